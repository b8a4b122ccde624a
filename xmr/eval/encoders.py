"""The encoding stage: images and texts to L2-normalised embeddings, batch by batch.

A plain :class:`~xmr.pipeline.Stage`; ``xmr.pipeline.ray_executor.StagePool`` runs it in Ray
actors (one model per actor, CPU or GPU), ``xmr.pipeline.run_local`` in this process with a
model already in memory (evaluation inside a training worker). A row that cannot be encoded
(missing or corrupt image) gets a zero embedding and its reason in the ``error`` column.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import numpy as np
import torch
from PIL import Image

from xmr.data.errors import DataError
from xmr.eval.protocol import ImageQuery
from xmr.models import ModelSpec, RetrievalModel, create_model
from xmr.pipeline.stage import Batch, Resources, Stage
from xmr.storage import as_path


class EncodeQueries(Stage):
    """Images and texts to embeddings with one model, in one pass: a pool of actors builds its
    model once for both.

    A row is an image (``path`` str, ``inpaint`` a JSON list of boxes or "", ``crop`` a JSON
    box or "", ``text`` "") or a text (``text`` str, ``path`` ""). Output: ``embedding``
    [B, D] float32, ``error`` ("" when fine; an image that cannot be read gets a zero
    embedding and the reason).

    Images are read and preprocessed (decode, resize, normalise: the work that sets a GPU
    actor's pace) on as many threads as the stage has cores (PIL and torch let go of the GIL
    for it), in row order; on a GPU, where the model needs no CPU threads of its own, each
    image's torch operations keep to one.
    """

    name = "encode"

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
        self._threads: ThreadPoolExecutor | None = None

    def setup(self) -> None:
        """Build the model on this worker's cores; on a GPU, then encode a warm-up batch and
        start the threads that prepare the images."""
        if self.model is not None:
            return
        cores = max(1, int(self.resources.cpus))
        torch.set_num_threads(cores)
        self.model = create_model(self.spec, device=self.device, seed=self.seed)
        if self.device.startswith("cuda"):
            self._warm_up()
            torch.set_num_threads(1)  # the model runs on the GPU: the cores go to the images
        if cores > 1:
            self._threads = ThreadPoolExecutor(cores, thread_name_prefix="encode-images")

    def teardown(self) -> None:
        """Stop the image threads."""
        if self._threads is not None:
            self._threads.shutdown()
            self._threads = None

    def _warm_up(self) -> None:
        """Encode one batch of blank images and one of texts, so that a GPU's first kernels
        (cuBLAS handles, autotuning) are chosen during setup, not in the first real batch."""
        blank = self.model.preprocess(Image.new("RGB", (224, 224)))
        self.model.encode_images(blank.unsqueeze(0).expand(self.batch_size, -1, -1, -1))
        self.model.encode_texts(["a photo"] * self.batch_size)
        torch.cuda.synchronize()

    def process(self, batch: Batch) -> Batch:
        paths = [str(p) for p in batch["path"]]
        embeddings = np.zeros((len(paths), self.model.embed_dim), dtype=np.float32)
        errors = [""] * len(paths)
        images = [i for i, path in enumerate(paths) if path]
        texts = [i for i, path in enumerate(paths) if not path]
        queries = []
        for i in images:
            boxes, crop = str(batch["inpaint"][i]), str(batch["crop"][i])
            queries.append(
                ImageQuery(
                    as_path(paths[i]),  # a file, or an object in a bucket (s3://…)
                    tuple(map(tuple, json.loads(boxes))) if boxes else (),
                    tuple(json.loads(crop)) if crop else None,
                )
            )
        mapped = self._threads.map if self._threads is not None else map
        tensors: list[torch.Tensor] = []
        readable: list[int] = []
        prepare = partial(prepare_image, self.model)
        for i, pixels in zip(images, mapped(prepare, queries), strict=True):
            if isinstance(pixels, str):
                errors[i] = pixels
            else:
                tensors.append(pixels)
                readable.append(i)
        if readable:
            embeddings[readable] = self.model.encode_images(torch.stack(tensors)).cpu().numpy()
        if texts:
            encoded = self.model.encode_texts([str(batch["text"][i]) for i in texts])
            embeddings[texts] = encoded.cpu().numpy()
        return {"row": batch["row"], "embedding": embeddings, "error": np.array(errors, object)}


def prepare_image(model: RetrievalModel, query: ImageQuery) -> torch.Tensor | str:
    """``model``'s input ``[3, S, S]`` for ``query``'s image (read, inpainted or cropped,
    preprocessed), or why it cannot be read: an encoder's per-image CPU work."""
    try:
        return model.preprocess(query.render())
    except (DataError, OSError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
