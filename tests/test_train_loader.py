"""The training loader (xmr.train.loader): per-pair augmentation seeds, batches as columns,
the slot stage on Ray Data, and a run that is the same twice."""

from __future__ import annotations

import warnings
from functools import partial

import numpy as np
import pyarrow as pa
import pytest
import ray
import torch
from biaug_fixture import write_biaug_dprime

from xmr.data import read_dataset
from xmr.models import create_model
from xmr.models.base import Corpus
from xmr.models.batch import TrainBatch
from xmr.pipeline.ray_idle import PauseWhenIdle
from xmr.train.batching import GROUP_COLUMN, epoch_order, pairs_together
from xmr.train.config import resolve_config
from xmr.train.data import ROW_COLUMN, augment_seeds, collate, training_data
from xmr.train.loader import StartClock, batches_of, clock_epoch, spare_loaders, training_dataset
from xmr.train.plan import DecodeSlots, slots_of_steps, training_plan
from xmr.train.run import train
from xmr.tune.trials import TrialFootprint


@pytest.fixture(scope="module")
def pairs(small_toyworld) -> pa.Table:
    return training_data(read_dataset("toyworld", small_toyworld, "train")).table


def _vsepp(table: pa.Table):
    return create_model(
        "vsepp", arch="xmr-tiny-vgg", seed=0, corpus=Corpus(table["caption"].to_pylist())
    )


def test_augment_seeds_differ_by_seed_epoch_and_row_and_repeat() -> None:
    rows = np.arange(1000)
    seeds = augment_seeds(0, 0, rows)
    assert seeds.dtype == np.int64 and (seeds >= 0).all() and len(set(seeds.tolist())) == 1000
    assert np.array_equal(seeds, augment_seeds(0, 0, rows))
    assert np.array_equal(seeds[[7, 3]], augment_seeds(0, 0, [7, 3]))  # a row's, in any batch
    for other in (augment_seeds(1, 0, rows), augment_seeds(0, 1, rows)):
        assert not np.isin(seeds, other).any()


def test_a_pairs_random_crop_depends_on_seed_epoch_and_row_only(pairs) -> None:
    """VSE++'s crop and flip: the same pair in another batch, order or RNG state gets the same
    pixels; another epoch gets others; the caller's RNG is left as it was."""
    model = _vsepp(pairs)
    rows = pairs.slice(0, 6).to_pydict()
    first = collate(rows, model, seed=5, epoch=2)
    torch.manual_seed(123)
    state = torch.get_rng_state()
    reordered = collate(pairs.take([4, 0]).to_pydict(), model, seed=5, epoch=2)
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(reordered.pixels, first.pixels[[4, 0]])
    later = collate(rows, model, seed=5, epoch=3)
    assert not torch.equal(later.pixels, first.pixels)
    assert not torch.equal(first.pixels[0], first.pixels[1])  # pairs differ within a batch


@pytest.mark.parametrize(
    ("family", "arch"), [("clip", "xmr-tiny"), ("blip", "xmr-tiny-blip"), ("eiclip", "xmr-tiny")]
)
def test_a_batch_goes_through_columns_unchanged(family: str, arch: str) -> None:
    corpus = Corpus(["a red shirt", "blue jeans"], {"brand": ["acme", "zenith"]})
    model = create_model(family, arch=arch, seed=0, corpus=corpus)
    text = model.tokenize(corpus.captions)
    batch = TrainBatch(
        pixels=torch.rand(2, 3, model.image_size, model.image_size),
        text=text,
        image_ids=torch.tensor([3, 3]),
        image_gender=torch.tensor([1, -1]),
        caption_neutral=torch.tensor([True, False]),
        entities=model.entity_ids(corpus.entities),
    )
    columns = batch.to_columns()
    for array in columns.values():  # as Ray Data hands them over: read-only
        array.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "NumPy array is not writable" per batch
        back = TrainBatch.from_columns(columns)
    texts = (back.text, batch.text) if isinstance(text, dict) else ({"": back.text}, {"": text})
    assert texts[0].keys() == texts[1].keys()
    assert all(torch.equal(texts[0][key], texts[1][key]) for key in texts[1])
    assert torch.equal(back.pixels, batch.pixels) and back.entities.keys() == batch.entities.keys()
    assert all(torch.equal(back.entities[g], batch.entities[g]) for g in batch.entities)
    for name, value in batch.labels().items():
        assert torch.equal(back.labels()[name], value)


@pytest.mark.slow
def test_the_slot_stage_decodes_each_epochs_permutation_from_the_start_epoch(
    local_ray, small_toyworld, pairs, tmp_path
) -> None:
    """Slots of the run through Ray Data: epochs before the start clock are skipped undecoded;
    every later epoch is its own seeded permutation, cut into micro-batches."""
    config = resolve_config(
        "vsepp", data=small_toyworld, epochs=3, batch_size=32, seed=4, storage=tmp_path
    )
    corpus = Corpus(pairs["caption"].to_pylist())
    steps = pairs.num_rows // config.batch_size
    clock = StartClock.remote()
    ray.get(clock.set.remote(1))
    dataset = training_dataset(pairs, config, corpus, clock, steps)
    assert PauseWhenIdle in dataset.context.custom_execution_callback_classes
    dataset.context.execution_options.preserve_order = True  # as xmr.train.run's DataConfig
    batches = [batch for batch, pairs in batches_of(dataset.iterator(), prefetch=1)]
    per_epoch = slots_of_steps(config, steps)
    assert per_epoch == steps and len(batches) == 2 * per_epoch  # epochs 1 and 2
    model = create_model(config.model, seed=config.seed, corpus=corpus)
    for epoch in (1, 2):
        order = epoch_order(pairs.num_rows, config.seed, epoch)
        for k in (0, per_epoch - 1):
            rows = pairs.take(order[k * 32 : (k + 1) * 32]).to_pydict()
            want = collate(rows, model, seed=config.seed, epoch=epoch)
            got = batches[(epoch - 1) * per_epoch + k]
            assert torch.equal(got.pixels, want.pixels) and torch.equal(got.text, want.text)
            assert torch.equal(got.image_ids, want.image_ids)
    assert not np.array_equal(epoch_order(pairs.num_rows, 4, 1), epoch_order(pairs.num_rows, 4, 2))
    inputs = partial(tuple, (pairs, corpus))
    stage = DecodeSlots(config, inputs, per_epoch, False, partial(clock_epoch, clock))
    stage.setup()
    assert stage.process({"slot": np.arange(per_epoch)}) == {}  # epoch 0: before the start
    assert ROW_COLUMN in pairs.column_names


@pytest.mark.slow
def test_one_or_four_loaders_give_the_same_batches_in_the_same_order(
    local_ray, small_toyworld, pairs, tmp_path
) -> None:
    """The loader's count changes who decodes, not what: VSE++'s random crops, two epochs,
    batch for batch equal (each pair's crop is seeded by its row and epoch)."""
    corpus = Corpus(pairs["caption"].to_pylist())
    steps = pairs.num_rows // 32
    runs = []
    for loaders in (1, 4):
        config = resolve_config(
            "vsepp", data=small_toyworld, epochs=2, batch_size=32, seed=5, storage=tmp_path,
            loaders=loaders,
        )  # fmt: skip
        dataset = training_dataset(pairs, config, corpus, StartClock.remote(), steps)
        dataset.context.execution_options.preserve_order = True  # as xmr.train.run's DataConfig
        runs.append([batch for batch, _ in batches_of(dataset.iterator(), prefetch=1)])
    one, four = runs
    assert len(one) == len(four) == 2 * steps
    for a, b in zip(one, four, strict=True):
        assert torch.equal(a.image_ids, b.image_ids) and torch.equal(a.pixels, b.pixels)
        assert torch.equal(a.text, b.text)


def test_the_number_of_loaders_is_what_the_nodes_spare_beside_the_workers() -> None:
    assert spare_loaders([16.0], workers=1, cpus_per_worker=8)[0] == 7
    assert spare_loaders([2.0], workers=1, cpus_per_worker=1)[0] == 1  # at least one
    count, why = spare_loaders([0.0, 8.0, 8.0], workers=2, cpus_per_worker=4)  # CPU-less head
    assert count == 6 and why == "2 nodes' 16 CPUs − 1 each − 2 workers × 4 CPUs"
    # in a sweep's trial "as many as spare" is one: its resources are reserved up front
    assert TrialFootprint.of({}, cpus=2, gpus=0).loaders == 1
    assert TrialFootprint.of({"loaders": 3}, cpus=2, gpus=0).loaders == 3


@pytest.mark.slow
def test_the_slot_stage_keeps_biaug_pairs_in_one_micro_batch(
    local_ray, small_toyworld, tmp_path
) -> None:
    """A BiAug D′ through Ray Data: each slot is the plan's micro-batch of whole groups (pairs
    and an odd batch size with few single rows leave most a row short: the tensor columns carry
    both sizes), and each batch reports every pair row beside its partner."""
    dprime = write_biaug_dprime(small_toyworld, tmp_path / "biaug", pairs=40)
    table = training_data(read_dataset("toyworld", small_toyworld, "train"), dprime).table
    paired = np.array(table[GROUP_COLUMN].to_pylist()) != ""
    table = table.filter(pa.array(paired | (np.cumsum(~paired) <= 3)))  # 80 pair rows, 3 single
    config = resolve_config(
        "clip", data=small_toyworld, synth=dprime, epochs=2, batch_size=5, seed=2, storage=tmp_path
    )
    plan = training_plan(table, config, grouped=True)
    steps = min(len(plan.batches(epoch)) for epoch in range(2))
    corpus = Corpus(table["caption"].to_pylist())
    dataset = training_dataset(table, config, corpus, StartClock.remote(), steps, grouped=True)
    dataset.context.execution_options.preserve_order = True  # as xmr.train.run's DataConfig
    got = list(batches_of(dataset.iterator(), prefetch=1))
    assert len(got) == 2 * steps
    wanted = [batch for epoch in range(2) for batch in plan.batches(epoch)[:steps]]
    assert {len(rows) for rows in wanted} == {4, 5}  # some a row short
    pair_rows = 0
    for (batch, (grouped, together)), rows in zip(got, wanted, strict=True):
        ids = table["image_id"].take(pa.array(rows)).to_numpy()
        assert np.array_equal(batch.image_ids.numpy(), ids) and batch.pixels.shape[0] == len(rows)
        group_ids = table[GROUP_COLUMN].take(pa.array(rows)).to_pylist()
        assert (grouped, together) == pairs_together(group_ids) and grouped == together
        pair_rows += grouped
    assert pair_rows > 0


@pytest.mark.slow
def test_the_same_config_trains_the_same_weights(local_ray, small_toyworld, tmp_path) -> None:
    """VSE++ (random crops, decoded by the loader's actors) trained twice with one seed: the
    same weights, parameter for parameter."""
    weights = []
    for name in ("first", "second"):
        config = resolve_config(
            "vsepp", data=small_toyworld, epochs=2, batch_size=16, seed=1, name=name,
            storage=tmp_path / "runs",
        )  # fmt: skip
        result = train(config, tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
        weights.append(torch.load(result.last_checkpoint, weights_only=True)["model"])
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][key], weights[1][key]) for key in weights[0])
