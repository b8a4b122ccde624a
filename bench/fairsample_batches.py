"""What FairSample (gender paper §3.1, eq. 6) changes in a world's training batches.

FairSample gives a gender-neutral caption's text->image loss negatives drawn half from the
batch's male images and half from its female ones, and none from its neutral images. Over
random batches of the training pairs (the loader's global shuffle), this prints how many
captions it applies to, the gender mix of the negatives plain training gives them, the weight
FairSample puts on each male and female negative relative to plain sampling (1 = no change),
and the share of negatives it leaves out (the neutral images).

    python bench/fairsample_batches.py --data WORLD [--batch-size 128] [--batches 2000]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from xmr.data.errors import DataError
from xmr.data.registry import read_dataset
from xmr.train.data import original_pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="a ToyWorld (or COCO) folder")
    parser.add_argument("--dataset", default="toyworld")
    parser.add_argument("--split", default="train")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--batches", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    try:
        records = read_dataset(args.dataset, args.data, args.split)
    except DataError as exc:
        parser.error(f"--data: {exc}")
    pairs = pd.DataFrame(original_pairs(records))
    images = pairs.drop_duplicates("image_id").image_gender.value_counts()
    gender = pairs.image_gender.to_numpy()
    neutral = pairs.caption_neutral.to_numpy()
    print(f"{args.data}: {len(pairs)} pairs of {images.sum()} images "
          f"({images.get('male', 0)} male, {images.get('female', 0)} female, "
          f"{images.get('neutral', 0)} neutral)")  # fmt: skip
    print(f"gender-neutral captions (FairSample applies): {neutral.mean():.3f} of the pairs; "
          f"{(neutral & (gender != 'neutral')).sum() / neutral.sum():.3f} of them describe a "
          "gendered image")  # fmt: skip

    rng = np.random.default_rng(args.seed)
    male_share, weight_male, weight_female, left_out = [], [], [], []
    for _ in range(args.batches):
        batch = gender[rng.choice(len(pairs), args.batch_size, replace=False)]
        males, females = int((batch == "male").sum()), int((batch == "female").sum())
        if not males or not females:
            continue
        male_share.append(males / (males + females))
        weight_male.append((males + females) / (2 * males))  # ½ over the males vs uniform
        weight_female.append((males + females) / (2 * females))
        left_out.append(float((batch == "neutral").mean()))
    low, high = np.percentile(male_share, [5, 95])
    print(f"over {len(male_share)} batches of {args.batch_size}:")
    print(f"  male share of a batch's gendered images (plain negatives): {np.mean(male_share):.3f}"
          f" (5-95 %: {low:.3f}-{high:.3f}; FairSample: 0.5)")  # fmt: skip
    print(f"  FairSample's weight on a male / female negative relative to plain: "
          f"{np.mean(weight_male):.2f} / {np.mean(weight_female):.2f}")  # fmt: skip
    print(f"  negatives FairSample leaves out (neutral images): {np.mean(left_out):.3f}")


if __name__ == "__main__":
    main()
