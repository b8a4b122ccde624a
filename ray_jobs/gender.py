"""The gender paper's experiments (§5.3, figures 3–4) as one Ray job: a FairSample α sweep and
a CLIP-clip m sweep on the α = 0 model, each read as a recall–bias Pareto front.

    ray job submit --address http://127.0.0.1:8265 --working-dir . -- \\
        python ray_jobs/gender.py --dataset coco --data /mnt/shared/coco --storage /mnt/shared/xmr

Submitting the same command again resumes it: finished steps are skipped. --dry-run prints the
plan. The steps are in xmr/jobs/gender.py.
"""

from _xmr_python import require_xmr_python

require_xmr_python()

from xmr.jobs.cli import job_app  # noqa: E402 (after the interpreter check)
from xmr.jobs.gender import GenderJobOptions, gender_job  # noqa: E402 (after the interpreter check)

app = job_app(gender_job, GenderJobOptions, __doc__)

if __name__ == "__main__":
    app()
