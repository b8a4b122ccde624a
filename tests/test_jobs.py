"""Jobs (xmr.jobs): steps run in order, finished ones are skipped on resubmission, a failure
resumes from the failed step, other options are refused, and every step's run is a child of
the job's run. Plain-Python steps here (no Ray); the ODmAP job end to end is in test_demo.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from xmr.compare.per_query import PER_QUERY_FILE, QueryValues, write_per_query
from xmr.jobs import Job, Step, StepContext, StepOutcome, run_job
from xmr.jobs.comparison import comparison_table, condition_metrics, record_comparison
from xmr.jobs.steps import print_plan
from xmr.metrics import metric_direction
from xmr.tracking import start_run

REPO = Path(__file__).resolve().parents[1]


def _steps(folder: Path, calls: list[str], fail_at: str | None = None) -> list[Step]:
    def make(name: str) -> Step:
        def run(context: StepContext) -> StepOutcome:
            calls.append(name)
            if name == fail_at:
                raise RuntimeError(f"{name} broke")
            out = context.folder / f"{name}.txt"
            earlier = sum(o.metrics.get("value", 0) for o in context.outcomes.values())
            out.write_text(str(earlier + 1))
            with start_run(
                context.experiment,
                run_name=name,
                tracking_uri=context.tracking_uri,
                parent_run_id=context.parent_run_id,
            ) as run:
                run.log_metrics({"value": earlier + 1})
            return StepOutcome(run.run_id, {"value": earlier + 1}, {"out": str(out)})

        return Step(name, f"write {name}.txt", f"xmr {name}", run)

    return [make(name) for name in ("first", "second", "third")]


def _job(folder: Path, calls: list[str], fail_at: str | None = None, seed: str = "0") -> Job:
    folder.mkdir(parents=True, exist_ok=True)
    return Job("toy", "toy-job", folder, {"seed": seed}, _steps(folder, calls, fail_at))


def test_a_job_runs_its_steps_as_children_and_a_resubmission_skips_them(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    calls: list[str] = []
    quiet = Console(quiet=True)
    result = run_job(_job(tmp_path / "job", calls), tracking_uri=uri, console=quiet)
    assert calls == ["first", "second", "third"] and result.skipped == []
    assert result.outcomes["third"].metrics == {"value": 4.0}  # 1, 2 (1+1), 4 (1+2+1)

    client = mlflow.MlflowClient(uri)
    experiment = client.get_experiment_by_name("xmr/jobs/toy")
    runs = client.search_runs([experiment.experiment_id])
    job = client.get_run(result.run_id)
    assert job.info.status == "FINISHED" and job.data.params == {"job.seed": "0"}
    assert {f"time/{n}" for n in calls} <= set(job.data.metrics)
    children = [r for r in runs if r.info.run_id != result.run_id]
    assert sorted(r.info.run_name for r in children) == ["first", "second", "third"]
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == {result.run_id}

    (tmp_path / "job" / "second.txt").unlink()  # a finished step whose output is gone runs again
    again = run_job(_job(tmp_path / "job", calls), tracking_uri=uri, console=quiet)
    assert calls[3:] == ["second"] and again.skipped == ["first", "third"]
    assert again.run_id == result.run_id  # the same job run, reopened and finished again
    assert client.get_run(result.run_id).info.status == "FINISHED"


def test_a_failed_step_fails_the_job_run_and_the_resubmission_resumes_there(
    tmp_path: Path,
) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    calls: list[str] = []
    quiet = Console(quiet=True)
    with pytest.raises(RuntimeError, match="second broke"):
        run_job(_job(tmp_path / "job", calls, fail_at="second"), tracking_uri=uri, console=quiet)
    client = mlflow.MlflowClient(uri)
    experiment = client.get_experiment_by_name("xmr/jobs/toy")
    (job,) = client.search_runs([experiment.experiment_id], "tags.`xmr.command` = 'job'")
    assert job.info.status == "FAILED"
    assert not (tmp_path / "job" / "steps" / "second.json").exists()

    result = run_job(_job(tmp_path / "job", calls), tracking_uri=uri, console=quiet)
    assert calls == ["first", "second", "second", "third"] and result.skipped == ["first"]
    assert result.run_id == job.info.run_id
    assert client.get_run(job.info.run_id).info.status == "FINISHED"

    with pytest.raises(ValueError, match=r"other options \(seed: '0' -> '1'\)"):
        run_job(_job(tmp_path / "job", calls, seed="1"), tracking_uri=uri, console=quiet)


def test_the_plan_marks_finished_steps_done(tmp_path: Path) -> None:
    calls: list[str] = []
    job = _job(tmp_path / "job", calls)
    quiet = Console(quiet=True)
    run_job(job, tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}", console=quiet)
    (tmp_path / "job" / "third.txt").unlink()
    console = Console(record=True, width=200)
    print_plan(job, console)
    lines = console.export_text().splitlines()
    assert [line.split(":")[0].strip() for line in lines if ". " in line] == [
        "1. done   first", "2. done   second", "3. to do  third"
    ]  # fmt: skip
    assert "$ xmr third" in lines[-1]


def test_a_world_left_by_a_run_stopped_before_its_record_is_made_again(tmp_path: Path) -> None:
    """The world step put its world in place, then the job stopped before recording the step:
    the resubmission generates it again over the one there, not an OSError."""
    from xmr.data import read_dataset
    from xmr.jobs.commands import world_step

    folder = tmp_path / "job"
    config = tmp_path / "world.yaml"
    config.write_text("splits: {train: 6, val: 2, test: 2}\n")
    uri, quiet = f"sqlite:///{tmp_path / 'mlflow.db'}", Console(quiet=True)

    def job() -> Job:
        folder.mkdir(exist_ok=True)
        return Job("toy", "toy-job", folder, {"seed": "0"},
                   [world_step(folder / "world", seed=1, config=config)])  # fmt: skip

    run_job(job(), tracking_uri=uri, console=quiet)
    (folder / "steps" / "world.json").unlink()
    again = run_job(job(), tracking_uri=uri, console=quiet)
    assert again.skipped == []
    assert len(read_dataset("toyworld", folder / "world", "train")) == 6
    assert not (tmp_path / "job" / ".world.partial").exists()


def _scored_step(name: str, sets: dict[str, QueryValues], extra: dict[str, float]) -> Step:
    """A step whose run logs ``sets`` as its per-query values, their means and ``extra`` (a
    metric without per-query values), as a training run's final evaluation does."""

    def run(context: StepContext) -> StepOutcome:
        metrics = {m: float(v.mean()) for s in sets.values() for m, v in s.values.items()}
        metrics.update(extra)
        with start_run(
            context.experiment,
            run_name=name,
            tracking_uri=context.tracking_uri,
            parent_run_id=context.parent_run_id,
        ) as run:
            run.log_metrics(metrics)
            folder = Path(context.folder) / name
            folder.mkdir()
            run.log_artifact(write_per_query(sets, folder / PER_QUERY_FILE))
        return StepOutcome(run.run_id, metrics)

    return Step(name, f"score {name}", f"xmr {name}", run)


def test_the_comparison_pairs_the_conditions_runs_query_by_query(tmp_path: Path) -> None:
    """Two conditions whose runs logged per-query values: the change of each metric with its
    paired interval (significant where every query moved, ≈ where it did not), a plain change
    for a metric without per-query values and for a query set the runs scored differently
    (said in one line), in the CSV, the job's run and the table."""
    rng = np.random.default_rng(0)
    hits = (rng.random(400) < 0.5).astype(np.float64)
    queries = [f"{n}:a caption" for n in range(400)]
    bias = rng.normal(0.2, 0.1, 60)
    flipped = hits.copy()  # two hits become misses, two misses hits: no change on the whole
    changed = [*np.flatnonzero(hits == 1)[:2], *np.flatnonzero(hits == 0)[:2]]
    flipped[changed] = 1 - flipped[changed]
    first = {
        "t2i": QueryValues(queries, {"test/recall_t2i_at_1": hits, "test/recall_t2i_at_5": hits}),
        "bias": QueryValues([f"{n}:a person" for n in range(60)], {"test/bias_at_10": bias}),
    }
    last = {
        "t2i": QueryValues(
            queries, {"test/recall_t2i_at_1": flipped, "test/recall_t2i_at_5": np.ones(400)}
        ),
        "bias": QueryValues([f"{n}:someone" for n in range(60)], {"test/bias_at_10": bias / 2}),
    }
    conditions = {"A": ["score-a"], "B": ["score-b"]}
    rows = ["test/recall_t2i_at_1", "test/recall_t2i_at_5", "test/bias_at_10", "test/sumr"]

    def compare(context: StepContext) -> StepOutcome:
        return record_comparison(context, conditions, rows, {"A": "a", "B": "b"})

    steps = [
        _scored_step("score-a", first, {"test/sumr": 1.0}),
        _scored_step("score-b", last, {"test/sumr": 1.5}),
        Step("compare", "compare", "xmr compare", compare),
    ]
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    folder = tmp_path / "job"
    folder.mkdir()
    job = Job("paired", "p", folder, {}, steps)
    result = run_job(job, tracking_uri=uri, console=Console(quiet=True))
    compared = result.outcomes["compare"]

    frame = pd.read_csv(folder / "comparison.csv").set_index("metric")
    assert list(frame.columns) == ["A", "B", "delta", "ci_low", "ci_high", "significant"]
    assert frame.loc["test/recall_t2i_at_5", "significant"]  # every miss became a hit
    assert frame.loc["test/recall_t2i_at_5", "ci_low"] > 0
    low, high = frame.loc["test/recall_t2i_at_1", ["ci_low", "ci_high"]]
    assert low <= 0 <= high and not frame.loc["test/recall_t2i_at_1", "significant"]
    for plain in ("test/bias_at_10", "test/sumr"):  # other bias queries; no per-query sumr
        assert frame.loc[plain, ["ci_low", "ci_high", "significant"]].isna().all()
    assert frame.loc["test/sumr", "delta"] == pytest.approx(0.5)

    r5 = frame.loc["test/recall_t2i_at_5"]
    job_run = mlflow.MlflowClient(uri).get_run(result.run_id).data.metrics
    assert job_run["delta/test/recall_t2i_at_5_ci_low"] == pytest.approx(r5.ci_low)
    assert job_run["delta/test/recall_t2i_at_5_ci_high"] == pytest.approx(r5.ci_high)
    assert "delta/test/sumr_ci_low" not in job_run and "delta/test/sumr" in job_run
    assert compared.notes == (
        "no interval for the bias queries: the runs scored other bias queries (60 vs 60; "
        "query 0 is '0:a person' vs '0:someone'): a paired comparison needs the same test set "
        "(the same dataset and split; the default ToyWorld depends on --seed)",
    )

    metrics = condition_metrics(result.outcomes, conditions)
    console = Console(record=True, width=200)
    console.print(comparison_table("A vs B", metrics, rows, compared=compared))
    shown = console.export_text()
    assert f"{r5.delta:+.3f} [{r5.ci_low:+.3f}, {r5.ci_high:+.3f}]" in shown
    assert f"≈ +0.000 [{low:+.3f}, {high:+.3f}]" in shown
    bias_line = next(line for line in shown.splitlines() if "bias_at_10" in line)
    plain_change = f"{frame.loc['test/bias_at_10', 'delta']:+.3f} (no interval)"  # B − A
    assert bias_line.split("│")[-2].strip() == plain_change
    verdict = (
        "better" if metric_direction("test/recall_t2i_at_5").better(r5.delta, than=0) else "worse"
    )
    r5_line = next(line for line in shown.splitlines() if "recall_t2i_at_5" in line)
    assert r5_line.split("│")[-2].strip().startswith(verdict if r5.significant else "≈")
    caption = " ".join(shown.split())  # wrapped to the table's width
    assert "Δ = B − A [95% paired bootstrap interval over the same queries]" in caption
    assert compared.notes[0] in caption
    again = run_job(job, tracking_uri=uri, console=Console(quiet=True))
    assert again.outcomes["compare"] == compared  # notes and intervals read back as recorded


def _odmap(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(REPO / "ray_jobs" / "odmap.py"), *args]
    return subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120)


def test_the_odmap_job_prints_its_plan_with_paths_resolved_in_the_driver(tmp_path: Path) -> None:
    dry = _odmap(tmp_path, "--dry-run", "--epochs", "1", "--storage", "jobs", "--name", "small")
    assert dry.returncode == 0, dry.stderr
    folder = tmp_path / "jobs" / "small"
    for line in (
        f"job small in {folder}",
        f"$ xmr data toyworld --out {folder / 'world'} --seed 0",
        f"--synth {folder / 'dprime'} --name train-d-dprime",
        "--name train-d --storage",
        "--steps <train-d-dprime's steps>",  # the control: D ∪ D′'s steps
        "MLflow: experiment xmr/jobs/odmap on sqlite:///",
    ):
        assert line in dry.stdout
    plan = dry.stdout.split("\n== ")[0]
    assert plan.index("train-d-dprime") < plan.index("--name train-d ")  # D ∪ D′ first
    assert dry.stdout.count("to do") == 5
    assert not (tmp_path / "jobs").exists() and not (tmp_path / "mlflow.db").exists()
    paper = _odmap(tmp_path, "--dry-run", "--epochs", "1", "--equal-epochs", "--name", "paper")
    assert "--epochs 1 --name train-d-epochs" in " ".join(paper.stdout.split())
    assert paper.stdout.count("to do") == 6
    converged = _odmap(tmp_path, "--dry-run", "--converged", "--max-epochs", "9", "--name", "c")
    flat = " ".join(converged.stdout.split())
    assert "--epochs auto --synth" in flat and "--max-epochs 9 --name train-d-dprime" in flat
    assert "--epochs auto --max-epochs 9 --name train-d " in flat
    assert "--steps" not in flat and converged.stdout.count("to do") == 5


_ODMAP_REFUSALS = [
    (["--dataset", "coco"], "error: --data is required for --dataset coco"),
    (["--fill", "magic"], "error: --fill 'magic' is not one of telea"),
    (["--epochs", "0"], "error: --epochs must be >= 1, got 0"),
    (["--model", "resnet"], "error: unknown model family 'resnet'"),
    (["--data", "/nonexistent", "--dry-run"], "error: --data /nonexistent is not a folder"),
    (["--name", "../../x"], "error: --name '../../x' must be one folder name"),
    (["--converged", "--epochs", "2"], "error: --converged trains each run until it levels"),
    (["--patience", "2"], "error: --patience and --max-epochs apply to --converged"),
    (["--epochs", "auto"], "error: --epochs auto: the odmap job trains both runs until"),
]

_RUN_JOB_SCRIPT = """
import importlib.util, json, sys
from typer.testing import CliRunner

script = sys.argv[1]
sys.path.insert(0, script.rsplit("/", 1)[0])  # as `python <script>` does
spec = importlib.util.spec_from_file_location("job", script)
job = importlib.util.module_from_spec(spec)
spec.loader.exec_module(job)
for args in json.loads(sys.argv[2]):
    result = CliRunner().invoke(job.app, args)
    print(json.dumps({"code": result.exit_code, "output": result.output}))
"""
"""Runs ``python <job script> ARGS`` for each ARGS in one interpreter (its typer app, as the
script's ``__main__`` does), one JSON line each."""


def test_the_odmap_job_refuses_bad_options_before_any_step(tmp_path: Path) -> None:
    """Each refusal: exit 2 and its one line, and nothing written (no xmr-jobs/, job.json or
    mlflow.db)."""
    done = subprocess.run(
        [sys.executable, "-c", _RUN_JOB_SCRIPT, str(REPO / "ray_jobs" / "odmap.py"),
         json.dumps([args for args, _ in _ODMAP_REFUSALS])],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    reports = [json.loads(line) for line in done.stdout.splitlines()]
    for (args, error), report in zip(_ODMAP_REFUSALS, reports, strict=True):
        assert report["code"] == 2, (args, report["output"])
        assert report["output"].startswith(error), (args, report["output"])
    assert len(reports) == len(_ODMAP_REFUSALS)
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_the_gender_job_sweeps_alpha_then_m_on_the_plain_model_and_draws_both_fronts(
    local_ray, small_toyworld, nltk_tagger, tmp_path: Path
) -> None:
    from xmr.jobs.gender import GenderJobOptions, gender_job
    from xmr.jobs.options import JobOptions

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    options = GenderJobOptions(data=small_toyworld, epochs=1, alphas="0,1", clip_ms="0,8")
    job = gender_job(options, JobOptions(storage=tmp_path / "jobs", name="g"))
    result = run_job(job, tracking_uri=uri, console=Console(quiet=True))
    assert [s.name for s in job.steps] == ["fair-alpha", "clip-m", "pareto"]
    for step in ("fair-alpha", "clip-m"):
        assert result.outcomes[step].metrics["trials"] == 2
        assert result.outcomes[step].metrics["trials_failed"] == 0
        assert Path(result.outcomes["pareto"].outputs[f"{step}_pareto"]).stat().st_size > 0

    client = mlflow.MlflowClient(uri)
    experiment = client.get_experiment_by_name("xmr/jobs/gender")
    runs = {r.info.run_id: r for r in client.search_runs([experiment.experiment_id])}
    sweeps = {r.data.tags["xmr.sweep_id"]: r for r in runs.values()
              if r.data.tags.get("xmr.command") == "tune"}  # fmt: skip
    assert set(sweeps) == {"g-fair-alpha", "g-clip-m"}
    assert {r.data.tags["mlflow.parentRunId"] for r in sweeps.values()} == {result.run_id}
    trials = [r for r in runs.values() if r.data.tags.get("mlflow.parentRunId") in
              {s.info.run_id for s in sweeps.values()}]  # fmt: skip
    assert len(trials) == 4 and all(r.info.status == "FINISHED" for r in trials)
    # Each α trial is a whole `xmr train` on Ray Train: its own per-epoch history, final test
    # metrics and checkpoint, in the job's folder.
    alpha = [r for r in trials if r.data.tags["mlflow.parentRunId"] ==
             sweeps["g-fair-alpha"].info.run_id]  # fmt: skip
    assert sorted(r.data.params["loss.fair_alpha"] for r in alpha) == ["0.0", "1.0"]
    for run in alpha:
        assert run.data.tags["xmr.command"] == "train"
        history = client.get_metric_history(run.info.run_id, "train/loss")
        assert [m.step for m in history] == [1]  # logged per epoch by the training run itself
        assert "final/test/bias_at_10" in run.data.metrics
        run_dir = Path(run.data.tags["xmr.run_dir"])
        assert (run_dir / "last.pt").is_file() and job.folder in run_dir.parents
    assert sweeps["g-fair-alpha"].data.tags["xmr.pareto_front"]
    plain = next(r for r in alpha if r.data.params["loss.fair_alpha"] == "0.0")
    clip_m = [r for r in trials if r.data.tags["mlflow.parentRunId"] ==
              sweeps["g-clip-m"].info.run_id]  # fmt: skip
    scored = {r.data.params["model.checkpoint"] for r in clip_m}
    assert scored == {plain.data.tags["xmr.checkpoint"]}
    assert {"fair-alpha_pareto.png", "clip-m_trials.csv"} <= {
        a.path for a in client.list_artifacts(result.run_id)
    }
    for step in ("fair-alpha", "clip-m"):  # two trials each: at most one pair of neighbours
        marks = pd.read_csv(result.outcomes["pareto"].outputs[f"{step}_trials"])["pareto"]
        assert marks.str.match(r"^(front|front ≈ .+|dominated)$").all()
        ties = marks.str.startswith("front ≈ ").sum()
        assert result.outcomes["pareto"].metrics[f"{step}/front_ties"] * 2 == ties
        trials = pd.read_csv(result.outcomes["pareto"].outputs[f"{step}_trials"])
        assert trials["test/male_share_at_10"].between(0, 1).all()  # the spaces' diagnostics
        # Bias@K ranks this world's test split itself (it has no gender split): no second one.
        assert trials["test/natural/gendered_share_at_10"].isna().all()
    console = Console(record=True, width=160)
    console.print(job.report(result.outcomes))
    text = console.export_text()
    assert "fair-alpha: recall–bias trade-off" in text
    assert "gendered_share@10" in text and "male_share@10" in text and "natural" not in text


@pytest.mark.slow
def test_a_job_folder_in_an_object_store_resumes_from_there(s3_bucket: str, tmp_path: Path):
    """``--storage s3://…``: the job's records, its steps' outputs and a generated world live in
    the bucket; a resubmission reads them back from there and skips every step."""
    from xmr.data import read_dataset
    from xmr.jobs.commands import world_step
    from xmr.storage import storage_path

    folder = storage_path(f"{s3_bucket}/jobs/toy-job")
    config = tmp_path / "world.yaml"
    config.write_text("splits: {train: 6, val: 2, test: 2}\n")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    calls: list[str] = []
    quiet = Console(quiet=True)

    def job() -> Job:
        steps = [world_step(folder / "world", seed=1, config=config), *_steps(folder, calls)]
        return Job("toy", "toy-job", folder, {"seed": "0"}, steps)

    result = run_job(job(), tracking_uri=uri, console=quiet)
    assert calls == ["first", "second", "third"] and result.skipped == []
    assert (folder / "job.json").is_file() and (folder / "steps" / "third.json").is_file()
    assert (folder / "third.txt").read_text() == "4"
    assert len(read_dataset("toyworld", folder / "world", "train")) == 6
    again = run_job(job(), tracking_uri=uri, console=quiet)
    assert calls == ["first", "second", "third"]
    assert again.skipped == ["world", "first", "second", "third"]
    assert again.run_id == result.run_id
