"""The toy CLIP (``--pretrained toy``): its shipped file against its record, loading it with no
network in both CLIP families and every job, and the job that rebuilds it (issue 45)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from xmr.jobs.options import JobOptions
from xmr.jobs.toy_clip import (
    ToyClipJobOptions,
    pretrain_options,
    recorded_train_config,
    toy_clip_job,
)
from xmr.models import Corpus, create_model
from xmr.models.base import ModelSpec
from xmr.models.registry import check_spec
from xmr.models.toy_clip import (
    RECORD_FILE,
    TOKEN_EMBEDDING,
    WEIGHTS_FILE,
    check_toy_weights,
    file_digest,
    read_record,
    read_toy_state,
    used_token_ids,
    write_toy_weights,
)
from xmr.toyworld import load_config
from xmr.train.config import TrainConfig, resolve_config

# --- the shipped file --------------------------------------------------------------------


def test_the_shipped_weights_match_their_recorded_hash_world_and_training() -> None:
    """The package's ``toy-clip.pt.gz`` is the file its record names (SHA-256), made from the
    packaged pretraining world and the training the job plans today: a rebuild with
    ``python ray_jobs/toy_clip.py`` trains the same config on the same world."""
    record = read_record()
    check_toy_weights()
    assert file_digest(WEIGHTS_FILE) == record["sha256"]
    assert WEIGHTS_FILE.stat().st_size == record["bytes"] <= 10_000_000
    assert record["tag"] == "toy" and record["arch"] == "xmr-tiny"
    assert record["world"]["resolved"] == load_config("pretrain").to_dict()
    planned = TrainConfig.from_options(
        pretrain_options(ToyClipJobOptions(), Path("/any/world"), Path("/any/runs"))
    )
    assert record["train"] == recorded_train_config(planned)
    assert record["pretraining"]["best_epoch"] >= 1


def test_the_toy_clip_loads_with_no_network_in_both_clip_families(monkeypatch) -> None:
    """``--pretrained toy`` builds ``xmr-tiny`` with the shipped weights, in ``clip`` and in
    EI-CLIP's image and description encoders, offline (the hub switched off)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    state = read_toy_state()
    clip = create_model("clip", "xmr-tiny", "toy")
    for name, value in clip.module.state_dict().items():
        assert torch.equal(value, state[name]), name
    corpus = Corpus(["a red sweater"], {"brand": ["horse"]})
    eiclip = create_model("eiclip", "xmr-tiny", "toy", corpus=corpus)
    for name, value in eiclip.module.clip.state_dict().items():
        assert torch.equal(value, state[name]), name
    assert clip.encode_texts(["a dog with a frisbee"]).shape == (1, 128)


def test_the_toy_tag_is_checked_before_any_worker_starts(tmp_path: Path) -> None:
    """A wrong architecture is refused by ``check_spec`` (what every command runs before Ray),
    a weights file that is not its record's, or no record, in one line naming it."""
    with pytest.raises(ValueError, match="--pretrained toy is the toy CLIP, an xmr-tiny model"):
        check_spec(ModelSpec("clip", "ViT-B-32", "toy"))
    with pytest.raises(ValueError, match=r"unknown pretrained tag 'toys'.*\['toy'\]"):
        create_model("clip", "xmr-tiny", "toys")
    with pytest.raises(ValueError, match="--pretrained toy is the toy CLIP: it finetunes"):
        resolve_config("vsepp", pretrained="toy")

    broken = tmp_path / WEIGHTS_FILE.name
    data = bytearray(WEIGHTS_FILE.read_bytes())
    data[-1] ^= 0xFF
    broken.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=f"{broken} has SHA-256 .* its record toy-clip.json"):
        check_toy_weights(broken, RECORD_FILE)
    with pytest.raises(FileNotFoundError, match=r"rebuild it with `python ray_jobs/toy_clip\.py`"):
        check_toy_weights(broken, tmp_path / "toy-clip.json")


def test_a_written_toy_clip_reads_back_rounded_with_only_the_used_tokens(tmp_path: Path) -> None:
    """The export: float16, gzip with no time stamp (the same state, the same bytes), the
    token embedding's unused rows zero, every other weight the state's, rounded."""
    model = create_model("clip", "xmr-tiny", "none", seed=3)
    state = model.module.state_dict()
    kept = used_token_ids([model.tokenize(["a dog with a frisbee", "a red car"])])
    weights, record = tmp_path / "w.pt.gz", tmp_path / "w.json"
    digest = write_toy_weights(state, kept, {"tag": "toy"}, weights, record)
    again = write_toy_weights(
        state, kept, {"tag": "toy"}, tmp_path / "x.pt.gz", tmp_path / "x.json"
    )
    assert digest == again == file_digest(weights)

    loaded = read_toy_state(weights, record)
    assert read_record(record)["tokens_kept"] == len(kept) < 20
    for name, value in state.items():
        if name != TOKEN_EMBEDDING:
            assert torch.equal(loaded[name], value.half().float()), name
    table = loaded[TOKEN_EMBEDDING]
    assert torch.equal(table[kept], state[TOKEN_EMBEDDING][kept].half().float())
    unused = torch.ones(table.shape[0], dtype=torch.bool)
    unused[kept] = False
    assert not table[unused].any()
    assert weights.stat().st_size < 3_000_000


# --- the jobs ------------------------------------------------------------------------------


def _plan(job: str, tmp_path: Path, **options: object) -> str:
    """The job's plan, its steps' command lines in one string, as ``--dry-run`` prints them."""
    from xmr.jobs.biaug import BiAugJobOptions, biaug_job
    from xmr.jobs.eiclip import EiClipJobOptions, eiclip_job
    from xmr.jobs.gender import GenderJobOptions, gender_job
    from xmr.jobs.odmap import ODmAPJobOptions, odmap_job

    jobs = {
        "odmap": (ODmAPJobOptions, odmap_job),
        "biaug": (BiAugJobOptions, biaug_job),
        "eiclip": (EiClipJobOptions, eiclip_job),
        "gender": (GenderJobOptions, gender_job),
    }
    options_class, build = jobs[job]
    planned = build(options_class(**options), JobOptions(storage=tmp_path / "jobs"))
    return " ".join(" ".join(step.command for step in planned.steps).split())


@pytest.mark.parametrize("job", ["odmap", "biaug", "eiclip"])
def test_every_paper_job_finetunes_the_toy_clip_to_convergence(tmp_path: Path, job: str) -> None:
    """``--pretrained toy --converged``: every training step starts from the toy CLIP and
    trains until its val RSUM levels off, none at a matched step count."""
    plan = _plan(job, tmp_path, pretrained="toy", converged=True, max_epochs=6)
    trainings = plan.count("xmr train")
    assert trainings == 2
    assert plan.count("--pretrained toy") == trainings
    assert plan.count("--epochs auto") == trainings and plan.count("--max-epochs 6") == trainings
    assert "--steps" not in plan


def test_the_gender_job_sweeps_alpha_from_the_toy_clip_to_convergence(tmp_path: Path) -> None:
    plan = _plan("gender", tmp_path, pretrained="toy", converged=True, patience=2)
    assert "--set epochs=auto" in plan and "--set patience=2" in plan
    assert "--set pretrained=toy" in plan


@pytest.mark.parametrize("job", ["odmap", "biaug", "eiclip", "gender"])
def test_converged_refuses_a_fixed_budget_beside_it(tmp_path: Path, job: str) -> None:
    with pytest.raises(ValueError, match="--converged trains each run until it levels off"):
        _plan(job, tmp_path, converged=True, epochs=2)
    with pytest.raises(ValueError, match="--patience and --max-epochs apply to --converged"):
        _plan(job, tmp_path, patience=2)
    assert not (tmp_path / "jobs").exists()


def test_the_toy_clip_job_plans_world_pretraining_export_and_zero_shot(tmp_path: Path) -> None:
    job = toy_clip_job(ToyClipJobOptions(), JobOptions(storage=tmp_path))
    names = [step.name for step in job.steps]
    assert names[:3] == ["world", "pretrain", "export"]
    assert job.steps[0].command.endswith("--config pretrain")
    assert "--epochs auto --patience 2 --max-epochs 15" in job.steps[1].command
    for world in ("default", "pets", "street", "binding", "shop"):
        assert f"world-{world}" in names and f"zero-shot-{world}" in names
    assert "binding-test" in names
    assert all("--pretrained toy" in s.command for s in job.steps if s.name.startswith("zero"))


@pytest.mark.slow
def test_a_training_worker_finetunes_the_toy_clip_offline(
    local_ray, small_toyworld, nltk_tagger, tmp_path: Path, monkeypatch
) -> None:
    """``xmr train --pretrained toy``: the Ray Train worker builds the toy CLIP from the
    package (no network: the hub is off), finetunes it with the finetuning preset and records
    the tag; its first loss is the pretrained model's, far below a random model's."""
    import mlflow

    from xmr.train.run import train

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    runs = {}
    for pretrained in ("toy", "none"):
        config = resolve_config(
            "clip", pretrained=pretrained, arch="xmr-tiny", data=small_toyworld, steps=2,
            batch_size=32, lr=1e-4, storage=tmp_path / "runs", name=f"from-{pretrained}",
        )  # fmt: skip
        runs[pretrained] = train(config, tracking_uri=uri)
    toy = mlflow.MlflowClient(uri).get_run(runs["toy"].mlflow_run_id).data
    assert toy.params["model.pretrained"] == "toy" and toy.params["optim.lr"] == "0.0001"
    assert runs["toy"].metrics["train/loss"] < runs["none"].metrics["train/loss"]


def test_the_export_step_writes_the_runs_weights_with_their_record(
    small_toyworld, tmp_path: Path
) -> None:
    """The job's export: the pretraining run's checkpoint as the toy CLIP, the token rows of
    the world's training captions kept, its record naming the world and the training config;
    ``--no-install`` leaves the package's file alone."""
    import json

    from xmr.jobs.steps import StepContext, StepOutcome
    from xmr.jobs.toy_clip import export_step
    from xmr.models import save_checkpoint

    config = resolve_config("clip", data=small_toyworld, storage=tmp_path / "runs", name="pre")
    run_dir = tmp_path / "runs" / "pre"
    run_dir.mkdir(parents=True)
    (run_dir / "xmr_run.json").write_text(json.dumps({"config": config.to_dict()}))
    model = create_model("clip", "xmr-tiny", "none", seed=1)
    checkpoint = save_checkpoint(run_dir / "last.pt", model)
    metrics = {"train/best_epoch": 2.0, "train/stopped_epoch": 4.0, "test/odmap_at_1": 0.5,
               "test/odmap_at_1_ci_low": 0.4, "test/bias_at_10_cup": 0.1}  # fmt: skip
    outcome = StepOutcome(None, metrics, {"checkpoint": str(checkpoint), "run": str(run_dir)})
    context = StepContext(tmp_path, "xmr/jobs/toy-clip", "parent", "sqlite:///x.db", None,
                          {"pretrain": outcome})  # fmt: skip
    shipped = file_digest(WEIGHTS_FILE)

    done = export_step(context, world=small_toyworld, install=False)
    record = read_record(Path(done.outputs["record"]))
    weights = Path(done.outputs["weights"])
    assert record["sha256"] == file_digest(weights) and file_digest(WEIGHTS_FILE) == shipped
    assert record["train"] == recorded_train_config(config)
    assert record["world"]["resolved"]["splits"]["train"] == 120
    assert record["pretraining"] == {"best_epoch": 2, "stopped_epoch": 4,
                                     "train/best_epoch": 2.0, "train/stopped_epoch": 4.0,
                                     "test/odmap_at_1": 0.5}  # fmt: skip
    state = read_toy_state(weights, Path(done.outputs["record"]))
    table = state[TOKEN_EMBEDDING]
    kept = table.abs().sum(dim=1) > 0
    assert 20 < int(kept.sum()) == record["tokens_kept"] < 300
    ids = model.tokenize(["a dog"])[0]
    assert all(kept[i] for i in ids[ids > 0].tolist())  # words of the world's captions
