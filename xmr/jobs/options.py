"""The options every job shares (:class:`JobOptions`) and how a job's options become its name,
its recorded params and the equivalent xmr command lines.

Importing this module loads neither Ray, torch nor MLflow (a job's ``--help`` stays fast).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xmr.fields import check_name, check_options, option, option_values, resolve_paths
from xmr.storage import StoragePath

DEFAULT_STORAGE = Path("xmr-jobs")
"""Where jobs' folders go when ``--storage`` is not given (under ``$XMR_STORAGE`` when set, else
in the working directory)."""


@dataclass(frozen=True)
class JobOptions:
    """Where a job's folder goes and whether it only prints its plan."""

    storage: StoragePath = option(
        None,
        "Where the job's folder goes. On a cluster: where every node reaches it, an object "
        "store (s3://bucket/folder) or a shared filesystem mounted at the same path on every "
        "node.",
        default_folder=str(DEFAULT_STORAGE),
    )
    name: str | None = option(
        None,
        "The job's name, its folder under --storage (default: <job>-<dataset>-<options hash>). "
        "Submitting the same command again resumes it.",
    )
    dry_run: bool = option(
        False, "Print the plan (each step, done or to do, and its xmr command) and exit."
    )

    def __post_init__(self) -> None:
        check_options(self)
        check_name(self.name)
        resolve_paths(self)

    def named(self, kind: str, dataset: str, params: Mapping[str, str]) -> tuple[str, StoragePath]:
        """The job's name (``--name``, else :func:`default_job_name`) and its folder under
        ``--storage``."""
        name = self.name or default_job_name(kind, dataset, params)
        return name, self.storage / name


def job_params(options: Any) -> dict[str, str]:
    """An options dataclass as ``{option: str(value)}``, by the names of its flags (a group's
    too, :func:`~xmr.fields.option_values`): what a job records and compares on resubmission
    (paths absolute, unset values ``"none"``)."""
    values = option_values(options)
    return {key: "none" if value is None else str(value) for key, value in values.items()}


def default_job_name(kind: str, dataset: str, params: Mapping[str, str]) -> str:
    """``<kind>-<dataset>-<8 hex digits of the options>``: the same options, the same job.

    >>> default_job_name("odmap", "toyworld", {"seed": "0"})
    'odmap-toyworld-57692611'
    """
    digest = hashlib.sha256(json.dumps(dict(params), sort_keys=True).encode()).hexdigest()
    return f"{kind}-{dataset}-{digest[:8]}"


def command_line(command: str, flags: Mapping[str, Any]) -> str:
    """An xmr command line: ``--flag value`` per set flag (None left out; True as ``--flag``,
    False as ``--no-flag``), underscores as dashes.

    >>> command_line("xmr train", {"model": "clip", "synth": None, "hard_negatives": False})
    'xmr train --model clip --no-hard-negatives'
    """
    parts = [command]
    for key, value in flags.items():
        name = key.replace("_", "-")
        if value is None:
            continue
        if value is True:
            parts.append(f"--{name}")
        elif value is False:
            parts.append(f"--no-{name}")
        else:
            parts.append(f"--{name} {value}")
    return " ".join(parts)
