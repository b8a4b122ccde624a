"""Search spaces of ``xmr tune``: one YAML file per sweep, validated before anything starts.

A space names the command it sweeps and everything about the sweep::

    description: FairSample's weight α against recall and gender bias (gender paper §5.3)
    command: train                  # train | eval: the xmr command one trial runs
    fixed: {model: clip, epochs: 3} # that command's options (flag names, without --)
    params:                         # the swept options and their domains
      fair_alpha: {grid: [0.0, 0.4, 1.0]}   # grid | choice | uniform | loguniform | randint
    search: grid                    # grid | random | optuna
    scheduler: none                 # none | {name: asha, metric: val/recall_t2i_at_10, ...}
    metrics:                        # what each trial is judged by; the first picks "best"
      - {name: test/bias_at_10, mode: min, abs: true}   # mode, abs: default to the metric's
      - {name: test/recall_t2i_at_10, mode: max}       # direction (xmr.metrics.direction)
    pareto: [[test/recall_t2i_at_10, test/bias_at_10]]   # x, y of each Pareto plot
    diagnostics: [test/gendered_share_at_10, test/male_share_at_10]  # recorded, never judged:
                                    # trials.csv columns and a Pareto plot's second panel
    resources: {cpus: 2, gpus: 0}   # per trial
    num_samples: 1                  # grid: repeats of the grid; random/optuna: trials
    base_model: {model: clip}       # eval sweeps: `xmr train` options of the model to evaluate
                                    # when `fixed` names no checkpoint or pretrained weights

The spaces shipped with xmr live in ``tune_spaces/`` and are found by name. The options a space
may set are the flags of ``xmr train`` (:class:`~xmr.train.options.TrainOptions`) or ``xmr eval``
(:class:`~xmr.eval.options.EvalOptions`), checked against the same bounds, their paths made
absolute here in the driver (trials run in other folders).
"""

from __future__ import annotations

import importlib.resources
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from xmr.eval.options import EvalOptions
from xmr.fields import load_yaml, option_fields, path_fields
from xmr.metrics.direction import find_direction
from xmr.storage import storage_path
from xmr.train.options import TrainOptions

COMMANDS = ("train", "eval")
SEARCHES = ("grid", "random", "optuna")
DOMAINS = ("grid", "choice", "uniform", "loguniform", "randint")

SWEEP_OPTIONS = frozenset({"name", "storage", "address", "tracking_uri"})
"""What ``xmr tune`` itself sets for every trial (a space may not)."""

TRAIN_OPTIONS = frozenset(f.name for f in option_fields(TrainOptions)) - SWEEP_OPTIONS
"""``xmr train`` options a space may set (name, storage and the cluster are the sweep's)."""

EVAL_OPTIONS = frozenset(f.name for f in option_fields(EvalOptions)) - SWEEP_OPTIONS
"""``xmr eval`` options a space may set."""

DEFAULT_SYNTH = "default"
"""``synth: default``: D′ of the embedded ToyWorld, built on first use (not a path)."""

EVAL_SWEEPABLE = frozenset(
    {"clip_m", "mi_estimator", "mi_bins", "mi_sigma", "mi_neighbors", "clip_renormalize"}
)
"""Eval options that only change the scoring: an eval sweep encodes once and varies these."""

OPTIONS = {"train": TRAIN_OPTIONS, "eval": EVAL_OPTIONS}
OPTION_CLASSES: dict[str, type[TrainOptions] | type[EvalOptions]] = {
    "train": TrainOptions,
    "eval": EvalOptions,
}
_KEYS = frozenset({
    "description", "command", "fixed", "params", "search", "scheduler", "metrics", "pareto",
    "resources", "num_samples", "max_concurrent", "base_model", "diagnostics",
})  # fmt: skip


class SpaceError(ValueError):
    """A search space that cannot run; the message names the file and the offending key."""


@dataclass(frozen=True)
class Domain:
    """One swept option: ``kind`` in :data:`DOMAINS` over ``values`` (bounds for the ranges,
    both inclusive). The sweep turns it into Ray Tune's search-space object."""

    kind: str
    values: tuple[Any, ...]

    def example(self) -> Any:
        """A value from the domain (to check a trial's config before the sweep starts)."""
        return self.values[0]


@dataclass(frozen=True)
class Objective:
    """A metric a trial is judged by. ``abs``: judge ``|value|`` (signed biases)."""

    name: str
    mode: str = "max"
    abs: bool = False

    def value(self, raw: float) -> float:
        return abs(raw) if self.abs else raw

    @property
    def label(self) -> str:
        return f"|{self.name}|" if self.abs else self.name


@dataclass(frozen=True)
class Scheduler:
    """Early stopping of training trials: ASHA on an intermediate (per-epoch) metric."""

    name: str = "none"
    metric: str = ""
    mode: str = "max"
    grace_period: int = 1
    reduction_factor: int = 2


@dataclass(frozen=True)
class SearchSpace:
    """A validated search space (see the module docstring for the YAML)."""

    name: str
    source: str  # the YAML text as read (logged as the sweep's artifact)
    command: str
    params: dict[str, Domain]
    metrics: tuple[Objective, ...]
    fixed: dict[str, Any] = field(default_factory=dict)
    search: str = "grid"
    scheduler: Scheduler = field(default_factory=Scheduler)
    pareto: tuple[tuple[str, str], ...] = ()
    diagnostics: tuple[str, ...] = ()  # recorded beside the metrics, never judged
    cpus: float = 1.0
    gpus: float = 0.0
    num_samples: int = 1
    max_concurrent: int | None = None
    base_model: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    origin: str = ""  # the file it was read from (named in errors)

    @property
    def objective(self) -> Objective:
        """The metric that picks the best trial."""
        return self.metrics[0]

    @property
    def recorded(self) -> tuple[str, ...]:
        """Every metric a trial's row holds: :attr:`metrics`' names, then :attr:`diagnostics`."""
        return (*(m.name for m in self.metrics), *self.diagnostics)

    def metric(self, name: str) -> Objective:
        for objective in self.metrics:
            if objective.name == name:
                return objective
        raise KeyError(name)

    def with_overrides(self, **changes: Any) -> SearchSpace:
        """A copy with command-line overrides (``fixed`` entries merged, others replaced)."""
        fixed = absolute_paths(self.command, {**self.fixed, **changes.pop("fixed", {})})
        space = replace(self, fixed=fixed, **changes)
        space.check()
        return space

    def check(self) -> None:
        """Raise :class:`SpaceError` for anything that would fail once trials run."""
        where = self.origin or self.name
        allowed = OPTIONS[self.command]
        for key in (*self.fixed, *self.params):
            if key not in allowed:
                hint = " (set by xmr tune)" if key in SWEEP_OPTIONS else ""
                raise SpaceError(
                    f"{where}: unknown {self.command} option {key!r}{hint}; "
                    f"choose from {', '.join(sorted(allowed))}"
                )
        both = set(self.fixed) & set(self.params)
        if both:
            raise SpaceError(f"{where}: {sorted(both)} both fixed and swept")
        if self.command == "eval":
            encoding = sorted(set(self.params) - EVAL_SWEEPABLE)
            if encoding:
                raise SpaceError(
                    f"{where}: an eval sweep encodes the data once, so it can only sweep "
                    f"{', '.join(sorted(EVAL_SWEEPABLE))}; move {encoding} to `fixed`"
                )
        if self.search == "grid":
            ranged = [k for k, d in self.params.items() if d.kind not in ("grid", "choice")]
            if ranged:
                raise SpaceError(
                    f"{where}: search: grid needs grid domains; {ranged} are ranges "
                    "(use search: random or optuna)"
                )
        if self.search == "optuna":
            grids = [k for k, d in self.params.items() if d.kind == "grid"]
            if grids:
                raise SpaceError(f"{where}: optuna cannot sample grid domains {grids}; use choice")
        names = {m.name for m in self.metrics}
        for x, y in self.pareto:
            for name in (x, y):
                if name not in names:
                    raise SpaceError(f"{where}: pareto metric {name!r} is not in `metrics`")
        judged = sorted(names & set(self.diagnostics))
        if judged:
            raise SpaceError(f"{where}: {judged} both in `metrics` and in `diagnostics`")
        if self.scheduler.name == "asha":
            if self.command != "train":
                raise SpaceError(f"{where}: the asha scheduler stops training trials; use none")
            if not self.fixed.get("eval_every"):
                raise SpaceError(
                    f"{where}: asha compares trials epoch by epoch: set eval_every: 1 in `fixed` "
                    f"so {self.scheduler.metric} is reported every epoch"
                )
        if self.cpus < 0 or self.gpus < 0:
            raise SpaceError(f"{where}: resources must be >= 0")
        if self.num_samples < 1:
            raise SpaceError(f"{where}: num_samples must be >= 1")
        if self.max_concurrent is not None and self.max_concurrent < 1:
            raise SpaceError(f"{where}: max_concurrent must be >= 1")
        for key in self.base_model:
            if key not in TRAIN_OPTIONS:
                raise SpaceError(f"{where}: unknown train option {key!r} in base_model")
        self._check_values(where)

    def _check_values(self, where: str) -> None:
        """Every fixed value, and every value a domain names (a range: its bounds), within the
        bounds its flag declares (``--epochs must be >= 1``), as ``xmr train``/``eval`` check."""
        options = OPTION_CLASSES[self.command]
        trials = [dict(self.fixed)]
        for key, domain in self.params.items():
            trials += [{**self.fixed, key: value} for value in domain.values]
        try:
            for trial in trials:
                options(**trial)
            TrainOptions(**self.base_model)
        except ValueError as exc:
            raise SpaceError(f"{where}: {exc}") from exc

    @property
    def trial_count(self) -> int:
        """How many trials the sweep runs: ``num_samples`` times the size of the grid."""
        count = self.num_samples
        for domain in self.params.values():
            if domain.kind == "grid":
                count *= len(domain.values)
        return count

    def example_trial(self) -> dict[str, Any]:
        """The options of one trial (each domain's first value), for a dry check."""
        return {**self.fixed, **{k: d.example() for k, d in self.params.items()}}


SPACES_PACKAGE = "xmr.tune_spaces"
"""The shipped spaces as package data: the repo's ``tune_spaces/``, installed under this name
(setup.py)."""


def spaces_folder() -> Path | None:
    """The folder of the shipped spaces: the installed package :data:`SPACES_PACKAGE` (a wheel,
    an editable install), else ``tune_spaces/`` beside ``xmr/`` when xmr runs from a source tree
    that is not installed (``python -m xmr.cli`` in a Ray job's working_dir); None when neither
    exists."""
    try:
        return Path(str(importlib.resources.files(SPACES_PACKAGE)))
    except ModuleNotFoundError:
        source_tree = Path(__file__).resolve().parents[2] / "tune_spaces"
        return source_tree if source_tree.is_dir() else None


def absolute_paths(command: str, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` of ``command`` with every path made absolute (a string): a relative path
    means the working directory of the sweep's driver, and trials run in other folders.
    ``synth: default`` (:data:`DEFAULT_SYNTH`) is not a path and stays."""
    paths = set(path_fields(OPTION_CLASSES[command]))

    def absolute(key: str, value: Any) -> Any:
        if key not in paths or value is None or (key == "synth" and value == DEFAULT_SYNTH):
            return value
        return str(storage_path(value))  # an object store's URI stays one

    return {key: absolute(key, value) for key, value in options.items()}


def shipped_spaces() -> dict[str, Path]:
    """Spaces that ship with xmr (``tune_spaces/*.yaml``), by name."""
    folder = spaces_folder()
    if folder is None:
        return {}
    return {path.stem: path for path in sorted(folder.glob("*.yaml"))}


def resolve_space_path(space: str | Path) -> Path:
    """A shipped space's name (``fair_alpha``) or a YAML path."""
    path = Path(space)
    if path.suffix in (".yaml", ".yml"):
        if not path.is_file():
            raise SpaceError(f"{path}: no such space file")
        return path.resolve()
    shipped = shipped_spaces()
    if str(space) not in shipped:
        raise SpaceError(
            f"unknown space {space!r}: give a YAML path or one of {', '.join(sorted(shipped))}"
        )
    return shipped[str(space)]


def load_space(space: str | Path) -> SearchSpace:
    """Read and validate a space (a shipped name or a YAML path)."""
    path = resolve_space_path(space)
    text = path.read_text()
    try:
        raw = load_yaml(text, str(path))
    except ValueError as exc:
        raise SpaceError(str(exc)) from exc
    return parse_space(raw, name=path.stem, source=text, where=str(path))


def _mapping(raw: Any, key: str, where: str) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise SpaceError(f"{where}: `{key}` must be a mapping, got {type(raw).__name__}")
    return dict(raw)


def _number(value: Any, what: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise SpaceError(f"{where}: {what} must be a number, got {value!r}")
    return value


def _domain(name: str, raw: Any, where: str) -> Domain:
    if not isinstance(raw, dict) or len(raw) != 1:
        raise SpaceError(
            f"{where}: params.{name} must be one of {{{' | '.join(DOMAINS)}: ...}}, got {raw!r}"
        )
    ((kind, values),) = raw.items()
    if kind not in DOMAINS:
        raise SpaceError(f"{where}: params.{name}: unknown domain {kind!r}; choose from {DOMAINS}")
    if not isinstance(values, list) or not values:
        raise SpaceError(f"{where}: params.{name}.{kind} must be a non-empty list")
    if kind in ("uniform", "loguniform", "randint"):
        if len(values) != 2:
            raise SpaceError(f"{where}: params.{name}.{kind} takes [low, high], got {values!r}")
        low, high = (_number(v, f"params.{name}.{kind} bounds", where) for v in values)
        if not low < high:
            raise SpaceError(f"{where}: params.{name}.{kind}: low {low} must be below high {high}")
        if kind == "loguniform" and low <= 0:
            raise SpaceError(f"{where}: params.{name}.loguniform needs low > 0")
        if kind == "randint" and not all(float(v).is_integer() for v in values):
            raise SpaceError(f"{where}: params.{name}.randint bounds must be integers")
    return Domain(kind, tuple(values))


def _objective(raw: Any, where: str) -> Objective:
    if isinstance(raw, str):
        raw = {"name": raw}
    if not isinstance(raw, dict) or "name" not in raw:
        raise SpaceError(f"{where}: each of `metrics` needs a name, got {raw!r}")
    unknown = set(raw) - {"name", "mode", "abs"}
    if unknown:
        raise SpaceError(f"{where}: metric {raw['name']!r}: unknown keys {sorted(unknown)}")
    name = str(raw["name"])
    return Objective(name, *_judged(raw, name, where))


def _judged(raw: dict, metric: str, where: str) -> tuple[str, bool]:
    """``(mode, abs)`` of ``metric``: as ``raw`` states them, else as declared for it
    (:func:`xmr.metrics.metric_direction`: signed metrics such as Bias@K are ``min`` of ``|x|``).
    A metric with no declared direction, or a diagnostic (no value better), needs its ``mode``
    stated."""
    direction = find_direction(metric)
    mode = raw.get("mode", direction.mode if direction and direction.judges else None)
    if mode is None:
        why = (
            "it is a diagnostic, no value of it is better"
            if direction
            else "xmr does not know which way it is better"
        )
        raise SpaceError(f"{where}: metric {metric!r}: give its mode (max or min); {why}")
    if mode not in ("max", "min"):
        raise SpaceError(f"{where}: metric {metric!r}: mode must be max or min")
    return mode, bool(raw.get("abs", direction is not None and direction.signed))


def _scheduler(raw: Any, where: str) -> Scheduler:
    if raw in (None, "none"):
        return Scheduler()
    if raw == "asha" or not isinstance(raw, dict):
        raise SpaceError(
            f"{where}: scheduler must be none or {{name: asha, metric: ..., mode: ...}}"
        )
    unknown = set(raw) - {"name", "metric", "mode", "grace_period", "reduction_factor"}
    if unknown or raw.get("name") != "asha" or not raw.get("metric"):
        raise SpaceError(
            f"{where}: scheduler takes name: asha, metric, mode, grace_period, "
            f"reduction_factor; got {raw!r}"
        )
    metric = str(raw["metric"])
    mode, signed = _judged(raw, metric, where)
    if signed and "mode" not in raw:
        raise SpaceError(
            f"{where}: scheduler metric {metric!r} is signed and ASHA compares it as it is, not "
            "|x|: give its mode"
        )
    return Scheduler(
        "asha",
        metric,
        mode,
        int(raw.get("grace_period", 1)),
        int(raw.get("reduction_factor", 2)),
    )


def parse_space(raw: Any, *, name: str, source: str = "", where: str | None = None) -> SearchSpace:
    """Validate a space read from YAML (``raw``: the parsed mapping)."""
    where = where or name
    if not isinstance(raw, dict):
        raise SpaceError(f"{where}: a space is a mapping of {', '.join(sorted(_KEYS))}")
    unknown = set(raw) - _KEYS
    if unknown:
        raise SpaceError(f"{where}: unknown keys {sorted(unknown)}; allowed: {sorted(_KEYS)}")
    command = raw.get("command")
    if command not in COMMANDS:
        raise SpaceError(f"{where}: `command` must be one of {COMMANDS}, got {command!r}")
    params = {
        k: _domain(k, v, where) for k, v in _mapping(raw.get("params"), "params", where).items()
    }
    if not params:
        raise SpaceError(f"{where}: `params` names no swept option")
    metrics = tuple(_objective(m, where) for m in raw.get("metrics") or [])
    if not metrics:
        raise SpaceError(f"{where}: `metrics` is empty; name at least the one that picks the best")
    search = raw.get("search", "grid")
    if search not in SEARCHES:
        raise SpaceError(f"{where}: `search` must be one of {SEARCHES}, got {search!r}")
    pareto_raw = raw.get("pareto")
    if pareto_raw is None:
        pareto_raw = [[metrics[1].name, metrics[0].name]] if len(metrics) > 1 else []
    if not isinstance(pareto_raw, list) or not all(
        isinstance(p, list) and len(p) == 2 for p in pareto_raw
    ):
        raise SpaceError(f"{where}: `pareto` is a list of [x metric, y metric] pairs")
    diagnostics = raw.get("diagnostics") or []
    if not isinstance(diagnostics, list) or not all(isinstance(d, str) for d in diagnostics):
        raise SpaceError(f"{where}: `diagnostics` is a list of metric names")
    resources = _mapping(raw.get("resources"), "resources", where)
    unknown = set(resources) - {"cpus", "gpus"}
    if unknown:
        raise SpaceError(f"{where}: resources take cpus and gpus, not {sorted(unknown)}")
    space = SearchSpace(
        name=name,
        source=source,
        command=command,
        params=params,
        metrics=metrics,
        fixed=absolute_paths(command, _mapping(raw.get("fixed"), "fixed", where)),
        search=search,
        scheduler=_scheduler(raw.get("scheduler"), where),
        pareto=tuple((str(x), str(y)) for x, y in pareto_raw),
        diagnostics=tuple(diagnostics),
        cpus=float(_number(resources.get("cpus", 1), "resources.cpus", where)),
        gpus=float(_number(resources.get("gpus", 0), "resources.gpus", where)),
        num_samples=int(raw.get("num_samples", 1)),
        max_concurrent=raw.get("max_concurrent"),
        base_model=absolute_paths("train", _mapping(raw.get("base_model"), "base_model", where)),
        description=str(raw.get("description", "")),
        origin=where,
    )
    space.check()
    return space
