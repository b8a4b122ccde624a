"""The ODmAP paper's experiment (tables 1–2) as one Ray job: build D′ → train on D ∪ D′ and
on D for as many optimiser steps (--converged: both until they level off) → compare their
test metrics (ODmAP@K, Recall@K both ways, Bias@K).

    ray job submit --address http://127.0.0.1:8265 --working-dir . -- \\
        python ray_jobs/odmap.py --dataset coco --data /mnt/shared/coco --storage /mnt/shared/xmr

Submitting the same command again resumes it: finished steps are skipped. --dry-run prints the
plan. The steps are in xmr/jobs/odmap.py.
"""

from _xmr_python import require_xmr_python

require_xmr_python()

from xmr.jobs.cli import job_app  # noqa: E402 (after the interpreter check)
from xmr.jobs.odmap import ODmAPJobOptions, odmap_job  # noqa: E402 (after the interpreter check)

app = job_app(odmap_job, ODmAPJobOptions, __doc__)

if __name__ == "__main__":
    app()
