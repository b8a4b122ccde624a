"""`xmr synth` on a local Ray: accounting, plans, determinism, resume, bad rows, model stages."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from xmr.cli import app
from xmr.data import load_image, read_toyworld
from xmr.data.images import decode_image
from xmr.data.synthetic import read_manifest, read_synthetic, read_synthetic_errors
from xmr.removal import plan_removals
from xmr.removal.planning import box_mask
from xmr.synth.config import load_configs
from xmr.synth.methods import synthesize
from xmr.synth.runner import ray_executor

pytestmark = pytest.mark.slow
runner = CliRunner()


def _build(world: Path, out: Path, **options):
    config, runtime = load_configs(
        None,
        {
            "data": world,
            "out": out,
            "rows_per_shard": 16,
            "progress": False,
            "log_mlflow": False,
            **options,
        },
    )
    return synthesize(config, runtime, executor=ray_executor(runtime))


def _rows(out: Path) -> list[tuple]:
    """Every written pair, comparable across builds."""
    return [
        (p.key, p.image, p.caption, p.removed_classes, p.kept_classes) for p in read_synthetic(out)
    ]


@pytest.fixture(scope="module")
def prompt_build(small_toyworld, local_ray, tmp_path_factory) -> Path:
    """Prompt captions keep every plan (no caption needs to mention the removed class)."""
    out = tmp_path_factory.mktemp("prompt") / "out"
    _build(small_toyworld, out, caption="prompt")
    return out


def test_every_plan_of_every_image_is_written_or_an_error(prompt_build, small_toyworld) -> None:
    manifest = read_manifest(prompt_build)
    assert manifest["planned"] == manifest["written"] + manifest["errors"]
    expected = set()
    for record in read_toyworld(small_toyworld, "train"):
        objects = [(o.category, list(o.bbox)) for o in record.objects]
        for plan in plan_removals(objects, record.width, record.height, 0.4, 0.8, 0.7):
            expected.add((record.image_id, plan))
    pairs = read_synthetic(prompt_build)
    errors = read_synthetic_errors(prompt_build)["key"].to_pylist()
    found = {(p.source_image_id, p.removed_classes) for p in pairs}
    found |= {(int(k.split("/")[0]), tuple(k.split("/")[1].split("+"))) for k in errors}
    assert found == expected
    assert len(pairs) + len(errors) == manifest["planned"] == len(expected)


def test_images_change_only_inside_the_removed_boxes(prompt_build, small_toyworld) -> None:
    records = {r.image_id: r for r in read_toyworld(small_toyworld, "train")}
    table = pq.read_table(sorted((prompt_build / "data").glob("*.parquet"))[0]).to_pylist()
    for row in table[:10]:
        source = np.asarray(load_image(records[row["source_image_id"]].path))
        synthetic = np.asarray(decode_image(row["image"]))
        mask = box_mask(row["removed_boxes"], row["width"], row["height"])
        assert synthetic.shape == source.shape
        assert np.array_equal(synthetic[~mask], source[~mask])
        assert not np.array_equal(synthetic[mask], source[mask])
        assert set(row["kept_classes"]).isdisjoint(row["removed_classes"])
        assert any(name in row["caption"] for name in row["kept_classes"])


def test_same_config_same_rows_and_resume_redoes_only_missing_shards(
    prompt_build, small_toyworld, tmp_path
) -> None:
    again = tmp_path / "again"
    _build(small_toyworld, again, caption="prompt")
    assert _rows(again) == _rows(prompt_build)
    shards = sorted((again / "data").glob("part-*.parquet"))
    for shard in shards[1:3]:
        shard.unlink()
    result = _build(small_toyworld, again, caption="prompt")
    assert result.manifest["counts"]["shards_resumed"] == len(shards) - 2
    assert result.manifest["counts"]["rows_this_run"] == 32
    assert _rows(again) == _rows(prompt_build)
    with pytest.raises(ValueError, match="another config"):
        _build(small_toyworld, again, caption="prompt", fill="zero")


def _break_world(world: Path, tmp: Path) -> tuple[Path, dict[str, int]]:
    """A copy of ``world`` with a missing image, a corrupt image, a degenerate box and a caption
    that noun-phrase removal empties. Returns the copy and the image id of each defect."""
    broken = tmp / "broken"
    shutil.copytree(world, broken)
    records = read_toyworld(world, "train")
    planned = [
        r
        for r in records
        if plan_removals([(o.category, list(o.bbox)) for o in r.objects], r.width, r.height)
    ]
    missing, corrupt, degenerate, emptied = planned[:4]
    (broken / "train" / missing.path.name).unlink()
    (broken / "train" / corrupt.path.name).write_bytes(b"\x89PNG this is not an image")
    instances = json.loads((broken / "annotations" / "instances_train.json").read_text())
    box = next(a for a in instances["annotations"] if a["image_id"] == degenerate.image_id)
    box["bbox"] = [10, 10, 0, 5]
    (broken / "annotations" / "instances_train.json").write_text(json.dumps(instances))
    captions = json.loads((broken / "annotations" / "captions_train.json").read_text())
    plans = plan_removals(
        [(o.category, list(o.bbox)) for o in emptied.objects], emptied.width, emptied.height
    )
    for ann in captions["annotations"]:
        if ann["image_id"] == emptied.image_id:
            ann["caption"] = f"A {plans[0][0]}."
    (broken / "annotations" / "captions_train.json").write_text(json.dumps(captions))
    ids = {"missing": missing, "corrupt": corrupt, "degenerate": degenerate, "emptied": emptied}
    return broken, {name: r.image_id for name, r in ids.items()}


def test_bad_rows_land_in_errors_and_the_job_completes(small_toyworld, local_ray, tmp_path) -> None:
    broken, ids = _break_world(small_toyworld, tmp_path)
    out = tmp_path / "out"
    args = ["synth", "--data", str(broken), "--out", str(out), "--no-progress", "--no-mlflow"]
    result = runner.invoke(app, [*args, "--max-error-rate", "0.001"])
    assert result.exit_code == 1, result.output
    assert "rows failed" in result.output
    assert "errors.parquet" in result.output
    errors = read_synthetic_errors(out).to_pylist()
    by_image: dict[int, set[str]] = {}
    for error in errors:
        by_image.setdefault(int(error["key"].split("/")[0]), set()).add(error["stage"])
        assert error["message"]
    assert by_image[ids["missing"]] == {"read"}
    assert by_image[ids["degenerate"]] == {"read"}
    assert by_image[ids["corrupt"]] == {"fill"}
    assert "caption" in by_image[ids["emptied"]]
    messages = " ".join(e["message"] for e in errors)
    assert "is missing" in messages and "becomes empty" in messages
    manifest = read_manifest(out)
    assert (
        manifest["planned"]
        == manifest["written"] + manifest["errors"]
        == (len(read_synthetic(out)) + len(errors))
    )
    # Allowed error rate: the same (finished) build exits 0.
    assert runner.invoke(app, [*args, "--max-error-rate", "0.5"]).exit_code == 0


def test_sd_fill_and_captioner_run_as_stages(small_toyworld, local_ray, tmp_path) -> None:
    from tiny_captioner import build_tiny_captioner
    from tiny_sd import build_tiny_sd_inpainting

    sd = build_tiny_sd_inpainting(tmp_path / "sd")
    captioner = build_tiny_captioner(tmp_path / "captioner")
    options = {
        "fill": "sd",
        "sd_model": str(sd),
        "sd_steps": 2,
        "sd_resolution": 64,
        "caption": "captioner",
        "captioner_model": str(captioner),
        "limit": 6,
    }
    result = _build(small_toyworld, tmp_path / "out", **options)
    manifest = result.manifest
    assert manifest["planned"] == manifest["written"] + manifest["errors"]
    pairs = read_synthetic(tmp_path / "out")
    assert pairs and all(p.fill == "sd" and p.caption_method == "captioner" for p in pairs)
    assert all(p.decode().size == (128, 128) for p in pairs)
    again = _build(small_toyworld, tmp_path / "again", **options)
    assert again.manifest["written"] == manifest["written"]
    assert _rows(tmp_path / "again") == _rows(tmp_path / "out")


def test_groundingdino_boxes_replace_annotations(small_toyworld, local_ray, tmp_path) -> None:
    from tiny_grounding_dino import build_tiny_grounding_dino

    detector = build_tiny_grounding_dino(tmp_path / "gdino")
    result = _build(
        small_toyworld,
        tmp_path / "out",
        boxes="groundingdino",
        detector_model=str(detector),
        box_threshold=0.01,
        text_threshold=0.01,
        caption="prompt",
        limit=6,
    )
    manifest = result.manifest
    assert manifest["planned"] == manifest["written"] + manifest["errors"]
    assert manifest["busy_s"]["detect"] > 0


def test_cli_logs_the_build_to_mlflow(small_toyworld, local_ray, tmp_path) -> None:
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = ["synth", "--data", str(small_toyworld), "--out", str(tmp_path / "out"), "--limit", "20"]
    result = runner.invoke(app, [*args, "--tracking-uri", uri, "--no-progress", "--run-name", "t"])
    assert result.exit_code in (0, 1), result.output
    assert "planned" in result.output and "written" in result.output
    mlflow.set_tracking_uri(uri)
    (run,) = mlflow.search_runs(experiment_names=["xmr/synth/toyworld"], output_format="list")
    assert run.data.params["synth.fill"] == "telea"
    manifest = read_manifest(tmp_path / "out")
    assert run.data.metrics["written"] == manifest["written"]
    assert run.data.metrics["planned"] == manifest["planned"]
    lasted = (run.info.end_time - run.info.start_time) / 1000
    assert lasted >= manifest["timings_s"]["total"]  # the run spans the build, then its log
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id)}
    assert {"manifest.json", "samples.png"} <= artifacts
