"""The toy CLIP, rebuilt: generate the pretraining world → pretrain xmr-tiny CLIP on it until
its val RSUM levels off → export the best epoch's weights as the package's toy CLIP
(--pretrained toy) → score it zero-shot on every packaged world.

    python ray_jobs/toy_clip.py                  # about 2 hours on 2 CPU cores

Run it from a clone (pip install -e .): it installs the weights into xmr/models/weights/ of the
xmr it runs. Submitting the same command again resumes it: finished steps are skipped.
--dry-run prints the plan. The steps are in xmr/jobs/toy_clip.py.
"""

from _xmr_python import require_xmr_python

require_xmr_python()

from xmr.jobs.cli import job_app  # noqa: E402 (after the interpreter check)
from xmr.jobs.toy_clip import ToyClipJobOptions, toy_clip_job  # noqa: E402 (after the interpreter check)

app = job_app(toy_clip_job, ToyClipJobOptions, __doc__)

if __name__ == "__main__":
    app()
