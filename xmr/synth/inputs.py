"""The source data of a D′ build: the dataset folder, its records and a hash of them.

``planned`` counts units of work, and an image that cannot be read is one: it is left out of the
records and becomes one error row (stage ``read``). The hash of what was read keys the build
(:func:`inputs_hash`): a rerun with other input data is refused.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from xmr.data import DataIssue, read_dataset
from xmr.data.records import ImageRecord
from xmr.data.registry import check_data_folder
from xmr.storage import StoragePath
from xmr.synth.config import SynthConfig
from xmr.toyworld.default_world import default_toyworld


def data_root(config: SynthConfig, progress: bool) -> StoragePath:
    """The dataset folder: ``--data``, or the embedded ToyWorld generated into the cache."""
    if config.data is not None:
        check_data_folder(config.dataset, config.data)
        return config.data
    if config.dataset != "toyworld":
        raise ValueError(f"--dataset {config.dataset} needs --data (the dataset's folder)")
    return default_toyworld(config.seed, progress=progress)


def read_inputs(config: SynthConfig, root: Path) -> tuple[list[ImageRecord], list[dict]]:
    """The records to plan and one error row per image left out (or input item unreadable).

    An image with any reader issue (missing file, bad box, ...) is left out whole: removing a
    class is only right when every box of the image is known. ``--limit`` keeps the first N
    image ids of the split, counting the left-out ones.
    """
    issues: list[DataIssue] = []
    records = read_dataset(config.dataset, root, config.split, issues=issues)
    if config.limit is not None:
        ids = sorted(
            {r.image_id for r in records} | {i.image_id for i in issues if i.image_id is not None}
        )
        allowed = set(ids[: config.limit])
        records = [r for r in records if r.image_id in allowed]
        issues = [i for i in issues if i.image_id is None or i.image_id in allowed]
    by_image: dict[object, list[DataIssue]] = defaultdict(list)
    for issue in issues:
        by_image[issue.image_id if issue.image_id is not None else issue.item].append(issue)
    errors = [
        {
            "key": str(key),
            "stage": "read",
            "error_type": "DataError",
            "message": "; ".join(f"{i.item}: {i.reason}" for i in found),
        }
        for key, found in by_image.items()
    ]
    records = [r for r in records if r.image_id not in by_image]
    return records, errors


def inputs_hash(records: Sequence[ImageRecord], read_errors: Sequence[dict]) -> str:
    """Hash of the input records (file names, not folders) and what was left out."""
    digest = hashlib.sha256()
    for record in records:
        data = record.to_dict()
        data["path"] = Path(data["path"]).name
        digest.update(json.dumps(data, sort_keys=True).encode())
    digest.update(json.dumps(sorted(e["key"] for e in read_errors)).encode())
    return digest.hexdigest()[:16]
