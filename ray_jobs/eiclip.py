"""The EI-CLIP paper's experiment (§4, tables 1–2) as one Ray job: train CLIP on the product
descriptions (baseline ②) and EI-CLIP on descriptions and entities, the same way → compare
product retrieval under both protocols (the full candidate set; Sample 100 of the
sub-category).

    ray job submit --address http://127.0.0.1:8265 --working-dir . -- \\
        python ray_jobs/eiclip.py --dataset fashiongen --data /mnt/shared/fashiongen \\
        --storage /mnt/shared/xmr --gpus-per-worker 1

Submitting the same command again resumes it: finished steps are skipped. --dry-run prints the
plan. The steps are in xmr/jobs/eiclip.py.
"""

from _xmr_python import require_xmr_python

require_xmr_python()

from xmr.jobs.cli import job_app  # noqa: E402 (after the interpreter check)
from xmr.jobs.eiclip import EiClipJobOptions, eiclip_job  # noqa: E402 (after the interpreter check)

app = job_app(eiclip_job, EiClipJobOptions, __doc__)

if __name__ == "__main__":
    app()
