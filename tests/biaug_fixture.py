"""A small BiAug D′ folder written directly, for training tests that need one before (or
without) ``xmr synth --mode biaug``: shards in :data:`~xmr.data.synthetic.BIAUG_ROW_SCHEMA`,
``manifest.json`` with ``"mode": "biaug"``, an empty ``errors.parquet``.

Each of the first ``pairs`` (image, caption) pairs of a ToyWorld split gets a positive and its
hard negative: the first object's box repainted in one colour or another, the caption extended
with the matching phrase (e.g. "a red car" / "a blue car").
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image, ImageDraw

from xmr.data import read_dataset
from xmr.data.synthetic import BIAUG_ROW_SCHEMA, ERROR_SCHEMA

COLOURS = (("red", (220, 30, 30)), ("blue", (30, 60, 220)))


def _repainted(path: Path, box: list[float], rgb: tuple[int, int, int]) -> bytes:
    image = Image.open(path).convert("RGB")
    x, y, w, h = box
    ImageDraw.Draw(image).rectangle([x, y, x + w, y + h], fill=rgb)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def write_biaug_dprime(world: Path, out: Path, pairs: int, split: str = "train") -> Path:
    """Write a BiAug D′ of ``pairs`` hard-negative pairs (``2 * pairs`` rows, two shards) from
    the ToyWorld at ``world`` to ``out``; returns ``out``."""
    rows = []
    for record in read_dataset("toyworld", world, split):
        for caption_id, caption in enumerate(record.caption_texts):
            if len(rows) == 2 * pairs or not record.objects:
                break
            target = record.objects[0]
            group_id = f"{record.image_id}/{caption_id}/{target.category}/color"
            for role, (colour, rgb) in zip(("positive", "negative"), COLOURS, strict=True):
                phrase = f"a {colour} {target.category}"
                rows.append(
                    {
                        "key": f"{group_id}/{role}",
                        "image": _repainted(record.path, list(target.bbox), rgb),
                        "caption": f"{caption.rstrip('.')} with {phrase}.",
                        "source_image_id": record.image_id,
                        "source_caption_id": caption_id,
                        "source_caption": caption,
                        "object": target.category,
                        "category": "color",
                        "phrase": phrase,
                        "group_id": group_id,
                        "role": role,
                        "box": list(target.bbox),
                        "width": record.width,
                        "height": record.height,
                        "fill": "render",
                    }
                )
    assert len(rows) == 2 * pairs, f"{world} has too few captions for {pairs} pairs"
    rows.sort(key=lambda row: row["key"])
    (out / "data").mkdir(parents=True)
    half = len(rows) // 2
    for n, part in enumerate((rows[:half], rows[half:])):
        pq.write_table(
            pa.Table.from_pylist(part, schema=BIAUG_ROW_SCHEMA), out / f"data/part-{n:05d}.parquet"
        )
    pq.write_table(ERROR_SCHEMA.empty_table(), out / "errors.parquet")
    manifest = {"mode": "biaug", "config_hash": f"biaug-fixture-{pairs}", "written": len(rows)}
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out
