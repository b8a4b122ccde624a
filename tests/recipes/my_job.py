"""A job of one training step: ``ray_jobs/myjob.py`` is this module's ``app`` and
``if __name__ == "__main__": app()``."""

from __future__ import annotations

from dataclasses import dataclass

from xmr.fields import option
from xmr.jobs.cli import job_app
from xmr.jobs.commands import train_step
from xmr.jobs.options import JobOptions, job_params
from xmr.jobs.steps import Job
from xmr.train.options import TrainChoice, TrainOptions


@dataclass(frozen=True)
class MyJobOptions(TrainChoice):
    """The job's flags: :class:`TrainChoice`'s (model, data, epochs, batch size), then its own."""

    run_name: str = option("train", "The training step's name (and its run's).")


def my_job(options: MyJobOptions, job: JobOptions) -> Job:
    params = job_params(options)  # {flag: str(value)}: the job's name hash and resume check
    name, folder = job.named("myjob", options.dataset, params)
    train = TrainOptions(
        model=options.model,
        dataset=options.dataset,
        data=options.data,
        epochs=options.epochs,
        storage=folder / "runs",
    )
    steps = [train_step(options.run_name, "train on D", train, {"xmr.job": name})]
    return Job("myjob", name, folder, params, steps, report=None)


app = job_app(my_job, MyJobOptions, __doc__)
