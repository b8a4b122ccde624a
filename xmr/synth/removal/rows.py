"""The rows of a removal D′: one per (source image, removal plan, chosen caption), with
deterministic keys.

A row's key is ``"{image_id}/{removed classes joined by '+'}/{caption_id}"``: the same config on
the same data plans the same keys, which is what lets a rerun resume and skip finished rows.

Caption choice (odmap paper §4.1: one caption of the five per image): for each plan, the eligible
captions are, when captions are rewritten by noun-phrase removal, those that mention a removed
class (a caption that never names a removed object has nothing to rewrite) and whose rewrite keeps
a word; else all captions. ``captions_per_image`` of them are drawn without replacement by a
generator seeded with ``(seed, key prefix)``, so the choice is independent of processing order.
The rewrite is therefore done here, once, and carried in the row. A plan whose mentioning captions
all become empty is a failure (stage ``caption``), not a row.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields

import numpy as np

from xmr.data.records import Caption, ImageRecord
from xmr.synth.batch import row_seed


@dataclass(frozen=True)
class PlannedRow:
    """One synthetic pair to build: remove ``removed`` from the image, rewrite the caption.

    ``boxes`` are the ``[x, y, w, h]`` pixel boxes of the removed classes (the fill mask).
    ``phrases`` are the caption's annotated entity phrases (Flickr30k), JSON-encoded.
    ``rewritten`` is the noun-phrase-removal caption ("" for the other caption methods).
    """

    key: str
    source_image_id: int
    source_caption_id: int
    source_caption: str
    phrases: str
    path: str
    width: int
    height: int
    removed: tuple[str, ...]
    kept: tuple[str, ...]
    boxes: tuple[tuple[float, float, float, float], ...]
    rewritten: str = ""

    def to_dict(self) -> dict:
        """Flat JSON-friendly columns (tuples as JSON strings) for Ray Data and Parquet."""
        return {
            "key": self.key,
            "source_image_id": self.source_image_id,
            "source_caption_id": self.source_caption_id,
            "source_caption": self.source_caption,
            "phrases": self.phrases,
            "path": self.path,
            "width": self.width,
            "height": self.height,
            "removed": json.dumps(self.removed),
            "kept": json.dumps(self.kept),
            "boxes": json.dumps(self.boxes),
            "rewritten": self.rewritten,
        }

    @classmethod
    def from_batch(cls, batch: Mapping[str, Sequence], i: int) -> PlannedRow:
        """Row ``i`` of a column batch that holds (at least) the :meth:`to_dict` columns."""
        return cls.from_dict({name: batch[name][i] for name in ROW_COLUMNS})

    @classmethod
    def from_dict(cls, row: dict) -> PlannedRow:
        """The inverse of :meth:`to_dict` (accepts numpy scalars from Ray batches)."""
        return cls(
            key=str(row["key"]),
            source_image_id=int(row["source_image_id"]),
            source_caption_id=int(row["source_caption_id"]),
            source_caption=str(row["source_caption"]),
            phrases=str(row["phrases"]),
            path=str(row["path"]),
            width=int(row["width"]),
            height=int(row["height"]),
            removed=tuple(json.loads(row["removed"])),
            kept=tuple(json.loads(row["kept"])),
            boxes=tuple(tuple(b) for b in json.loads(row["boxes"])),
            rewritten=str(row["rewritten"]),
        )


@dataclass(frozen=True)
class PlanFailure:
    """A plan that yields no row, and why (``stage`` names the step that failed)."""

    key: str
    stage: str
    error_type: str
    message: str


ROW_COLUMNS = tuple(f.name for f in fields(PlannedRow))
"""The columns of a planned row in a batch (:meth:`PlannedRow.to_dict`)."""


def row_key(image_id: int, removed: Sequence[str], caption_id: int) -> str:
    """The deterministic key of a synthetic row."""
    return f"{image_id}/{'+'.join(removed)}/{caption_id}"


def plan_rows(
    record: ImageRecord,
    plans: Sequence[tuple[str, ...]],
    mentions: Sequence[set[str]] | None,
    *,
    captions_per_image: int | None,
    seed: int,
    rewrite: Callable[[Caption, tuple[str, ...]], str] | None = None,
    failures: list[PlanFailure] | None = None,
) -> list[PlannedRow]:
    """The rows of one image, in (plan, caption) order.

    Args:
        record: the source image.
        plans: its removal plans (:func:`~xmr.removal.planning.removal_plans`).
        mentions: the classes each caption of ``record`` mentions (caption order), or None when
            every caption is eligible (prompt / captioner captions).
        captions_per_image: captions drawn per plan, None for all eligible ones.
        seed: the build's seed.
        rewrite: the noun-phrase removal ``(caption, removed) -> text``, raising ValueError when
            nothing is left; with it, only captions it rewrites are eligible.
        failures: collects the plans left without an eligible caption; None raises instead.

    Raises:
        ValueError: a plan has no eligible caption and ``failures`` is None.
    """
    if mentions is not None and len(mentions) != len(record.captions):
        raise ValueError(f"image {record.image_id}: {len(mentions)} mentions for captions")
    rows = []
    for plan in plans:
        removed = set(plan)
        eligible = [
            i for i in range(len(record.captions)) if mentions is None or mentions[i] & removed
        ]
        rewritten = {i: "" for i in eligible}
        if rewrite is not None and eligible:
            problems = []
            for i in eligible:
                try:
                    rewritten[i] = rewrite(record.captions[i], plan)
                except ValueError as exc:
                    problems.append(str(exc))
            usable = [i for i in eligible if rewritten[i]]
            if not usable:
                failure = PlanFailure(
                    row_key(record.image_id, plan, record.captions[eligible[0]].id),
                    "caption",
                    "ValueError",
                    "no caption keeps a word after noun-phrase removal: " + "; ".join(problems),
                )
                if failures is None:
                    raise ValueError(f"{failure.key}: {failure.message}")
                failures.append(failure)
            eligible = usable
        if captions_per_image is not None and len(eligible) > captions_per_image:
            rng = np.random.default_rng(row_seed(seed, row_key(record.image_id, plan, -1)))
            eligible = sorted(rng.choice(eligible, size=captions_per_image, replace=False))
        kept = tuple(sorted(record.categories - removed))
        boxes = tuple(tuple(o.bbox) for o in record.objects if o.category in removed)
        for i in eligible:
            caption = record.captions[i]
            rows.append(
                PlannedRow(
                    key=row_key(record.image_id, plan, caption.id),
                    source_image_id=record.image_id,
                    source_caption_id=caption.id,
                    source_caption=caption.text,
                    phrases=json.dumps([[p.text, list(p.types)] for p in caption.phrases]),
                    path=str(record.path),
                    width=record.width,
                    height=record.height,
                    removed=tuple(plan),
                    kept=kept,
                    boxes=boxes,
                    rewritten=rewritten[i],
                )
            )
    return rows
