"""Every family's objective on 2 data-parallel workers (gloo, DDP), and with gradient
accumulation (``--accum-steps``) on 1 or 2 workers, equals 1 worker on the concatenated batch:
the same loss and the same gradients (the global batch of :mod:`xmr.models.gather`,
:mod:`xmr.train.accumulate`). No Ray: two processes and a process group on 127.0.0.1."""

from __future__ import annotations

import itertools
import socket
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from PIL import Image
from torch.nn.parallel import DistributedDataParallel

from xmr.metrics.gender_bias import GENDER_CODES
from xmr.models import Corpus, create_model
from xmr.models.batch import TrainBatch
from xmr.models.gather import gather_rows, local_share
from xmr.models.losses import LossConfig
from xmr.models.objective import Objective
from xmr.train.accumulate import accumulated_backward, average_gradients

SPLIT = (6, 4)  # rows on worker 0 and worker 1: unequal, as BiAug's whole-group batches can be
ACCUM_SPLIT = ([3, 3], [1, 2, 1])  # each worker's micro-batches under accumulation
CAPTIONS = [
    "a man rides a red bike", "a woman holds a blue cup", "a person walks a dog",
    "a red car near a tree", "a man with a green hat", "a woman on a bench",
    "a child plays with a ball", "a dog on the grass", "a blue car on the road",
    "a person with a yellow umbrella",
]  # fmt: skip
ENTITIES = {
    "brand": ["arvo", "", "kel", "arvo", "", "kel", "mon", "", "arvo", "mon"],
    "season": ["summer", "winter", "", "summer", "", "", "winter", "summer", "", ""],
}
# (case, family, arch, loss settings): every family's objective, FairSample on two of them.
CASES = {
    "clip-infonce": ("clip", "xmr-tiny", LossConfig()),
    "clip-fairsample": ("clip", "xmr-tiny", LossConfig(fair_alpha=0.5)),
    "vsepp-hardest": ("vsepp", "xmr-tiny-vgg", LossConfig()),
    "vsepp-fairsample": ("vsepp", "xmr-tiny-vgg", LossConfig(fair_alpha=0.5)),
    "blip-itc-itm": ("blip", "xmr-tiny-blip", LossConfig()),
    "blip-fairsample": ("blip", "xmr-tiny-blip", LossConfig(fair_alpha=0.5)),
    "eiclip-three": ("eiclip", "xmr-tiny", LossConfig()),
}


def _objective(case: str) -> tuple[torch.nn.Module, TrainBatch]:
    """The case's objective (seeded weights) and its 10-row batch, the same in any process."""
    family, arch, loss = CASES[case]
    corpus = Corpus(CAPTIONS, ENTITIES if family == "eiclip" else {})
    model = create_model(family, arch=arch, corpus=corpus, seed=0)
    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 255, (48, 48, 3), dtype=np.uint8)) for _ in CAPTIONS]
    m, f, n = GENDER_CODES["male"], GENDER_CODES["female"], GENDER_CODES["neutral"]
    batch = TrainBatch(
        pixels=torch.stack([model.preprocess(image) for image in images]),
        text=model.tokenize(CAPTIONS),
        # rows 1 and 7 show one image, across the two workers: never each other's negatives
        image_ids=torch.tensor([0, 1, 2, 3, 4, 5, 6, 1, 8, 9]),
        image_gender=torch.tensor([m, f, n, n, m, f, n, f, m, n]),
        caption_neutral=torch.tensor([0, 0, 1, 1, 0, 0, 1, 0, 1, 1], dtype=torch.bool),
        entities=model.entity_ids(ENTITIES) if family == "eiclip" else {},
    )
    objective = model.objective(loss, seed=11)
    objective.train()
    for module in objective.modules():  # VSE++'s fc7 dropout draws differ between processes
        if isinstance(module, torch.nn.Dropout):
            module.eval()
    return objective, batch


def _rows(batch: TrainBatch, rows: slice) -> TrainBatch:
    def cut(value):
        if isinstance(value, dict):
            return {k: cut(v) for k, v in value.items()}
        return value[rows]

    return TrainBatch(**{name: cut(value) for name, value in vars(batch).items()})


def _step(objective: torch.nn.Module, batch: TrainBatch) -> dict[str, torch.Tensor]:
    """Loss parts and parameter gradients of one step (``grad/<name>``)."""
    out = objective(batch)
    out["loss"].backward()
    module = objective.module if isinstance(objective, DistributedDataParallel) else objective
    result = {key: value.detach() for key, value in out.items()}
    for name, param in module.named_parameters():
        if param.grad is not None:
            result[f"grad/{name}"] = param.grad.detach().clone()
    return result


def _accumulated_step(objective: Objective, batch: TrainBatch, sizes: list[int]) -> dict:
    """:func:`_step` as ``xmr train --accum-steps`` takes it, over micro-batches of ``sizes``."""
    starts = np.cumsum([0, *sizes])
    micro = [_rows(batch, slice(a, b)) for a, b in itertools.pairwise(starts)]
    out = accumulated_backward(objective, micro)
    average_gradients(objective)
    result = {key: value.detach() for key, value in out.items()}
    for name, param in objective.named_parameters():
        if param.grad is not None:
            result[f"grad/{name}"] = param.grad.detach().clone()
    return result


def _worker(rank: int, port: int, out: str) -> None:
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=len(SPLIT)
    )
    torch.set_num_threads(1)
    start = sum(SPLIT[:rank])
    results = {}
    for case in CASES:
        objective, batch = _objective(case)
        ddp = DistributedDataParallel(objective, find_unused_parameters=True)
        results[case] = _step(ddp, _rows(batch, slice(start, start + SPLIT[rank])))
        objective, batch = _objective(case)
        mine = _rows(batch, slice(start, start + SPLIT[rank]))
        results[f"{case}/accum"] = _accumulated_step(objective, mine, ACCUM_SPLIT[rank])
    torch.save(results, Path(out) / f"rank{rank}.pt")
    dist.destroy_process_group()


def _close(actual: torch.Tensor, expected: torch.Tensor) -> bool:
    """Equal up to float32 summation order: relative 1e-4 of each value, or 5e-5 of the
    tensor's largest one (elements that cancel to ~0 differ in their noise only)."""
    scale = float(expected.abs().max())
    return torch.allclose(actual, expected, rtol=1e-4, atol=5e-5 * scale + 1e-8)


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory) -> list[dict[str, dict[str, torch.Tensor]]]:
    """Every case's step on 2 DDP workers (rows split as :data:`SPLIT`): each rank's results."""
    out = tmp_path_factory.mktemp("ddp")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_worker, args=(port, str(out)), nprocs=len(SPLIT), join=True)
    return [torch.load(out / f"rank{r}.pt", weights_only=True) for r in range(len(SPLIT))]


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_two_workers_equal_one_worker_on_the_concatenated_batch(two_workers, case: str) -> None:
    objective, batch = _objective(case)
    single = _step(objective, batch)
    ranks = [results[case] for results in two_workers]
    # Loss parts: their mean over the workers (what `xmr train` logs) is the 1-worker value.
    losses = [key for key in single if not key.startswith("grad/")]
    for key in losses:
        mean = sum(rank[key] for rank in ranks) / len(ranks)
        assert _close(mean, single[key]), (key, mean, single[key])
    grads = [key for key in single if key.startswith("grad/")]
    assert grads
    for key in grads:
        for rank in ranks:  # DDP leaves the averaged gradient on every worker
            assert _close(rank[key], single[key]), key
    assert {k for k in ranks[0] if k.startswith("grad/")} == set(grads)


@pytest.mark.parametrize("case", list(CASES))
def test_accumulation_equals_one_step_on_the_whole_batch(case: str) -> None:
    """``--accum-steps``: 3 micro-batches on 1 worker give the loss and gradients of 1 step on
    the 10 rows at once (dropout draws replayed; every family's negatives intact)."""
    objective, batch = _objective(case)
    single = _step(objective, batch)
    objective, batch = _objective(case)
    accumulated = _accumulated_step(objective, batch, [4, 3, 3])
    for key, value in single.items():
        assert _close(accumulated[key], value), key


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_two_workers_accumulating_equal_one_step_on_the_whole_batch(two_workers, case) -> None:
    """2 DDP workers each accumulating 2 or 3 micro-batches: the gradients of 1 step on the 10
    rows at once, and its loss as the mean of theirs."""
    objective, batch = _objective(case)
    single = _step(objective, batch)
    ranks = [results[f"{case}/accum"] for results in two_workers]
    for key, value in single.items():
        if key.startswith("grad/"):
            assert all(_close(rank[key], value) for rank in ranks), key
        else:
            assert _close(sum(rank[key] for rank in ranks) / len(ranks), value), key


def test_outside_a_process_group_gathering_is_the_identity() -> None:
    x = torch.randn(3, 2, requires_grad=True)
    (same,), rows = gather_rows(x)
    assert same is x and rows == slice(0, 3)
    assert torch.equal(local_share(torch.tensor(6.0), 3), torch.tensor(2.0))
