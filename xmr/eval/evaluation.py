"""One ``xmr eval``: a split's retrieval evaluation or a benchmark's scoring, with its console
report and its MLflow run. The command and the jobs' eval steps both run it."""

from __future__ import annotations

from dataclasses import dataclass

from xmr.eval import report
from xmr.eval.benchmark import BenchmarkResult, run_benchmark
from xmr.eval.config import EvalConfig
from xmr.eval.encode import EncoderFactory
from xmr.eval.options import BenchmarkOptions
from xmr.eval.score import EvalResult, evaluate
from xmr.storage import StoragePath
from xmr.tracking import experiment_name


@dataclass(frozen=True)
class Evaluation:
    """A finished evaluation: its result, the config it ran with, the benchmark (None: a
    split's retrieval metrics)."""

    result: EvalResult | BenchmarkResult
    config: EvalConfig
    benchmark: str | None

    @property
    def experiment(self) -> str:
        """The MLflow experiment it logs to by default: ``xmr/eval/<benchmark or dataset>``."""
        return experiment_name("eval", self.benchmark or self.config.dataset)

    def print(self) -> None:
        """The console report: the metrics table (and, for a split, the skipped items)."""
        if isinstance(self.result, BenchmarkResult):
            report.print_benchmark(self.result, self.config)
        else:
            report.print_report(self.result, self.config)

    def write_json(self, path: StoragePath) -> StoragePath:
        """The metrics JSON (``--output``) at ``path``."""
        return report.write_json(self.result, self.config, path)

    def log(
        self,
        *,
        tracking_uri: str | None = None,
        run_name: str | None = None,
        experiment: str | None = None,
        parent_run_id: str | None = None,
    ) -> str:
        """Log it as one MLflow run (see :func:`~xmr.eval.report.log_to_mlflow`); the run id."""
        where = {
            "tracking_uri": tracking_uri,
            "run_name": run_name,
            "experiment": experiment,
            "parent_run_id": parent_run_id,
        }
        if isinstance(self.result, BenchmarkResult):
            return report.log_benchmark_to_mlflow(self.result, self.config, **where)
        return report.log_to_mlflow(self.result, self.config, **where)


def run_evaluation(
    config: EvalConfig, scored: BenchmarkOptions, encoder: EncoderFactory
) -> Evaluation:
    """Score ``scored.benchmark`` read from ``config.data``, or with no benchmark evaluate
    ``config``'s split (Recall@K, ODmAP@K, Bias@K), encoded by the encoder ``encoder`` makes
    (:func:`~xmr.eval.encode.ray_encoder` for ``xmr eval`` and the jobs)."""
    if scored.benchmark is not None:
        result: EvalResult | BenchmarkResult = run_benchmark(
            config,
            scored.benchmark,
            encoder=encoder,
            subset=scored.subset,
            images=scored.images,
            strict=scored.strict,
        )
    else:
        result = evaluate(config, encoder)
    return Evaluation(result, config, scored.benchmark)
