"""Encoding stages: images and texts to L2-normalised embeddings, batch by batch.

Plain :class:`~xmr.pipeline.Stage` classes; ``xmr.pipeline.ray_executor`` runs them as Ray Data
actor pools (one model per actor, CPU or GPU), ``xmr.pipeline.run_local`` in this process with a
model already in memory (evaluation inside a training worker). A row that cannot be encoded
(missing or corrupt image) gets a zero embedding and its reason in the ``error`` column.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from xmr.data.errors import DataError
from xmr.eval.protocol import ImageQuery
from xmr.models import ModelSpec, RetrievalModel, create_model
from xmr.pipeline.stage import Batch, Resources, Stage


class _EncodeStage(Stage):
    def __init__(
        self,
        spec: ModelSpec,
        device: str,
        resources: Resources,
        batch_size: int,
        seed: int,
        model: RetrievalModel | None = None,
    ) -> None:
        """``model``: encode with this one (already on its device) instead of building ``spec``."""
        super().__init__(resources, batch_size)
        self.spec = spec
        self.device = device
        self.seed = seed
        self.model = model

    def setup(self) -> None:
        if self.model is not None:
            return
        if self.device == "cpu":
            torch.set_num_threads(max(1, int(self.resources.cpus)))
        self.model = create_model(self.spec, device=self.device, seed=self.seed)


class EncodeImages(_EncodeStage):
    """``path`` (str) [+ ``inpaint`` (JSON list of boxes)] -> ``embedding`` [B, D], ``error``."""

    name = "encode_images"

    def process(self, batch: Batch) -> Batch:
        paths = batch["path"]
        inpaint = batch["inpaint"] if "inpaint" in batch else [""] * len(paths)
        tensors: list[torch.Tensor] = []
        ok: list[int] = []
        errors: list[str] = []
        for i, (path, boxes) in enumerate(zip(paths, inpaint, strict=True)):
            query = ImageQuery(Path(path), tuple(map(tuple, json.loads(boxes))) if boxes else ())
            try:
                tensors.append(self.model.preprocess(query.render()))
                ok.append(i)
                errors.append("")
            except (DataError, OSError, ValueError) as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
        embeddings = np.zeros((len(paths), self.model.embed_dim), dtype=np.float32)
        if ok:
            embeddings[ok] = self.model.encode_images(torch.stack(tensors)).cpu().numpy()
        return {"row": batch["row"], "embedding": embeddings, "error": np.array(errors, object)}


class EncodeTexts(_EncodeStage):
    """``text`` (str) -> ``embedding`` [B, D]."""

    name = "encode_texts"

    def process(self, batch: Batch) -> Batch:
        texts = [str(t) for t in batch["text"]]
        embeddings = self.model.encode_texts(texts).cpu().numpy()
        return {"row": batch["row"], "embedding": embeddings}
