"""The ``sd`` fill backend: Stable Diffusion inpainting through diffusers.

The ODmAP paper fills removed regions with a learned inpainting model (§3.1) rather than a
constant, to avoid a distribution shift; Stable Diffusion 2 inpainting is our stand-in. It needs
its weights (about 5 GB, downloaded once into the Hugging Face cache, or any local diffusers
folder) and, at a usable speed, a GPU.

Each image is resized to ``resolution x resolution`` for the model and the result resized back;
only the pixels under the mask are taken from the model, all others are the input's exactly.
The prompt is empty: the surrounding image alone decides what is painted, and the negative prompt
(the removed class names) steers the model away from painting the removed objects back.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from xmr.pretrained import resolve_device
from xmr.removal.fill import check_fill_inputs

DEFAULT_SD_MODEL = "stabilityai/stable-diffusion-2-inpainting"
PROMPT = ""  # no content prompt: the context decides; see the module docstring
DTYPES = ("float16", "bfloat16", "float32")  # torch dtype names; torch is imported on use


def _resize(image: np.ndarray, width: int, height: int) -> np.ndarray:
    """Resize ``[h, w, C]`` or ``[h, w]`` to ``[height, width, ...]`` (area when shrinking)."""
    shrinking = width * height < image.shape[0] * image.shape[1]
    interpolation = cv2.INTER_AREA if shrinking else cv2.INTER_CUBIC
    return cv2.resize(image, (width, height), interpolation=interpolation)


def _resize_mask(mask: np.ndarray, size: int) -> np.ndarray:
    """``[h, w]`` bool to ``[size, size]`` bool, True where any of it overlaps a True pixel.

    Conservative where nearest-neighbour sampling would drop thin masks when shrinking (and at
    most one model pixel wider when growing); only the model's input sees this mask, the
    composite uses the original.
    """
    coverage = cv2.resize(mask.astype(np.float32), (size, size), interpolation=cv2.INTER_AREA)
    return coverage > 0


class StableDiffusionInpainter:
    """Batched Stable Diffusion inpainting with per-image seeds and negative prompts.

    Construction only stores settings; :meth:`load` (called by the first :meth:`inpaint` if not
    before) loads the pipeline.

    Args:
        model: a Hugging Face hub id (weights must be in the local cache or downloadable) or a
            local folder written by ``save_pretrained`` (with ``model_index.json``).
        device: torch device; ``"auto"`` is ``"cuda"`` when available, else ``"cpu"``.
        steps: denoising steps per image.
        guidance_scale: classifier-free guidance weight (> 1 enables the negative prompt).
        resolution: side of the square the model works at, pixels, a multiple of 8.
        dtype: ``"auto"`` (float16 on CUDA, float32 elsewhere), ``"float16"``, ``"bfloat16"`` or
            ``"float32"``.
    """

    def __init__(
        self,
        model: str = DEFAULT_SD_MODEL,
        *,
        device: str = "auto",
        steps: int = 25,
        guidance_scale: float = 7.5,
        resolution: int = 512,
        dtype: str = "auto",
    ) -> None:
        if steps < 1:
            raise ValueError(f"steps must be >= 1, got {steps}")
        if resolution < 8 or resolution % 8:
            raise ValueError(f"resolution must be a positive multiple of 8, got {resolution}")
        if dtype != "auto" and dtype not in DTYPES:
            raise ValueError(f"dtype must be 'auto' or one of {sorted(DTYPES)}, got {dtype!r}")
        import torch

        self.model = str(model)
        device = resolve_device(device)
        if dtype == "auto":
            dtype = "float16" if torch.device(device).type == "cuda" else "float32"
        self.device = device
        self.dtype = getattr(torch, dtype)
        self.steps = steps
        self.guidance_scale = guidance_scale
        self.resolution = resolution
        self.pipeline = None

    def load(self) -> None:
        """Load the pipeline onto :attr:`device` in :attr:`dtype` (no-op when loaded).

        The safety checker is whatever the model folder holds: Stable Diffusion 2 ships none.

        Raises:
            FileNotFoundError: ``model`` is neither a folder with ``model_index.json`` nor a hub
                id whose weights are cached or downloadable.
        """
        if self.pipeline is not None:
            return
        from diffusers import StableDiffusionInpaintPipeline

        how = (
            "download the weights first (e.g. `hf download "
            f"{DEFAULT_SD_MODEL}` on a machine with network access fills the Hugging Face cache) "
            "or pass a local folder written by `save_pretrained`"
        )
        local = Path(self.model)
        if local.is_dir():
            if not (local / "model_index.json").is_file():
                raise FileNotFoundError(
                    f"Stable Diffusion model folder {self.model} has no model_index.json: {how}"
                )
            # diffusers 0.42 names it `dtype`; `torch_dtype` still works but warns (deprecated).
            pipeline = StableDiffusionInpaintPipeline.from_pretrained(local, dtype=self.dtype)
        else:
            try:
                pipeline = StableDiffusionInpaintPipeline.from_pretrained(
                    self.model, dtype=self.dtype
                )
            except (OSError, ValueError) as exc:  # not cached and not downloadable, or a bad id
                raise FileNotFoundError(
                    f"cannot load Stable Diffusion inpainting model {self.model!r} (not a local "
                    f"folder; {exc}): {how}"
                ) from exc
        pipeline.set_progress_bar_config(disable=True)
        self.pipeline = pipeline.to(self.device)

    def inpaint(
        self,
        images: list[np.ndarray],
        masks: list[np.ndarray],
        seeds: list[int],
        negative_prompts: list[str],
        prompts: list[str] | None = None,
    ) -> list[np.ndarray]:
        """Fill ``masks[i]`` in ``images[i]``, all images in one pipeline call.

        Row ``i`` draws its noise from its own generator seeded with ``seeds[i]``, so its result
        does not depend on the other rows of the batch (up to floating-point differences of
        batched kernels).

        Args:
            images: ``[H_i, W_i, 3]`` uint8 RGB, any sizes.
            masks: ``[H_i, W_i]`` bool, True where pixels are removed. A model pixel is masked
                when any input pixel it covers is, so thin masks survive downscaling.
            seeds: one seed per image.
            negative_prompts: one per image, e.g. the removed class names ``"dog, frisbee"``.
            prompts: what to paint, one per image (BiAug: the attributive phrase); default the
                empty prompt, which lets the surrounding image decide (object removal).

        Returns:
            ``[H_i, W_i, 3]`` uint8 RGB per image: the model's pixels under ``masks[i]``,
            ``images[i]`` exactly elsewhere.

        Raises:
            ValueError: the lists differ in length, or an image/mask is malformed.
        """
        n = len(images)
        prompts = [PROMPT] * n if prompts is None else list(prompts)
        if not len(masks) == len(seeds) == len(negative_prompts) == len(prompts) == n:
            raise ValueError(
                f"images, masks, seeds, negative_prompts and prompts differ in length: {n}, "
                f"{len(masks)}, {len(seeds)}, {len(negative_prompts)}, {len(prompts)}"
            )
        for image, mask in zip(images, masks, strict=True):
            check_fill_inputs(image, mask)
        if n == 0:
            return []
        self.load()
        from PIL import Image

        size = self.resolution
        model_images = [Image.fromarray(_resize(image, size, size)) for image in images]
        model_masks = [Image.fromarray(_resize_mask(mask, size) * np.uint8(255)) for mask in masks]
        import torch

        generators = [torch.Generator(self.device).manual_seed(int(seed)) for seed in seeds]
        generated = self.pipeline(
            prompt=prompts,
            negative_prompt=list(negative_prompts),
            image=model_images,
            mask_image=model_masks,
            height=size,
            width=size,
            num_inference_steps=self.steps,
            guidance_scale=self.guidance_scale,
            generator=generators,
            output_type="np",
        ).images  # [n, size, size, 3] float in [0, 1]
        results = []
        for image, mask, pixels in zip(images, masks, generated, strict=True):
            pixels = np.clip(np.rint(pixels * 255), 0, 255).astype(np.uint8)
            pixels = _resize(pixels, image.shape[1], image.shape[0])
            out = image.copy()
            out[mask] = pixels[mask]
            results.append(out)
        return results
