"""Benchmark: fill backends against ToyWorld's true counterfactual renders (PSNR, SSIM, ms/image).

ToyWorld renders every test scene again without the removed classes, so a fill backend can be
scored against the image it should have produced. For each counterfactual of the test split the
source image's removed region (the union of the removed classes' boxes,
:func:`xmr.removal.planning.removal_mask`) is filled by each backend and compared with the render:

- PSNR (dB, peak 255, over all RGB values) inside the mask and over the whole image; an exact
  match would be ``inf``. Counterfactuals whose source already equals the render under the mask
  (the removed objects are hidden behind others, so any fill that copies its surroundings
  scores ``inf``) are skipped and counted.
- SSIM (Wang et al. 2004: 11 x 11 Gaussian window, sigma 1.5, per RGB channel, averaged; borders
  reflected where skimage crops them) over the whole image and averaged over the mask's pixels.
- Milliseconds per image of the fill call alone (image decoding and scoring excluded).

The world is generated with the packaged defaults (about 20 s) into ``--out-dir``, or a temporary
folder removed afterwards; an ``--out-dir`` that already holds a world is reused. Stable Diffusion
is opt-in (``--sd-model``): with the tiny random test pipeline it paints noise, so its figures
only time the plumbing. Run from the repository root with ``xmr`` importable:

    python bench/bench_fill_quality.py                        # every CPU backend, all 530
    python bench/bench_fill_quality.py --limit 50 --sd-model /path/to/sd2-inpainting
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np

from xmr.data import load_image, read_counterfactuals, read_toyworld
from xmr.removal.fill import CPU_FILLS
from xmr.removal.planning import removal_mask
from xmr.toyworld import generate

METRICS = ("psnr_mask", "psnr_image", "ssim_image", "ssim_mask")


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """PSNR in dB (peak 255) between two uint8 arrays of equal shape; ``inf`` when equal."""
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else float(10 * np.log10(255.0**2 / mse))


def ssim_map(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per-pixel SSIM of two ``[H, W, 3]`` uint8 images, averaged over channels: ``[H, W]``."""
    x, y = a.astype(np.float64), b.astype(np.float64)

    def blur(z: np.ndarray) -> np.ndarray:
        return cv2.GaussianBlur(z, (11, 11), 1.5)

    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    mx, my = blur(x), blur(y)
    vx, vy, cxy = blur(x * x) - mx * mx, blur(y * y) - my * my, blur(x * y) - mx * my
    ssim = (2 * mx * my + c1) * (2 * cxy + c2) / ((mx * mx + my * my + c1) * (vx + vy + c2))
    return ssim.mean(axis=2)


def scores(filled: np.ndarray, truth: np.ndarray, mask: np.ndarray) -> dict[str, float]:
    """The :data:`METRICS` of one filled image against its true counterfactual."""
    ssim = ssim_map(filled, truth)
    return {
        "psnr_mask": psnr(filled[mask], truth[mask]),
        "psnr_image": psnr(filled, truth),
        "ssim_image": float(ssim.mean()),
        "ssim_mask": float(ssim[mask].mean()),
    }


def sd_backend(model: str, steps: int, resolution: int) -> Callable:
    """A batch fill ``(images, masks, seeds, negative_prompts) -> images`` with Stable Diffusion."""
    from xmr.removal.sd_inpaint import StableDiffusionInpainter

    inpainter = StableDiffusionInpainter(model, steps=steps, resolution=resolution)
    inpainter.load()
    return inpainter.inpaint


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, help="world folder (kept; reused if it has one)")
    parser.add_argument("--seed", type=int, default=0, help="world seed")
    parser.add_argument("--limit", type=int, help="score only the first N counterfactuals")
    parser.add_argument("--sd-model", help="also score Stable Diffusion (hub id or local dir)")
    parser.add_argument("--sd-steps", type=int, default=25)
    parser.add_argument("--sd-resolution", type=int, default=512)
    parser.add_argument("--sd-batch", type=int, default=8, help="images per pipeline call")
    args = parser.parse_args()

    tmp = None if args.out_dir else Path(tempfile.mkdtemp(prefix="bench-fill-"))
    root = args.out_dir or tmp / "world"
    try:
        if not (root / "world.json").is_file():
            start = time.perf_counter()
            generate(root, seed=args.seed)
            print(f"generated {root} in {time.perf_counter() - start:.1f} s")
        records = {r.image_id: r for r in read_toyworld(root, "test")}
        counterfactuals = read_counterfactuals(root, "test")[: args.limit]

        items = []  # (source image, true render, mask, seed, negative prompt)
        unchanged = 0
        for cf in counterfactuals:
            record = records[cf.source_image_id]
            image = np.asarray(load_image(record.path))
            objects = [(o.category, o.bbox) for o in record.objects]
            mask = removal_mask(objects, cf.removed, record.width, record.height)
            truth = np.asarray(load_image(cf.path))
            if np.array_equal(image[mask], truth[mask]):  # removed objects fully hidden
                unchanged += 1
                continue
            items.append((image, truth, mask, cf.id, ", ".join(sorted(cf.removed))))

        results: dict[str, dict[str, list[float]]] = {}
        seconds: dict[str, float] = {}
        for name, fill in CPU_FILLS.items():
            rows = results[name] = {m: [] for m in METRICS}
            seconds[name] = 0.0
            for image, truth, mask, _, _ in items:
                start = time.perf_counter()
                filled = fill(image, mask)
                seconds[name] += time.perf_counter() - start
                for metric, value in scores(filled, truth, mask).items():
                    rows[metric].append(value)
        if args.sd_model:
            inpaint = sd_backend(args.sd_model, args.sd_steps, args.sd_resolution)
            rows = results["sd"] = {m: [] for m in METRICS}
            seconds["sd"] = 0.0
            for i in range(0, len(items), args.sd_batch):
                batch = items[i : i + args.sd_batch]
                images, truths, masks, seeds, negatives = map(list, zip(*batch, strict=True))
                start = time.perf_counter()
                filled = inpaint(images, masks, seeds, negatives)
                seconds["sd"] += time.perf_counter() - start
                for f, truth, mask in zip(filled, truths, masks, strict=True):
                    for metric, value in scores(f, truth, mask).items():
                        rows[metric].append(value)

        mask_share = np.mean([mask.mean() for _, _, mask, _, _ in items])
        print(
            f"\n{len(items)} counterfactuals of the test split ({unchanged} skipped: the source "
            f"already equals the render under the mask), removed region {100 * mask_share:.1f} % "
            "of the image on average\n"
        )
        print(
            "| backend | PSNR in mask (dB) mean / median | PSNR whole image (dB) mean / median "
            "| SSIM whole image mean | SSIM in mask mean | ms / image |"
        )
        print("|---|---:|---:|---:|---:|---:|")
        for name, rows in results.items():
            pm, pi = np.array(rows["psnr_mask"]), np.array(rows["psnr_image"])
            print(
                f"| {name} | {pm.mean():.2f} / {np.median(pm):.2f} "
                f"| {pi.mean():.2f} / {np.median(pi):.2f} "
                f"| {np.mean(rows['ssim_image']):.3f} | {np.mean(rows['ssim_mask']):.3f} "
                f"| {1000 * seconds[name] / len(items):.2f} |"
            )
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
