"""The gender paper's experiments (§5.3, figures 3–4) as one Ray job: a FairSample α sweep and
a CLIP-clip m sweep on the α = 0 model, each read as a recall–bias Pareto front.

    ray job submit --address http://127.0.0.1:8265 --working-dir . -- \\
        python ray_jobs/gender.py --dataset coco --data /mnt/shared/coco --storage /mnt/shared/xmr

Submitting the same command again resumes it: finished steps are skipped. --dry-run prints the
plan. The steps are in xmr/jobs/gender.py.
"""

from xmr.jobs.cli import job_app
from xmr.jobs.gender import GenderJobOptions, gender_job

app = job_app(gender_job, GenderJobOptions, __doc__)

if __name__ == "__main__":
    app()
