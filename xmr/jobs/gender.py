"""The gender paper's experiments as a job (§5.3 and figures 3–4): a FairSample α sweep and a
CLIP-clip m sweep, each read as a recall–bias Pareto front.

Steps, in the job's folder:

1. ``world`` (ToyWorld without ``--data`` only): generate the world into ``world/``.
2. ``fair-alpha``: train one model per α (FairSample, the shipped ``fair_alpha`` space);
   each trial ends with the test-split evaluation (Recall@K, Bias@K).
3. ``clip-m``: CLIP-clip on the α = 0 trial's model (plain training, as the paper applies it):
   one evaluation per m (the shipped ``clip_m`` space), MI estimated on the train split.
4. ``pareto``: both fronts (recall@10 text→image against |Bias@10|) as PNGs and tables in the
   job's folder and the job's MLflow run, neighbours on a front that the test set cannot tell
   apart marked ``≈``.

``ray_jobs/gender.py`` submits it.
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd
from rich.console import Group
from rich.table import Table

from xmr.data.registry import check_data_root
from xmr.fields import check_options, option, resolve_paths
from xmr.jobs.commands import sweep_step, world_step
from xmr.jobs.options import JobOptions, job_params
from xmr.jobs.steps import Job, Step, StepContext, StepOutcome
from xmr.storage import StoragePath, storage_path
from xmr.train.options import ConvergenceChoice, DataChoice, ModelChoice
from xmr.tune.space import Domain, SearchSpace, load_space

BIAS_10 = re.compile(r"test/(natural/)?(bias|gendered_share|male_share)_at_10")
"""The sweep columns of the tables: Bias@10, its diagnostics, and the same of the test split's
own images (``natural/``, :data:`xmr.eval.encode.NATURAL`, spelt out: importing it loads torch)."""
SWEEPS = {"fair-alpha": ("fair_alpha", "fair_alpha"), "clip-m": ("clip_m", "clip_m")}
"""Step name -> (shipped space, swept option)."""


def parse_values(text: str, flag: str, *, integer: bool = False) -> tuple[float, ...]:
    """``"0,0.5,1"`` -> ``(0.0, 0.5, 1.0)``; sorted, without repeats.

    >>> parse_values("0.5, 0, 1", "--alphas")
    (0.0, 0.5, 1.0)

    Raises:
        ValueError: an empty list or an item that is not a number (the flag is named).
    """
    kind = int if integer else float
    try:
        values = tuple(sorted({kind(item) for item in text.split(",") if item.strip()}))
    except ValueError as exc:
        raise ValueError(f"{flag} takes comma-separated numbers, got {text!r}") from exc
    if not values:
        raise ValueError(f"{flag} is empty")
    return values


@dataclass(frozen=True)
class GenderJobOptions(ConvergenceChoice, ModelChoice, DataChoice):
    """The experiment's options: :class:`DataChoice`'s and :class:`ModelChoice`'s (the model
    family of the trials; ``--pretrained toy``: each trial finetunes the toy CLIP),
    :class:`ConvergenceChoice`'s (``--converged``: each α trial until its val RSUM levels
    off), the swept values, trial resources."""

    epochs: int | None = option(None, "Epochs of each α trial (default: the space's).", ge=1)
    alphas: str = option(
        "0,0.2,0.4,0.6,0.8,1",
        "FairSample α values, comma-separated; 0 (plain training) is required: CLIP-clip is "
        "applied to that model.",
    )
    clip_ms: str = option("0,8,16,32,48,64,96", "CLIP-clip m values (dimensions clipped).")
    seed: int = option(0, "Seed of the world and every trial.", ge=0)
    gpus_per_trial: float = option(0.0, "GPUs per trial (0: CPU).", ge=0)
    cpus_per_trial: float = option(1.0, "CPUs per trial.", gt=0)
    max_concurrent: int | None = option(
        None, "Trials at once (default: as many as the cluster fits).", ge=1
    )

    def __post_init__(self) -> None:
        check_options(self)
        resolve_paths(self)
        if self.data is None and self.dataset != "toyworld":
            raise ValueError(f"--data is required for --dataset {self.dataset}")
        check_data_root(self.dataset, self.data)
        self.check_budget({"--epochs": self.epochs})
        if any(alpha < 0 or alpha > 1 for alpha in parse_values(self.alphas, "--alphas")):
            raise ValueError(f"--alphas must lie in [0, 1], got {self.alphas!r}")
        if 0 not in parse_values(self.alphas, "--alphas"):
            raise ValueError(f"--alphas must include 0 (the plain model), got {self.alphas!r}")
        if min(parse_values(self.clip_ms, "--clip-ms", integer=True)) < 0:
            raise ValueError(f"--clip-ms must be >= 0, got {self.clip_ms!r}")


def gender_job(options: GenderJobOptions, job: JobOptions) -> Job:
    """The job ``options`` define, in ``<storage>/<name>``; both spaces are checked here.

    Raises:
        ValueError: options a step refuses (``SpaceError`` names the space and the option).
    """
    params = job_params(options)
    name, folder = job.named("gender", options.dataset, params)
    steps = gender_steps(options, folder, name)
    return Job("gender", name, folder, params, steps, gender_report)


def gender_spaces(options: GenderJobOptions, data: StoragePath) -> dict[str, SearchSpace]:
    """The two sweeps' spaces: the shipped ones on ``data`` with the job's values."""
    model = {"model": options.model, "arch": options.arch, "pretrained": options.pretrained}
    model = {key: value for key, value in model.items() if value is not None}
    common = {"dataset": options.dataset, "data": str(data), "seed": options.seed}
    resources = {"cpus": options.cpus_per_trial, "gpus": options.gpus_per_trial}
    budget = options.budget() or {"epochs": options.epochs}
    epochs = {key: value for key, value in budget.items() if value is not None}
    alphas = parse_values(options.alphas, "--alphas")
    ms = parse_values(options.clip_ms, "--clip-ms", integer=True)
    return {
        "fair-alpha": load_space("fair_alpha").with_overrides(
            fixed={**common, **model, **epochs},
            params={"fair_alpha": Domain("grid", alphas)},
            **resources,
        ),
        "clip-m": load_space("clip_m").with_overrides(
            fixed=common, params={"clip_m": Domain("grid", ms)}, **resources
        ),
    }


def gender_steps(options: GenderJobOptions, folder: StoragePath, job_name: str) -> list[Step]:
    """The experiment's steps with outputs under ``folder``; the sweeps are named
    ``<job_name>-fair-alpha`` and ``<job_name>-clip-m`` (``xmr compare --sweep ...``)."""
    steps: list[Step] = []
    data = options.data
    if data is None:
        data = folder / "world"
        steps.append(world_step(data, seed=options.seed))
    spaces = gender_spaces(options, data)
    sweeps = folder / "sweeps"
    steps.append(
        sweep_step(
            "fair-alpha",
            "FairSample: train one model per α",
            spaces["fair-alpha"],
            sweeps,
            sweep=f"{job_name}-fair-alpha",
            max_concurrent=options.max_concurrent,
        )
    )
    steps.append(
        sweep_step(
            "clip-m",
            "CLIP-clip on the α = 0 model: evaluate once per m",
            spaces["clip-m"],
            sweeps,
            sweep=f"{job_name}-clip-m",
            max_concurrent=options.max_concurrent,
            prepare=_on_the_plain_model,
        )
    )
    pareto = Step(
        "pareto",
        "both recall–bias Pareto fronts",
        f"xmr compare --sweep {job_name}-fair-alpha; xmr compare --sweep {job_name}-clip-m",
        lambda context: pareto_step(context, spaces),
    )
    steps.append(pareto)
    return steps


def _on_the_plain_model(space: SearchSpace, context: StepContext) -> SearchSpace:
    """The clip-m space scoring the α = 0 trial's final checkpoint (no base model trained)."""
    from xmr.tracking import TrackedRun

    trials = _read_csv(context.outcomes["fair-alpha"].outputs["trials"])
    plain = trials[(trials["fair_alpha"] == 0) & (trials["status"] == "FINISHED")]
    if plain.empty:
        raise RuntimeError("fair-alpha: the α = 0 trial did not finish; CLIP-clip needs its model")
    tags = TrackedRun(str(plain.iloc[0]["mlflow_run_id"]), context.tracking_uri).tags()
    return space.with_overrides(fixed={"checkpoint": tags["xmr.checkpoint"]})


def pareto_step(context: StepContext, spaces: Mapping[str, SearchSpace]) -> StepOutcome:
    """Each sweep's front: ``<sweep>_pareto.png`` (neighbours the test set cannot tell apart
    joined by a dashed ``≈``: :func:`xmr.tune.pareto.pareto_ties`) and ``<sweep>_trials.csv``
    (``front`` and ``pareto`` columns added: :func:`xmr.tune.pareto.front_marks`) in the job's
    folder and the job's run."""
    from xmr.tune.pareto import front_marks, pareto_ties, plot_pareto

    run = context.job_run
    outputs: dict[str, str] = {}
    metrics: dict[str, float] = {}
    for step, space in spaces.items():
        trials = _read_csv(context.outcomes[step].outputs["trials"])
        x, y = (space.metric(name) for name in space.pareto[0])
        done = trials[trials["status"] == "FINISHED"].dropna(subset=[x.name, y.name])
        done = done.reset_index(drop=True)
        names = done["run_name"].tolist()
        ties = pareto_ties(done, x, y, tracking_uri=context.tracking_uri)
        png = context.folder / f"{step}_pareto.png"
        front = plot_pareto(
            done,
            x,
            y,
            labels=names,
            path=png,
            title=f"{step}: {len(done)} trials, front in red",
            ties=ties,
            diagnostics=space.diagnostics,
        )
        table = done.assign(front=front, pareto=front_marks(front, ties, names))
        csv = context.folder / f"{step}_trials.csv"
        csv.write_text(table.to_csv(index=False))
        for path in (png, csv):
            run.log_artifact(path)
        outputs.update({f"{step}_pareto": str(png), f"{step}_trials": str(csv)})
        metrics[f"{step}/front_size"] = float(front.sum())
        metrics[f"{step}/front_ties"] = float(len(ties))
    run.log_metrics(metrics)
    return StepOutcome(context.parent_run_id, metrics, outputs)


def gender_report(outcomes: Mapping[str, StepOutcome]) -> Group:
    """One table per sweep: each trial's swept value, recall@10 t2i, Bias@10 and its
    diagnostics (gendered and male share of the top 10) and the same of the test split's own
    images (``natural``), when the sweep recorded them, on the front (``*``; ``* ≈ <trial>``:
    not distinguishable from that neighbour)."""
    tables = []
    for step, (_, swept) in SWEEPS.items():
        trials = _read_csv(outcomes["pareto"].outputs[f"{step}_trials"])
        table = Table(
            title=f"{step}: recall–bias trade-off (test split; * on the Pareto front, "
            "≈ not distinguishable from its neighbour)"
        )
        columns = [
            c
            for c in trials
            if c != "test/bias_at_10" and BIAS_10.fullmatch(str(c)) and trials[c].notna().any()
        ]
        short = [
            name.removeprefix("test/").replace("natural/", "natural ").replace("_at_", "@")
            for name in columns
        ]
        headers = [swept, "recall t2i@10", "bias@10", *short, "front"]
        for column in headers:
            table.add_column(column, justify="right")
        for _, row in trials.sort_values(swept).iterrows():
            table.add_row(
                f"{row[swept]:g}",
                f"{row['test/recall_t2i_at_10']:.3f}",
                f"{row['test/bias_at_10']:+.3f}",
                *(f"{row[name]:{'+' if 'bias' in name else ''}.3f}" for name in columns),
                "*" + str(row.get("pareto", "front")).removeprefix("front") if row["front"] else "",
            )
        tables.append(table)
    return Group(*tables)


def _read_csv(path: str) -> pd.DataFrame:
    """A CSV a step wrote, from a local file or an object store."""
    return pd.read_csv(io.StringIO(storage_path(path).read_text()))
