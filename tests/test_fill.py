"""Fill backends: CPU fills on synthetic and real images; Stable Diffusion on a tiny pipeline."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
from tiny_sd import build_tiny_sd_inpainting

from xmr.data import load_image, read_coco
from xmr.removal.fill import (
    BLUR_SIGMA_FRACTION,
    CPU_FILLS,
    FILL_METHODS,
    fill_blur,
    fill_mean,
    fill_zero,
)
from xmr.removal.planning import removal_mask
from xmr.removal.sd_inpaint import StableDiffusionInpainter

FILLS = sorted(CPU_FILLS)


def random_image(height: int = 48, width: int = 64, seed: int = 0) -> np.ndarray:
    """``[height, width, 3]`` uint8 noise."""
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def irregular_mask(height: int = 48, width: int = 64) -> np.ndarray:
    """``[height, width]`` bool: two overlapping boxes (one touching the border), a stray pixel."""
    mask = np.zeros((height, width), dtype=bool)
    mask[10:25, 12:30] = True
    mask[20:height, 25:40] = True
    mask[3, 60] = True
    return mask


def test_registry_names() -> None:
    assert set(CPU_FILLS) == {"telea", "ns", "zero", "mean", "blur"}
    assert FILL_METHODS[:-1] == tuple(CPU_FILLS)
    assert FILL_METHODS[-1] == "sd"


def test_fill_module_needs_neither_torch_nor_diffusers() -> None:
    code = "import sys, xmr.removal.fill; print(sorted({'torch', 'diffusers'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("name", FILLS)
def test_fill_keeps_pixels_outside_the_mask(name: str) -> None:
    image, mask = random_image(), irregular_mask()
    before = image.copy()
    out = CPU_FILLS[name](image, mask)
    assert out.shape == image.shape and out.dtype == np.uint8
    np.testing.assert_array_equal(out[~mask], image[~mask])
    np.testing.assert_array_equal(image, before)  # the input is not written to
    assert (out[mask] != image[mask]).any()


@pytest.mark.parametrize("name", FILLS)
def test_empty_mask_returns_a_copy(name: str) -> None:
    image = random_image()
    out = CPU_FILLS[name](image, np.zeros(image.shape[:2], dtype=bool))
    np.testing.assert_array_equal(out, image)
    assert not np.shares_memory(out, image)


@pytest.mark.parametrize("name", FILLS)
@pytest.mark.parametrize(
    ("image", "mask", "match"),
    [
        (random_image().astype(np.float32), irregular_mask(), "uint8 image"),
        (random_image()[..., 0], irregular_mask(), "uint8 image"),
        (np.zeros((48, 64, 4), np.uint8), irregular_mask(), "uint8 image"),
        (random_image(), irregular_mask(48, 63), "does not match"),
        (random_image(), irregular_mask().astype(np.uint8), "bool mask"),
    ],
)
def test_fill_rejects_malformed_inputs(
    name: str, image: np.ndarray, mask: np.ndarray, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        CPU_FILLS[name](image, mask)


def test_zero_fill_is_black() -> None:
    image, mask = random_image(), irregular_mask()
    assert (fill_zero(image, mask)[mask] == 0).all()


def test_mean_fill_is_the_mean_of_the_removed_region() -> None:
    image, mask = random_image(), irregular_mask()
    expected = [round(image[..., c][mask].sum() / mask.sum()) for c in range(3)]
    out = fill_mean(image, mask)
    assert (out[mask] == np.array(expected, dtype=np.uint8)).all()


def test_blur_fill_pastes_the_image_blur_under_the_mask() -> None:
    image, mask = random_image(), irregular_mask()
    sigma = BLUR_SIGMA_FRACTION * 64
    blurred = cv2.GaussianBlur(image.astype(np.float32), (0, 0), sigmaX=sigma, sigmaY=sigma)
    out = fill_blur(image, mask)
    assert np.abs(out[mask].astype(np.float32) - blurred[mask]).max() <= 0.5
    flat = np.full_like(image, 77)  # a flat image blurs to itself
    np.testing.assert_array_equal(fill_blur(flat, mask), flat)


def test_blur_fill_erases_an_object() -> None:
    image = np.zeros((128, 128, 3), dtype=np.uint8)
    image[50:70, 40:60] = 255  # a white 20 px object on black
    mask = np.zeros((128, 128), dtype=bool)
    mask[48:72, 38:62] = True
    out = fill_blur(image, mask)
    assert out[mask].max() < 128  # at sigma 12.8 px no pixel stays near white
    assert out[mask].std() < 0.25 * image[mask].std()


@pytest.mark.parametrize("name", ["telea", "ns"])
def test_inpainting_continues_a_smooth_image(name: str) -> None:
    ramp = np.linspace(0, 255, 96, dtype=np.float32)
    image = np.stack(np.broadcast_arrays(ramp[None, :], ramp[:, None], 128 + 0 * ramp[None, :]), -1)
    image = np.rint(image).astype(np.uint8)  # [96, 96, 3] gradients
    mask = np.zeros((96, 96), dtype=bool)
    mask[30:60, 35:55] = True
    error = np.abs(CPU_FILLS[name](image, mask)[mask].astype(float) - image[mask]).mean()
    zero_error = np.abs(image[mask].astype(float)).mean()
    assert error < 0.1 * zero_error


def seam(image: np.ndarray, mask: np.ndarray) -> float:
    """Mean absolute step (grey levels, summed over RGB) between neighbours across the mask edge."""
    pixels = image.astype(np.float32)
    rows = np.abs(np.diff(pixels, axis=0)).sum(-1)[mask[1:] != mask[:-1]]
    cols = np.abs(np.diff(pixels, axis=1)).sum(-1)[mask[:, 1:] != mask[:, :-1]]
    return float(np.concatenate([rows, cols]).mean())


@pytest.mark.parametrize("name", ["telea", "ns"])
def test_inpainting_a_real_coco_object(coco_mini: Path, name: str) -> None:
    record = next(
        r for r in read_coco(coco_mini, "train") if any(o.category == "dog" for o in r.objects)
    )
    image = np.asarray(load_image(record.path))
    objects = [(o.category, o.bbox) for o in record.objects]
    mask = removal_mask(objects, {"dog"}, record.width, record.height)
    assert 0 < mask.mean() < 0.5
    out = CPU_FILLS[name](image, mask)
    np.testing.assert_array_equal(out[~mask], image[~mask])
    ring = cv2.dilate(mask.astype(np.uint8), np.ones((9, 9), np.uint8)).astype(bool) & ~mask
    # The fill continues its surroundings: similar colour, a far smaller step at the edge than
    # the constant fills leave.
    assert np.abs(out[mask].mean(0) - image[ring].mean(0)).max() < 20
    assert seam(out, mask) < 0.5 * seam(fill_zero(image, mask), mask)
    assert seam(out, mask) < 0.5 * seam(fill_mean(image, mask), mask)


# Stable Diffusion on a tiny random-weight pipeline: tests the plumbing, not the painting.


@pytest.fixture(scope="module")
def tiny_sd_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_sd_inpainting(tmp_path_factory.mktemp("tiny-sd"))


@pytest.fixture(scope="module")
def inpainter(tiny_sd_dir: Path) -> StableDiffusionInpainter:
    sd = StableDiffusionInpainter(str(tiny_sd_dir), resolution=64, steps=2)
    sd.load()
    return sd


@pytest.fixture(scope="module")
def sd_inputs() -> tuple[list[np.ndarray], list[np.ndarray]]:
    """An 80 x 96 and a 64 x 64 image, each with a mask."""
    images = [random_image(80, 96, seed=1), random_image(64, 64, seed=2)]
    masks = [np.zeros((80, 96), dtype=bool), np.zeros((64, 64), dtype=bool)]
    masks[0][10:40, 20:60] = True
    masks[1][30:50, 5:20] = True
    return images, masks


def test_sd_defaults_on_cpu() -> None:
    sd = StableDiffusionInpainter()
    assert sd.model == "stabilityai/stable-diffusion-2-inpainting"
    assert (sd.device, str(sd.dtype), sd.pipeline) == ("cpu", "torch.float32", None)


def test_sd_inpaints_inside_the_mask_only(inpainter, sd_inputs) -> None:
    images, masks = sd_inputs
    out = inpainter.inpaint(images, masks, [1, 2], ["dog", "cat, frisbee"])
    assert inpainter.pipeline.safety_checker is None
    assert len(out) == 2
    for image, mask, result in zip(images, masks, out, strict=True):
        assert result.shape == image.shape and result.dtype == np.uint8
        np.testing.assert_array_equal(result[~mask], image[~mask])
        assert (result[mask] != image[mask]).mean() > 0.9
    assert inpainter.inpaint([], [], [], []) == []


@pytest.mark.slow
def test_sd_is_deterministic_per_seed(inpainter, sd_inputs) -> None:
    images, masks = sd_inputs
    first = inpainter.inpaint(images, masks, [1, 2], ["dog", "cat"])
    again = inpainter.inpaint(images, masks, [1, 2], ["dog", "cat"])
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a, b)
    other = inpainter.inpaint(images[:1], masks[:1], [3], ["dog"])[0]
    assert (other[masks[0]] != first[0][masks[0]]).any()


@pytest.mark.slow
def test_sd_rows_do_not_depend_on_their_batch(inpainter, sd_inputs) -> None:
    images, masks = sd_inputs
    batch = inpainter.inpaint(images, masks, [1, 2], ["dog", "cat"])
    for i in range(2):
        alone = inpainter.inpaint([images[i]], [masks[i]], [[1, 2][i]], [["dog", "cat"][i]])[0]
        # Batched CPU kernels differ in the last float bits (~4e-6 of the [0, 1] output), which
        # can flip a rounding: allow one grey level.
        assert np.abs(batch[i].astype(int) - alone.astype(int)).max() <= 1


def test_sd_rejects_mismatched_inputs(inpainter, sd_inputs) -> None:
    images, masks = sd_inputs
    with pytest.raises(ValueError, match="differ in length"):
        inpainter.inpaint(images, masks, [1], ["dog", "cat"])
    with pytest.raises(ValueError, match="does not match"):
        inpainter.inpaint(images, masks[::-1], [1, 2], ["dog", "cat"])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"resolution": 100}, "multiple of 8"), ({"steps": 0}, "steps"), ({"dtype": "fp8"}, "dtype")],
)
def test_sd_rejects_bad_settings(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        StableDiffusionInpainter(**kwargs)


def test_sd_missing_model_is_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    with pytest.raises(FileNotFoundError, match=r"no-such-model.*download the weights"):
        StableDiffusionInpainter(str(missing)).load()
    with pytest.raises(FileNotFoundError, match=r"model_index\.json"):
        StableDiffusionInpainter(str(tmp_path)).load()
