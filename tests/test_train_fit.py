"""The run without Ray (xmr.train.fit): a whole training in this process with local hooks, to a
plateau, tested with its best epoch's weights, and resumed after a stop where it left off."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from xmr.toyworld import generate
from xmr.train.config import resolve_config
from xmr.train.convergence import BEST_EPOCH, PLATEAUED, STOPPED_EPOCH
from xmr.train.evaluation import selection_score
from xmr.train.fit import MODEL_FILE, FitData, LocalHooks, fit
from xmr.train.plan import RunPlan, local_batches, plan_run


class Stopped(Exception):
    """A stop after a report: the process ends between two epochs."""


class StopAfter(LocalHooks):
    """Local hooks that stop the run once ``epochs`` epochs are reported (and checkpointed)."""

    def __init__(self, folder: Path, epochs: int) -> None:
        super().__init__(folder)
        self.epochs = epochs

    def report(self, metrics, checkpoint, name) -> None:
        super().report(metrics, checkpoint, name)
        if len(self.reports) == self.epochs:
            raise Stopped


@contextlib.contextmanager
def worker_threads(count: int) -> Iterator[None]:
    """torch's threads as in a Ray Train worker of ``count`` CPUs: sums over another thread
    count round differently in the last digits."""
    threads = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def untimed(metrics: dict[str, float]) -> dict[str, float]:
    """``metrics`` without those that time the run (they differ from run to run)."""
    timing = ("samples_per_s", "_s", "gpu_util")
    return {k: v for k, v in metrics.items() if not any(part in k for part in timing)}


def _data(plan: RunPlan) -> FitData:
    return FitData(
        root=plan.root,
        corpus=plan.corpus,
        steps_per_epoch=plan.steps_per_epoch,
        grouped=plan.grouped,
        batches=lambda start: local_batches(plan, start),
    )


@pytest.fixture(scope="module")
def plan(tmp_path_factory) -> RunPlan:
    """CLIP to convergence on a world of 24 training images (about 7 steps an epoch): no
    evaluation gains 600 RSUM points, so the count starts at the first evaluation and the run
    stops at epoch 4 (patience 3)."""
    folder = tmp_path_factory.mktemp("fit-world")
    (folder / "world.yaml").write_text("splits: {train: 24, val: 4, test: 4}\n")
    world = generate(folder / "w", folder / "world.yaml", seed=3)
    config = resolve_config(
        "clip", data=world, batch_size=16, epochs="auto", patience=3, min_delta=600,
        max_epochs=6, storage=tmp_path_factory.mktemp("unused"), seed=2,
    )  # fmt: skip
    return plan_run(config)


@pytest.fixture(scope="module")
def uninterrupted(plan, tmp_path_factory) -> LocalHooks:
    hooks = LocalHooks(tmp_path_factory.mktemp("uninterrupted"))
    with worker_threads(plan.config.cpus_per_worker):
        fit(plan.config, _data(plan), hooks)
    return hooks


def test_the_run_modules_import_no_ray() -> None:
    code = (
        "import sys, xmr.train.fit, xmr.train.plan, xmr.train.evaluation\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'ray', 'mlflow'}))"
    )
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "[]"


def test_fit_trains_to_a_plateau_and_tests_the_best_epochs_weights(plan, uninterrupted) -> None:
    reports = uninterrupted.reports
    assert [r["epoch"] for r in reports] == [1, 2, 3, 4]  # stopped by the plateau, not the cap
    rsum = {int(r["epoch"]): selection_score(r, "val") for r in reports}
    best_epoch = max(rsum, key=lambda epoch: (rsum[epoch], -epoch))  # the first of the best
    final = reports[-1]
    assert (final[STOPPED_EPOCH], final[PLATEAUED], final[BEST_EPOCH]) == (4, 1.0, best_epoch)
    assert "test/recall_t2i_at_1" in final and "test/odmap_at_1" in final
    assert all("test/recall_t2i_at_1" not in r for r in reports[:-1])  # tested once, at the end
    steps = [r["train/global_step"] for r in reports]
    assert steps == [plan.steps_per_epoch * e for e in (1, 2, 3, 4)]
    folder = uninterrupted.folder
    last = torch.load(folder / "last.pt", weights_only=True)["model"]
    best = torch.load(folder / "best.pt", weights_only=True)["model"]
    assert all(torch.equal(last[key], best[key]) for key in best)  # last.pt: the best weights
    assert sorted(p.name for p in folder.glob("epoch_*")) == ["epoch_0003", "epoch_0004"]
    assert (folder / "epoch_0004" / MODEL_FILE).is_file()


def test_a_stopped_run_resumes_where_it_left_off_and_ends_as_an_uninterrupted_one(
    plan, uninterrupted, tmp_path
) -> None:
    """Stopped after epoch 2's checkpoint, a new process (fresh hooks on the same folder)
    resumes at epoch 3 with the plateau's count and, when the best epoch came before the stop,
    takes its weights back from ``best.pt``: every reported number equals the uninterrupted
    run's, to the digit."""
    with worker_threads(plan.config.cpus_per_worker):
        with pytest.raises(Stopped):
            fit(plan.config, _data(plan), StopAfter(tmp_path, epochs=2))
        resumed = LocalHooks(tmp_path)
        fit(plan.config, _data(plan), resumed)
    assert [r["epoch"] for r in resumed.reports] == [3, 4]
    assert uninterrupted.reports[-1][BEST_EPOCH] <= 2  # so the resumed run read best.pt
    for got, want in zip(resumed.reports, uninterrupted.reports[2:], strict=True):
        assert untimed(got) == untimed(want)


def test_a_finished_run_run_again_reports_nothing_more(plan, uninterrupted, tmp_path) -> None:
    import shutil

    shutil.copytree(uninterrupted.folder, tmp_path, dirs_exist_ok=True)
    again = LocalHooks(tmp_path)
    assert fit(plan.config, _data(plan), again) == {} and again.reports == []


@pytest.mark.slow
def test_rays_loop_and_fit_give_the_same_metrics_for_the_same_seed(
    local_ray, plan, uninterrupted, tmp_path
) -> None:
    """``xmr train`` (Ray Train's loop, the loader's actors) and :func:`fit` in this process:
    the same final metrics, to the digit."""
    from xmr.train.run import train

    config = replace(plan.config, storage=tmp_path)
    result = train(config, tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    local = untimed(uninterrupted.reports[-1])
    ray_metrics = {k: v for k, v in untimed(result.metrics).items() if k in local}
    assert ray_metrics == local and len(local) > 50
