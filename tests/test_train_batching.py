"""Training batches (biaug paper §3.3, §5.1) without Ray: a BiAug D′ becomes training rows with a
``group_id``; whole groups are sampled, shuffled each epoch and batched, so a positive and its
hard negative always share a micro-batch (on any number of workers: a micro-batch goes whole to
one), and ``--no-hard-negatives`` lets them part. D and a removal-mode D′ train as before."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from biaug_fixture import write_biaug_dprime

from xmr.data import read_dataset
from xmr.data.errors import DataError
from xmr.data.synthetic import ERROR_SCHEMA, ROW_SCHEMA, synthetic_mode
from xmr.eval.protocol import record_gender
from xmr.toyworld import generate
from xmr.train.batching import (
    GROUP_COLUMN,
    EpochPlan,
    batch_groups,
    epoch_order,
    groups_of,
    pairs_together,
)
from xmr.train.config import TrainConfig, resolve_config
from xmr.train.data import (
    PAIR_SCHEMA,
    ROW_COLUMN,
    ratio_shortfall,
    sample_groups,
    training_data,
)
from xmr.train.options import TrainOptions
from xmr.train.run import train

PAIRS = 12  # hard-negative pairs in the fixture D′


@pytest.fixture(scope="module")
def tiny_world(tmp_path_factory) -> Path:
    config = tmp_path_factory.mktemp("tiny-world-config") / "world.yaml"
    config.write_text("splits: {train: 8, val: 2, test: 2}\n")
    return generate(tmp_path_factory.mktemp("tiny-world") / "w", config, seed=3)


@pytest.fixture(scope="module")
def biaug_dprime(tiny_world, tmp_path_factory) -> Path:
    return write_biaug_dprime(tiny_world, tmp_path_factory.mktemp("biaug") / "out", PAIRS)


def _removal_dprime(world: Path, out: Path, manifest: dict) -> Path:
    """A removal-mode D′ of one row per D image (``manifest`` as given: with or without mode)."""
    rows = [
        {
            "key": f"{record.image_id:012d}/0",
            "image": record.path.read_bytes(),
            "caption": "a room.",
            "source_image_id": record.image_id,
            "source_caption_id": 0,
            "source_caption": record.caption_texts[0],
            "removed_classes": ["person"] if n % 2 else ["car"],
            "kept_classes": [],
            "removed_boxes": [[0.0, 0.0, 4.0, 4.0]],
            "width": record.width,
            "height": record.height,
            "fill": "zero",
            "caption_method": "prompt",
        }
        for n, record in enumerate(read_dataset("toyworld", world, "train"))
    ]
    (out / "data").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=ROW_SCHEMA), out / "data/part-00000.parquet")
    pq.write_table(ERROR_SCHEMA.empty_table(), out / "errors.parquet")
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


def _mixed_groups(singles: int, pairs: int, seed: int) -> list[list[str]]:
    """``singles`` groups of one and ``pairs`` groups of two, in a seeded order."""
    groups = [[f"d{n}"] for n in range(singles)] + [[f"p{n}+", f"p{n}-"] for n in range(pairs)]
    order = np.random.default_rng(seed).permutation(len(groups))
    return [groups[n] for n in order]


def _assert_whole(batches: list[list[str]], groups: list[list[str]]) -> None:
    where = {row: n for n, batch in enumerate(batches) for row in batch}
    for group in groups:
        if group[0] in where:
            assert {where.get(row) for row in group} == {where[group[0]]}, group


@pytest.mark.parametrize("batch_size", [2, 3, 5, 8])
def test_batches_are_full_and_never_split_a_group(batch_size: int) -> None:
    groups = _mixed_groups(singles=40, pairs=30, seed=batch_size)
    batches = list(batch_groups(groups, batch_size))
    _assert_whole(batches, groups)
    sizes = Counter(len(batch) for batch in batches)
    if batch_size % 2 == 0:  # a single row in the batch always makes room for a pair
        assert set(sizes) == {batch_size}
    else:  # a run of pairs may leave one slot open
        assert set(sizes) <= {batch_size, batch_size - 1} and sizes[batch_size] > 0.9 * len(batches)
    rows = [row for batch in batches for row in batch]
    assert len(rows) == len(set(rows)) and len(rows) > 100 - batch_size - 2  # only a tail left
    assert batches == list(batch_groups(groups, batch_size))  # deterministic


def test_only_pairs_and_an_odd_batch_size_give_batches_one_short() -> None:
    groups = [[f"p{n}+", f"p{n}-"] for n in range(20)]
    batches = list(batch_groups(groups, 5))
    _assert_whole(batches, groups)
    assert {len(batch) for batch in batches} == {4} and len(batches) == 9  # 4 rows left over
    with pytest.raises(ValueError, match="group of 2 rows does not fit in a batch of 1"):
        list(batch_groups(groups, 1))


def test_an_epoch_plan_shuffles_whole_groups_and_uses_each_row_once() -> None:
    group_ids = ["", "a", "", "b", "a", "b", "c", "", "c"]
    assert groups_of(group_ids) == [[0], [1, 4], [2], [3, 5], [6, 8], [7]]
    assert groups_of(group_ids, hard_negatives=False) == [[n] for n in range(9)]
    table = pa.table({"caption": [f"row {n}" for n in range(9)], "group_id": group_ids})
    plan = EpochPlan.for_table(table, 4, seed=1, grouped=True, hard_negatives=True)
    epochs = [[batch.tolist() for batch in plan.batches(epoch)] for epoch in range(6)]
    for batches in epochs:
        _assert_whole(batches, groups_of(group_ids))
        rows = [row for batch in batches for row in batch]
        assert len(rows) == len(set(rows)) == 8 and {len(b) for b in batches} == {4}
    assert len({str(batches) for batches in epochs}) > 1  # a fresh order each epoch
    again = EpochPlan.for_table(table, 4, seed=1, grouped=True, hard_negatives=True)
    assert [[b.tolist() for b in again.batches(epoch)] for epoch in range(6)] == epochs
    # Without groups (or with --no-hard-negatives): consecutive slices of the rows' permutation.
    for grouped, hard in ((False, True), (True, False)):
        rows_plan = EpochPlan.for_table(table, 4, seed=1, grouped=grouped, hard_negatives=hard)
        order = epoch_order(9, 1, 3)
        assert [b.tolist() for b in rows_plan.batches(3)] == [
            order[:4].tolist(),
            order[4:8].tolist(),
        ]
    assert all(b.dtype == np.int64 for b in plan.batches(0))


def _epoch_batches(table: pa.Table, batch_size: int, seed: int, hard_negatives: bool):
    """What the loader trains on in each of three epochs: the plan's micro-batches as row
    dicts (the workers share them out whole)."""
    plan = EpochPlan.for_table(table, batch_size, seed, True, hard_negatives)
    return [
        [table.take(pa.array(batch)).to_pylist() for batch in plan.batches(epoch)]
        for epoch in range(3)
    ]


def test_each_pair_lands_in_one_micro_batch(tiny_world, biaug_dprime) -> None:
    records = read_dataset("toyworld", tiny_world, "train")
    data = training_data(records, biaug_dprime, seed=0)
    assert data.synth_mode == "biaug" and data.synthetic == 2 * PAIRS
    for seed in range(3):
        for epoch in _epoch_batches(data.table, 6, seed, hard_negatives=True):
            place: dict[str, set[int]] = {}
            for n, batch in enumerate(epoch):
                assert len(batch) == 6
                for row in batch:
                    if row["group_id"]:
                        place.setdefault(row["group_id"], set()).add(n)
                grouped, together = pairs_together([row["group_id"] for row in batch])
                assert grouped == together
            assert place and all(len(spots) == 1 for spots in place.values())


def test_no_hard_negatives_lets_pairs_part(tiny_world, biaug_dprime) -> None:
    records = read_dataset("toyworld", tiny_world, "train")
    data = training_data(records, biaug_dprime, seed=0)
    split = 0
    for seed in range(3):
        (epoch, *_) = _epoch_batches(data.table, 6, seed, hard_negatives=False)
        for batch in epoch:
            grouped, together = pairs_together([row["group_id"] for row in batch])
            split += grouped - together
    assert split > 0


def test_biaug_rows_keep_group_ids_and_their_source_gender(tiny_world, biaug_dprime) -> None:
    records = read_dataset("toyworld", tiny_world, "train")
    genders = {record.image_id: record_gender(record) for record in records}
    assert synthetic_mode(biaug_dprime) == "biaug"
    data = training_data(records, biaug_dprime, seed=0)
    schema = PAIR_SCHEMA.append(pa.field(ROW_COLUMN, pa.int64()))
    assert data.table.schema == schema and data.dprime_digest == f"biaug-fixture-{PAIRS}"
    original = data.table.filter(pa.compute.equal(data.table["source"], "D")).to_pylist()
    assert original and all(row["group_id"] == "" for row in original)
    synthetic = data.table.filter(pa.compute.equal(data.table["source"], "D′")).to_pylist()
    assert Counter(Counter(row["group_id"] for row in synthetic).values()) == {2: PAIRS}
    assert len({row["image_id"] for row in synthetic}) == 2 * PAIRS  # mutual negatives
    sources = {int(row["group_id"].split("/")[0]) for row in synthetic}
    assert "female" in {genders[source] for source in sources}
    for row in synthetic:
        assert row["image_gender"] == genders[int(row["group_id"].split("/")[0])]


@pytest.mark.parametrize("wanted", [5, 10, 11, 17])
def test_synth_ratio_samples_whole_pairs(tiny_world, biaug_dprime, wanted: int) -> None:
    records = read_dataset("toyworld", tiny_world, "train")
    ratio = wanted / sum(len(record.captions) for record in records)
    data = training_data(records, biaug_dprime, ratio, seed=4)
    assert data.synthetic == wanted - wanted % 2  # whole pairs only
    assert ratio_shortfall(data, ratio) is None  # D′ had enough: nothing to report
    synthetic = data.table.filter(pa.compute.equal(data.table["source"], "D′"))
    assert set(Counter(synthetic.column("group_id").to_pylist()).values()) == {2}
    again = training_data(records, biaug_dprime, ratio, seed=4)
    assert again.table.column("caption").to_pylist() == data.table.column("caption").to_pylist()
    ids = ["a", "a", "", "b", "b", "", "c", "c", ""]
    samples = {tuple(sample_groups(ids, 4, seed)) for seed in range(20)}
    assert len(samples) > 1
    for sample in samples:
        taken = Counter(ids[n] for n in sample if ids[n])
        assert len(sample) in (3, 4) and set(taken.values()) <= {2}
    assert list(sample_groups(ids, None, 0)) == list(range(9))


def test_removal_dprime_and_plain_d_train_as_before(tiny_world, tmp_path) -> None:
    records = read_dataset("toyworld", tiny_world, "train")
    only_d = training_data(records)
    assert only_d.synth_mode == "" and set(only_d.table.column("group_id").to_pylist()) == {""}
    legacy = _removal_dprime(tiny_world, tmp_path / "legacy", {"config_hash": "h"})
    named = _removal_dprime(tiny_world, tmp_path / "named", {"mode": "removal"})
    assert synthetic_mode(legacy) == synthetic_mode(named) == "removal"
    ratio = 5 / sum(len(record.captions) for record in records)
    data = training_data(records, legacy, ratio, seed=3)
    assert data.synth_mode == "removal"
    # the sample the removal mode has always drawn: seeded rows, in key order
    count = 5
    take = np.sort(np.random.default_rng(3).choice(len(records), size=count, replace=False))
    synthetic = data.table.slice(data.original).to_pylist()
    assert [row["image_id"] for row in synthetic] == [-(1 + int(n)) for n in take]
    assert all(row["group_id"] == "" for row in synthetic)
    genders = [record_gender(records[int(n)]) for n in take]
    assert [row["image_gender"] for row in synthetic] == [
        "neutral" if n % 2 else gender for n, gender in zip(take, genders, strict=True)
    ]  # odd rows removed their persons
    bad = _removal_dprime(tiny_world, tmp_path / "bad", {"mode": "inpaint"})
    with pytest.raises(DataError, match="unknown D′ mode 'inpaint'"):
        training_data(records, bad)


def test_a_lone_biaug_row_trains_alone_and_a_group_of_three_is_refused(tiny_world, tmp_path):
    out = write_biaug_dprime(tiny_world, tmp_path / "out", 3)
    shard = out / "data/part-00001.parquet"
    table = pq.read_table(shard)
    records = read_dataset("toyworld", tiny_world, "train")
    pq.write_table(table.slice(1), shard)  # a positive whose hard negative is missing
    data = training_data(records, out)
    synthetic = data.table.slice(data.original).to_pylist()
    assert Counter(Counter(row["group_id"] for row in synthetic).values()) == {2: 2, 1: 1}
    assert "" in {row["group_id"] for row in synthetic}
    pq.write_table(pa.concat_tables([table, table.slice(0, 1)]), shard)
    with pytest.raises(DataError, match=r"group_id '.*' has 3 rows"):
        training_data(records, out)


def test_the_hard_negatives_flag(tiny_world, biaug_dprime, tmp_path) -> None:
    base = resolve_config("clip", data=tiny_world, synth=biaug_dprime, storage=tmp_path)
    ablation = resolve_config(
        "clip", data=tiny_world, synth=biaug_dprime, storage=tmp_path, hard_negatives=False
    )
    assert base.params()["data.hard_negatives"] == "True"
    assert ablation.params()["data.hard_negatives"] == "False"
    assert base.fingerprint() != ablation.fingerprint()
    assert (
        TrainConfig.from_options(
            TrainOptions(synth=biaug_dprime, hard_negatives=False)
        ).hard_negatives
        is False
    )
    with pytest.raises(ValueError, match="--no-hard-negatives needs --synth"):
        resolve_config("clip", data=tiny_world, hard_negatives=False)
    removal = _removal_dprime(tiny_world, tmp_path / "removal", {"mode": "removal"})
    config = resolve_config(
        "clip", data=tiny_world, synth=removal, storage=tmp_path, hard_negatives=False
    )
    with pytest.raises(ValueError, match="--no-hard-negatives applies to a BiAug D′"):
        train(config, tracking_uri=f"sqlite:///{tmp_path / 'never.db'}")  # before Ray starts


@pytest.mark.slow
def test_the_synth_only_flag_trains_on_the_dprime_sample_alone(
    tiny_world, biaug_dprime, tmp_path
) -> None:
    """BiAug's ablation "D′ without D": the same seeded D′ sample, no pair of D; a run name of
    its own; refused without --synth."""
    records = read_dataset("toyworld", tiny_world, "train")
    mixed = training_data(records, biaug_dprime, 0.5, seed=3)
    alone = training_data(records, biaug_dprime, 0.5, seed=3, synth_only=True)
    assert alone.original == 0 and alone.synthetic == mixed.synthetic > 0
    pairs = alone.table.drop_columns([ROW_COLUMN])  # numbered from 0 in each table
    assert (
        pairs.to_pylist()
        == mixed.table.drop_columns([ROW_COLUMN]).slice(mixed.original).to_pylist()
    )
    assert alone.table[ROW_COLUMN].to_pylist() == list(range(alone.synthetic))
    base = resolve_config("clip", data=tiny_world, synth=biaug_dprime, storage=tmp_path)
    ablation = resolve_config(
        "clip", data=tiny_world, synth=biaug_dprime, storage=tmp_path, synth_only=True
    )
    assert ablation.params()["data.synth_only"] == "True"
    assert base.fingerprint() != ablation.fingerprint()
    assert (
        TrainConfig.from_options(TrainOptions(synth=biaug_dprime, synth_only=True)).synth_only
        is True
    )
    with pytest.raises(ValueError, match="--synth-only needs --synth"):
        resolve_config("clip", data=tiny_world, synth_only=True)
    # MLflow gets the D′ sample as the run's only dataset input (no empty D)
    import mlflow

    from xmr.tracking import start_run
    from xmr.train.plan import RunPlan
    from xmr.train.record import _log_inputs

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    plan = RunPlan(ablation, tiny_world, alone, alone.corpus(), grouped=True, steps_per_epoch=1)
    with start_run("xmr/train/toyworld", tracking_uri=uri) as run:
        _log_inputs(run, plan)
    inputs = mlflow.MlflowClient(uri).get_run(run.run_id).inputs.dataset_inputs
    assert [i.dataset.name for i in inputs] == ["D′"]


@pytest.mark.parametrize(
    ("steps", "length"), [(1, (6, 1)), (6, (6, 1)), (12, (5, 3)), (31, (5, 7))]
)
def test_steps_set_the_epochs_from_the_fewest_steps_an_epoch_has(
    tiny_world, biaug_dprime, tmp_path, steps: int, length: tuple[int, int]
) -> None:
    """--steps N on BiAug pairs and 5 single rows in batches of 5 (whole groups leave some a row
    short: epoch 0 has 6 micro-batches, epoch 1 has 5): steps per epoch are the fewest of any
    epoch the run trains, and the epochs ``ceil(N / steps per epoch)`` (12 steps: not 2 epochs
    of 6, but 3 of 5); the epochs' steps add up to N. --epochs E: the fewest over E epochs."""
    from xmr.train.plan import run_length, training_plan

    full = training_data(read_dataset("toyworld", tiny_world, "train"), biaug_dprime).table
    paired = np.array(full[GROUP_COLUMN].to_pylist()) != ""
    table = full.filter(pa.array(paired | (np.cumsum(~paired) <= 5)))
    fields = {"data": tiny_world, "synth": biaug_dprime, "storage": tmp_path, "batch_size": 5}
    config = resolve_config("clip", steps=steps, **fields)
    plan = training_plan(table, config, grouped=True)
    assert [len(plan.batches(epoch)) for epoch in range(2)] == [6, 5]
    per_epoch, epochs = run_length(table, config, grouped=True)
    assert (per_epoch, epochs) == length
    assert per_epoch == min(len(plan.batches(epoch)) for epoch in range(epochs))
    assert sum(config.steps_in_epoch(epoch, per_epoch) for epoch in range(epochs)) == steps
    assert run_length(table, resolve_config("clip", epochs=1, **fields), grouped=True) == (6, 1)
    assert run_length(table, resolve_config("clip", epochs=2, **fields), grouped=True) == (5, 2)


def test_pairs_together_counts_rows_beside_their_partner() -> None:
    assert pairs_together(["g", "", "h", "g"]) == (3, 2)
    assert pairs_together(["", ""]) == (0, 0)
