"""Which way each metric is better (torchmetrics' ``higher_is_better``) and how its per-query
values aggregate (torchmetrics' ``aggregation``), declared once.

Every consumer that judges a metric (the demo's Δ colours, the eval report, the sweeps' default
``mode`` / ``abs``, ``xmr compare``) asks :func:`metric_direction` instead of guessing from the
name:

- higher is better: Recall@K (``recall_i2t_at_10``, ``subcat_recall_t2i_at_1``), mAP@K,
  ODmAP@K, the summed recalls (``rsum``, ``sumr``, ``subcat_sumr``), the compositional
  benchmarks' accuracies (``aro/vg_relation_acc``, ``sugarcrepe/swap_att_acc``,
  ``sugarcrepe/mean_acc``, ``binding/counter_acc``; :mod:`xmr.benchmarks`);
- lower is better: training losses (``loss``, ``loss_itc``, ...), the median rank of a query's
  first positive (MedR: ``medr_i2t``, ``medr_t2i``; :mod:`xmr.metrics.medr`);
- signed, best at 0 and judged by size (compare ``|x|``): Bias@K (gender paper §2.2, in
  [-1, 1], + = towards male; ``bias_at_10_cup``: over the queries that mention a class) and the
  similarity bias (its Eq. 9);
- none, a diagnostic that explains another metric and is never judged: Bias@K's
  ``gendered_share_at_K`` and ``male_share_at_K`` (:mod:`xmr.metrics.gender_bias`).

Names are MLflow metric names, with any ``split/`` or ``final/split/`` prefix
(``test/recall_t2i_at_10``, ``final/test/bias_at_5``, ``val/rsum``, ``train/loss``). A name
that is none of these is never given a guessed direction: :func:`metric_direction` refuses it
with :class:`UnknownMetricError`, and :func:`find_direction` returns None for a caller that can
do without one (a table's number format, a sweep metric whose ``mode`` the space states).

Every metric is a mean over queries of a per-query value (:attr:`Aggregation.MEAN`) unless
:data:`AGGREGATIONS` declares otherwise: MedR is the median of its queries' ranks
(:attr:`Aggregation.MEDIAN`). :func:`metric_aggregation` tells the bootstrap
(:mod:`xmr.compare.bootstrap`) which statistic to take of each resample, and a paired
comparison which to take the difference of.
"""

from __future__ import annotations

import re
from enum import Enum


class Direction(Enum):
    """Which values of a metric are better."""

    HIGHER = "higher is better"
    LOWER = "lower is better"
    TOWARD_ZERO = "closer to 0 is better"  # signed: judged by |value|
    NONE = "no value is better (a diagnostic)"

    @property
    def mode(self) -> str:
        """``max`` or ``min`` of :meth:`judged` values (Ray Tune's and the sweeps' ``mode``).

        Raises ValueError for :attr:`NONE`: a diagnostic is never optimised.
        """
        if self is Direction.NONE:
            raise ValueError("a diagnostic metric has no better value to optimise")
        return "max" if self is Direction.HIGHER else "min"

    @property
    def judges(self) -> bool:
        """Whether one value can be better than another (False for a diagnostic)."""
        return self is not Direction.NONE

    @property
    def symbol(self) -> str:
        """A table's hint: ``↑`` (higher is better), ``↓`` (lower), ``→0`` (closer to 0), ``·``
        (a diagnostic)."""
        return {"HIGHER": "↑", "LOWER": "↓", "TOWARD_ZERO": "→0", "NONE": "·"}[self.name]

    @property
    def signed(self) -> bool:
        """Whether the sign carries meaning and is judged away (shown with its sign)."""
        return self is Direction.TOWARD_ZERO

    def judged(self, value: float) -> float:
        """The number that is compared: ``|value|`` for signed metrics, else ``value``."""
        return abs(value) if self.signed else value

    def better(self, value: float, than: float) -> bool:
        """Whether ``value`` is strictly better than ``than`` (NaN is never better; nothing is
        better for :attr:`NONE`)."""
        if self is Direction.NONE:
            return False
        value, than = self.judged(value), self.judged(than)
        return value > than if self is Direction.HIGHER else value < than


class UnknownMetricError(ValueError):
    """A metric name whose direction is not declared in :data:`DIRECTIONS`."""


DIRECTIONS: tuple[tuple[str, Direction], ...] = (
    (r"(subcat_)?recall_(i2t|t2i)_at_\d+", Direction.HIGHER),
    (r"(od)?map_at_\d+", Direction.HIGHER),
    (r"rsum|(subcat_)?sumr", Direction.HIGHER),
    (r"(vg_relation|vg_attribution|coco_order|flickr_order)_acc", Direction.HIGHER),  # ARO
    (r"(add|replace|swap)_(att|obj)_acc|replace_rel_acc|mean_acc", Direction.HIGHER),  # SugarCrepe
    (r"(swap|counter|stereotype)_acc", Direction.HIGHER),  # the ToyWorld binding test
    (r"loss(_\w+)?", Direction.LOWER),
    (r"medr_(i2t|t2i)", Direction.LOWER),  # MedR: a rank, 1 is best
    (r"bias_at_\d+(_(?!ci_)[a-z_]+)?|similarity_bias", Direction.TOWARD_ZERO),  # _cup: a class
    (r"(gendered|male)_share_at_\d+(_(?!ci_)[a-z_]+)?", Direction.NONE),  # Bias@K's diagnostics
)
"""(pattern of the name's last ``/`` part, direction): the declaration, in one place."""


class Aggregation(Enum):
    """Which statistic of its per-query values a metric is."""

    MEAN = "mean"
    MEDIAN = "median"


AGGREGATIONS: tuple[tuple[str, Aggregation], ...] = ((r"medr_(i2t|t2i)", Aggregation.MEDIAN),)
"""(pattern of the name's last ``/`` part, aggregation) of the metrics that are not means: the
declaration, beside :data:`DIRECTIONS`."""


def find_direction(name: str) -> Direction | None:
    """The declared :class:`Direction` of MLflow metric ``name`` (any ``split/`` prefixes), or
    None when it has none (for callers that can do without: a table's number format, a sweep
    metric whose ``mode`` the space states)."""
    stem = name.rsplit("/", 1)[-1]
    for pattern, direction in DIRECTIONS:
        if re.fullmatch(pattern, stem):
            return direction
    return None


def metric_direction(name: str) -> Direction:
    """The :class:`Direction` of MLflow metric ``name`` (any ``split/`` prefixes allowed).

    >>> metric_direction("final/test/bias_at_5").mode, metric_direction("val/rsum").mode
    ('min', 'max')

    Raises :class:`UnknownMetricError` naming the metric when its direction is not declared.
    """
    direction = find_direction(name)
    if direction is None:
        raise UnknownMetricError(
            f"metric {name!r}: its direction is not known (xmr.metrics.direction declares "
            "recall_*, odmap_at_*, map_at_*, rsum, sumr, the ARO, SugarCrepe and binding *_acc, "
            "loss*, medr_i2t, medr_t2i, "
            "bias_at_*, similarity_bias; the diagnostics gendered_share_at_*, male_share_at_*)"
        )
    return direction


def metric_aggregation(name: str) -> Aggregation:
    """How metric ``name`` (an MLflow name, any ``split/`` prefixes; or any column name of
    per-query values) aggregates its per-query values: :attr:`Aggregation.MEDIAN` where
    :data:`AGGREGATIONS` declares it, else :attr:`Aggregation.MEAN`.

    >>> metric_aggregation("test/medr_t2i").value, metric_aggregation("test/recall_t2i_at_1").value
    ('median', 'mean')
    """
    stem = name.rsplit("/", 1)[-1]
    for pattern, aggregation in AGGREGATIONS:
        if re.fullmatch(pattern, stem):
            return aggregation
    return Aggregation.MEAN
