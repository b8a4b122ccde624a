"""D′ building blocks without Ray: config, row planning and keys, shard commits, resume checks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from xmr.data import Caption, DataError, ImageRecord, ObjectAnnotation, read_toyworld
from xmr.removal import plan_removals, removal_plans
from xmr.synth.config import OPTION_ORDER, SynthOptions, load_configs
from xmr.synth.inputs import inputs_hash, read_inputs
from xmr.synth.output import (
    check_out_dir,
    commit_shard,
    error_table,
    finished_shards,
    split_shards,
)
from xmr.synth.removal.plan import save_plan
from xmr.synth.removal.rows import PlannedRow, plan_rows, row_key

RECORD = ImageRecord(
    image_id=7,
    path=Path("/data/7.png"),
    width=100,
    height=100,
    captions=(
        Caption(1, "Two dogs fighting over a frisbee"),
        Caption(2, "A dog on the grass"),
        Caption(3, "A frisbee in the air"),
        Caption(4, "Dogs and a frisbee"),
    ),
    objects=(
        ObjectAnnotation("dog", (0, 0, 30, 30)),
        ObjectAnnotation("dog", (50, 50, 20, 20)),
        ObjectAnnotation("frisbee", (35, 0, 10, 10)),
    ),
    split="train",
)
MENTIONS = [{"dog", "frisbee"}, {"dog"}, {"frisbee"}, {"dog", "frisbee"}]


def test_yaml_config_with_flag_overrides(tmp_path) -> None:
    path = tmp_path / "synth.yaml"
    path.write_text("fill: blur\nalpha1: 0.3\ncaptions-per-image: all\nfill_actors: 3\n")
    options, runtime = load_configs(path, {"alpha1": 0.5, "seed": None, "dataset": "toyworld"})
    assert options.shared.fill == "blur"
    assert options.methods["removal"].alpha1 == 0.5  # the flag wins over the file
    assert options.shared.captions_per_image is None  # "all"
    assert runtime.fill_actors == 3
    assert runtime.out == Path("xmr-synth/toyworld-train").resolve()  # absolute: Ray workers


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"fill": "lama"}, "--fill 'lama' is not one of"),
        ({"alpha3": 1.5}, "--alpha3 must be in"),
        ({"captions_per_image": "some"}, "--captions-per-image"),
        ({"colour": "red"}, "unknown option(s) colour"),
        ({"max_error_rate": 2.0}, "--max-error-rate"),
        ({"box_threshold": 0.0}, "--box-threshold must be in"),
    ],
)
def test_bad_options_are_named(overrides, message) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_configs(None, overrides)


def test_a_missing_model_folder_is_named_before_anything_runs(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="--sd-model"):
        load_configs(None, {"fill": "sd", "sd_model": str(tmp_path / "no-such-model")})


def test_fingerprint_ignores_where_the_data_is_but_not_what_is_built() -> None:
    base = SynthOptions.of()
    assert base.fingerprint() == SynthOptions.of(data=Path("/elsewhere")).fingerprint()
    assert base.fingerprint() != SynthOptions.of(fill="zero").fingerprint()
    assert base.fingerprint() != SynthOptions.of(seed=1).fingerprint()
    assert base.fingerprint() != SynthOptions.of(alpha1=0.5).fingerprint()
    # A method hashes the shared config and its own, not the other method's options ...
    assert base.fingerprint() == SynthOptions.of(max_objects=7).fingerprint()
    biaug = SynthOptions.of(mode="biaug")
    assert biaug.fingerprint() == SynthOptions.of(mode="biaug", alpha1=0.5).fingerprint()
    assert biaug.fingerprint() != SynthOptions.of(mode="biaug", max_objects=7).fingerprint()
    # ... which are recorded all the same, flat, in the flags' order.
    assert list(SynthOptions.of(mode="biaug", alpha1=0.5).to_dict().items())[:6] == [
        ("mode", "biaug"), ("dataset", "toyworld"), ("data", None), ("split", "train"),
        ("limit", None), ("alpha1", 0.5),
    ]  # fmt: skip
    assert list(base.to_dict()) == list(OPTION_ORDER)


def test_rows_pair_each_plan_with_a_caption_that_names_a_removed_class() -> None:
    plans = removal_plans(RECORD, 0.4, 0.8, 0.7)
    assert plans == [("dog",), ("frisbee",)]
    rows = plan_rows(RECORD, plans, MENTIONS, captions_per_image=1, seed=0)
    assert [r.removed for r in rows] == [("dog",), ("frisbee",)]
    caption_ids = [c.id for c in RECORD.captions]
    for row in rows:
        assert set(row.removed) & MENTIONS[caption_ids.index(row.source_caption_id)]
        assert row.key == row_key(7, row.removed, row.source_caption_id)
    dog = rows[0]
    assert dog.kept == ("frisbee",)
    assert dog.boxes == ((0, 0, 30, 30), (50, 50, 20, 20))


def test_caption_choice_is_seeded_and_all_takes_every_eligible_caption() -> None:
    plans = [("dog",)]
    chosen = {
        plan_rows(RECORD, plans, MENTIONS, captions_per_image=1, seed=s)[0].source_caption_id
        for s in range(40)
    }
    assert chosen == {1, 2, 4}  # every caption that mentions a dog, never "A frisbee in the air"
    again = [plan_rows(RECORD, plans, MENTIONS, captions_per_image=1, seed=5) for _ in range(3)]
    assert again[0] == again[1] == again[2]
    every = plan_rows(RECORD, plans, MENTIONS, captions_per_image=None, seed=0)
    assert [r.source_caption_id for r in every] == [1, 2, 4]
    # Prompt / captioner captions: no mentions needed, every caption is eligible.
    assert len(plan_rows(RECORD, plans, None, captions_per_image=None, seed=0)) == 4


def test_np_removal_draws_only_captions_that_keep_a_word(nltk_tagger) -> None:
    from xmr.synth.removal.captions import rewrite_caption
    from xmr.synth.removal.rows import PlanFailure

    record = ImageRecord(
        7, Path("/data/7.png"), 100, 100,
        (Caption(1, "A frisbee."), Caption(2, "A dog with a frisbee."), Caption(3, "A dog.")),
        RECORD.objects, "train",
    )  # fmt: skip
    mentions = [{"frisbee"}, {"dog", "frisbee"}, {"dog"}]

    def rewrite(caption, removed):
        return rewrite_caption(caption, removed, "coco")

    failures: list[PlanFailure] = []
    for seed in range(20):
        (row,) = plan_rows(record, [("frisbee",)], mentions, captions_per_image=1, seed=seed,
                           rewrite=rewrite, failures=failures)  # fmt: skip
        assert (row.source_caption_id, row.rewritten) == (2, "A dog with.")
    assert failures == []
    # Every caption naming a dog becomes empty: the plan is a failure, not a row.
    dogless = ImageRecord(8, record.path, 100, 100, (Caption(4, "A dog."),), record.objects, "x")
    rows = plan_rows(dogless, [("dog",)], [{"dog"}], captions_per_image=1, seed=0,
                     rewrite=rewrite, failures=failures)  # fmt: skip
    assert rows == []
    assert failures[0].key == "8/dog/4" and failures[0].stage == "caption"
    assert "becomes empty" in failures[0].message
    with pytest.raises(ValueError, match="no caption keeps a word"):
        plan_rows(dogless, [("dog",)], [{"dog"}], captions_per_image=1, seed=0, rewrite=rewrite)


def test_planned_row_round_trips_through_columns() -> None:
    row = plan_rows(RECORD, [("dog",)], MENTIONS, captions_per_image=1, seed=0)[0]
    assert PlannedRow.from_dict(row.to_dict()) == row


def test_rows_on_toyworld_follow_plan_removals(small_toyworld) -> None:
    for record in read_toyworld(small_toyworld, "train")[:40]:
        objects = [(o.category, list(o.bbox)) for o in record.objects]
        plans = plan_removals(objects, record.width, record.height)
        rows = plan_rows(record, plans, None, captions_per_image=1, seed=0)
        assert sorted({r.removed for r in rows}) == plans
        assert len({r.key for r in rows}) == len(rows)


def _row(key: str) -> dict:
    return {
        "key": key,
        "image": b"png",
        "caption": "a dog",
        "source_image_id": 1,
        "source_caption_id": 2,
        "source_caption": "a dog and a cat",
        "removed_classes": ["cat"],
        "kept_classes": ["dog"],
        "removed_boxes": [[0.0, 0.0, 1.0, 1.0]],
        "width": 4,
        "height": 4,
        "fill": "telea",
        "caption_method": "np-removal",
    }


def test_shards_commit_atomically_and_resume_checks_their_keys(tmp_path) -> None:
    shards = split_shards(["a", "b", "c", "d", "e"], 2)
    assert shards == [["a", "b"], ["c", "d"], ["e"]]
    error = {"key": "b", "stage": "fill", "error_type": "DataError", "message": "corrupt"}
    commit_shard(tmp_path, 0, [_row("a")], [error])
    assert finished_shards(tmp_path, shards) == {0}
    assert not list(tmp_path.rglob("*.tmp"))
    assert pq.read_table(tmp_path / "data" / "part-00000.parquet")["key"].to_pylist() == ["a"]
    # The same folder under another plan is refused, naming the shard.
    with pytest.raises(DataError, match=r"part-00000\.parquet does not hold"):
        finished_shards(tmp_path, split_shards(["x", "y"], 2))
    commit_shard(tmp_path, 5, [_row("z")], [])
    with pytest.raises(DataError, match="beyond this plan"):
        finished_shards(tmp_path, shards)


def test_out_dir_must_be_ours(tmp_path) -> None:
    check_out_dir(tmp_path / "new")
    (tmp_path / "thesis.tex").write_text("")
    with pytest.raises(DataError, match=r"thesis\.tex"):
        check_out_dir(tmp_path)


# Runs each build of argv[2:] in a fresh process and prints, per build, the refusal and whether
# Ray was started in the process by then.
_BUILD_AND_REPORT_RAY = """
import json, sys
from pathlib import Path
import ray
from xmr.synth.methods import synthesize
from xmr.synth.runner import ray_executor
from xmr.synth.config import load_configs

for out in sys.argv[2:]:
    options, runtime = load_configs(
        None, {"data": Path(sys.argv[1]), "out": Path(out), "progress": False, "log_mlflow": False}
    )
    try:
        synthesize(options, runtime, executor=ray_executor(runtime))
        refusal = None
    except ValueError as exc:
        refusal = str(exc)
    print(json.dumps({"refusal": refusal, "ray_started": ray.is_initialized()}))
"""


def test_refusals_of_an_existing_out_come_before_ray_starts(small_toyworld, tmp_path) -> None:
    options, _ = load_configs(None, {"data": small_toyworld})
    digest = inputs_hash(*read_inputs(options.shared, small_toyworld))
    # The refusal expected, and the metadata of the plan already in --out.
    ours = options.fingerprint()
    cases = [
        ("built from another config", {"config_hash": "0123456789abcdef", "inputs_hash": digest}),
        ("built from another input data", {"config_hash": ours, "inputs_hash": "0" * 16}),
        ("beyond this plan", {"config_hash": ours, "inputs_hash": digest}),
    ]
    outs = [tmp_path / f"out{n}" for n in range(len(cases))]
    for out, (_, metadata) in zip(outs, cases, strict=True):
        save_plan(out, [], error_table([]), metadata)
    commit_shard(outs[-1], 0, [_row("z")], [])  # a shard that the (empty) plan does not have
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run(
        [sys.executable, "-c", _BUILD_AND_REPORT_RAY, str(small_toyworld), *map(str, outs)],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    reports = [json.loads(line) for line in done.stdout.splitlines()]
    for (refusal, _), report in zip(cases, reports, strict=True):
        assert refusal in report["refusal"]
        assert not report["ray_started"], refusal


def _planned_batch(options: SynthOptions, count: int) -> dict:
    """The planner stage's rows for the first images of ``options.shared.data``, as the fill
    gets them."""
    from xmr.pipeline import Resources
    from xmr.pipeline.stage import rows_to_batch
    from xmr.synth.removal.stages import PlanRows, plan_inputs

    records = read_toyworld(options.shared.data, "train")[:count]
    planner = PlanRows(options.shared, options.methods["removal"], Resources(), 8)
    planned = planner.run_local(rows_to_batch(plan_inputs(records)))
    ok = [i for i, error in enumerate(planned["error"]) if not error]
    return {k: v[ok] for k, v in planned.items() if not k.startswith("seconds_")}


@pytest.mark.parametrize("fill", ["telea", "ns", "zero", "mean", "blur"])
@pytest.mark.parametrize("caption", ["np-removal", "prompt"])
def test_every_cpu_fill_and_caption_runs_as_a_stage(small_toyworld, nltk_tagger, fill, caption):
    from xmr.data.images import decode_image
    from xmr.pipeline import Resources
    from xmr.synth.removal.stages import FillImages, WriteCaptions

    options = SynthOptions.of(data=small_toyworld, fill=fill, caption=caption)
    batch = _planned_batch(options, 6)
    filled = FillImages(options.shared, Resources(), 8).run_local(batch)
    done = WriteCaptions(options.shared, options.methods["removal"], Resources(), 8).run_local(
        filled
    )
    ok = [i for i, error in enumerate(done["error"]) if not error]
    assert ok
    for i in ok:
        assert decode_image(done["image"][i]).size == (done["width"][i], done["height"][i])
        assert done["caption"][i]
