"""``xmr demo``: the ODmAP paper's central experiment, end to end, on the embedded ToyWorld.

It is the ODmAP job (:mod:`xmr.jobs.odmap`, what ``ray_jobs/odmap.py`` submits to a
cluster) at laptop size, in ``--workdir``:

1. Build D′ from the default ToyWorld's train split (cached; no download): box masks + Telea
   inpainting, noun-phrase removal captions.
2. Train ``xmr-tiny`` CLIP from scratch on D ∪ D′ for 3 epochs, and on D for as many
   optimiser steps (or, ``converged``, both until their val RSUM levels off), with the same
   seed; each run ends with the test-split evaluation (Recall@K both ways, ODmAP@K on exact
   counterfactual renders, Bias@K).
3. Compare them side by side: the change D′ makes beyond the training budget, on one seed.

The job is one MLflow run in ``xmr/jobs/odmap`` with a child run per step; rerunning skips the
finished steps and resumes an interrupted one.
"""

from __future__ import annotations

from rich.console import Console

from xmr.data.registry import check_data_folder
from xmr.jobs.odmap import ODmAPJobOptions, odmap_report, odmap_steps
from xmr.jobs.options import job_params
from xmr.jobs.steps import Job, JobResult, run_job
from xmr.storage import StoragePath
from xmr.toyworld.default_world import default_toyworld

DEMO_EPOCHS = 3  # of D ∪ D′, whose steps D gets too: about 20 min on 2 cores, far from converged


def demo_epochs(epochs: int | None, pretrained: str | None) -> int | None:
    """The D ∪ D′ run's epochs: ``epochs`` when given; from scratch :data:`DEMO_EPOCHS`; from
    the toy CLIP None (its finetuning preset's, :data:`~xmr.train.config.TOY_FINETUNE`).

    >>> demo_epochs(None, None), demo_epochs(None, "toy"), demo_epochs(5, "toy")
    (3, None, 5)
    """
    if epochs is not None:
        return epochs
    return None if pretrained else DEMO_EPOCHS


def demo_job(
    workdir: StoragePath,
    *,
    seed: int = 0,
    epochs: int | None = DEMO_EPOCHS,
    cpus_per_worker: int = 2,
    progress: bool = True,
    data: StoragePath | None = None,
    converged: bool = False,
    equal_epochs: bool = False,
    pretrained: str | None = None,
) -> Job:
    """The demo's job in ``workdir``, on ``data`` (another ToyWorld folder, from ``xmr data
    toyworld``, a path or ``s3://…``) or the default ToyWorld: D ∪ D′ for ``epochs`` against
    D at its steps (``equal_epochs``: and D for ``epochs`` too), or ``converged`` both trained
    until they level off (``epochs`` unused); ``pretrained`` ``"toy"``: both finetune the toy
    CLIP (None: ``xmr-tiny`` from scratch)."""
    check_data_folder("toyworld", data)
    world = data or default_toyworld(seed, progress=progress)
    budget = {"converged": True} if converged else {"epochs": epochs, "equal_epochs": equal_epochs}
    options = ODmAPJobOptions(
        data=world, seed=seed, cpus_per_worker=cpus_per_worker, pretrained=pretrained, **budget
    )
    steps = odmap_steps(options, workdir, {"xmr.demo": f"seed{seed}"})
    return Job("odmap", f"demo-seed{seed}", workdir, job_params(options), steps, odmap_report)


def run_demo(
    workdir: StoragePath,
    *,
    seed: int = 0,
    epochs: int | None = DEMO_EPOCHS,
    tracking_uri: str | None = None,
    address: str | None = None,
    cpus_per_worker: int = 2,
    progress: bool = True,
    data: StoragePath | None = None,
    converged: bool = False,
    equal_epochs: bool = False,
    pretrained: str | None = None,
) -> JobResult:
    """Run (or resume) the demo in ``workdir``: D′ in ``workdir/dprime``, runs in
    ``workdir/runs``, the comparison in ``workdir/comparison.csv``."""
    job = demo_job(
        workdir,
        seed=seed,
        epochs=epochs,
        cpus_per_worker=cpus_per_worker,
        progress=progress,
        data=data,
        converged=converged,
        equal_epochs=equal_epochs,
        pretrained=pretrained,
    )
    return run_job(job, tracking_uri=tracking_uri, address=address, console=Console())
