"""Jobs: the papers' experiments as sequences of xmr steps, each submitted as one Ray job
(``ray_jobs/``), resumable, and recorded as one MLflow run with a child run per step."""

from xmr.jobs.options import JobOptions
from xmr.jobs.steps import Job, JobResult, Step, StepContext, StepOutcome, run_job

__all__ = ["Job", "JobOptions", "JobResult", "Step", "StepContext", "StepOutcome", "run_job"]
