"""CLIP-clip inside ``xmr eval``: encode once, score under any m, log the clipped dims."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import mlflow
import pytest
from typer.testing import CliRunner

from xmr.cli import app
from xmr.eval.config import EvalConfig, eval_config
from xmr.eval.encode import encode, local_encoder
from xmr.eval.score import evaluate, score
from xmr.models import create_model


@pytest.fixture(scope="module")
def tiny_clip():
    config = eval_config(pretrained="none")
    return create_model(config.model, device="cpu", seed=0)


def test_scoring_one_encoding_under_each_m_equals_a_full_evaluation(
    small_toyworld: Path, tiny_clip
) -> None:
    base = eval_config(data=small_toyworld, pretrained="none", metrics="recall,bias")
    encoded = encode(base, local_encoder(tiny_clip), mi_features=True)
    assert len(encoded.mi_emb) == 120 and len(encoded.mi_genders) == 120  # the train split

    for m in (0, 16):
        config = replace(base, clip_m=m)
        once = score(encoded, config)
        full = evaluate(config, local_encoder(tiny_clip), model=tiny_clip)
        assert once.metrics == pytest.approx(full.metrics)
    clipped = score(encoded, replace(base, clip_m=16))
    assert len(clipped.clip.indices) == 16 and len(set(clipped.clip.indices.tolist())) == 16
    assert clipped.clip.mi_split == "train" and clipped.clip.mutual_information.shape == (128,)
    assert sum(clipped.clip.mi_genders.values()) == 120
    assert clipped.metrics != score(encoded, base).metrics  # m changed the rankings
    ksg = score(encoded, replace(base, clip_m=16, mi_estimator="ksg"))
    assert ksg.clip.estimator == "ksg" and ksg.clip.params == {"neighbors": 3}

    with pytest.raises(ValueError, match="encode again"):
        score(encoded, replace(base, split="val"))
    plain = encode(base, local_encoder(tiny_clip))
    with pytest.raises(ValueError, match="mi_features=True"):
        score(plain, replace(base, clip_m=8))
    with pytest.raises(ValueError, match="m=128 but the features have 128 dims"):
        score(encoded, replace(base, clip_m=128))


def test_mi_images_are_a_seeded_sample_of_the_mi_split(small_toyworld: Path, tiny_clip) -> None:
    config = eval_config(data=small_toyworld, pretrained="none", metrics="bias", mi_samples=50)
    first = encode(config, local_encoder(tiny_clip), mi_features=True)
    again = encode(config, local_encoder(tiny_clip), mi_features=True)
    assert len(first.mi_emb) == 50 and first.mi_genders == again.mi_genders
    assert (first.mi_emb == again.mi_emb).all()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"clip_m": -1}, "--clip-m must be >= 0"),
        ({"mi_estimator": "kde"}, "unknown --mi-estimator 'kde'"),
        ({"mi_samples": 1}, "--mi-samples must be >= 2"),
    ],
)
def test_bad_clip_options_are_refused(fields: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        eval_config(pretrained="none", **fields)


def test_the_clip_params_are_namespaced() -> None:
    params = EvalConfig(model=eval_config().model, clip_m=100, mi_estimator="ksg").params()
    assert params["clip.m"] == "100" and params["clip.mi_estimator"] == "ksg"
    assert params["clip.mi_split"] == "train" and params["clip.mi_params"] == "neighbors=3"


@pytest.mark.slow
def test_xmr_eval_clips_and_logs_the_dims_as_an_artifact(
    local_ray, small_toyworld: Path, tmp_path: Path
) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = ["eval", "--data", str(small_toyworld), "--metrics", "recall,bias", "--clip-m", "8",
            "--mi-estimator", "ksg", "--tracking-uri", uri]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "CLIP-clip: dropped 8 dims by ksg MI on 120 train images" in result.output
    assert "warning" not in result.output

    client = mlflow.MlflowClient(uri)
    experiment = client.get_experiment_by_name("xmr/eval/toyworld")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.data.params["clip.m"] == "8"
    path = client.download_artifacts(run.info.run_id, "clip_dims.json", str(tmp_path))
    clipped = json.loads(Path(path).read_text())
    assert clipped["m"] == 8 and clipped["estimator"] == "ksg" and clipped["mi_images"] == 120
    assert len(clipped["mutual_information_nats"]) == 128

    leaky = CliRunner().invoke(app, [*args, "--mi-split", "test"])
    assert leaky.exit_code == 0, leaky.output
    assert "warning" in leaky.output and "scored split" in leaky.output
