"""A tiny Fashion-Gen HDF5 file in the public release's layout (see :mod:`xmr.data.fashiongen`).

Same dataset names, per-row shapes and dtypes as ``fashiongen_256_256_{split}.h5``: images
``(N, 256, 256, 3)`` uint8; strings as fixed-length byte strings (``S``) in ``(N, 1)`` datasets,
latin-1 encoded; ``input_productID`` ``(N, 1)`` int64, ``input_msrpUSD`` ``(N, 1)`` float32,
``index`` / ``index_2`` ``(N, 1)`` int64. The string lengths below are this fixture's choice (the
real ones were not confirmed). Rows come in products of 1-4 views sharing the description and
metadata, like the real file; descriptions carry HTML-ish debris, no-break spaces and latin-1
accents, brands include ``Golden Goose`` / ``Canada Goose`` (shared word) and a non-ASCII one.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import h5py
import numpy as np

STRING_LENGTHS = {
    "input_brand": 100,
    "input_category": 100,
    "input_composition": 400,
    "input_concat_description": 1000,
    "input_department": 50,
    "input_description": 800,
    "input_gender": 20,
    "input_name": 200,
    "input_pose": 20,
    "input_season": 20,
    "input_subcategory": 100,
}
BRANDS = ("Golden Goose", "Canada Goose", "Comme des Garçons", "Acne Studios", "Dsquared2")
PRODUCTS = (  # department, category, subcategory, noun
    ("CLOTHING", "SWEATERS", "CREWNECKS", "sweater"),
    ("CLOTHING", "JACKETS & COATS", "BOMBERS", "bomber jacket"),
    ("CLOTHING", "TOPS", "T-SHIRTS", "t-shirt"),
    ("SHOES", "SNEAKERS", "LOW TOP SNEAKERS", "sneakers"),
    ("BAGS", "TOTE BAGS", "TOTE BAGS", "tote"),
)
COLOURS = ("black", "navy", "white", "'hustler' grey", "burgundy")
COMPOSITIONS = ("100% cotton.", "Body: 100% wool. Trim: 100% polyamide.", "100% leather.")
SEASONS = ("SS2017", "FW2017", "SS2018")
GENDERS = ("MEN", "WOMEN")


def write_fashiongen(
    path: str | Path,
    n: int,
    seed: int,
    *,
    image_rows: int | None = None,
    empty_rows: Sequence[int] = (),
) -> list[dict[str, str]]:
    """Write ``n`` rows to ``path``; return each row's raw strings (keys: dataset names).

    ``image_rows`` writes fewer image rows than metadata rows (the rest have no image);
    ``empty_rows`` get an empty-looking description (``"<br> &nbsp;"``). Same arguments give
    the same bytes.
    """
    rng = np.random.default_rng(seed)
    rows: list[dict[str, str]] = []
    product_ids: list[int] = []
    while len(rows) < n:
        product = int(rng.integers(10_000, 999_999))
        department, category, subcategory, noun = PRODUCTS[int(rng.integers(len(PRODUCTS)))]
        brand = BRANDS[int(rng.integers(len(BRANDS)))]
        colour = COLOURS[int(rng.integers(len(COLOURS)))]
        description = (
            f"Long sleeve {noun} in {colour}.\u00a0Logo appliqué at chest.<br>"
            f"Tonal  stitching &amp; trim."
        )
        fields = {
            "input_brand": brand,
            "input_category": category,
            "input_composition": COMPOSITIONS[int(rng.integers(len(COMPOSITIONS)))],
            "input_department": department,
            "input_description": description,
            "input_gender": GENDERS[int(rng.integers(len(GENDERS)))],
            "input_name": f"{colour.title()} {noun.title()}",
            "input_season": SEASONS[int(rng.integers(len(SEASONS)))],
            "input_subcategory": subcategory,
        }
        fields["input_concat_description"] = f"{brand} {fields['input_name']}. {description}"
        for view in range(min(int(rng.integers(1, 5)), n - len(rows))):
            rows.append({**fields, "input_pose": f"id_gridfs_{view + 1}"})
            product_ids.append(product)
    for row in empty_rows:
        rows[row]["input_description"] = "<br> &nbsp;"
        rows[row]["input_concat_description"] = ""

    with h5py.File(path, "w") as file:
        images = rng.integers(0, 256, (n if image_rows is None else image_rows, 256, 256, 3))
        file.create_dataset("input_image", data=images.astype(np.uint8))
        for key, length in STRING_LENGTHS.items():
            cells = [[row[key].encode("latin-1")] for row in rows]
            file.create_dataset(key, data=np.array(cells, dtype=f"S{length}"))
        file.create_dataset("input_productID", data=np.array(product_ids, np.int64)[:, None])
        prices = rng.integers(50, 2000, (n, 1)).astype(np.float32)
        file.create_dataset("input_msrpUSD", data=prices)
        file.create_dataset("index", data=np.arange(n, dtype=np.int64)[:, None])
        file.create_dataset("index_2", data=np.arange(n, dtype=np.int64)[:, None])
    return rows
