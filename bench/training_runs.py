"""What the reproduction scripts share: run an ``xmr`` command line, read a run's results back."""

from __future__ import annotations

import shlex
import subprocess

import mlflow


def run(command: list[str]) -> None:
    """Print ``command`` as a shell line, then run it; a failure stops the script."""
    print("$", shlex.join(command), flush=True)
    subprocess.run(command, check=True)


def final_metrics(
    tracking_uri: str, name: str, experiment: str = "xmr/train/toyworld"
) -> dict[str, float]:
    """The metrics of the finished run ``name`` in ``experiment``, ``final/`` prefix dropped
    (``test/recall_t2i_at_10``); a failed or unfinished run of that name is never read."""
    client = mlflow.MlflowClient(tracking_uri)
    found = client.search_runs(
        [client.get_experiment_by_name(experiment).experiment_id],
        f"attributes.run_name = '{name}' and attributes.status = 'FINISHED'",
        max_results=1,
    )
    if not found:
        raise RuntimeError(f"{tracking_uri}: no finished run named {name!r} in {experiment}")
    return {k.removeprefix("final/"): v for k, v in found[0].data.metrics.items()}
