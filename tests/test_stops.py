"""Stops (xmr.stops): SIGTERM and SIGINT are one stop that marks the runs in progress KILLED
before anything else, and a stopped command exits 130 / 143; a job's script stopped mid-step
leaves its run and the step's run KILLED (real signals, a real subprocess, sqlite MLflow)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import pytest

from xmr.stops import Stopped, exit_code, handling_stops, on_stop, stop_requested
from xmr.tracking import start_run

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_runs_the_stop_callbacks_first_then_raises_stopped(signum: int) -> None:
    seen: list[str] = []
    first, then = on_stop(lambda: seen.append("outer")), on_stop(lambda: seen.append("inner"))
    with handling_stops(), pytest.raises(Stopped) as stopped, first, then:
        os.kill(os.getpid(), signum)
        time.sleep(5)  # the handler raises here
    assert seen == ["inner", "outer"]
    assert stopped.value.signum == signum and exit_code(signum) == 128 + signum
    assert not stop_requested()  # after the block, the process goes on as before


def test_a_stopped_run_is_killed_and_a_failed_one_failed(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    stopped = start_run("x", run_name="stopped", tracking_uri=uri)
    with handling_stops(), pytest.raises(Stopped), stopped:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    with pytest.raises(ValueError), start_run("x", run_name="failed", tracking_uri=uri):
        raise ValueError("bad")
    client = mlflow.MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("x").experiment_id])
    assert {r.info.run_name: r.info.status for r in runs} == {
        "stopped": "KILLED",
        "failed": "FAILED",
    }


JOB_SCRIPT = '''
"""A job whose one step opens its run and waits to be stopped."""
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from xmr.jobs import Job, Step, StepOutcome
from xmr.jobs.cli import job_app
from xmr.tracking import resume_run, start_run


@dataclass(frozen=True)
class WaitOptions:
    """No options of its own."""


def wait(context):
    with start_run(context.experiment, run_name="wait", tracking_uri=context.tracking_uri,
                   parent_run_id=context.parent_run_id, keep_running=True) as run:
        pass
    with resume_run(run.run_id, tracking_uri=context.tracking_uri):
        print("waiting", flush=True)
        time.sleep(600)
    return StepOutcome(run.run_id)


def build(options, job_options):
    folder = Path(job_options.storage) / job_options.name
    return Job("wait", job_options.name, folder, {}, [Step("wait", "wait", "sleep", wait)])


if __name__ == "__main__":
    job_app(build, WaitOptions, "Wait to be stopped.")()
'''


@pytest.mark.slow
def test_a_job_stopped_mid_step_exits_143_with_its_runs_killed(tmp_path: Path) -> None:
    script = tmp_path / "wait_job.py"
    script.write_text(JOB_SCRIPT)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    command = [sys.executable, str(script), "--storage", str(tmp_path / "jobs"), "--name", "w"]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    log = tmp_path / "job.log"
    process = subprocess.Popen(
        [*command, "--tracking-uri", uri], env=env, stdout=log.open("w"), stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 120
        while "waiting" not in log.read_text():
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 143, log.read_text()
    finally:
        process.kill()
    assert "stopped by SIGTERM" in log.read_text()
    client = mlflow.MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("xmr/jobs/wait").experiment_id])
    assert {r.info.run_name: r.info.status for r in runs} == {"w": "KILLED", "wait": "KILLED"}
