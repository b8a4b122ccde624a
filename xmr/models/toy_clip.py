"""The toy CLIP: ``xmr-tiny`` pretrained on ToyWorld, shipped with xmr as the pretrained tag
``toy`` of the ``clip`` and ``eiclip`` families (``--pretrained toy``).

The papers finetune a pretrained CLIP; a model trained from scratch on a 4,000-image world has
no priors for a method to correct or exploit. The toy CLIP is what ToyWorld's experiments
finetune instead: ``xmr-tiny`` trained to convergence on the pretraining world
(``xmr data toyworld --config pretrain``: every class, colour and person, the default
co-occurrences and gender rules, the binding world's colour stereotypes), so its priors are
known. ``python ray_jobs/toy_clip.py`` rebuilds it (:mod:`xmr.jobs.toy_clip`).

Two package files, in ``xmr/models/weights/``:

- ``toy-clip.pt.gz``: the weights, a ``{name: tensor}`` state dict in float16, gzip-compressed;
  the token embedding's rows of tokens that no pretraining caption uses are zero (open_clip's
  vocabulary has 49,408 tokens, the world's captions use a few hundred: the rest would be
  15 MB of random init). Read with ``torch.load(weights_only=True)``; loaded as float32.
- ``toy-clip.json``: its record (:data:`RECORD_FILE`): the SHA-256 of the weights file, the
  architecture, the world and training configs, the command that made it and how the
  pretraining ended. A weights file whose digest differs from its record is refused.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

TOY_TAG = "toy"
"""The pretrained tag that names the toy CLIP (``--pretrained toy``)."""

TOY_ARCH = "xmr-tiny"
"""The one architecture the toy CLIP's weights fit."""

WEIGHTS_DIR = Path(__file__).parent / "weights"
WEIGHTS_FILE = WEIGHTS_DIR / "toy-clip.pt.gz"
RECORD_FILE = WEIGHTS_DIR / "toy-clip.json"

TOKEN_EMBEDDING = "token_embedding.weight"
"""The open_clip text tower's ``[vocab, width]`` table whose unused rows the file zeroes."""


def toy_tags(arch: str) -> list[str]:
    """xmr's own pretrained tags of the open_clip architecture ``arch``.

    >>> toy_tags("xmr-tiny"), toy_tags("ViT-B-32")
    (['toy'], [])
    """
    return [TOY_TAG] if arch == TOY_ARCH else []


def read_record(record: Path = RECORD_FILE) -> dict[str, Any]:
    """The toy CLIP's record (``toy-clip.json``).

    Raises:
        FileNotFoundError: no record, with the command that rebuilds it.
    """
    if not record.is_file():
        raise FileNotFoundError(
            f"the toy CLIP is not in this install ({record} is missing): rebuild it with "
            "`python ray_jobs/toy_clip.py`, or use --pretrained none"
        )
    return json.loads(record.read_text())


def file_digest(path: Path) -> str:
    """SHA-256 of ``path``'s bytes, hex."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def check_toy_weights(weights: Path = WEIGHTS_FILE, record: Path = RECORD_FILE) -> bytes:
    """Fail fast, before a model is built: the weights and their record are there and agree.
    Returns the weights file's bytes.

    Raises:
        FileNotFoundError: the weights or the record is missing.
        ValueError: the weights file's SHA-256 is not the record's.
    """
    expected = read_record(record)["sha256"]
    if not weights.is_file():
        raise FileNotFoundError(
            f"the toy CLIP's weights {weights} are missing: rebuild them with "
            "`python ray_jobs/toy_clip.py`, or use --pretrained none"
        )
    data = weights.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != expected:
        raise ValueError(
            f"{weights} has SHA-256 {digest[:12]}…, its record {record.name} says "
            f"{expected[:12]}…: the file was changed or is partial; rebuild it with "
            "`python ray_jobs/toy_clip.py`"
        )
    return data


def read_toy_state(weights: Path = WEIGHTS_FILE, record: Path = RECORD_FILE) -> dict[str, Any]:
    """The toy CLIP's state dict as float32 tensors, after :func:`check_toy_weights`."""
    raw = gzip.decompress(check_toy_weights(weights, record))
    state = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
    return {key: value.float() for key, value in state.items()}


def load_toy_weights(clip: nn.Module) -> None:
    """Load the toy CLIP's weights into an open_clip ``xmr-tiny`` model (every key, strict)."""
    clip.load_state_dict(read_toy_state())


def used_token_ids(token_ids: Iterable[torch.Tensor]) -> torch.Tensor:
    """The sorted distinct ids in ``token_ids`` (``[B, L]`` tokenised captions, 0 = padding)."""
    seen = torch.unique(torch.cat([ids.flatten() for ids in token_ids]))
    return seen[seen != 0]


def write_toy_weights(
    state: Mapping[str, torch.Tensor],
    kept_tokens: torch.Tensor,
    record: Mapping[str, Any],
    weights: Path = WEIGHTS_FILE,
    record_file: Path = RECORD_FILE,
) -> str:
    """Write ``state`` as the toy CLIP (float16, gzip; token-embedding rows outside
    ``kept_tokens`` zero) and ``record`` with the file's SHA-256, each atomically.

    ``kept_tokens``: ``[T]`` int64 ids of the tokens the pretraining captions use
    (:func:`used_token_ids`). The gzip header carries no time, so the same state gives the
    same bytes. Returns the SHA-256.
    """
    small = {key: value.detach().to("cpu", torch.float16).clone() for key, value in state.items()}
    table = small[TOKEN_EMBEDDING]
    keep = torch.zeros(table.shape[0], dtype=torch.bool)
    keep[kept_tokens] = True
    table[~keep] = 0
    buffer = io.BytesIO()
    torch.save(small, buffer)
    data = gzip.compress(buffer.getvalue(), compresslevel=9, mtime=0)
    digest = hashlib.sha256(data).hexdigest()
    _write_atomic(weights, data)
    full = {**record, "sha256": digest, "bytes": len(data), "tokens_kept": int(keep.sum())}
    _write_atomic(record_file, (json.dumps(full, indent=2, sort_keys=True) + "\n").encode())
    return digest


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.replace(tmp, path)
