"""The ``xmr synth`` command, also ``python -m xmr.synth`` (what ``ray job submit`` runs).

Its flags are the fields of the configs (:data:`~xmr.synth.config.SynthFlags`: the shared
:class:`~xmr.synth.config.SynthConfig` and each method's, in flag order), of
:class:`~xmr.synth.config.SynthRuntime` and of the LLM, all unset by default so that a
``--config`` YAML can set them; a flag given wins over the file. Importing this module loads
neither Ray nor the build (they are imported when the command runs).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from xmr.fields import check_outputs, option, resolve_paths
from xmr.llm import LLMSpec
from xmr.options import Overrides, command, user_errors
from xmr.progress import summary_line
from xmr.synth.config import SynthFlags, SynthRuntime


@dataclass(frozen=True)
class SynthFile:
    """``--config``: the YAML file of options the flags override."""

    config: Path | None = option(None, "YAML file of options (flags override it).")

    def __post_init__(self) -> None:
        resolve_paths(self)


def run_synth(
    file: SynthFile,
    config_flags: dict[str, Any],
    runtime_flags: dict[str, Any],
    llm_flags: dict[str, Any],
) -> None:
    """Build D′ on Ray Data: remove co-occurring objects from images and their captions
    (--mode removal), or BiAug's attribute edits and hard negatives (--mode biaug).

    Rerunning with the same options and --out resumes an interrupted build.
    """
    from xmr.synth.config import load_configs, load_llm_spec
    from xmr.synth.methods import synthesize
    from xmr.synth.report import SAMPLES, log_to_mlflow, print_summary, save_sample_grid
    from xmr.synth.runner import ray_executor
    from xmr.tracking import experiment_name, resolve_tracking_uri, run_link

    with user_errors():
        options, runtime = load_configs(file.config, {**config_flags, **runtime_flags})
        llm = load_llm_spec(file.config, llm_flags)
        # The flags' groups are dicts, so command() checked no instance of them.
        check_outputs(runtime, tracking=runtime.log_mlflow)
        check_outputs(llm)
        result = synthesize(options, runtime, llm, executor=ray_executor(runtime))
    save_sample_grid(result.out, result.out / SAMPLES, seed=options.shared.seed)
    print_summary(result)
    where = str(result.out)
    if runtime.log_mlflow:
        run_id = log_to_mlflow(result, options, runtime, llm)
        experiment = experiment_name("synth", options.shared.dataset)
        run = run_link(run_id, tracking_uri=resolve_tracking_uri(runtime.tracking_uri))
        where += f" ({run} in experiment {experiment})"
    manifest = result.manifest
    counts = {key: manifest[key] for key in ("planned", "written", "errors")}
    if manifest["counts"].get("retried"):
        counts.update({key: manifest["counts"][key] for key in ("retried", "recovered")})
    typer.echo(summary_line("synth", manifest["timings_s"]["total"], counts, where))
    if result.error_rate > runtime.max_error_rate:
        manifest = result.manifest
        typer.secho(
            f"error: {manifest['errors']} of {manifest['planned']} rows failed "
            f"({result.error_rate:.1%} > --max-error-rate {runtime.max_error_rate:.1%}); "
            f"reasons in {result.out / 'errors.parquet'}",
            fg=typer.colors.RED,
            err=True,
        )
        raise typer.Exit(code=1)


synth_command = command(
    run_synth, SynthFile, Overrides(SynthFlags), Overrides(SynthRuntime), Overrides(LLMSpec)
)
"""``xmr synth``: register with ``app.command("synth")(synth_command)``."""
