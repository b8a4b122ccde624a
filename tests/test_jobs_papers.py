"""The BiAug and EI-CLIP jobs (ray_jobs/biaug.py, ray_jobs/eiclip.py): each end to end at tiny
size (in process, on the shared local Ray: every step's run a child of the job's run, the
steps' outputs, a resubmission that skips every step), their plans (--dry-run) and their
refusals of bad options before any step runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import mlflow
import pandas as pd
import pytest
import yaml
from PIL import Image
from rich.console import Console

from xmr.data.synthetic import read_manifest
from xmr.jobs import run_job
from xmr.jobs.options import JobOptions
from xmr.models import ModelSpec, create_model
from xmr.toyworld.config import PACKAGED_WORLDS

REPO = Path(__file__).resolve().parents[1]
COLOURS = {"red": (220, 30, 30), "blue": (30, 60, 220)}


def _job_script(name: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(REPO / "ray_jobs" / f"{name}.py"), *args]
    return subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120)


def _squares(folder: Path) -> dict[str, str]:
    """Two images, a red and a blue square on grey: colour -> file name."""
    folder.mkdir(parents=True, exist_ok=True)
    names = {}
    for colour, rgb in COLOURS.items():
        image = Image.new("RGB", (32, 32), (128, 128, 128))
        image.paste(rgb, (8, 8, 24, 24))
        names[colour] = f"{colour}.png"
        image.save(folder / names[colour])
    return names


def _sugarcrepe(root: Path) -> Path:
    """SugarCrepe's layout (``swap_att.json``, images in ``val2017/``): two items."""
    names = _squares(root / "val2017")
    items = {
        str(n): {"filename": names[colour], "caption": f"a {colour} square",
                 "negative_caption": f"a {other} square"}
        for n, (colour, other) in enumerate((("red", "blue"), ("blue", "red")))
    }  # fmt: skip
    (root / "swap_att.json").write_text(json.dumps(items))
    return root


def _aro(root: Path) -> Path:
    """ARO's VG-Relation layout (the JSON list, images in ``images/``): two items."""
    names = _squares(root / "images")
    items = [
        {"image_id": str(n), "image_path": names[colour], "bbox_x": 0, "bbox_y": 0,
         "bbox_w": 32, "bbox_h": 32, "relation_name": "on",
         "true_caption": f"the {colour} square is on the grey",
         "false_caption": f"the grey is on the {colour} square"}
        for n, colour in enumerate(COLOURS)
    ]  # fmt: skip
    (root / "visual_genome_relation.json").write_text(json.dumps(items))
    return root


def _children(uri: str, experiment: str, job_run_id: str) -> dict[str, mlflow.entities.Run]:
    client = mlflow.MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    children = {r.info.run_name: r for r in runs if r.info.run_id != job_run_id}
    assert {r.data.tags["mlflow.parentRunId"] for r in children.values()} == {job_run_id}
    assert all(r.info.status == "FINISHED" for r in runs)
    return children


# --- BiAug ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_biaug_job_builds_dprime_trains_step_matched_runs_scores_them_and_resumes(
    local_ray, tmp_path: Path
) -> None:
    """The packaged binding world at a twenty-fifth of its size (world step), BiAug-D′ with
    the oracle, D ∪ D′ for E epochs and D for as many optimiser steps (read from that run),
    SugarCrepe on both checkpoints (ARO's steps are the same eval step: see the plan test), the
    binding test read from the training runs."""
    from xmr.jobs.biaug import BiAugJobOptions, biaug_job

    world = yaml.safe_load(PACKAGED_WORLDS["binding"].read_text())
    world.update(splits={"train": 40, "val": 8, "test": 16},
                 binding={"swap_items": 12, "counter_items": 12})  # fmt: skip
    config = tmp_path / "binding-small.yaml"
    config.write_text(yaml.safe_dump(world))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    options = BiAugJobOptions(
        world_config=config, epochs=1, synth_ratio=1.0, batch_size=16,
        sugarcrepe=_sugarcrepe(tmp_path / "sugarcrepe"), eval_actors=1,
    )  # fmt: skip
    job = biaug_job(options, JobOptions(storage=tmp_path / "jobs", name="b"))
    assert [s.name for s in job.steps] == [
        "world", "synth", "train-d-dprime", "train-d", "sugarcrepe-d", "sugarcrepe-d-dprime",
        "compare",
    ]  # fmt: skip
    result = run_job(job, tracking_uri=uri, console=Console(quiet=True))
    folder, outcomes = job.folder, result.outcomes

    manifest = read_manifest(folder / "dprime")
    assert manifest["mode"] == "biaug" and manifest["llm"]["backend"] == "oracle"
    assert manifest["config"]["boxes"] == "gt" and manifest["config"]["fill"] == "render"
    assert manifest["planned"] == manifest["written"] + manifest["errors"]
    assert manifest["written"] > 0 and outcomes["synth"].metrics["written"] == manifest["written"]
    for condition in ("d", "d-dprime"):
        train = outcomes[f"train-{condition}"]
        assert {"test/binding/swap_acc", "test/recall_t2i_at_1"} <= set(train.metrics)
        assert (
            Path(train.outputs["checkpoint"]) == folder / "runs" / f"train-{condition}" / "last.pt"
        )
        scored = outcomes[f"sugarcrepe-{condition}"]
        assert set(scored.metrics) == {"sugarcrepe/swap_att_acc", "sugarcrepe/mean_acc"}
        saved = json.loads(Path(scored.outputs["metrics"]).read_text())
        assert saved["metrics"] == scored.metrics and saved["counts"]["scored"] == 2

    children = _children(uri, "xmr/jobs/biaug", result.run_id)
    assert set(children) == {s.name for s in job.steps} - {"world", "compare"}
    d, dd = children["train-d"].data.params, children["train-d-dprime"].data.params
    steps = int(children["train-d-dprime"].data.metrics["train/global_step"])
    assert d["train.steps"] == d["train.total_steps"] == dd["train.total_steps"] == str(steps)
    assert d["train.lr_step_period"] == d["optim.step_period"] == dd["train.lr_step_period"]
    assert (
        dd["train.epochs"] == "1" and children["train-d"].data.metrics["train/global_step"] == steps
    )
    assert d["data.synth"] == "none" and dd["data.synth"] == str(folder / "dprime")
    assert dd["data.hard_negatives"] == "True" and dd["data.synth_ratio"] == "1.0"
    assert children["sugarcrepe-d-dprime"].data.params["model.checkpoint"] == str(
        folder / "runs" / "train-d-dprime" / "last.pt"
    )
    assert children["sugarcrepe-d"].data.tags["xmr.benchmark"] == "sugarcrepe"
    job_run = mlflow.MlflowClient(uri).get_run(result.run_id)
    compared = outcomes["compare"].metrics
    for key in ("test/binding/counter_acc", "test/recall_i2t_at_5", "sugarcrepe/mean_acc"):
        assert compared[f"delta/{key}"] == pytest.approx(
            compared[f"d_dprime/{key}"] - compared[f"d/{key}"]
        )
        assert job_run.data.metrics[f"delta/{key}"] == pytest.approx(compared[f"delta/{key}"])
    # Recall@K and the binding test (the training runs' per-query values) and SugarCrepe (the
    # evaluations') are paired over the same queries or items, each condition's runs merged.
    table = pd.read_csv(folder / "comparison.csv").set_index("metric")
    for key in ("test/recall_i2t_at_5", "test/binding/counter_acc", "sugarcrepe/swap_att_acc"):
        low, high = table.loc[key, ["ci_low", "ci_high"]]
        assert low <= compared[f"delta/{key}"] <= high
        assert compared[f"delta/{key}_ci_low"] == pytest.approx(low)
    console = Console(record=True, width=120)
    console.print(job.report(outcomes))
    shown = console.export_text()
    for text in ("binding/stereotype_acc ↑", "recall_i2t@1 ↑", "sugarcrepe/swap_att_acc", "Δ",
                 f"at equal optimiser steps ({steps} each)"):  # fmt: skip
        assert text in shown

    runs = len(children)
    again = run_job(job, tracking_uri=uri, console=Console(quiet=True))
    assert list(again.skipped) == [s.name for s in job.steps] and again.run_id == result.run_id
    assert len(_children(uri, "xmr/jobs/biaug", result.run_id)) == runs


@pytest.mark.slow
def test_the_biaug_job_prints_its_plan(tmp_path: Path) -> None:
    from xmr.jobs.biaug import BiAugJobOptions, biaug_job
    from xmr.jobs.steps import print_plan

    aro, sugarcrepe = _aro(tmp_path / "aro"), _sugarcrepe(tmp_path / "sc")
    dry = _job_script(
        "biaug", tmp_path, "--dry-run", "--storage", "jobs", "--name", "small",
        "--epochs", "2", "--aro", str(aro), "--sugarcrepe", str(sugarcrepe),
    )  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    folder = tmp_path / "jobs" / "small"
    for line in (
        f"$ xmr data toyworld --out {folder / 'world'} --config binding --seed 0",
        "--captions-per-image 2 --fill render --boxes gt --out",
        "--max-error-rate 0.5 --llm oracle",
        "--name train-d --storage",
        "--steps <train-d-dprime's steps>",  # read from that run
        f"--epochs 2 --synth {folder / 'dprime'} --synth-ratio 0.5 --name train-d-dprime",
        f"$ xmr eval --benchmark aro --data {aro} --checkpoint "
        f"{folder / 'runs' / 'train-d-dprime' / 'last.pt'} --output "
        f"{folder / 'eval' / 'aro-d-dprime.json'}",
        f"$ xmr eval --benchmark sugarcrepe --data {sugarcrepe} --checkpoint "
        f"{folder / 'runs' / 'train-d' / 'last.pt'} --output "
        f"{folder / 'eval' / 'sugarcrepe-d.json'}",
        "MLflow: experiment xmr/jobs/biaug on sqlite:///",
    ):
        assert line in dry.stdout, line
    assert dry.stdout.count("to do") == 9
    assert not (tmp_path / "jobs").exists() and not (tmp_path / "mlflow.db").exists()

    # Real data: the LLM the user names, and xmr synth's components (GroundingDINO, SD).
    options = BiAugJobOptions(
        dataset="coco", data=tmp_path, epochs=2,
        llm={"backend": "openai", "model": "gpt-4o-mini", "url": "http://127.0.0.1:9/v1"},
    )  # fmt: skip
    console = Console(record=True, width=1000)
    print_plan(biaug_job(options, JobOptions(storage=tmp_path / "jobs")), console)
    plan = console.export_text()
    assert "--llm openai --llm-model gpt-4o-mini --llm-url http://127.0.0.1:9/v1" in plan
    assert "--fill sd --boxes groundingdino" in plan and "world:" not in plan  # synth's defaults


def test_the_biaug_job_adds_the_hard_negative_ablation_on_the_same_budget(tmp_path: Path) -> None:
    """``--hard-negative-ablation``: D ∪ BiAug-D′ again with its pairs shuffled freely, for
    the headline run's optimiser steps (or, ``--converged``, until it levels off), a column
    between D and D ∪ BiAug-D′."""
    from xmr.jobs.biaug import BiAugJobOptions, biaug_job

    for converged in (False, True):
        options = BiAugJobOptions(hard_negative_ablation=True, converged=converged)
        job = biaug_job(options, JobOptions(storage=tmp_path / "jobs"))
        steps = {step.name: step.command for step in job.steps}
        assert list(steps) == ["world", "synth", "train-d-dprime", "train-d-dprime-free",
                               "train-d", "compare"]  # fmt: skip
        free = steps["train-d-dprime-free"]
        assert "--no-hard-negatives" in free and "--synth-ratio 0.5" in free
        budget = "--epochs auto" if converged else "--steps <train-d-dprime's steps>"
        assert budget in free and budget in steps["train-d"]


def test_the_biaug_job_refuses_bad_options_before_any_step(tmp_path: Path) -> None:
    from xmr.jobs.biaug import BiAugJobOptions, biaug_job

    refused = _job_script("biaug", tmp_path, "--dataset", "coco", "--data", ".")
    assert refused.returncode == 2
    assert refused.stderr.startswith("error: --llm is required for --dataset coco"), refused.stderr
    assert not (tmp_path / "xmr-jobs").exists()

    storage = JobOptions(storage=tmp_path / "jobs")
    for values, error in (
        ({"llm": {"backend": "openai"}}, "--llm-model is required with --llm openai"),
        ({"fill": "telea"}, "--fill 'telea' is not one of sd, render with --mode biaug"),
        ({"epochs": "auto"}, "--epochs auto: the biaug job trains D ∪ BiAug-D′ for E epochs"),
        (
            {"dataset": "coco", "data": tmp_path, "llm": {"backend": "oracle"}},
            "--llm oracle answers from",
        ),
    ):
        with pytest.raises(ValueError, match=error):
            biaug_job(BiAugJobOptions(**values), storage)
    with pytest.raises(ValueError, match=f"--data {tmp_path} has no binding test"):
        BiAugJobOptions(data=tmp_path)
    with pytest.raises(FileNotFoundError, match=f"--aro {tmp_path}: no ARO file"):
        BiAugJobOptions(aro=tmp_path)
    shop = tmp_path / "shop.yaml"
    shop.write_text("mode: shop\n")
    with pytest.raises(ValueError, match=r"--world-config: .*mode: must be 'scene'"):
        BiAugJobOptions(world_config=shop)
    assert not (tmp_path / "jobs").exists()


# --- EI-CLIP --------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_eiclip_job_trains_clip_and_eiclip_alike_and_compares_both_protocols(
    local_ray, tmp_path: Path
) -> None:
    """A small shop world (world step), the CLIP baseline and EI-CLIP with the same budget on
    two data-parallel workers (EI-CLIP's three losses see the other worker's batch), both
    protocols' metrics compared, and a resubmission that skips every step."""
    from xmr.jobs.eiclip import EiClipJobOptions, eiclip_job

    config = tmp_path / "shop-small.yaml"
    config.write_text("image_size: 64\nsplits: {train: 60, val: 8, test: 40}\n")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    options = EiClipJobOptions(world_config=config, epochs=1, batch_size=16, workers=2)
    job = eiclip_job(options, JobOptions(storage=tmp_path / "jobs", name="e"))
    assert [s.name for s in job.steps] == ["world", "train-clip", "train-eiclip", "compare"]
    result = run_job(job, tracking_uri=uri, console=Console(quiet=True))
    folder, outcomes = job.folder, result.outcomes
    assert json.loads((folder / "world" / "world.json").read_text())["mode"] == "shop"

    children = _children(uri, "xmr/jobs/eiclip", result.run_id)
    assert set(children) == {"train-clip", "train-eiclip"}
    clip, eiclip = (children[n].data.params for n in ("train-clip", "train-eiclip"))
    assert (clip["model.family"], eiclip["model.family"]) == ("clip", "eiclip")
    for key in ("model.arch", "train.epochs", "train.batch_size", "optim.lr", "data.root",
                "train.workers", "optim.weight_decay", "optim.schedule",
                "optim.warmup_steps"):  # fmt: skip
        assert clip[key] == eiclip[key], key  # EI-CLIP's optimiser recipe for both
    assert eiclip["train.workers"] == "2"
    spec = ModelSpec.from_checkpoint(Path(outcomes["train-eiclip"].outputs["checkpoint"]))
    model = create_model(spec)  # the entity vocabularies come back from the checkpoint
    assert spec.family == "eiclip" and model.encode_texts(["a red shirt"]).shape[0] == 1
    compared = outcomes["compare"].metrics
    for key in ("test/sumr", "test/subcat_sumr", "test/recall_t2i_at_1",
                "test/subcat_recall_i2t_at_10"):  # fmt: skip
        assert key in outcomes["train-eiclip"].metrics and key in outcomes["train-clip"].metrics
        assert compared[f"delta/{key}"] == pytest.approx(
            compared[f"eiclip/{key}"] - compared[f"clip/{key}"]
        )
        summed = key.endswith("sumr")  # a sum over two query sets: no per-query values
        assert (f"delta/{key}_ci_low" in compared) is not summed, key
    console = Console(record=True, width=120)
    console.print(job.report(outcomes))
    shown = " ".join(console.export_text().split())
    for text in ("Full candidate set, test split", "Sample 100 (same sub-category), test split",
                 "metric ┃ CLIP ┃ EI-CLIP ┃ Δ", "Rank t2i@10 ↑", "SumR ↑"):  # fmt: skip
        assert text in shown
    assert "paired bootstrap" in shown  # the rank metrics' changes have intervals

    again = run_job(job, tracking_uri=uri, console=Console(quiet=True))
    assert list(again.skipped) == [s.name for s in job.steps] and again.run_id == result.run_id
    assert len(_children(uri, "xmr/jobs/eiclip", result.run_id)) == len(children)


def test_the_eiclip_job_prints_its_plan_on_fashiongen(tmp_path: Path) -> None:
    dry = _job_script(
        "eiclip", tmp_path, "--dry-run", "--dataset", "fashiongen", "--data", str(tmp_path),
        "--storage", "jobs", "--name", "fg",
    )  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    folder = tmp_path / "jobs" / "fg"
    same = (f"--arch ViT-B-32 --dataset fashiongen --data {tmp_path} --epochs 20 "
            "--batch-size 128 --lr 5e-05 --weight-decay 0.0001 --lr-schedule cosine "
            "--warmup-steps 1000")  # fmt: skip
    for line in (
        f"$ xmr train {same}",  # --model clip: the default
        f"$ xmr train --model eiclip {same}",
        f"--name train-eiclip --storage {folder / 'runs'}",
        "MLflow: experiment xmr/jobs/eiclip on sqlite:///",
    ):
        assert line in dry.stdout, line
    assert "train EI-CLIP on descriptions + entities, test on validation" in " ".join(
        dry.stdout.split()
    )
    assert dry.stdout.count("to do") == 3 and "world:" not in dry.stdout

    # ToyWorld: a shop world first; without the baseline, EI-CLIP alone.
    from xmr.jobs.eiclip import EiClipJobOptions, eiclip_job

    job = eiclip_job(EiClipJobOptions(baseline=False), JobOptions(storage=tmp_path / "jobs"))
    assert [s.name for s in job.steps] == ["world", "train-eiclip", "compare"]
    assert job.steps[0].command.endswith("--mode shop --seed 0")


def test_the_eiclip_job_refuses_bad_options_before_any_step(tmp_path: Path) -> None:
    from xmr.jobs.eiclip import EiClipJobOptions

    refused = _job_script("eiclip", tmp_path, "--dataset", "coco")
    assert refused.returncode == 2
    assert refused.stderr.startswith(
        "error: --dataset 'coco': EI-CLIP learns from product entities"
    ), refused.stderr
    assert not (tmp_path / "xmr-jobs").exists()

    scene = tmp_path / "scene.yaml"
    scene.write_text("mode: scene\n")
    (tmp_path / "world").mkdir()
    (tmp_path / "world" / "world.json").write_text('{"mode": "scene"}')
    for values, error in (
        ({"dataset": "fashiongen"}, "--data is required for --dataset fashiongen"),
        ({"world_config": scene}, r"--world-config: .*mode: must be 'shop'"),
        ({"world_config": tmp_path / "nowhere.yaml"}, "--world-config: .*no such world config"),
        ({"data": tmp_path / "world"}, "is a scene ToyWorld; EI-CLIP needs a shop world"),
    ):
        with pytest.raises((ValueError, FileNotFoundError), match=error):
            EiClipJobOptions(**values)


# --- the evaluation step on a split ---------------------------------------------------------


@pytest.mark.slow
def test_an_eval_step_scores_a_split_and_logs_its_run_under_the_job(
    local_ray, small_toyworld, tmp_path: Path
) -> None:
    """``eval_step`` without a benchmark: ``xmr eval`` on the test split (Recall@K of a
    random-init tiny CLIP), its JSON and its run nested under the job's."""
    from xmr.eval.options import EvalOptions
    from xmr.jobs import Job
    from xmr.jobs.commands import eval_step

    options = EvalOptions(data=small_toyworld, model="clip", arch="xmr-tiny", metrics="recall",
                          actors=1)  # fmt: skip
    output = tmp_path / "job" / "eval" / "test.json"
    step = eval_step("eval-test", "score the test split", options, output)
    assert step.command.startswith(f"xmr eval --data {small_toyworld} --model clip")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    job = Job("evalstep", "e", tmp_path / "job", {}, [step])
    result = run_job(job, tracking_uri=uri, console=Console(quiet=True))
    metrics = result.outcomes["eval-test"].metrics
    assert set(metrics) == {
        *(f"test/recall_{d}_at_{k}" for d in ("i2t", "t2i") for k in (1, 5, 10)),
        "test/medr_i2t",
        "test/medr_t2i",
    }
    assert json.loads(output.read_text())["metrics"] == metrics
    (child,) = _children(uri, "xmr/jobs/evalstep", result.run_id).values()
    assert child.info.run_name == "eval-test" and child.data.tags["xmr.command"] == "eval"
    assert child.data.metrics["test/recall_t2i_at_5"] == metrics["test/recall_t2i_at_5"]
