"""The BiAug paper's experiment (§4–5) as one Ray job: build BiAug-D′ → train on D and on
D ∪ BiAug-D′ with its hard negatives, at equal step counts → compare attribute binding (the
ToyWorld binding test; ARO and SugarCrepe when given) and retrieval.

    ray job submit --address http://127.0.0.1:8265 --working-dir . -- \\
        python ray_jobs/biaug.py --dataset coco --data /mnt/shared/coco \\
        --llm openai --llm-model gpt-4o-mini --aro /mnt/shared/aro \\
        --sugarcrepe /mnt/shared/sugarcrepe --storage /mnt/shared/xmr

The workers read the API key from OPENAI_API_KEY (--llm-key-env names another variable): set it
in the cluster's environment, never on the command line. On ToyWorld (the default, no --data)
the LLM is the world's ground truth (--llm oracle) and no model is downloaded.

Submitting the same command again resumes it: finished steps are skipped. --dry-run prints the
plan. The steps are in xmr/jobs/biaug.py.
"""

from _xmr_python import require_xmr_python

require_xmr_python()

from xmr.jobs.biaug import BiAugJobOptions, biaug_job  # noqa: E402 (after the interpreter check)
from xmr.jobs.cli import job_app  # noqa: E402 (after the interpreter check)

app = job_app(biaug_job, BiAugJobOptions, __doc__)

if __name__ == "__main__":
    app()
