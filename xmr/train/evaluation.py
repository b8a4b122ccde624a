"""A training run's evaluations, in the chief worker's process: the validation split that
selects the model, the test split at the end, and the world's binding test.

No Ray: the metrics come from :mod:`xmr.eval` with a local encoder.
"""

from __future__ import annotations

import re
from dataclasses import replace

from xmr.compare.per_query import QueryValues
from xmr.data import read_dataset
from xmr.data.fashiongen import read_product_ids
from xmr.eval.benchmark import run_benchmark
from xmr.eval.config import EvalConfig
from xmr.eval.encode import local_encoder
from xmr.eval.product_retrieval import product_retrieval
from xmr.eval.score import evaluate
from xmr.metrics import summed_recall
from xmr.models import RetrievalModel
from xmr.storage import StoragePath
from xmr.toyworld.shop.brand_kinds import BRAND_GROUP, world_brand_kinds
from xmr.train.config import TrainConfig


def selection_score(metrics: dict[str, float], split: str) -> float | None:
    """Model selection: the split's summed recall (RSUM, :func:`xmr.metrics.summed_recall`, in
    percentage points) over its ``{split}/recall_{i2t,t2i}_at_K`` metrics (not their intervals'
    ends); ``None`` if none was measured."""
    recall = re.compile(rf"{re.escape(split)}/recall_(i2t|t2i)_at_\d+")
    recalls = {k: v for k, v in metrics.items() if recall.fullmatch(k)}
    return summed_recall([recalls]) if recalls else None


def run_eval(
    model: RetrievalModel,
    config: TrainConfig,
    data_root: StoragePath,
    split: str,
    metrics: tuple,
    products: bool,
) -> tuple[dict[str, float], dict[str, QueryValues]]:
    """Evaluate ``model`` in this process (no Ray) on ``split``: ``{split}/...`` metrics, with
    their bootstrap intervals (``..._ci_low``, ``..._ci_high``), and the per-query values they
    are means of.

    Data with product entities (``products``: Fashion-Gen, the ToyWorld shop) is evaluated with
    the EI-CLIP paper's product protocols (full candidate set and same-sub-category "sample
    100", SumR); a ToyWorld shop's also on each kind of brand name's queries alone
    (:mod:`xmr.toyworld.shop.brand_kinds`: ``{split}/brand_scene_word/...``); everything else
    with ``metrics`` of :func:`xmr.eval.score.evaluate`.
    """
    if products:
        records = read_dataset(config.dataset, data_root, split)
        product_ids = read_product_ids(data_root, split) if config.dataset == "fashiongen" else None
        kinds = world_brand_kinds(data_root) if config.dataset == "toyworld" else None
        result = product_retrieval(
            model, records, split=split, product_ids=product_ids, ks=config.ks, seed=config.seed,
            split_by=None if kinds is None else (BRAND_GROUP, kinds),
        )  # fmt: skip
        return {**result.metrics, **result.interval_metrics()}, result.per_query
    eval_config = EvalConfig(
        model=config.model,
        dataset=config.dataset,
        data=data_root,
        split=split,
        metrics=metrics,
        ks=config.ks,
        seed=config.seed,
    )
    result = evaluate(eval_config, local_encoder(model), model=model)
    return {**result.metrics, **result.interval_metrics()}, result.per_query


def run_binding(
    model: RetrievalModel, config: TrainConfig, data_root: StoragePath
) -> tuple[dict[str, float], dict[str, QueryValues]]:
    """The world's binding test (:mod:`xmr.benchmarks.binding`), in this process: the metrics
    ``{test_split}/binding/swap_acc``, ``.../counter_acc``, ``.../stereotype_acc`` with their
    bootstrap intervals (``..._ci_low``/``_ci_high``), and the per-item values under the same
    names (query set ``binding``), which ``xmr compare`` pairs."""
    eval_config = EvalConfig(
        model=config.model, dataset=config.dataset, data=data_root, seed=config.seed
    )
    result = run_benchmark(eval_config, "toyworld-binding", encoder=local_encoder(model))
    prefix = f"{config.test_split}/"
    metrics = {**result.metrics, **result.interval_metrics()}
    per_item = {
        name: replace(values, values={prefix + m: v for m, v in values.values.items()})
        for name, values in result.per_query.items()
    }
    return {prefix + name: value for name, value in metrics.items()}, per_item
