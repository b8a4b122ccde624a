"""The options of ``xmr tune`` (:class:`TuneOptions`): which space, what to override in it, where
the sweep goes. Importing this module loads neither Ray nor MLflow.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xmr.fields import check_name, check_options, load_yaml, option, resolve_paths
from xmr.storage import StoragePath
from xmr.tune.space import SearchSpace, load_space, shipped_spaces

DEFAULT_STORAGE = Path("xmr-tune")
"""Where sweeps go (under ``$XMR_STORAGE`` when set, else in the working directory)."""


@dataclass(frozen=True)
class TuneOptions:
    """``xmr tune``'s own options, named as its flags (``overrides`` is ``--set``)."""

    space: str = option(help=f"{' | '.join(shipped_spaces())} (tune_spaces/) or a space YAML path.")
    dataset: str | None = option(None, "Shortcut for --set dataset=... (default: the space's).")
    data: StoragePath | None = option(
        None,
        "Shortcut for --set data=...: the dataset folder, a path or s3://… (default: the space's).",
    )
    overrides: list[str] | None = option(
        None, "Override a fixed option of the space: KEY=VALUE (repeatable).", flag="set"
    )
    num_samples: int | None = option(
        None, "Trials (random/optuna) or repeats of the grid (default: the space's).", ge=1
    )
    max_concurrent: int | None = option(
        None, "Trials at once (default: as many as the cluster's CPUs/GPUs fit).", ge=1
    )
    gpus_per_trial: float | None = option(None, "GPUs per trial (default: the space's).", ge=0)
    cpus_per_trial: float | None = option(None, "CPUs per trial (default: the space's).", ge=0)
    name: str | None = option(
        None, "Sweep name; rerunning a name resumes it (default: space-<hash>)."
    )
    storage: StoragePath = option(
        None, "Folder of sweeps: a path, or s3://….", default_folder=str(DEFAULT_STORAGE)
    )

    def __post_init__(self) -> None:
        check_options(self)
        check_name(self.name)
        resolve_paths(self)

    def fixed(self) -> dict[str, Any]:
        """The ``--set KEY=VALUE`` options (values parsed as YAML), ``--dataset`` and ``--data``
        (made absolute: the trials run in other folders).

        Raises:
            ValueError: an item that is not KEY=VALUE, or a value that is not valid YAML.
        """
        fixed: dict[str, Any] = {}
        for item in self.overrides or []:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise ValueError(f"--set takes KEY=VALUE, got {item!r}")
            fixed[key.strip().replace("-", "_")] = load_yaml(value, f"--set {item}")
        if self.dataset:
            fixed["dataset"] = self.dataset
        if self.data is not None:
            fixed["data"] = str(self.data)
        return fixed

    def search_space(self) -> SearchSpace:
        """The space these options name, with their overrides, checked.

        Raises:
            SpaceError: the space cannot run (the message names the file and the option).
            ValueError: a bad ``--set``.
        """
        changes: dict[str, Any] = {"fixed": self.fixed()}
        for name, value in (
            ("num_samples", self.num_samples),
            ("max_concurrent", self.max_concurrent),
            ("gpus", self.gpus_per_trial),
            ("cpus", self.cpus_per_trial),
        ):
            if value is not None:
                changes[name] = value
        return load_space(self.space).with_overrides(**changes)
