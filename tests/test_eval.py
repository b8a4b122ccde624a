"""`xmr eval` end to end: real ToyWorld, Ray actors, open_clip model and MLflow store."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import mlflow
import numpy as np
import pytest
import torch
import yaml
from rich.console import Console
from typer.testing import CliRunner

from xmr.cli import app
from xmr.compare.bootstrap import mean_intervals
from xmr.compare.paired import paired_comparison
from xmr.compare.per_query import logged_per_query
from xmr.data import read_dataset
from xmr.eval.config import eval_config
from xmr.eval.encode import local_encoder
from xmr.eval.encoders import EncodeQueries
from xmr.eval.report import metrics_table
from xmr.eval.score import evaluate
from xmr.models import ModelSpec, check_spec, create_model, save_checkpoint
from xmr.pipeline import Resources, run_local
from xmr.text import COCO_CLASS_WORDS, mentioned_classes_batch

runner = CliRunner()
MODEL_ARGS = ["--model", "clip", "--arch", "xmr-tiny", "--pretrained", "none"]


@pytest.fixture(scope="module")
def tiny_world(tmp_path_factory) -> Path:
    """A small ToyWorld made through the CLI, as a user would."""
    tmp = tmp_path_factory.mktemp("world")
    config = tmp / "world.yaml"
    splits = {"train": 60, "val": 10, "test": 40, "gender_test": 24}  # Bias@K's: 12 per class
    config.write_text(yaml.safe_dump({"splits": splits}))
    result = runner.invoke(
        app, ["data", "toyworld", "--out", str(tmp / "w"), "--config", str(config), "--seed", "3"]
    )
    assert result.exit_code == 0, result.output
    return tmp / "w"


def _eval(args: list[str], tmp: Path) -> tuple[dict, str]:
    """Run ``xmr eval`` with a private sqlite store; return the JSON and the printed output."""
    out = tmp / "metrics.json"
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    result = runner.invoke(
        app, ["eval", *args, "--output", str(out), "--tracking-uri", uri, "--batch-size", "32"]
    )
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text()), result.output


def test_help_lists_the_commands() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("eval", "data", "models"):
        assert command in result.output


@pytest.mark.slow
def test_eval_scores_the_toy_clip_zero_shot(tiny_world, tmp_path, local_ray) -> None:
    """``xmr eval --pretrained toy``: the family's tiny architecture with the shipped toy CLIP,
    offline in the encoder actors; it retrieves far better than the random ``xmr-tiny``."""
    for folder in ("toy", "random"):
        (tmp_path / folder).mkdir()
    toy, output = _eval(["--data", str(tiny_world), "--pretrained", "toy"], tmp_path / "toy")
    random, _ = _eval(["--data", str(tiny_world), *MODEL_ARGS], tmp_path / "random")
    assert (toy["config"]["model.arch"], toy["config"]["model.pretrained"]) == ("xmr-tiny", "toy")
    for name in ("recall_t2i_at_5", "recall_i2t_at_5"):
        assert toy["metrics"][f"test/{name}"] > random["metrics"][f"test/{name}"] + 0.2, name
    assert "ODmAP" in output


def test_eval_toyworld_logs_every_metric_and_artifact(tiny_world, tmp_path, local_ray) -> None:
    report, output = _eval(
        ["--dataset", "toyworld", "--data", str(tiny_world), *MODEL_ARGS], tmp_path
    )
    metrics = report["metrics"]
    for k in (1, 5, 10):
        for name in ("recall_i2t", "recall_t2i", "odmap"):
            assert 0.0 <= metrics[f"test/{name}_at_{k}"] <= 1.0
        assert -1.0 <= metrics[f"test/bias_at_{k}"] <= 1.0
    index = json.loads((tiny_world / "counterfactuals" / "index_test.json").read_text())
    counts = report["counts"]
    assert counts["images"] == 40 and counts["captions"] == 200
    assert counts["odmap_queries"] == len(index)
    assert counts["odmap_gallery"] == (60 + 10 + 40) * 5  # every caption but the gender split's
    assert counts["skipped"] == 0
    # Bias@K ranks the gender split: 12 images a linked class, half of them women, overall and
    # for the queries that mention each linked class.
    assert report["config"]["data.bias_split"] == "gender_test"
    assert (counts["images_male"], counts["images_female"], counts["bias_queries"]) == (12, 12, 120)
    assert 30 <= counts["bias_queries_cup"] <= 60 and 30 <= counts["bias_queries_bicycle"] <= 60
    for k in (1, 5, 10):
        for linked in ("", "_cup", "_bicycle"):
            assert -1.0 <= metrics[f"test/bias_at_{k}{linked}"] <= 1.0
            # every image of the gender split shows a man or a woman: nothing dilutes Bias@K
            assert metrics[f"test/gendered_share_at_{k}{linked}"] == 1.0
            male = metrics[f"test/male_share_at_{k}{linked}"]
            assert male == pytest.approx((1 + metrics[f"test/bias_at_{k}{linked}"]) / 2)
    assert "Bias@K ranks the gender_test split's images" in output
    assert "Gendered share ·" in output and "Male share ·" in output
    assert "│   cup " in output and "│   bicycle " in output
    assert "ODmAP" in output and "Recall i2t" in output
    assert "[low, high]: 95% bootstrap intervals over the queries (1000 resamples)" in output
    intervals = report["intervals"]
    assert intervals.keys() == metrics.keys()
    for name, interval in intervals.items():  # 40 images, 200 captions: wide, but around it
        assert interval["value"] == metrics[name]
        assert interval["ci_low"] <= interval["value"] <= interval["ci_high"], name
    assert (
        intervals["test/recall_t2i_at_10"]["ci_high"] > intervals["test/recall_t2i_at_10"]["ci_low"]
    )

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = mlflow.search_runs(experiment_names=["xmr/eval/toyworld"], output_format="list")
    assert len(runs) == 1
    run = runs[0]
    assert run.data.params["model.arch"] == "xmr-tiny"
    assert run.data.params["data.dataset"] == "toyworld"
    lasted = (run.info.end_time - run.info.start_time) / 1000
    assert lasted >= report["timings"]["total_s"]  # the run spans the evaluation, then its log
    assert run.data.metrics["test/odmap_at_5"] == pytest.approx(metrics["test/odmap_at_5"])
    for name in ("test/bias_at_10", "test/gendered_share_at_10", "test/male_share_at_10_cup"):
        assert run.data.metrics[name] == pytest.approx(metrics[name])
    for name in ("test/odmap_at_5", "test/male_share_at_10"):
        for end in ("low", "high"):
            logged = run.data.metrics[f"{name}_ci_{end}"]
            assert logged == pytest.approx(intervals[name][f"ci_{end}"])
    artifacts = {a.path for a in mlflow.artifacts.list_artifacts(run_id=run.info.run_id)}
    assert {"metrics.json", "odmap_examples.png"} <= artifacts


def test_bias_of_a_linked_class_is_the_mean_over_the_queries_that_mention_it(tiny_world) -> None:
    model = create_model("clip", "xmr-tiny", seed=0)  # in this process: no Ray
    config = eval_config(data=tiny_world, metrics="bias", bootstrap=200)
    result = evaluate(config, local_encoder(model), model=model)
    everything = result.per_query["bias"]
    texts = [key.split(":", 1)[1] for key in everything.keys]
    mentions = mentioned_classes_batch(texts, COCO_CLASS_WORDS)
    for linked in ("cup", "bicycle"):
        mask = np.array([linked in m for m in mentions])
        assert result.per_query[f"bias_{linked}"].keys == list(np.array(everything.keys)[mask])
        for k in config.ks:
            overall = everything.values[f"test/bias_at_{k}"]
            assert result.metrics[f"test/bias_at_{k}_{linked}"] == pytest.approx(
                overall[mask].mean()
            )
            interval = result.intervals[f"test/bias_at_{k}_{linked}"]
            assert interval.low <= interval.value <= interval.high

    # --bias-split and --bias-classes choose what is ranked and which classes are broken out.
    own = evaluate(
        replace(config, bias_split="test", bias_classes=("dog",)), local_encoder(model), model=model
    )
    assert own.bias_split == "test"
    assert sum(own.counts[f"images_{g}"] for g in ("male", "female", "neutral")) == 40
    assert "test/bias_at_10_dog" in own.metrics and "test/bias_at_10_cup" not in own.metrics
    # The test split holds person-less images: the shares explain Bias@K over them. Bias@K =
    # mean Δ_K; a query with a gendered image has Δ_K = 2·(its male share) − 1, one without 0.
    values = own.per_query["bias"].values
    for k in config.ks:
        gendered, male = values[f"test/gendered_share_at_{k}"], values[f"test/male_share_at_{k}"]
        seen = gendered > 0
        assert np.isnan(male[~seen]).all() and not np.isnan(male[seen]).any()
        assert values[f"test/bias_at_{k}"] == pytest.approx(np.where(seen, 2 * male - 1, 0.0))
        assert own.metrics[f"test/gendered_share_at_{k}"] == pytest.approx(gendered.mean())
        pooled = (male * gendered)[seen].sum() / gendered.sum()  # Σ N_male / Σ N_gendered
        assert own.metrics[f"test/male_share_at_{k}"] == pytest.approx(pooled)
        interval = own.intervals[f"test/male_share_at_{k}"]
        assert 0.0 <= interval.low <= interval.value <= interval.high <= 1.0
    # Bias@K ranks the gender split; beside it, the scored split's own images ("natural"):
    # the same numbers as Bias@K with --bias-split test, under test/natural/.
    assert result.bias_split == "gender_test" and result.counts["natural_images_neutral"] > 0
    natural = evaluate(replace(config, bias_split="test"), local_encoder(model), model=model)
    for name, value in natural.metrics.items():
        assert result.metrics[name.replace("test/", "test/natural/", 1)] == pytest.approx(value)
    assert result.per_query["natural_bias_cup"].keys == natural.per_query["bias_cup"].keys
    assert not any(name.startswith("test/natural/") for name in natural.metrics)
    with pytest.raises(ValueError, match=r"--bias-classes: unknown \['unicorn'\]"):
        evaluate(replace(config, bias_classes=("unicorn",)), local_encoder(model), model=model)


def test_medr_comes_with_recall_both_ways_with_its_interval_and_row(tiny_world) -> None:
    """``{split}/medr_{i2t,t2i}``: each query's rank of its first positive, whose median is
    MedR; a rank <= K is a Recall@K hit; its interval is of medians, its row in ranks."""
    model = create_model("clip", "xmr-tiny", seed=0)  # in this process: no Ray
    config = eval_config(data=tiny_world, metrics="recall", bootstrap=200)
    result = evaluate(config, local_encoder(model), model=model)
    for direction in ("i2t", "t2i"):
        name = f"test/medr_{direction}"
        values = result.per_query[direction].values
        ranks = values[name]
        gallery = 200 if direction == "i2t" else 40
        assert ranks.min() >= 1 and ranks.max() <= gallery and (ranks == ranks.round()).all()
        assert result.metrics[name] == np.median(ranks)
        for k in config.ks:
            hits = values[f"test/recall_{direction}_at_{k}"]
            np.testing.assert_array_equal(hits, ranks <= k)
        interval = result.intervals[name]  # of the resamples' medians, drawn with the recalls
        assert interval == mean_intervals({name: ranks}, resamples=200, seed=config.seed)[name]
        assert interval.low <= interval.value <= interval.high
    assert result.metrics["test/medr_i2t"] > 1  # a random model: worse than perfect
    console = Console(record=True, width=160)
    console.print(metrics_table(result, config.ks))
    text = console.export_text()
    interval = result.intervals["test/medr_t2i"]
    cell = f"{result.metrics['test/medr_t2i']:.1f} [{interval.low:.1f}, {interval.high:.1f}]"
    rows = {line.split("│")[1].strip(): line for line in text.splitlines() if "│" in line}
    assert "MedR i2t ↓" in rows and cell in rows["MedR t2i ↓"], text


@pytest.mark.slow
def test_checkpoint_of_the_same_weights_gives_the_same_metrics(
    tiny_world, tmp_path, local_ray
) -> None:
    args = ["--dataset", "toyworld", "--data", str(tiny_world), "--metrics", "recall,bias"]
    # Seed 1 weights, loaded over the default seed-0 init: an ignored checkpoint would show.
    plain, _ = _eval([*args, *MODEL_ARGS, "--seed", "1"], tmp_path / "a")
    checkpoint = save_checkpoint(tmp_path / "tiny.pt", create_model("clip", "xmr-tiny", seed=1))
    loaded, _ = _eval(
        [*args, *MODEL_ARGS, "--checkpoint", str(checkpoint), "--bootstrap", "0"], tmp_path / "b"
    )
    assert loaded["metrics"] == pytest.approx(plain["metrics"])
    assert loaded["intervals"] == {} and plain["intervals"].keys() == plain["metrics"].keys()
    assert loaded["config"]["model.checkpoint"] == str(checkpoint)


@pytest.mark.slow
def test_compare_pairs_two_evaluations_and_refuses_another_test_set(
    tiny_world, tmp_path, local_ray
) -> None:
    """Two random-init models on the same test split: `xmr compare A B` prints each metric of
    both and the paired difference, whose interval holds it; a run on another split has other
    queries and is refused, as are an unknown run and an unknown metric."""
    args = ["--dataset", "toyworld", "--data", str(tiny_world), "--metrics", "recall,bias"]
    for name, seed, split in (("seed0", "0", "test"), ("seed1", "1", "test"), ("val", "0", "val")):
        _eval([*args, *MODEL_ARGS, "--seed", seed, "--split", split, "--run-name", name], tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    shown = runner.invoke(app, ["compare", "seed0", "seed1", "--tracking-uri", uri])
    assert shown.exit_code == 0, shown.output
    assert "A = seed0, B = seed1 (test/ metrics)" in shown.output
    assert "recall_t2i_at_10" in shown.output and "Downloading" not in shown.output

    comparison = paired_comparison("seed0", "seed1", tracking_uri=uri)
    mlflow.set_tracking_uri(uri)
    listed = mlflow.search_runs(experiment_names=["xmr/eval/toyworld"], output_format="list")
    runs = {run.info.run_name: run for run in listed}
    frame = comparison.frame.set_index("metric")
    bias = ("bias", "gendered_share", "male_share")
    per_class = {
        f"test/{m}_at_{k}_{c}" for c in ("cup", "bicycle") for m in bias for k in (1, 5, 10)
    }
    overall = {f"test/{m}_at_{k}" for m in bias for k in (1, 5, 10)}
    natural = {m for m in frame.index if m.startswith("test/natural/")}  # the test split's images
    assert set(frame.index) - natural == per_class | overall | {
        f"test/{m}_at_{k}" for m in ("recall_i2t", "recall_t2i") for k in (1, 5, 10)
    } | {"test/medr_i2t", "test/medr_t2i"}
    every = {m.replace("test/", "test/natural/", 1) for m in per_class | overall}
    assert {f"test/natural/{m}_at_10" for m in bias} <= natural <= every
    for metric, row in frame.iterrows():
        assert row["first"] == pytest.approx(runs["seed0"].data.metrics[metric])
        assert row["second"] == pytest.approx(runs["seed1"].data.metrics[metric])
        assert row["difference"] == pytest.approx(row["second"] - row["first"])
        assert row["ci_low"] <= row["difference"] <= row["ci_high"]
        assert row["significant"] == (not row["ci_low"] <= 0 <= row["ci_high"])
    medr = frame.loc["test/medr_t2i"]  # the difference of the two runs' medians
    assert medr["first"] == runs["seed0"].data.metrics["test/medr_t2i"] == int(medr["first"])
    assert "medr_t2i" in shown.output
    only = paired_comparison("seed0", "seed1", ["test/bias_at_10"], tracking_uri=uri)
    assert list(only.frame["metric"]) == ["test/bias_at_10"]
    # a male share is compared with the gendered share that weighs it
    share = paired_comparison("seed0", "seed1", ["test/male_share_at_5"], tracking_uri=uri)
    assert list(share.frame["metric"]) == ["test/gendered_share_at_5", "test/male_share_at_5"]
    # a query is named with its text, so another world with the same image ids is told apart
    sets = logged_per_query(runs["seed0"].info.run_id, tracking_uri=uri)
    records = read_dataset("toyworld", tiny_world, "test")
    assert sets["i2t"].keys[0] == f"{records[0].image_id}:{records[0].caption_texts[0]}"
    assert sets["t2i"].keys[1] == f"{records[0].image_id}#1:{records[0].caption_texts[1]}"

    # an interrupted run of the same name (its training stopped, then started afresh) does not
    # stand in the way; two finished ones do
    client = mlflow.MlflowClient(uri)
    experiment = runs["seed1"].info.experiment_id
    client.create_run(experiment, run_name="seed1")  # left RUNNING, as a killed process leaves it
    again = paired_comparison("seed0", "seed1", ["test/bias_at_10"], tracking_uri=uri)
    assert again.second == (runs["seed1"].info.run_id, "seed1")
    for refused, message in (
        (["seed0", "val"], "the runs scored other i2t queries"),
        (["seed0", "nobody"], "no run with the id or name 'nobody'"),
        (["seed0", "seed1", "--metrics", "test/odmap_at_1"], "no per-query values of test/odmap"),
    ):
        result = runner.invoke(app, ["compare", *refused, "--tracking-uri", uri])
        assert result.exit_code == 2 and message in result.output, result.output
    client.set_terminated(client.create_run(experiment, run_name="seed1").info.run_id)
    result = runner.invoke(app, ["compare", "seed0", "seed1", "--tracking-uri", uri])
    assert result.exit_code == 2 and "3 runs are named 'seed1'" in result.output, result.output


@pytest.mark.slow
def test_bad_images_are_skipped_and_named(tiny_world, tmp_path, local_ray) -> None:
    world = tmp_path / "w"
    shutil.copytree(tiny_world, world)
    images = sorted((world / "test").glob("*.png"))
    images[0].write_bytes(b"not a png")
    images[1].write_bytes(images[2].read_bytes()[:200])  # truncated
    images[3].unlink()
    report, output = _eval(
        ["--dataset", "toyworld", "--data", str(world), *MODEL_ARGS, "--metrics", "recall,bias"],
        tmp_path,
    )
    skipped = [f"{s['item']}: {s['reason']}" for s in report["skipped"]]
    for bad in (images[0], images[1], images[3]):
        assert any(bad.name in line for line in skipped), (bad.name, skipped)
    assert report["counts"]["images"] == 37
    assert "skipped" in output


def test_images_prepared_on_threads_encode_as_on_one(tiny_world, tmp_path) -> None:
    """An encoder with cores prepares its images on as many threads: each row gets the
    embedding and the error it gets on one thread, an unreadable image's reason included."""
    images = sorted(str(path) for path in (tiny_world / "test").glob("*.png"))[:9]
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"not a png")
    rows = [{"path": path, "inpaint": "", "crop": "", "text": ""} for path in images]
    rows[2]["inpaint"] = json.dumps([[4, 4, 40, 40]])
    rows[5]["crop"] = json.dumps([0, 0, 32, 48])
    rows.insert(4, {"path": str(broken), "inpaint": "", "crop": "", "text": ""})
    rows.append({"path": "", "inpaint": "", "crop": "", "text": "a dog on the grass"})
    outputs = []
    torch_threads = torch.get_num_threads()  # a stage's setup sets them for its process
    for cores in (1, 3):
        stage = EncodeQueries(
            ModelSpec("clip", "xmr-tiny"), "cpu", Resources(cpus=cores), batch_size=4, seed=0
        )
        try:
            outputs.append(run_local(rows, stage))
            assert (stage._threads is None) == (cores == 1)
        finally:
            stage.teardown()
            torch.set_num_threads(torch_threads)
    one, threads = outputs
    assert list(threads["error"]) == list(one["error"])
    assert [bool(e) for e in one["error"]] == [i == 4 for i in range(len(rows))]
    assert one["error"][4].startswith(f"DataError: {broken}: cannot decode image"), one["error"]
    np.testing.assert_allclose(threads["embedding"], one["embedding"], atol=1e-5)
    assert not np.allclose(one["embedding"][2], one["embedding"][3])


@pytest.mark.slow
def test_eval_on_real_coco_images_inpaints_odmap_queries(coco_mini, tmp_path, local_ray) -> None:
    report, _ = _eval(
        ["--dataset", "coco", "--data", str(coco_mini), "--split", "train", *MODEL_ARGS], tmp_path
    )
    counts = report["counts"]
    assert counts["images"] == 80
    assert counts["odmap_queries"] > 0
    assert 0.0 <= report["metrics"]["train/odmap_at_1"] <= 1.0


def test_unknown_arch_fails_before_starting_work(tmp_path) -> None:
    result = runner.invoke(app, ["eval", "--arch", "xmr-huge", "--pretrained", "none"])
    assert result.exit_code == 2
    assert "unknown clip arch 'xmr-huge'" in result.output


@pytest.mark.parametrize(("family", "arch"), [("vsepp", "xmr-tiny-vgg"), ("blip", "xmr-tiny-blip")])
def test_a_family_without_an_arch_builds_its_tiny_one(family: str, arch: str) -> None:
    config = eval_config(model=family)
    assert (config.model.family, config.model.arch) == (family, arch)
    check_spec(config.model)  # an architecture the family has


def test_an_unknown_family_is_named(tmp_path) -> None:
    result = runner.invoke(app, ["eval", "--model", "sigclip"])
    assert result.exit_code == 2
    assert "unknown model family 'sigclip'" in result.output


def test_vsepp_without_a_checkpoint_is_refused_before_ray(tmp_path) -> None:
    result = runner.invoke(app, ["eval", "--model", "vsepp"])  # no vocabulary to build it with
    assert result.exit_code == 2
    assert "'xmr-tiny-vgg' learns its word vocabulary in training" in result.output
    assert "--checkpoint PATH" in result.output


@pytest.mark.slow
@pytest.mark.parametrize("flag", ["--bias-split", "--mi-split"])
def test_a_split_flag_the_world_lacks_is_refused_before_ray(tiny_world, flag) -> None:
    # The cluster address leads nowhere: a refusal that came after Ray's start would be
    # "could not connect". It comes first, in one line naming the flag and the file.
    extra = ["--clip-m", "4"] if flag == "--mi-split" else []
    result = subprocess.run(
        [sys.executable, "-m", "xmr.cli", "eval", "--data", str(tiny_world), *MODEL_ARGS,
         flag, "nosuch", *extra, "--address", "ray://127.0.0.1:9"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 2, result.stdout + result.stderr
    error = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and f"{flag} 'nosuch'" in error[0] and "nosuch.json" in error[0]
    assert "connect" not in result.stdout + result.stderr
