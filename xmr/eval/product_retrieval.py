"""E-commerce product retrieval: the EI-CLIP paper's two protocols (§4.1, "Evaluation").

    "Given a text description (or image), the positive candidate is the associated ground-truth
    image (or text description) from the same product. For the negative candidates, we consider
    two kinds of settings. 1) Following [10, 72], we randomly sample 100 images (or text
    description) from other products within the same sub-category. [...] 2) We also consider the
    entire product set as our candidate set [...]. We use Rank@1 (Top-1 accuracy), Rank@5,
    Rank@10 to evaluate the performance of both retrieve tasks. Following [72],
    SumR=(Rank@1+Rank@5+Rank@10)*100 is regarded as an overall metric of the model."

and (§4.3, the "Sample 100" comparison) "As all candidates belong to the same sub-category, we
discard the category entity in evaluation."

Here, over the records of one split:

- **Products**: images sharing a product id are views of one product (Fashion-Gen: pass
  :func:`xmr.data.fashiongen.read_product_ids`); without ids every image is its own product
  (ToyWorld shop). A product's texts are its distinct descriptions (Fashion-Gen: one, shared by
  its views) and its entities are those of its first image.
- **Full candidate** (``full``): image->text queries every image against every product text,
  text->image every product text against every image; any text (image, any view) of the query's
  product is a hit. Metrics ``{split}/recall_i2t_at_{k}``, ``{split}/recall_t2i_at_{k}``,
  ``{split}/sumr``.
- **Sample 100** (``subcat``): each query's candidates are all items of its own product plus
  ``candidates`` (100) items drawn uniformly without replacement (seeded; all of them when there
  are fewer) from the items of the *other* products of its sub-category, in gallery order (so
  ties rank as in the full ranking). Queries whose product has no sub-category, or whose
  sub-category holds no other product, are skipped (counted in ``counts``). EI-CLIP's texts are
  embedded without the ``discard_groups`` entities (category and sub-category: the same for
  every candidate). Metrics ``{split}/subcat_recall_{i2t,t2i}_at_{k}``, ``{split}/subcat_sumr``.
- **SumR**: :func:`xmr.metrics.summed_recall`, ``100 ×`` the sum of the recalls (fractions)
  of both directions at every K, the paper's scale (its Table 1 SumR 302 is
  25.7+54.5+66.8+28.4+57.1+69.4).

Every Rank@K comes with a seeded percentile bootstrap interval over its queries (each
direction and protocol is one query set, its Ks resampled together), and its per-query hits are
kept (:class:`ProductRetrievalResult`) for ``xmr compare`` to pair two models on the same
queries. SumR, a sum over both directions' query sets, has none.

Texts are embedded with the model's entity-aware encoder when it has one
(:class:`ProductTextEncoder`: EI-CLIP's ``encode_product_texts``), else with ``encode_texts``.
Recall is the mean of :func:`xmr.metrics.recall_hits`; the full protocol ranks with
:func:`xmr.retrieval.topk_similarity`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np
import torch

from xmr.compare.bootstrap import CONFIDENCE, RESAMPLES, Interval
from xmr.compare.per_query import QueryValues
from xmr.data.images import load_image
from xmr.data.records import ImageRecord
from xmr.eval.intervals import interval_metrics, intervals_of
from xmr.metrics import recall_hits, summed_recall
from xmr.metrics.ranking import check_ks
from xmr.models import RetrievalModel
from xmr.retrieval import topk_similarity

PROTOCOLS = ("full", "subcat")
"""``full``: the entire product set as candidates; ``subcat``: the paper's "Sample 100"."""

SUBCATEGORY_GROUP = "subcategory"
DISCARD_GROUPS = ("category", "subcategory")
"""Entity groups EI-CLIP's texts leave out in the sub-category protocol (paper §4.3)."""

DIRECTIONS = ("i2t", "t2i")


@runtime_checkable
class ProductTextEncoder(Protocol):
    """A model with an entity-aware text embedding (EI-CLIP)."""

    def encode_product_texts(
        self, texts: Sequence[str], entities: Mapping[str, Sequence[str]]
    ) -> torch.Tensor:
        """``B`` descriptions and group -> ``B`` entity values to L2-normalised ``[B, D]``."""
        ...


@dataclass(frozen=True)
class ProductSet:
    """The images and product texts of a split, grouped by product.

    Attributes:
        image_paths: ``N`` image paths (one per view).
        image_product: ``[N]`` int64, the product index of each image.
        texts: ``T`` descriptions, each distinct description of a product once.
        text_product: ``[T]`` int64, the product index of each text.
        text_entities: group -> ``T`` entity values of each text's product ("" = none).
        product_ids: ``[P]`` int64, the product id of each product index.
        product_subcategory: ``P`` sub-category values ("" = unknown).
        product_entities: group -> ``P`` entity values of each product ("" = none).
    """

    image_paths: list[Path]
    image_product: np.ndarray
    texts: list[str]
    text_product: np.ndarray
    text_entities: dict[str, list[str]]
    product_ids: np.ndarray
    product_subcategory: list[str]
    product_entities: dict[str, list[str]]

    @classmethod
    def from_records(
        cls,
        records: Sequence[ImageRecord],
        product_ids: Mapping[int, int] | None = None,
        subcategory_group: str = SUBCATEGORY_GROUP,
    ) -> ProductSet:
        """Group ``records`` by ``product_ids`` (image id -> product id; ``None``: each image is
        its own product), products in order of first appearance.

        Raises:
            ValueError: no records, or an image id missing from ``product_ids``.
        """
        if not records:
            raise ValueError("product retrieval needs at least one image")
        index: dict[int, int] = {}
        first: list[ImageRecord] = []
        image_product = []
        for record in records:
            if product_ids is None:
                product = record.image_id
            elif record.image_id in product_ids:
                product = product_ids[record.image_id]
            else:
                raise ValueError(f"image {record.image_id} ({record.path}) has no product id")
            if product not in index:
                index[product] = len(first)
                first.append(record)
            image_product.append(index[product])
        texts: dict[tuple[int, str], None] = {}
        for record, product in zip(records, image_product, strict=True):
            for text in record.caption_texts:
                texts[(product, text)] = None
        groups = sorted({group for record in first for group in record.entities})
        text_product = [product for product, _ in texts]
        return cls(
            image_paths=[record.path for record in records],
            image_product=np.array(image_product, dtype=np.int64),
            texts=[text for _, text in texts],
            text_product=np.array(text_product, dtype=np.int64),
            text_entities={g: [first[p].entities.get(g, "") for p in text_product] for g in groups},
            product_ids=np.array(list(index), dtype=np.int64),
            product_subcategory=[record.entities.get(subcategory_group, "") for record in first],
            product_entities={g: [record.entities.get(g, "") for record in first] for g in groups},
        )


@dataclass
class ProductRetrievalResult:
    """Metrics (MLflow names) and counts of one product-retrieval evaluation.

    ``intervals``: each Rank@K's bootstrap interval (none with 0 resamples); ``per_query``:
    query set (``products_i2t``, ``products_t2i``, ``subcat_i2t``, ``subcat_t2i``) -> its
    queries (an image: ``"<image id>:<its first text>"``; a text: ``"<product id>:<text>"``)
    and their hits at each K, whose means are the metrics.
    """

    metrics: dict[str, float]
    counts: dict[str, int]
    intervals: dict[str, Interval] = field(default_factory=dict)
    per_query: dict[str, QueryValues] = field(default_factory=dict)

    def interval_metrics(self) -> dict[str, float]:
        """The intervals as MLflow metrics: ``{name}_ci_low`` and ``{name}_ci_high``."""
        return interval_metrics(self.intervals)


def _items_by_product(item_product: np.ndarray, num_products: int) -> list[np.ndarray]:
    """Product index -> the sorted item indices of that product."""
    order = np.argsort(item_product, kind="stable")
    bounds = np.searchsorted(item_product[order], np.arange(num_products + 1))
    return [order[bounds[p] : bounds[p + 1]] for p in range(num_products)]


def full_hits(
    queries: torch.Tensor,
    gallery: torch.Tensor,
    query_product: np.ndarray,
    gallery_product: np.ndarray,
    ks: Sequence[int] = (1, 5, 10),
) -> dict[int, np.ndarray]:
    """Per query, whether it hits at each K over the whole gallery (``{K: bool [Q]}``): when
    any item of its product ranks in the top K. ``queries`` ``[Q, D]`` and ``gallery``
    ``[G, D]`` normalised; products ``[Q]``, ``[G]``."""
    num_products = int(max(query_product.max(), gallery_product.max())) + 1
    items = _items_by_product(gallery_product, num_products)
    positives = [set(items[p].tolist()) for p in query_product.tolist()]
    return recall_hits(topk_similarity(queries, gallery, max(ks)), positives, ks)


def full_recall(
    queries: torch.Tensor,
    gallery: torch.Tensor,
    query_product: np.ndarray,
    gallery_product: np.ndarray,
    ks: Sequence[int] = (1, 5, 10),
) -> dict[int, float]:
    """Recall@K over the whole gallery: the mean of :func:`full_hits` (same arguments)."""
    hits = full_hits(queries, gallery, query_product, gallery_product, ks)
    return {k: float(hit.mean()) for k, hit in hits.items()}


def sample_candidates(
    query_product: np.ndarray,
    gallery_product: np.ndarray,
    product_subcategory: Sequence[str],
    n: int,
    rng: np.random.Generator,
) -> list[np.ndarray | None]:
    """The "Sample 100" candidate set of each query: sorted gallery indices.

    Every gallery item of the query's product, plus ``n`` items drawn uniformly without
    replacement from the gallery items of the other products of the query's sub-category (all of
    them when there are at most ``n``). ``None`` for a query whose product has no sub-category
    ("") or whose sub-category has no other product in the gallery. Queries draw in order from
    ``rng``.
    """
    if n < 1:
        raise ValueError(f"the number of sampled candidates must be >= 1, got {n}")
    num_products = len(product_subcategory)
    items = _items_by_product(gallery_product, num_products)
    subcategory = np.array(product_subcategory, dtype=object)
    gallery_subcategory = subcategory[gallery_product]
    pools = {s: np.flatnonzero(gallery_subcategory == s) for s in set(product_subcategory) if s}
    out: list[np.ndarray | None] = []
    for product in query_product.tolist():
        pool = pools.get(subcategory[product])
        others = None if pool is None else pool[gallery_product[pool] != product]
        if others is None or len(others) == 0:
            out.append(None)
            continue
        if len(others) > n:
            others = rng.choice(others, size=n, replace=False)
        out.append(np.sort(np.concatenate([items[product], others])))
    return out


def candidate_hits(
    queries: torch.Tensor,
    gallery: torch.Tensor,
    candidates: Sequence[np.ndarray | None],
    query_product: np.ndarray,
    gallery_product: np.ndarray,
    ks: Sequence[int] = (1, 5, 10),
    chunk: int = 1024,
) -> tuple[dict[int, np.ndarray], list[int]]:
    """Per query ranked against its own candidates only (``None``: skipped), whether it hits.

    ``queries`` ``[Q, D]`` and ``gallery`` ``[G, D]`` normalised; ``candidates[q]`` gallery
    indices in gallery order (equal scores rank the lower gallery index first, as in the full
    ranking). A query hits at K when an item of its product ranks in its top K.

    Returns:
        ``{K: bool [E]}`` for the ``E`` queries evaluated, and their indices (``E`` of ``Q``,
        ascending).

    Raises:
        ValueError: no query has candidates.
    """
    kept = [q for q, c in enumerate(candidates) if c is not None]
    if not kept:
        raise ValueError("no query has a candidate set (no sub-category with several products)")
    width = max(len(candidates[q]) for q in kept)
    index = np.zeros((len(kept), width), dtype=np.int64)
    valid = np.zeros((len(kept), width), dtype=bool)
    for row, q in enumerate(kept):
        index[row, : len(candidates[q])] = candidates[q]
        valid[row, : len(candidates[q])] = True
    rows = torch.as_tensor(kept, device=queries.device)
    cols = torch.as_tensor(index, device=queries.device)
    scores = torch.empty((len(kept), width), dtype=torch.float32)
    with torch.inference_mode():
        for start in range(0, len(kept), chunk):
            block = slice(start, start + chunk)
            score = torch.einsum("cd,cwd->cw", queries[rows[block]], gallery[cols[block]])
            scores[block] = score.float().cpu()
    scores[~torch.as_tensor(valid)] = -torch.inf
    positives = [
        set(np.flatnonzero(valid[row] & (gallery_product[index[row]] == query_product[q])))
        for row, q in enumerate(kept)
    ]
    return recall_hits(scores, positives, ks), kept


def candidate_recall(
    queries: torch.Tensor,
    gallery: torch.Tensor,
    candidates: Sequence[np.ndarray | None],
    query_product: np.ndarray,
    gallery_product: np.ndarray,
    ks: Sequence[int] = (1, 5, 10),
    chunk: int = 1024,
) -> tuple[dict[int, float], int]:
    """Recall@K of each query ranked against its own candidates only: the mean of
    :func:`candidate_hits` (same arguments), and the number of queries evaluated.

    Raises:
        ValueError: no query has candidates.
    """
    hits, kept = candidate_hits(
        queries, gallery, candidates, query_product, gallery_product, ks, chunk
    )
    return {k: float(hit.mean()) for k, hit in hits.items()}, len(kept)


def encode_images(model: RetrievalModel, paths: Sequence[Path], batch_size: int) -> torch.Tensor:
    """``N`` image files -> L2-normalised ``[N, D]`` float32 on the model's device."""
    out = [
        model.encode_images(
            torch.stack([model.preprocess(load_image(p)) for p in paths[i : i + batch_size]])
        )
        for i in range(0, len(paths), batch_size)
    ]
    return torch.cat(out)


def encode_product_texts(
    model: RetrievalModel,
    texts: Sequence[str],
    entities: Mapping[str, Sequence[str]],
    batch_size: int,
) -> torch.Tensor:
    """``T`` descriptions -> L2-normalised ``[T, D]``: entity-aware when the model is a
    :class:`ProductTextEncoder`, its plain text embedding otherwise."""
    out = []
    for i in range(0, len(texts), batch_size):
        chunk = texts[i : i + batch_size]
        if isinstance(model, ProductTextEncoder):
            part = {group: values[i : i + batch_size] for group, values in entities.items()}
            out.append(model.encode_product_texts(chunk, part))
        else:
            out.append(model.encode_texts(chunk))
    return torch.cat(out)


def product_retrieval(
    model: RetrievalModel,
    records: Sequence[ImageRecord],
    *,
    split: str = "test",
    product_ids: Mapping[int, int] | None = None,
    protocols: Sequence[str] = PROTOCOLS,
    ks: Sequence[int] = (1, 5, 10),
    candidates: int = 100,
    seed: int = 0,
    subcategory_group: str = SUBCATEGORY_GROUP,
    discard_groups: Sequence[str] = DISCARD_GROUPS,
    batch_size: int = 64,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    split_by: tuple[str, Mapping[str, str]] | None = None,
) -> ProductRetrievalResult:
    """Evaluate ``model`` on the products of ``records`` (one split) with ``protocols``.

    ``split_by``: ``(entity group, value -> subset)``, e.g. ``("brand", {"horse": "scene_word",
    ...})``: every protocol is also scored on the queries of each subset alone (those whose
    product has that value of the group; values not in the mapping in none), metrics
    ``{split}/{group}_{subset}/recall_…`` and ``…/sumr``, query sets
    ``{set}_{group}_{subset}``: where a method's gain lies, e.g. on the brands that a pretrained
    model already reads as something else.

    ``product_ids``: image id -> product id (Fashion-Gen's ``read_product_ids``); ``candidates``:
    negatives sampled per query in the ``subcat`` protocol, from ``np.random.default_rng([seed,
    d])`` for direction ``d`` (0: i2t, 1: t2i). See the module docstring for the protocols.
    ``resamples`` (0: none) and ``confidence``: the bootstrap intervals', seeded by ``seed``.

    Raises:
        ValueError: an unknown protocol or bad ``ks``; ``subcat`` on records without any
            ``subcategory_group`` entity.
    """
    unknown = set(protocols) - set(PROTOCOLS)
    if unknown or not protocols:
        raise ValueError(f"unknown protocols {sorted(unknown)}; choose from {PROTOCOLS}")
    ks = check_ks(ks)
    products = ProductSet.from_records(records, product_ids, subcategory_group)
    if "subcat" in protocols and not any(products.product_subcategory):
        groups = sorted({g for record in records for g in record.entities})
        raise ValueError(
            f"the sub-category protocol needs the entity group {subcategory_group!r}; "
            f"the records have {groups}"
        )
    images = encode_images(model, products.image_paths, batch_size)
    texts = encode_product_texts(model, products.texts, products.text_entities, batch_size)
    prefix = f"{split}/"
    metrics: dict[str, float] = {}
    counts = {
        "images": len(products.image_paths),
        "texts": len(products.texts),
        "products": len(products.product_ids),
    }
    views = {
        "i2t": (images, texts, products.image_product, products.text_product),
        "t2i": (texts, images, products.text_product, products.image_product),
    }
    # The queries' identities, with their text (another data set with the same ids is told
    # apart): an image's id and its first text; a text's product id and the text.
    keys = {
        "i2t": [f"{r.image_id}:{r.caption_texts[0] if r.caption_texts else ''}" for r in records],
        "t2i": [
            f"{products.product_ids[p]}:{text}"
            for p, text in zip(products.text_product.tolist(), products.texts, strict=True)
        ],
    }
    per_query: dict[str, QueryValues] = {}
    if "full" in protocols:
        for d in DIRECTIONS:
            hits = full_hits(*views[d], ks)
            per_query[f"products_{d}"] = _query_set(hits, keys[d], f"{prefix}recall_{d}_at_")
        recalls = _recalls(per_query[f"products_{d}"] for d in DIRECTIONS)
        metrics.update({name: r for direction in recalls for name, r in direction.items()})
        metrics[f"{prefix}sumr"] = summed_recall(recalls)
    if "subcat" in protocols:
        if isinstance(model, ProductTextEncoder):
            kept = {g: v for g, v in products.text_entities.items() if g not in discard_groups}
            texts = encode_product_texts(model, products.texts, kept, batch_size)
            views["i2t"] = (images, texts, *views["i2t"][2:])
            views["t2i"] = (texts, images, *views["t2i"][2:])
        for n, d in enumerate(DIRECTIONS):
            queries, gallery, query_product, gallery_product = views[d]
            rng = np.random.default_rng([seed, n])
            sets = sample_candidates(
                query_product, gallery_product, products.product_subcategory, candidates, rng
            )
            hits, evaluated = candidate_hits(
                queries, gallery, sets, query_product, gallery_product, ks
            )
            per_query[f"subcat_{d}"] = _query_set(
                hits, [keys[d][q] for q in evaluated], f"{prefix}subcat_recall_{d}_at_"
            )
            counts[f"subcat_queries_{d}"] = len(evaluated)
            counts[f"subcat_skipped_{d}"] = len(sets) - len(evaluated)
        recalls = _recalls(per_query[f"subcat_{d}"] for d in DIRECTIONS)
        metrics.update({name: r for direction in recalls for name, r in direction.items()})
        metrics[f"{prefix}subcat_sumr"] = summed_recall(recalls)
    if split_by is not None:
        subsets = _query_subsets(per_query, keys, products, *split_by, prefix)
        for name, subset in subsets.items():
            per_query[name] = subset
            metrics.update(_recalls([subset])[0])
        metrics.update(_subset_sumr(subsets, split_by[0], prefix))
    intervals = intervals_of(per_query, resamples=resamples, confidence=confidence, seed=seed)
    return ProductRetrievalResult(metrics, counts, intervals, per_query)


def _query_subsets(
    per_query: Mapping[str, QueryValues],
    keys: Mapping[str, Sequence[str]],
    products: ProductSet,
    group: str,
    subsets: Mapping[str, str],
    prefix: str,
) -> dict[str, QueryValues]:
    """Each query set of ``per_query`` cut into ``subsets`` by the ``group`` entity of each
    query's product: ``{set}_{group}_{subset}``, metric ``{prefix}{group}_{subset}/…``."""
    values = products.product_entities.get(group, [""] * len(products.product_ids))
    product_of = {
        "i2t": dict(zip(keys["i2t"], products.image_product.tolist(), strict=True)),
        "t2i": dict(zip(keys["t2i"], products.text_product.tolist(), strict=True)),
    }
    cut: dict[str, QueryValues] = {}
    for name, queries in per_query.items():
        direction = name.rsplit("_", 1)[1]
        label = [subsets.get(values[product_of[direction][key]]) for key in queries.keys]
        for subset in sorted(set(subsets.values())):
            mask = np.array([found == subset for found in label], dtype=bool)
            if not mask.any():
                continue
            renamed = {
                metric.replace(prefix, f"{prefix}{group}_{subset}/", 1): hits[mask]
                for metric, hits in queries.values.items()
            }
            kept = [key for key, keep in zip(queries.keys, mask, strict=True) if keep]
            cut[f"{name}_{group}_{subset}"] = QueryValues(kept, renamed)
    return cut


def _subset_sumr(subsets: Mapping[str, QueryValues], group: str, prefix: str) -> dict[str, float]:
    """SumR of each subset and protocol that has queries in both directions."""
    sumr: dict[str, float] = {}
    for name in subsets:
        protocol, direction, rest = name.split("_", 2)
        if direction != "i2t" or f"{protocol}_t2i_{rest}" not in subsets:
            continue
        subset = rest.removeprefix(f"{group}_")
        infix = "" if protocol == "products" else f"{protocol}_"
        pair = [subsets[name], subsets[f"{protocol}_t2i_{rest}"]]
        sumr[f"{prefix}{group}_{subset}/{infix}sumr"] = summed_recall(_recalls(pair))
    return sumr


def _query_set(hits: Mapping[int, np.ndarray], keys: Sequence[str], stem: str) -> QueryValues:
    """The hits ``{K: bool [E]}`` of the ``E`` queries named by ``keys`` as a query set, metric
    ``{stem}{K}`` (1.0: a hit)."""
    return QueryValues(
        list(keys), {f"{stem}{k}": hit.astype(np.float64) for k, hit in hits.items()}
    )


def _recalls(sets: Iterable[QueryValues]) -> list[dict[str, float]]:
    """Per query set, each metric's mean over its queries (its Recall@K)."""
    return [{name: float(v.mean()) for name, v in s.values.items()} for s in sets]


__all__ = [
    "DISCARD_GROUPS",
    "PROTOCOLS",
    "SUBCATEGORY_GROUP",
    "ProductRetrievalResult",
    "ProductSet",
    "ProductTextEncoder",
    "candidate_hits",
    "candidate_recall",
    "encode_images",
    "encode_product_texts",
    "full_hits",
    "full_recall",
    "product_retrieval",
    "sample_candidates",
]
