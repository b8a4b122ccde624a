"""Compositional benchmarks: readers of the published layouts and the scoring rules.

Plain Python and numpy (no models, no Ray): a reader turns a benchmark's files into
:class:`ContrastItem` s (an image, optionally a box of it, and captions with the true one first);
the caller scores each item's image against its captions; :func:`true_caption_wins` turns those
scores into per-item correctness (strictly above every negative: a tie is wrong), and the
benchmark's scorer aggregates it into metrics (all higher is better).

Modules:

- :mod:`.items`: the item form, the skipped rows' form and reasons (:class:`SkippedItem`,
  :data:`SKIP_REASONS`), :func:`true_caption_wins`, per-group accuracy and the metrics
  made of group accuracies (:func:`weighted_accuracy` with :func:`macro_weights` or
  :func:`pooled_weights`; their per-item values for the bootstrap), :func:`item_image` (the
  image cropped to the item's box);
- :mod:`.sugarcrepe`: SugarCrepe's seven category files, per-category and mean accuracy;
- :mod:`.aro`: ARO's VG-Relation and VG-Attribution files, the subset choice, the excluded
  relations and the >= 25 items rule, the four subsets' metrics;
- :mod:`.order`: COCO-Order and Flickr-Order built from Karpathy test captions with the four
  seeded shuffles;
- :mod:`.binding`: the ToyWorld binding test (swap and counter-stereotype items, both
  directions).
"""

from xmr.benchmarks.aro import (
    ARO_FILES,
    ARO_METRICS,
    ARO_SUBSETS,
    EXCLUDED_RELATIONS,
    MIN_ATTRIBUTE_PAIR_ITEMS,
    aro_subsets,
    read_aro,
    score_aro,
)
from xmr.benchmarks.binding import BINDING_GROUPS, BINDING_METRICS, read_binding, score_binding
from xmr.benchmarks.items import (
    EMPTY_CAPTION,
    IMAGE_NOT_FOUND,
    IMAGE_OUTSIDE,
    NO_SHUFFLE,
    SKIP_REASONS,
    UNREADABLE_IMAGE,
    BenchmarkData,
    BenchmarkScore,
    CaptionContrastItem,
    ContrastItem,
    GroupAccuracy,
    SkippedItem,
    group_accuracies,
    item_image,
    macro_accuracy,
    macro_weights,
    pooled_weights,
    true_caption_wins,
    weighted_accuracy,
)
from xmr.benchmarks.order import PERTURBATIONS, order_captions, read_order
from xmr.benchmarks.sugarcrepe import (
    SUGARCREPE_CATEGORIES,
    SUGARCREPE_MEAN_METRIC,
    category_metric,
    read_sugarcrepe,
    score_sugarcrepe,
)

__all__ = [
    "ARO_FILES",
    "ARO_METRICS",
    "ARO_SUBSETS",
    "BINDING_GROUPS",
    "BINDING_METRICS",
    "EMPTY_CAPTION",
    "EXCLUDED_RELATIONS",
    "IMAGE_NOT_FOUND",
    "IMAGE_OUTSIDE",
    "MIN_ATTRIBUTE_PAIR_ITEMS",
    "NO_SHUFFLE",
    "PERTURBATIONS",
    "SKIP_REASONS",
    "SUGARCREPE_CATEGORIES",
    "SUGARCREPE_MEAN_METRIC",
    "UNREADABLE_IMAGE",
    "BenchmarkData",
    "BenchmarkScore",
    "CaptionContrastItem",
    "ContrastItem",
    "GroupAccuracy",
    "SkippedItem",
    "aro_subsets",
    "category_metric",
    "group_accuracies",
    "item_image",
    "macro_accuracy",
    "macro_weights",
    "order_captions",
    "pooled_weights",
    "read_aro",
    "read_binding",
    "read_order",
    "read_sugarcrepe",
    "score_aro",
    "score_binding",
    "score_sugarcrepe",
    "true_caption_wins",
    "weighted_accuracy",
]
