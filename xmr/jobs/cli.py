"""A job's command line: ``python ray_jobs/<job>.py [options]``, what ``ray job submit`` runs.

:func:`job_app` turns a job's options dataclass and its builder into a typer app with the
job's flags, :class:`~xmr.jobs.options.JobOptions` (``--storage``, ``--name``,
``--dry-run``) and :class:`~xmr.fields.ClusterOptions` (``--address``, ``--tracking-uri``).
Every option is checked, and every step's, and ``--data`` is there, before the plan is printed
(``--dry-run`` too) and anything is written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer
from rich.console import Console

from xmr.data.registry import check_data_folder
from xmr.fields import ClusterOptions
from xmr.jobs.options import JobOptions
from xmr.jobs.steps import Job, print_plan
from xmr.logs import prepare_console
from xmr.options import command, user_errors
from xmr.storage import check_bucket


def job_app(build: Callable[[Any, JobOptions], Job], options: type, help: str) -> typer.Typer:
    """The app of a job: ``build(options, job_options)`` makes the :class:`Job` to run;
    ``help``'s first paragraph is the command's help. A job's ``data`` folder (with its
    ``dataset``), when its options have one, must exist before the plan is made."""

    def run(values: Any, job_options: JobOptions, cluster: ClusterOptions) -> None:
        from xmr.jobs.steps import run_job
        from xmr.tracking import resolve_tracking_uri

        console = Console()
        with user_errors():
            if getattr(values, "data", None) is not None:  # None: a world the job generates
                check_data_folder(values.dataset, values.data)
            job = build(values, job_options)
            check_bucket(job.folder, "--storage")
            print_plan(job, console, commands=job_options.dry_run)
        uri = resolve_tracking_uri(cluster.tracking_uri)
        console.print(f"MLflow: experiment {job.experiment} on {uri}", soft_wrap=True)
        if job_options.dry_run:
            return
        with user_errors():
            result = run_job(job, tracking_uri=uri, address=cluster.address, console=console)
        if job.report is not None:
            console.print(job.report(result.outcomes))
        console.print(result.summary(), soft_wrap=True, markup=False, highlight=False)

    run.__doc__ = " ".join(help.split("\n\n")[0].split()) + (
        "\n\nSubmitting the same command again resumes the job: finished steps are skipped. "
        "--dry-run prints the plan."
    )
    prepare_console()
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command()(command(run, options, JobOptions, ClusterOptions))
    return app
