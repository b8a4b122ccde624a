"""``xmr synth --mode biaug`` end to end: a scripted chat-completions server on 127.0.0.1 as the
LLM, tiny random GroundingDINO and Stable Diffusion models, real COCO images, local Ray; and
with perfect components on a ToyWorld (``--llm oracle --boxes gt --fill render``).

The server answers object proposals with a JSON list and attribute requests with a CSV table
(one row of it invalid, to be recorded); captions carrying a ``[[script:NAME]]`` marker get a
misbehaving answer instead (malformed JSON, a Python expression, 8 MiB, 429 then success, 500
forever, too slow, 401), and each must end as its row's error with the right status while the
job completes.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pyarrow.parquet as pq
import pytest
from chat_server import ChatServer
from typer.testing import CliRunner

from xmr.cli import app
from xmr.data.synthetic import BIAUG_ROW_SCHEMA, read_manifest, synthetic_table
from xmr.toyworld import WorldConfig, generate

MARKED = {  # script -> how the source example must end (error stage, error type)
    "malformed_json": ("propose", "AnswerError"),
    "python_expression": ("propose", "AnswerError"),
    "huge": ("propose", "llm_too_large"),
    "server_error": ("propose", "llm_server_error"),
    "slow": ("propose", "llm_timeout"),
    "unauthorized": ("propose", "llm_http_error"),
}
RECOVERS = "rate_limit_once"  # 429 with Retry-After, then an answer: the example goes on
OBJECTS = ["person", "dog", "car"]


def _answer(text: str) -> str:
    """The scripted LLM: proposals -> a JSON list; attribute requests -> a CSV table."""
    if not text.rstrip().endswith("Answer:"):
        return json.dumps(OBJECTS)
    caption = re.findall(r'Caption: "(.*)"', text)[-1]
    objects = json.loads(re.findall(r"Objects: (\[.*\])", text)[-1])
    rows = ["object,category,phrase,caption,negative_phrase,negative_caption"]
    for name in objects:
        rows.append(f'{name},color,a red {name},"{caption}, with a red {name}",'
                    f'a blue {name},"{caption}, with a blue {name}"')  # fmt: skip
    rows.append(f"{objects[0]},color,only four,fields")  # invalid: recorded, never repaired
    return "\n".join(rows) + "\n"


@pytest.fixture(scope="module")
def marked_coco(coco_mini: Path, tmp_path_factory) -> Path:
    """coco-mini's first 10 images; the captions of seven of them carry a script marker."""
    root = tmp_path_factory.mktemp("coco") / "coco"
    (root / "annotations").mkdir(parents=True)
    (root / "train2017").symlink_to((coco_mini / "train2017").resolve())
    shutil.copy(coco_mini / "annotations/instances_train2017.json", root / "annotations")
    captions = json.loads((coco_mini / "annotations/captions_train2017.json").read_text())
    first = sorted({image["id"] for image in captions["images"]})[:10]
    script_of = dict(zip(first, [*MARKED, RECOVERS], strict=False))
    for caption in captions["annotations"]:
        if caption["image_id"] in script_of:
            caption["caption"] += f" [[script:{script_of[caption['image_id']]}]]"
    (root / "annotations/captions_train2017.json").write_text(json.dumps(captions))
    return root


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> tuple[Path, Path]:
    from tiny_grounding_dino import build_tiny_grounding_dino
    from tiny_sd import build_tiny_sd_inpainting

    root = tmp_path_factory.mktemp("models")
    return build_tiny_grounding_dino(root / "gdino"), build_tiny_sd_inpainting(root / "sd")


def _args(
    server: ChatServer, data: Path, out: Path, models: tuple[Path, Path], uri: str
) -> list[str]:
    detector, sd = models
    return [
        "synth", "--mode", "biaug", "--dataset", "coco", "--data", str(data), "--limit", "10",
        "--out", str(out), "--llm", "openai", "--llm-url", server.url, "--llm-model", "scripted",
        "--llm-timeout", "2", "--llm-retries", "1", "--llm-backoff", "0.05",
        "--llm-max-response-bytes", "65536", "--detector", "hf",
        "--detector-model", str(detector), "--box-threshold", "0.01", "--text-threshold", "0.01",
        "--min-box-share", "0.001", "--max-box-share", "1.0", "--max-overlap", "1.0",
        "--fill", "sd", "--sd-model", str(sd), "--sd-steps", "2", "--sd-resolution", "64",
        "--max-error-rate", "1", "--no-progress", "--tracking-uri", uri,
        "--llm-cache", str(out.parent / f"{out.name}-llm-cache"),  # one cache per build here
    ]  # fmt: skip


def _synth(server: ChatServer, data: Path, out: Path, models: tuple[Path, Path], uri: str):
    return CliRunner().invoke(app, _args(server, data, out, models, uri))


@pytest.mark.slow
def test_biaug_builds_pairs_and_records_every_failure(
    local_ray, marked_coco, models, tmp_path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with ChatServer(slow_s=4.0, retry_after="0.2", default=_answer) as server:
        result = _synth(server, marked_coco, tmp_path / "out", models, uri)
        assert result.exit_code == 0, result.output
        log = server.log
    assert not (tmp_path / "PWNED").exists() and not Path("PWNED").exists()
    manifest = read_manifest(tmp_path / "out")
    assert manifest["mode"] == "biaug"
    assert manifest["planned"] == manifest["written"] + manifest["errors"]
    stats = manifest["statistics"]
    assert stats["source_examples"] == 10
    assert stats["augmented_examples"] == manifest["written"] > 0
    assert stats["hard_negative_pairs"] * 2 == manifest["written"]

    table = synthetic_table(tmp_path / "out")
    assert table.schema.equals(BIAUG_ROW_SCHEMA)
    rows = table.to_pylist()
    by_group: dict[str, dict[str, dict]] = {}
    for row in rows:
        by_group.setdefault(row["group_id"], {})[row["role"]] = row
    for group_id, pair in by_group.items():
        assert set(pair) == {"positive", "negative"}, group_id
        positive, negative = pair["positive"], pair["negative"]
        assert positive["box"] == negative["box"] and positive["category"] == "color"
        assert positive["phrase"].startswith("a red") and negative["phrase"].startswith("a blue")
        assert positive["image"] != negative["image"]  # same seed and mask, another prompt

    errors = pq.read_table(tmp_path / "out" / "errors.parquet").to_pylist()
    ended = {(e["stage"], e["error_type"]) for e in errors}
    for script, outcome in MARKED.items():
        assert outcome in ended, (script, ended)
    assert not any("Bearer" in e["message"] for e in errors)  # no credential in a reason
    # 429 then success: retried once after Retry-After, and the example went on.
    limited = [entry for entry in log if entry.script == RECOVERS]
    assert [entry.status for entry in limited][:2] == [429, 200]
    assert limited[1].started - limited[0].finished >= 0.2
    assert not any(RECOVERS in e["message"] for e in errors)
    reasons = pq.read_table(tmp_path / "out" / "reasons.parquet").to_pylist()
    assert any(r["stage"] == "decouple" and r["rule"] == "invalid_row" for r in reasons)
    dropped = sum(r["stage"] == "verify" for r in reasons)  # every dropped proposal, with why
    assert dropped == stats["extracted_objects"] - stats["kept_objects"]
    proposals = [
        entry for entry in log if entry.script == "default" and "Answer:" not in entry.user_text
    ]
    assert len({entry.body_sha256 for entry in proposals}) == len(proposals)  # asked once each

    # The same command again: only the transient failures (500, too slow) are asked again,
    # and they fail again; with --no-retry-errors nothing is asked; nothing changes.
    with ChatServer(slow_s=4.0, default=_answer) as again_server:
        again = _synth(again_server, marked_coco, tmp_path / "out", models, uri)
        assert again.exit_code == 0, again.output
        assert {entry.script for entry in again_server.log} == {"server_error", "slow"}
    with ChatServer(default=_answer) as quiet_server:
        args = [*_args(quiet_server, marked_coco, tmp_path / "out", models, uri),
                "--no-retry-errors"]  # fmt: skip
        assert CliRunner().invoke(app, args).exit_code == 0
        assert quiet_server.log == []
    assert synthetic_table(tmp_path / "out").equals(table)

    # Killed mid-way through the LLM calls, then rerun: no finished request is asked again,
    # and the output is the uninterrupted build's.
    with ChatServer(latency_s=0.3, slow_s=4.0, retry_after="0.2", default=_answer) as slow:
        args = _args(slow, marked_coco, tmp_path / "killed", models, uri)
        command = [sys.executable, "-m", "xmr.synth", *args[1:], "--llm-in-flight", "1"]
        env = {**os.environ, "RAY_AUTH_MODE": "disabled", "OMP_NUM_THREADS": "1"}
        build = subprocess.Popen(
            command, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 300
        while sum(entry.status == 200 for entry in slow.log) < 4:
            assert build.poll() is None and time.monotonic() < deadline, "the build got nowhere"
            time.sleep(0.05)
        killed_at = time.monotonic()
        family = [psutil.Process(build.pid), *psutil.Process(build.pid).children(recursive=True)]
        for process in family:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        psutil.wait_procs(family, timeout=30)
        finished = {
            e.body_sha256 for e in slow.log if e.status == 200 and e.finished < killed_at - 1
        }
    assert finished and not (tmp_path / "killed" / "manifest.json").exists()
    with ChatServer(slow_s=4.0, retry_after="0.2", default=_answer) as rerun_server:
        rerun = CliRunner().invoke(app, _args(rerun_server, marked_coco, tmp_path / "killed",
                                              models, uri))  # fmt: skip
        assert rerun.exit_code == 0, rerun.output
        asked_again = {entry.body_sha256 for entry in rerun_server.log}
    assert not finished & asked_again
    assert synthetic_table(tmp_path / "killed").equals(table)


def _stand_in_vllm(asked: Path):
    """Stands in for ``build_vllm_processor`` where vLLM cannot be installed (it pins another
    torch): the same row contract through xmr's own row functions (``vllm_request_fields`` in,
    ``vllm_result_row`` out), with the scripted answers as the engine's; a prompt carrying the
    ``server_error`` marker fails in the engine (``__inference_error__``). The engine appends
    each key it gets to the file ``asked`` (it runs in Ray's worker processes)."""
    from xmr.llm.vllm import vllm_request_fields, vllm_result_row

    def build(model: str, *, keep_columns, **settings):
        assert settings["runtime_env"] == {"image_uri": "ray-llm"} and settings["batch_size"] == 4

        def engine(row: dict) -> dict:
            fields = vllm_request_fields(row)
            text = fields["messages"][-1]["content"]
            with asked.open("a") as log:
                log.write(f"{row['key']}\n")
            if "[[script:server_error]]" in text:
                return {**row, **fields, "__inference_error__": "CUDA error: out of\nmemory"}
            return {**row, **fields, "generated_text": _answer(text)}

        def answer(dataset):
            return dataset.map(engine).map(
                vllm_result_row, fn_kwargs={"keep_columns": keep_columns}
            )

        return answer

    return build


@pytest.mark.slow
def test_vllm_engine_passes_answer_through_the_cache(
    local_ray, marked_coco, models, tmp_path, monkeypatch
) -> None:
    """``--llm vllm``: the engine answers every question of a planning step in one Ray Data
    pass, each answer lands in the cache, the LLM stages parse it from there; an engine failure
    ends its example as ``llm_engine_error`` with the reason on one line; a second plan asks
    the engine nothing and gives the same groups."""
    from xmr.llm import LLMSpec
    from xmr.pipeline.ray_executor import RayExecutor
    from xmr.synth.biaug import method as biaug_method
    from xmr.synth.config import load_configs
    from xmr.synth.inputs import read_inputs

    log = tmp_path / "asked.txt"
    monkeypatch.setattr(biaug_method, "build_vllm_processor", _stand_in_vllm(log))
    options, runtime = load_configs(None, {
        "mode": "biaug", "dataset": "coco", "data": marked_coco, "limit": 6,
        "detector_model": str(models[0]), "box_threshold": 0.01, "text_threshold": 0.01,
        "min_box_share": 0.001, "max_box_share": 1.0, "max_overlap": 1.0, "batch_size": 4,
        "out": tmp_path / "out", "progress": False,
    })  # fmt: skip
    llm = LLMSpec(backend="vllm", model="org/model", runtime_env='{"image_uri": "ray-llm"}',
                  batch_size=4, cache_dir=tmp_path / "cache")  # fmt: skip
    llm.check_ready()
    config, biaug = options.shared, options.methods["biaug"]
    records, _ = read_inputs(config, marked_coco)
    examples = biaug_method.source_examples(records, config)
    executor = RayExecutor(progress=False)
    groups, errors, _, stats, busy, _ = biaug_method.plan_pass(
        executor, examples, config, biaug, runtime, llm
    )
    assert stats["source_examples"] == len(examples) == 6 and busy["llm_engine"] > 0
    before_decouple = sum(e["stage"] in ("propose", "verify") for e in errors)
    asked = log.read_text().split()
    assert len(asked) == len(set(asked)) == 6 + 6 - before_decouple  # each question once
    (failed,) = [e for e in errors if e["error_type"] == "llm_engine_error"]
    assert failed["stage"] == "propose" and failed["message"] == "CUDA error: out of memory"
    assert groups and {g["phrase"].split()[1] for g in groups} == {"red"}
    log.unlink()
    again = biaug_method.plan_pass(executor, examples, config, biaug, runtime, llm)
    assert again[0] == groups and again[1] == errors
    # only the question the engine failed on is asked again (failures are not cached)
    assert len(log.read_text().split()) == 1


@pytest.fixture(scope="module")
def oracle_world(tmp_path_factory) -> Path:
    """Ten 64-px images (8 train): small enough for a quick build with every component exact."""
    config = WorldConfig.from_dict({"image_size": 64, "splits": {"train": 8, "test": 2}})
    return generate(tmp_path_factory.mktemp("oracle-world") / "w", config, seed=5)


@pytest.mark.slow
def test_biaug_with_perfect_components_edits_only_the_boxes(
    local_ray, oracle_world, tmp_path
) -> None:
    """``--llm oracle --boxes gt --fill render``: every unit of work ends written or as an
    error; a positive is the source image itself (the oracle names the true colour), its
    negative differs from it only inside the object's box, in another colour of the palette."""
    from xmr.biaug import ToyWorldOracle
    from xmr.biaug.oracle import named_colour
    from xmr.data.images import decode_image, load_image
    from xmr.toyworld.scene.classes import palette

    out = tmp_path / "out"
    args = ["synth", "--mode", "biaug", "--llm", "oracle", "--boxes", "gt", "--fill", "render",
            "--data", str(oracle_world), "--out", str(out),
            "--max-error-rate", "1", "--no-progress", "--no-mlflow"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    manifest = read_manifest(out)
    assert manifest["llm"] == {"backend": "oracle", "model": None}
    assert manifest["config"]["boxes"] == "gt" and manifest["config"]["fill"] == "render"
    assert manifest["planned"] == manifest["written"] + manifest["errors"]
    stats = manifest["statistics"]
    assert stats["source_examples"] == 8 and stats["hard_negative_pairs"] * 2 == manifest["written"]
    assert manifest["written"] >= 4 and not manifest["counts"]["errors_by_stage"]["inpaint"]
    errors = pq.read_table(out / "errors.parquet").to_pylist()
    assert all(e["stage"] in ("verify", "decouple") and e["message"] for e in errors)
    assert not any(e["error_type"].startswith("validation:") for e in errors)

    oracle = ToyWorldOracle(oracle_world)
    for row in synthetic_table(out).to_pylist():
        scene = oracle.scene(row["source_image_id"])
        category = row["object"]
        (colour,) = {o.colour for o in scene.objects if o.category == category}
        named = named_colour(row["phrase"], list(palette(category)))
        source = np.asarray(
            load_image(oracle_world / "train" / f"{row['source_image_id']:012d}.png")
        )
        image = np.asarray(decode_image(row["image"]))
        if row["role"] == "positive":
            assert named == colour and np.array_equal(image, source)
            continue
        assert named != colour and named in row["caption"]
        x, y, w, h = row["box"]
        inside = np.zeros(source.shape[:2], dtype=bool)
        inside[int(y) : int(np.ceil(y + h)), int(x) : int(np.ceil(x + w))] = True
        assert np.array_equal(image[~inside], source[~inside])
        assert not np.array_equal(image[inside], source[inside])


# --- the stages in this process (no Ray), and refusals before Ray starts ----------------------


def test_annotation_boxes_confirm_proposals_without_a_detector(oracle_world) -> None:
    """``--boxes gt``: a proposal naming an annotated class gets the union box of its instances
    (score 1), then the §4.1 filters; no detector is loaded."""
    from xmr.data import read_dataset
    from xmr.detection import Detection
    from xmr.llm import LLMSpec
    from xmr.pipeline import Resources
    from xmr.synth.biaug.method import source_examples
    from xmr.synth.biaug.stages import VerifyObjects, annotated_detections
    from xmr.synth.config import load_configs

    dogs = [["dog", [10, 10, 20, 10]], ["dog", [40, 30, 10, 20]], ["sports ball", [0, 0, 5, 5]]]
    found = annotated_detections(["puppies", "soccer ball", "cat"], dogs, "toyworld")
    assert found == [Detection("puppies", (10, 10, 40, 40), 1.0),
                     Detection("soccer ball", (0, 0, 5, 5), 1.0)]  # fmt: skip
    coco = annotated_detections(
        ["Traffic  Light", "dog"], [["traffic light", [1, 2, 3, 4]]], "coco"
    )
    assert coco == [Detection("Traffic  Light", (1, 2, 3, 4), 1.0)]

    options, _ = load_configs(None, {"mode": "biaug", "data": oracle_world, "boxes": "gt"})
    assert load_configs(None, {"mode": "biaug"})[0].shared.boxes == "groundingdino"
    assert load_configs(None, {})[0].shared.boxes == "gt"  # the removal mode's default
    records = read_dataset("toyworld", oracle_world, "train")
    examples = source_examples(records, options.shared)
    for example, record in zip(examples, records, strict=True):
        example["objects"] = json.dumps([*record.categories, "unicorn"])
    stage = VerifyObjects(options.shared, options.methods["biaug"], Resources(cpus=1), batch_size=8)
    out = stage.run_local(_stage_batch(examples))
    assert stage.detector is None and LLMSpec(backend="oracle").reads_images
    for i, record in enumerate(records):
        verified = json.loads(out["verified"][i])
        dropped = json.loads(out["dropped"][i])
        assert len(verified) + len(dropped) == len(record.categories) + 1
        assert {"name": "unicorn", "rule": "not_detected"}.items() <= dropped[-1].items()
        for kept in verified:
            boxes = [o.bbox for o in record.objects if o.category == kept["name"]]
            assert kept["bbox"][0] == min(b[0] for b in boxes) and kept["score"] == 1.0


def _stage_batch(rows: list[dict]) -> dict:
    from xmr.pipeline.stage import rows_to_batch

    blank = {"error_stage": "", "error_type": "", "error": ""}
    return rows_to_batch([{**row, **blank} for row in rows])


def test_garbage_from_a_tiny_local_llm_fails_row_by_row(small_toyworld, tmp_path) -> None:
    """``--llm hf`` with a tiny random causal LM: its answers are not JSON, so every example
    ends as an error with its reason, and nothing crashes."""
    from tiny_llm import save_tiny_chat_model

    from xmr.data import read_dataset
    from xmr.llm import LLMSpec
    from xmr.pipeline import Resources
    from xmr.synth.biaug.method import source_examples
    from xmr.synth.biaug.stages import ProposeObjects
    from xmr.synth.config import load_configs

    options, _ = load_configs(None, {"mode": "biaug", "data": small_toyworld, "fill": "render"})
    llm = LLMSpec(backend="hf", model=str(save_tiny_chat_model(tmp_path / "llm")), device="cpu")
    records = read_dataset("toyworld", small_toyworld, "train")[:4]
    examples = source_examples(records, options.shared)
    stage = ProposeObjects(
        options.shared, options.methods["biaug"], llm, Resources(cpus=1), batch_size=4, device="cpu"
    )
    out = stage.run_local(_stage_batch(examples))
    assert list(out["error_stage"]) == ["propose"] * 4
    assert all(kind in ("AnswerError", "NoObjects") or kind.startswith("llm_")
               for kind in out["error_type"])  # fmt: skip
    assert all(out["error"])


def test_render_fill_repaints_only_the_box_in_the_named_colours(small_toyworld) -> None:
    """``--fill render`` (ToyWorld): the pair is the world's own image with the object re-drawn
    in the phrase's colour and in the negative phrase's colour; outside the box nothing moves."""
    from xmr.data import read_dataset
    from xmr.data.images import decode_image, load_image
    from xmr.pipeline import Resources
    from xmr.synth.biaug.stages import InpaintPairs
    from xmr.synth.config import load_configs
    from xmr.toyworld.scene.classes import palette

    config = load_configs(None, {"mode": "biaug", "data": small_toyworld, "fill": "render"})[
        0
    ].shared
    record = next(r for r in read_dataset("toyworld", small_toyworld, "train")
                  if any(o.category == "car" for o in r.objects))  # fmt: skip
    (car, *_) = [o for o in record.objects if o.category == "car"]
    colours = list(palette("car"))
    group = {
        "key": f"{record.image_id}/0/car/color", "image_id": record.image_id, "caption_id": 0,
        "source_caption": "a car", "path": str(record.path), "width": record.width,
        "height": record.height, "object": "car", "category": "color",
        "box": json.dumps(list(car.bbox)), "phrase": f"a {colours[0]} car",
        "caption": f"a {colours[0]} car", "negative_phrase": f"a {colours[1]} car",
        "negative_caption": f"a {colours[1]} car", "seed": 1,
    }  # fmt: skip
    unknown = {**group, "key": "x/0/unicorn/color", "object": "unicorn"}
    stage = InpaintPairs(config, Resources(cpus=1), 2, world=str(small_toyworld))
    out = stage.run_local(_stage_batch([group, unknown]))
    assert out["error"][0] == "" and "not a ToyWorld class" in out["error"][1]
    source = np.asarray(load_image(record.path), dtype=np.int16)
    positive = np.asarray(decode_image(out["positive_image"][0]), dtype=np.int16)
    negative = np.asarray(decode_image(out["negative_image"][0]), dtype=np.int16)
    x, y, w, h = (round(v) for v in car.bbox)
    outside = np.ones(source.shape[:2], dtype=bool)
    outside[max(y - 1, 0) : y + h + 1, max(x - 1, 0) : x + w + 1] = False
    for painted in (positive, negative):
        assert np.array_equal(painted[outside], source[outside])
    assert np.abs(positive - negative).sum() > 0  # another colour, the same object


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--llm", "vllm", "--llm-model", "m"], "--llm vllm"),
        (["--fill", "telea"], "--fill 'telea' is not one of sd, render with --mode biaug"),
        (["--dataset", "coco", "--data", ".", "--fill", "render"], "--fill render re-draws"),
        (["--fill", "render", "--attributes", "shape"], "draws colours only"),
        (["--attributes", "size"], "--attributes 'size'"),
        (["--min-box-share", "0.9", "--max-box-share", "0.5"], "must be below --max-box-share"),
        (["--llm-url", "ftp://x"], "--llm-url"),
        (["--llm", "openai"], "--llm-model is required"),
        (["--llm", "oracle", "--dataset", "coco"], "--llm oracle answers from ToyWorld's ground"),
        (["--llm", "oracle", "--data", "."], "--llm oracle needs a scene ToyWorld as --data"),
    ],
)
def test_bad_biaug_options_are_refused_before_ray_starts(
    small_toyworld, tmp_path, flags: list[str], message: str
) -> None:
    args = ["synth", "--mode", "biaug", "--data", str(small_toyworld), "--out",
            str(tmp_path / "out"), "--no-mlflow", *flags]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
