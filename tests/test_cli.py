"""The command line: flags declared once on options dataclasses and kept in sync with the configs
and the keys a tune space may set; bad input refused in one line before Ray starts; relative
paths that still mean the user's folder on the Ray workers."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import click
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import typer
import yaml
from PIL import Image
from typer.testing import CliRunner

from xmr.cli import app
from xmr.data import DATASETS, read_dataset
from xmr.data.synthetic import DATA_DIR, MANIFEST, ROW_SCHEMA
from xmr.eval.config import EvalConfig
from xmr.eval.options import BenchmarkOptions, EvalOptions, EvalOutputOptions
from xmr.fields import ClusterOptions, flag, option_fields
from xmr.llm import LLMSpec
from xmr.models import ModelSpec
from xmr.synth.command import SynthFile
from xmr.synth.config import BiAugSynthChoice, RemovalSynthChoice, SynthFlags, SynthRuntime
from xmr.train.config import TrainConfig, resolve_config
from xmr.train.data import ratio_shortfall, training_data
from xmr.train.options import DataChoice, ModelChoice, SeedOptions, TrainChoice, TrainOptions
from xmr.tune.space import EVAL_OPTIONS, TRAIN_OPTIONS, SpaceError, load_space

REPO = Path(__file__).resolve().parents[1]
runner = CliRunner()


def _flags(*path: str) -> set[str]:
    """Every flag of ``xmr PATH...`` as click parses it (``--help`` aside)."""
    group = typer.main.get_command(app)
    command = group
    for name in path:
        command = command.commands[name]  # type: ignore[attr-defined]
    return {name for p in command.params for name in (*p.opts, *p.secondary_opts)} - {"--help"}


def _declared(*classes: type) -> set[str]:
    """The flags the options dataclasses declare (``--no-X`` for booleans, unset ones too)."""
    declared = set()
    for cls in classes:
        for item in option_fields(cls):
            declared.add(flag(item))
            if item.default is True or item.default is False or item.type == "bool | None":
                declared.add(flag(item).replace("--", "--no-", 1))
    return declared


def _default(cls: type, name: str) -> object:
    (item,) = [f for f in fields(cls) if f.name == name]
    return item.default


def test_train_flags_train_options_train_config_and_tune_keys_agree(tmp_path: Path) -> None:
    assert _flags("train") == _declared(TrainOptions, SeedOptions, ClusterOptions)
    options = {f.name for f in option_fields(TrainOptions)}
    config_fields = {f.name for f in fields(TrainConfig)}
    # The model spec, the optimiser, the loss and the stopping rule take the options that are
    # not config fields.
    assert options - config_fields == {
        "arch", "pretrained", "init", "lr", "weight_decay", "lr_schedule", "warmup_steps",
        "lr_step_period", "fair_alpha", "patience",
        "min_delta", "max_epochs", "fair_captions", "max_violation", "max_violation_after",
    }  # fmt: skip
    assert config_fields - options == {
        "optim", "loss", "eval_split", "test_split", "ks", "convergence"
    }  # fmt: skip
    for name in (options & config_fields) - {"model"}:
        if _default(TrainOptions, name) is not None:
            assert _default(TrainConfig, name) == _default(TrainOptions, name), name

    given = TrainOptions(
        model="clip", arch="xmr-tiny", pretrained="none", dataset="coco", data=tmp_path / "d",
        split="val", synth=tmp_path / "s", synth_ratio=0.5, fair_alpha=0.3, epochs=2,
        batch_size=8, lr=0.01, weight_decay=0.1, lr_schedule="cosine", warmup_steps=7,
        lr_step_period=40, workers=2, gpus_per_worker=0.5, cpus_per_worker=3,
        init=tmp_path / "x.pt", name="run", storage=tmp_path / "runs", seed=5, eval_every=1,
        max_failures=0, precision="bf16", accum_steps=2, fair_captions="gendered-images",
        max_violation=True, max_violation_after=2,
    )  # fmt: skip
    config = TrainConfig.from_options(given)
    assert config.model == ModelSpec("clip", "xmr-tiny", None, tmp_path / "x.pt")
    optim = config.optim
    assert (optim.lr, optim.weight_decay, optim.schedule, optim.warmup_steps) == (
        0.01, 0.1, "cosine", 7
    )  # fmt: skip
    assert (optim.step_period, config.loss.fair_alpha) == (40, 0.3)
    loss = config.loss
    assert (loss.fair_captions, loss.max_violation, loss.max_violation_after) == (
        "gendered-images",
        True,
        2,
    )
    for name in (options & config_fields) - {"model"}:
        assert getattr(config, name) == getattr(given, name), name

    assert options - {"name", "storage"} == TRAIN_OPTIONS  # those two are the sweep's
    swept = resolve_config("clip", **{k: getattr(given, k) for k in TRAIN_OPTIONS - {"model"}})
    assert swept.fingerprint() == config.fingerprint()  # every key a space may set is used


def test_eval_and_synth_flags_are_their_options(tmp_path: Path) -> None:
    assert _flags("eval") == _declared(
        EvalOptions, BenchmarkOptions, EvalOutputOptions, ClusterOptions
    )
    assert {f.name for f in option_fields(EvalOptions)} == EVAL_OPTIONS
    config_fields = {f.name for f in fields(EvalConfig)}
    for name in {f.name for f in option_fields(EvalOptions)} & config_fields:
        if name not in ("model", "metrics"):
            assert _default(EvalConfig, name) == _default(EvalOptions, name), name
    assert _flags("synth") == _declared(SynthFile, SynthFlags, SynthRuntime, LLMSpec)


@pytest.mark.parametrize("command", ["train", "eval", "synth"])
def test_help_names_every_dataset_of_the_registry(command: str) -> None:
    result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert all(name in result.output for name in DATASETS)  # fashiongen too


@pytest.mark.parametrize("module", ["xmr.cli", "xmr.synth"])
def test_help_loads_neither_torch_ray_nor_mlflow(module: str) -> None:
    """``xmr --help`` stays fast; ``python -m xmr.synth`` does not import the CLI above it."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", module, "--help"],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if "|" in line}
    assert not loaded & {"torch", "ray", "mlflow"}
    if module == "xmr.synth":
        assert "xmr.cli" not in loaded


# Runs ``xmr ARGS`` for each ARGS of argv[1] (JSON) in this one process and prints, per run, the
# exit code, the output and whether Ray was started by then.
_RUN_AND_REPORT_RAY = """
import json, sys
import ray
from typer.testing import CliRunner
from xmr.cli import app

for args in json.loads(sys.argv[1]):
    result = CliRunner().invoke(app, args)
    print(json.dumps({"code": result.exit_code, "output": result.output,
                      "ray": ray.is_initialized()}))
"""

_REFUSALS = [
    (["train", "--epochs", "0"], "--epochs must be >= 1, got 0"),
    (["train", "--batch-size", "0"], "--batch-size must be >= 1, got 0"),
    (["train", "--workers", "0"], "--workers must be >= 1"),
    (["train", "--cpus-per-worker", "0"], "--cpus-per-worker must be >= 1"),
    (["train", "--gpus-per-worker", "-1"], "--gpus-per-worker must be >= 0"),
    (["train", "--max-failures", "-1"], "--max-failures must be >= 0"),
    (["train", "--eval-every", "-1"], "--eval-every must be >= 0"),
    (["train", "--lr", "0"], "--lr must be > 0"),
    (["train", "--synth-ratio", "-1"], "--synth-ratio must be >= 0"),
    (["train", "--fair-alpha", "2"], "--fair-alpha must be in [0, 1], got 2.0"),
    (["train", "--precision", "fp16"], "--precision must be one of fp32 | bf16 | amp, got 'fp16'"),
    (["train", "--accum-steps", "0"], "--accum-steps must be >= 1, got 0"),
    (["train", "--batch-size", "8", "--accum-steps", "8"], "fewer than 2 pairs per micro-batch"),
    (["train", "--init", "notes.txt"], "notes.txt is not a checkpoint"),
    (["train", "--init", "folder"], "folder is a directory"),
    (["eval", "--actors", "0"], "--actors must be >= 1, got 0"),
    (["eval", "--batch-size", "0"], "--batch-size must be >= 1"),
    (["eval", "--mi-bins", "1"], "--mi-bins must be >= 2"),
    (["eval", "--checkpoint", "notes.txt"], "notes.txt is not a checkpoint"),
    (["eval", "--checkpoint", "folder"], "folder is a directory, not a checkpoint file"),
    (["eval", "--benchmark", "glue"], "--benchmark must be one of aro, sugarcrepe"),
    (["eval", "--benchmark", "aro", "--subset", "vg"], "--subset: ARO subset 'vg'"),
    (["eval", "--benchmark", "aro", "--data", "folder"], "no ARO file"),
    (["eval", "--benchmark", "sugarcrepe", "--data", "folder"], "add_att.json"),
    (["synth", "--batch-size", "0"], "--batch-size must be >= 1"),
    (["synth", "--rows-per-shard", "0"], "--rows-per-shard must be >= 1"),
    (["synth", "--num-cpus", "0"], "--num-cpus must be >= 1"),
    (["synth", "--config", "broken.yaml"], "broken.yaml: not valid YAML: "),
    (["tune", "--space", "fair_alpha", "--set", "epochs=0"], "--epochs must be >= 1, got 0"),
    (["tune", "--space", "fair_alpha", "--set", "epochs=[1"], "--set epochs=[1: not valid YAML"),
    (["tune", "--space", "fair_alpha", "--num-samples", "0"], "--num-samples must be >= 1"),
    (["tune", "--space", "fair_alpha", "--max-concurrent", "0"], "--max-concurrent must be >= 1"),
    (["tune", "--space", "fair_alpha", "--cpus-per-trial", "-1"], "--cpus-per-trial must be >= 0"),
    (["demo", "--epochs", "0"], "--epochs must be >= 1, got 0"),
    (["demo", "--cpus-per-worker", "0"], "--cpus-per-worker must be >= 1"),
    (["compare"], "give exactly one of two runs, --sweep or --experiment"),
    (["compare", "only-one"], "give two runs to compare, got 1: only-one"),
    (["compare", "a", "b", "--sweep", "s"], "give exactly one of two runs, --sweep or"),
    # no POS tagger (and no network): said before training, not by the worker after it
    (["train", "--data", "world", "--epochs", "1"], "the NLTK tagger"),
]


def test_bad_input_is_one_line_and_refused_before_ray_starts(tmp_path: Path) -> None:
    """Zero or negative counts (never silently the default), files that are not checkpoints,
    folders given as checkpoints, broken YAML, no NLTK tagger: one ``error:`` line, exit 2,
    Ray not started."""
    from xmr.toyworld import generate

    (tmp_path / "notes.txt").write_text("some notes\nmore\n")
    (tmp_path / "folder").mkdir()
    (tmp_path / "broken.yaml").write_text("fill: [telea\n")
    (tmp_path / "world.yaml").write_text("splits: {train: 8, val: 4, test: 4}\n")
    generate(tmp_path / "world", tmp_path / "world.yaml", seed=3)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    # No NLTK data anywhere NLTK looks, and downloads go to a closed port.
    no_proxy = "http://127.0.0.1:9"
    env |= {"NLTK_DATA": str(tmp_path / "no-nltk"), "HOME": str(tmp_path),
            "https_proxy": no_proxy, "HTTPS_PROXY": no_proxy}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", _RUN_AND_REPORT_RAY, json.dumps([a for a, _ in _REFUSALS])],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    reports = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(reports) == len(_REFUSALS)
    for (args, message), report in zip(_REFUSALS, reports, strict=True):
        lines = report["output"].strip().splitlines()
        assert report["code"] == 2, (args, report["output"][-2000:])
        assert len(lines) == 1 and lines[0].startswith("error: "), (args, report["output"])
        assert message in lines[0], (args, lines[0])
        assert not report["ray"], args
    assert not (tmp_path / "mlflow.db").exists()


def test_unset_options_take_the_defaults_and_zero_is_refused(tmp_path: Path) -> None:
    assert resolve_config("clip").epochs == 8  # the ToyWorld preset
    for field in ("epochs", "batch_size"):
        with pytest.raises(ValueError, match=f"--{field.replace('_', '-')} must be >= 1"):
            resolve_config("clip", **{field: 0})
    with pytest.raises(SpaceError, match=r"fair_alpha\.yaml: --epochs must be >= 1, got 0"):
        load_space("fair_alpha").with_overrides(fixed={"epochs": 0})
    swept = tmp_path / "epochs.yaml"  # a swept value is checked too
    swept.write_text(
        "command: train\nparams: {epochs: {grid: [1, 0]}}\nmetrics: [test/odmap_at_1]\n"
    )
    with pytest.raises(SpaceError, match=r"epochs\.yaml: --epochs must be >= 1, got 0"):
        load_space(swept)


def test_tune_makes_relative_paths_of_a_space_absolute(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    space = load_space("synth_ratio").with_overrides(fixed={"data": "world"})
    assert space.fixed["data"] == str(tmp_path / "world")
    assert space.fixed["synth"] == "default"  # not a path: D′ of the embedded ToyWorld
    clip = load_space("clip_m").with_overrides(fixed={"checkpoint": "runs/last.pt"})
    assert clip.fixed["checkpoint"] == str(tmp_path / "runs" / "last.pt")


def test_tune_data_is_the_spaces_data_made_absolute(tmp_path: Path, monkeypatch) -> None:
    """``xmr tune --data DIR``, as ``xmr train`` and every job take it: ``--set data=DIR``."""
    from xmr.tune.options import TuneOptions

    monkeypatch.chdir(tmp_path)
    options = TuneOptions(space="fair_alpha", data="world", dataset="toyworld")
    assert options.fixed() == {"dataset": "toyworld", "data": str(tmp_path / "world")}
    assert options.search_space().fixed["data"] == str(tmp_path / "world")
    result = runner.invoke(app, ["tune", "--help"], env={"COLUMNS": "200"})
    assert "--data" in result.output


def _tiny_world(folder: Path) -> None:
    """``xmr data toyworld --out world`` in ``folder``, as a user would (a relative path)."""
    splits = {"splits": {"train": 8, "val": 4, "test": 4}}
    (folder / "world.yaml").write_text(yaml.safe_dump(splits))
    done = subprocess.run(
        [sys.executable, "-m", "xmr.cli", "data", "toyworld", "--out", "world", "--config",
         "world.yaml", "--seed", "3"],
        cwd=folder, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]


def _small_dprime(out: Path, world: Path, pairs: int) -> None:
    """A finished D′ folder of ``pairs`` rows (copies of a train image), written directly."""
    image = next(r.path for r in read_dataset("toyworld", world, "train"))
    buffer = io.BytesIO()
    Image.open(image).convert("RGB").save(buffer, format="PNG")
    rows = [
        {"key": f"k{n}", "image": buffer.getvalue(), "caption": "a dog on the grass",
         "source_image_id": 1, "source_caption_id": n, "source_caption": "a dog and a frisbee",
         "removed_classes": ["frisbee"], "kept_classes": ["dog"], "removed_boxes": [[0, 0, 1, 1]],
         "width": 64, "height": 64, "fill": "telea", "caption_method": "np-removal"}
        for n in range(pairs)
    ]  # fmt: skip
    (out / DATA_DIR).mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=ROW_SCHEMA), out / DATA_DIR / "part-0.parquet")
    (out / MANIFEST).write_text(json.dumps({"config_hash": "0123456789abcdef", "written": pairs}))


def test_a_ratio_beyond_dprime_says_how_much_it_used(tmp_path: Path) -> None:
    _tiny_world(tmp_path)
    _small_dprime(tmp_path / "dprime", tmp_path / "world", pairs=4)
    records = read_dataset("toyworld", tmp_path / "world", "train")
    data = training_data(records, tmp_path / "dprime", synth_ratio=2.0)
    assert data.synthetic == 4 and data.synth_ratio == pytest.approx(4 / data.original)
    note = ratio_shortfall(data, 2.0)
    assert note is not None and f"--synth-ratio 2 asks for {2 * data.original}" in note
    assert ratio_shortfall(training_data(records, tmp_path / "dprime", 0.01), 0.01) is None


@pytest.mark.slow
def test_gitignore_covers_every_default_output_folder() -> None:
    from xmr.cli import DemoOptions
    from xmr.fields import OPTION
    from xmr.jobs.options import DEFAULT_STORAGE as JOB_STORAGE
    from xmr.synth.config import DEFAULT_OUT
    from xmr.tracking import ARTIFACTS_DIR, DEFAULT_DB
    from xmr.train.options import DEFAULT_STORAGE as TRAIN_STORAGE
    from xmr.tune.options import DEFAULT_STORAGE as TUNE_STORAGE

    repo = Path(__file__).resolve().parents[1]
    if not (repo / ".git").exists():
        pytest.skip("not a git checkout")
    demo_workdir = Path(DemoOptions.__dataclass_fields__["workdir"].metadata[OPTION].default_folder)
    folders = [DEFAULT_OUT, TRAIN_STORAGE, TUNE_STORAGE, demo_workdir, JOB_STORAGE]
    outputs = [*folders, Path(ARTIFACTS_DIR)]
    paths = [f"{folder}/anything" for folder in outputs] + [DEFAULT_DB]
    checked = subprocess.run(
        ["git", "check-ignore", "--no-index", *paths], cwd=repo, capture_output=True, text=True
    )
    assert sorted(checked.stdout.split()) == sorted(paths)
    assert len({str(folder) for folder in folders}) == len(folders)
    assert all(str(folder).startswith("xmr-") for folder in folders)


def _job_command(job: str) -> click.Command:
    """The click command of ``python ray_jobs/<job>.py`` (what ``ray job submit`` runs)."""
    if str(REPO / "ray_jobs") not in sys.path:  # as `python ray_jobs/<job>.py` puts it first
        sys.path.insert(0, str(REPO / "ray_jobs"))
    spec = importlib.util.spec_from_file_location(f"ray_job_{job}", REPO / "ray_jobs" / f"{job}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return typer.main.get_command(module.app)


def _shown(command: click.Command, group: type) -> dict[str, tuple]:
    """What ``--help`` says of each flag of the option group ``group``: its names, default,
    help and whether the default is shown."""
    flags = {flag(item) for item in option_fields(group)}
    return {
        p.opts[0]: (p.opts, p.secondary_opts, p.default, p.help, p.show_default)
        for p in command.params
        if p.opts[0] in flags
    }


@pytest.mark.parametrize(
    ("job", "groups", "synth_groups"),
    [
        ("odmap", (TrainChoice,), (RemovalSynthChoice,)),
        ("biaug", (TrainChoice,), (LLMSpec, BiAugSynthChoice)),
        ("gender", (ModelChoice, DataChoice), ()),
        ("eiclip", (DataChoice,), ()),
    ],
)
def test_a_job_s_shared_flags_read_as_the_command_s(
    job: str, groups: tuple[type, ...], synth_groups: tuple[type, ...]
) -> None:
    """A job's model, data and training flags are ``xmr train``'s, and the build flags it
    passes on (the BiAug job's LLM flags, the D′ builds' limit, models and actors) are
    ``xmr synth``'s, to the help text: both come from the one declaration, so they cannot
    drift. A job flag named as a command flag is one of these, or one the job documents as its
    own (its default differs)."""
    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    submitted = _job_command(job)
    for group in groups:
        shared = _shown(submitted, group)
        assert set(shared) == {flag(item) for item in option_fields(group)}
        assert shared == _shown(commands["train"], group)
    for group in synth_groups:
        shared = _shown(submitted, group)
        assert set(shared) == {flag(item) for item in option_fields(group)}
        assert shared == _shown(commands["synth"], group)
    if job == "biaug":
        llm = _shown(submitted, LLMSpec)
        assert {"--llm-retries", "--llm-backoff", "--llm-seed", "--llm-max-response-bytes"} <= set(
            llm
        )
    covered = {name for group in (*groups, *synth_groups) for name in _group_flags(group)}
    for command in ("train", "synth"):
        same_name = _long_flags(submitted) & _long_flags(commands[command])
        same_name -= covered | COMMON_FLAGS
        assert same_name <= JOB_OWN_FLAGS[job], (command, same_name - JOB_OWN_FLAGS[job])


COMMON_FLAGS = {"--help", "--seed", "--dataset", "--data", "--address", "--tracking-uri",
                "--storage", "--name", "--workers", "--gpus-per-worker", "--cpus-per-worker",
                "--synth-ratio", "--patience", "--max-epochs"}  # fmt: skip
"""Flags every job and command share by meaning, not by a declaration (a job's seed seeds
every step; its storage holds the job; ConvergenceChoice's patience and cap apply with
--converged and go to each run's --epochs auto)."""

JOB_OWN_FLAGS = {
    "odmap": {"--fill"},  # the removal fill alone (xmr synth's --fill names both modes' fills)
    "biaug": {"--captions-per-image", "--fill", "--boxes", "--max-error-rate"},
    "gender": {"--epochs"},  # each α trial's, default the sweep space's
    "eiclip": {"--arch", "--pretrained", "--epochs", "--batch-size", "--lr"},  # both models',
    # default EI-CLIP's (the CLIP baseline trains with EI-CLIP's recipe)
}
"""Job flags named as a command's whose default is the job's own (documented in its help)."""


def _group_flags(group: type) -> set[str]:
    return {flag(item) for item in option_fields(group)}


def _long_flags(command: click.Command) -> set[str]:
    return {name for p in command.params for name in p.opts if name.startswith("--")}


def test_configs_and_options_load_no_command_line_library() -> None:
    """Field declarations live in xmr.fields: the configs and option groups import neither
    typer nor xmr.options (the command builder); only the command-line modules do."""
    modules = (
        "xmr.fields", "xmr.train.options", "xmr.train.config", "xmr.eval.options",
        "xmr.eval.config", "xmr.llm.spec", "xmr.synth.config", "xmr.tune.options",
        "xmr.jobs.options", "xmr.jobs.odmap", "xmr.jobs.biaug", "xmr.jobs.gender",
        "xmr.jobs.eiclip",
    )  # fmt: skip
    code = (
        f"import sys\nfor m in {modules!r}: __import__(m)\n"
        "print(sorted(m for m in ('typer', 'click', 'xmr.options') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def test_user_errors_live_below_the_command_line(capsys) -> None:
    """The executor and the cluster raise :class:`UnavailableError` without loading typer; a
    command prints it as one line and exits 2."""
    from xmr.errors import USER_ERRORS, UnavailableError
    from xmr.options import user_errors

    code = "import sys, xmr.errors; print('typer' in sys.modules)"
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "False" and UnavailableError in USER_ERRORS
    with pytest.raises(typer.Exit) as raised, user_errors():
        raise UnavailableError("Ray did not start: try --num-cpus 1")
    assert raised.value.exit_code == 2
    assert capsys.readouterr().err == "error: Ray did not start: try --num-cpus 1\n"
