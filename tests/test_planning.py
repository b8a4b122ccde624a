"""Removal planning (odmap §3.1): hand-computed cases for every branch of the contract.

Most cases use a 100 x 100 image, so an area of N pixels is N / 10000 of the image.
"""

from __future__ import annotations

import numpy as np
import pytest

from xmr.removal import plan_removals
from xmr.removal.planning import class_masks, pixel_box, removal_mask

W = H = 100


def test_single_class_removals_of_disjoint_objects() -> None:
    objects = [("person", [0, 0, 20, 20]), ("horse", [50, 50, 20, 20])]
    assert plan_removals(objects, W, H) == [("horse",), ("person",)]


def test_object_mostly_inside_another_is_removed_with_it() -> None:
    # tie (100 px) lies wholly inside person (2500 px): removing person takes the tie too;
    # removing the tie alone hides 100 / 2500 = 4% of the person, so it is a plan of its own.
    objects = [
        ("person", [0, 0, 50, 50]),
        ("tie", [10, 10, 10, 10]),
        ("dog", [60, 60, 20, 20]),
    ]
    assert plan_removals(objects, W, H) == [("dog",), ("person", "tie"), ("tie",)]


def test_alpha1_rejects_a_removal_that_hides_much_of_a_kept_class() -> None:
    # a: 30x10 = 300 px, b: 20x10 = 200 px, overlap 10x10 = 100 px.
    # Removing a hides 100/200 = 50% >= 40% of b (and 50% <= 80%, so b does not go with it).
    # Removing b hides 100/300 = 33% < 40% of a.
    objects = [("a", [0, 0, 30, 10]), ("b", [20, 0, 20, 10])]
    assert plan_removals(objects, W, H) == [("b",)]


def test_alpha3_rejects_a_removal_covering_most_of_the_image() -> None:
    objects = [("big", [0, 0, 80, 90]), ("small", [90, 90, 5, 5])]  # big covers 72%
    assert plan_removals(objects, W, H) == [("small",)]


def test_alpha3_bounds_the_union_of_all_removed_classes() -> None:
    # a covers 69% of the image; b (10x100) is 90% under a, so it goes with a, and the removed
    # region grows to 70x100 = 70%: not < alpha3. The paper's pseudo-code (alpha3 on mask_q
    # alone) would accept {a, b}.
    objects = [("a", [0, 0, 69, 100]), ("b", [60, 0, 10, 100]), ("c", [90, 90, 5, 5])]
    assert plan_removals(objects, W, H) == [("b",), ("c",)]


def test_removing_every_class_is_not_a_plan() -> None:
    objects = [("a", [0, 0, 20, 20]), ("b", [0, 0, 20, 20])]
    assert plan_removals(objects, W, H) == []


def test_kept_classes_are_checked_against_the_union_of_removed_masks() -> None:
    # q = a takes b along (90% of b is under a); c lies wholly under the part of b outside a.
    # a alone hides none of c, the union hides all of it: {a, b} is rejected (the paper's
    # pseudo-code would accept it). q = b takes c along and hides 45% of a: rejected too.
    objects = [("a", [0, 0, 20, 10]), ("b", [11, 0, 10, 10]), ("c", [20, 0, 1, 10])]
    assert plan_removals(objects, W, H) == [("c",)]


@pytest.mark.parametrize(
    "objects",
    [
        [],
        [("person", [0, 0, 10, 10])],
        [("person", [0, 0, 10, 10]), ("person", [50, 50, 10, 10])],
        [("person", [0, 0, 10, 10]), ("dog", [200, 200, 10, 10])],  # dog outside the image
        [("person", [0, 0, 10, 10]), ("dog", [5, 5, 0, 10])],  # zero-area dog
    ],
)
def test_fewer_than_two_classes_give_no_plan(objects: list) -> None:
    assert plan_removals(objects, W, H) == []


def test_boxes_are_clipped_to_the_image() -> None:
    assert pixel_box([-10, -10, 30, 30], W, H) == (0, 0, 20, 20)
    assert pixel_box([90, 95, 50, 50], W, H) == (90, 95, 100, 100)
    assert pixel_box([120, 0, 10, 10], W, H) is None
    assert pixel_box([-20, 0, 10, 10], W, H) is None
    # Clipped areas are what the thresholds see: dog's visible part (10x10 = 100 px) lies
    # wholly under person, so dog goes with person (only 10% of the unclipped 1000-px box).
    objects = [("person", [0, 0, 60, 60]), ("dog", [-90, 0, 100, 10]), ("cat", [80, 80, 5, 5])]
    assert class_masks(objects, W, H)["dog"].sum() == 100
    assert plan_removals(objects, W, H) == [("cat",), ("dog",), ("dog", "person")]


def test_zero_area_boxes_are_ignored() -> None:
    assert pixel_box([2.5, 0, 0, 3], W, H) is None  # would be a 1-px column by floor/ceil
    assert pixel_box([2, 2, 5, 0], W, H) is None
    objects = [("a", [0, 0, 10, 10]), ("b", [50, 50, 0, 0]), ("c", [50, 50, 10, 10])]
    assert set(class_masks(objects, W, H)) == {"a", "c"}
    assert plan_removals(objects, W, H) == [("a",), ("c",)]


def test_fractional_coordinates_round_outwards() -> None:
    assert pixel_box([1.5, 2.2, 3.1, 0.5], W, H) == (1, 2, 5, 3)
    mask = class_masks([("a", [1.5, 2.2, 3.1, 0.5])], 8, 4)["a"]
    expected = np.zeros((4, 8), dtype=bool)
    expected[2, 1:5] = True
    np.testing.assert_array_equal(mask, expected)
    # b = [9.5, 0, 10, 10] covers columns 9..19 (11x10 = 110 px); a covers columns 0..9, so
    # the overlap is one column: 10/110 < alpha1 and 10/100 < alpha1.
    objects = [("a", [0, 0, 10, 10]), ("b", [9.5, 0, 10, 10])]
    assert class_masks(objects, W, H)["b"].sum() == 110
    assert plan_removals(objects, W, H) == [("a",), ("b",)]


def test_duplicate_plans_are_deduplicated() -> None:
    # a and b share a box: q = a and q = b both give R = {a, b}.
    objects = [("a", [0, 0, 20, 20]), ("b", [0, 0, 20, 20]), ("c", [50, 50, 10, 10])]
    assert plan_removals(objects, W, H) == [("a", "b"), ("c",)]


def test_output_is_sorted_and_plans_are_sorted_tuples() -> None:
    objects = [
        ("zebra", [0, 0, 30, 30]),
        ("apple", [5, 5, 5, 5]),
        ("mouse", [60, 60, 10, 10]),
    ]
    plans = plan_removals(objects, W, H)
    assert plans == [("apple",), ("apple", "zebra"), ("mouse",)]
    assert plans == sorted(plans)


def test_thresholds_are_strict() -> None:
    # alpha1: removing a hides exactly 40/100 of b (and vice versa): rejected at 0.4.
    objects = [("a", [0, 0, 10, 10]), ("b", [6, 0, 10, 10])]
    assert plan_removals(objects, W, H, alpha1=0.4) == []
    assert plan_removals(objects, W, H, alpha1=0.41) == [("a",), ("b",)]
    # alpha2: exactly 80/100 of b under a is not "> 0.8": b stays, and then fails alpha1.
    objects = [("a", [0, 0, 50, 10]), ("b", [42, 0, 10, 10]), ("c", [90, 90, 5, 5])]
    assert plan_removals(objects, W, H, alpha2=0.8) == [("b",), ("c",)]
    assert plan_removals(objects, W, H, alpha2=0.79) == [("a", "b"), ("b",), ("c",)]
    # alpha3: a removed region of exactly 70% is rejected.
    objects = [("a", [0, 0, 70, 100]), ("c", [90, 90, 5, 5])]
    assert plan_removals(objects, W, H, alpha3=0.7) == [("c",)]
    assert plan_removals(objects, W, H, alpha3=0.71) == [("a",), ("c",)]


def test_alpha_one_is_allowed() -> None:
    objects = [("a", [0, 0, 10, 10]), ("b", [0, 0, 10, 10])]
    # alpha2 = 1: nothing is ever > 1, so a and b are planned alone, and each hides 100% of
    # the other: rejected by alpha1 = 1 (not < 1) too.
    assert plan_removals(objects, W, H, alpha2=1.0, alpha1=1.0) == []


def test_removal_mask_is_the_union_of_the_classes_boxes() -> None:
    objects = [("a", [0, 0, 4, 2]), ("a", [6, 3, 2.5, 1]), ("b", [1, 1, 2, 2])]
    mask = removal_mask(objects, ["a"], 10, 5)
    expected = np.zeros((5, 10), dtype=bool)
    expected[0:2, 0:4] = True
    expected[3:4, 6:9] = True
    np.testing.assert_array_equal(mask, expected)
    both = removal_mask(objects, {"a", "b"}, 10, 5)
    masks = class_masks(objects, 10, 5)
    np.testing.assert_array_equal(both, masks["a"] | masks["b"])
    assert not removal_mask(objects, ["zebra"], 10, 5).any()
    assert mask.shape == (5, 10) and mask.dtype == bool
    with pytest.raises(TypeError, match="collection of class names"):
        removal_mask(objects, "a", 10, 5)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"width": 0}, "image size"),
        ({"height": -3}, "image size"),
        ({"alpha1": 0.0}, "alpha1"),
        ({"alpha2": 1.5}, "alpha2"),
        ({"alpha3": -0.1}, "alpha3"),
        ({"objects": [("a", [0, 0, 1])]}, "4 numbers"),
        ({"objects": [("a", [0, 0, 1, "x"])]}, "4 numbers"),
        ({"objects": [("a", [0, 0, -1, 2])]}, "w, h >= 0"),
        ({"objects": [("a", [0, float("nan"), 1, 2])]}, "finite"),
    ],
)
def test_invalid_input_raises(kwargs: dict, message: str) -> None:
    args = {"objects": [("a", [0, 0, 5, 5]), ("b", [6, 6, 2, 2])], "width": W, "height": H}
    with pytest.raises(ValueError, match=message):
        plan_removals(**(args | kwargs))


def _reference(objects: list, width: int, height: int, a1: float, a2: float, a3: float) -> list:
    """The contract, written directly on full-resolution masks."""
    masks = class_masks(objects, width, height)
    if len(masks) < 2:
        return []
    plans = set()
    for q in masks:
        group = {q} | {
            g for g in masks if g != q and (masks[q] & masks[g]).sum() / masks[g].sum() > a2
        }
        kept = [k for k in masks if k not in group]
        region = np.any([masks[r] for r in group], axis=0)
        if not kept or region.sum() / (width * height) >= a3:
            continue
        if all((region & masks[k]).sum() / masks[k].sum() < a1 for k in kept):
            plans.add(tuple(sorted(group)))
    return sorted(plans)


def _pseudo_code(objects: list, width: int, height: int, a1: float, a2: float, a3: float):
    """Appendix C's loop (typos fixed): single-class and multi-class plans, in two sets."""
    masks = class_masks(objects, width, height)
    single, multi = set(), set()
    if len(masks) < 2:
        return single, multi
    for q, mask_q in masks.items():
        if mask_q.sum() / mask_q.size > a3:
            continue
        others = [g for g in masks if g != q]
        overlaps = np.array([(mask_q & masks[g]).sum() / masks[g].sum() for g in others])
        if np.all(overlaps < a1):
            single.add((q,))
        elif np.any(overlaps > a2):
            multi.add(
                tuple(sorted([q] + [g for g, o in zip(others, overlaps, strict=True) if o > a2]))
            )
    return single, multi


def _random_scene(rng: np.random.Generator) -> tuple[list, int, int]:
    width, height = int(rng.integers(5, 40)), int(rng.integers(5, 40))
    objects = [
        (
            f"c{rng.integers(5)}",
            [
                float(rng.uniform(-5, width)),
                float(rng.uniform(-5, height)),
                float(rng.uniform(0, width)),
                float(rng.uniform(0, height)),
            ],
        )
        for _ in range(int(rng.integers(1, 9)))
    ]
    return objects, width, height


def test_matches_full_resolution_reference_on_random_scenes() -> None:
    rng = np.random.default_rng(0)
    for _ in range(300):
        objects, width, height = _random_scene(rng)
        alphas = [float(a) for a in rng.uniform(0.05, 1.0, 3)]
        assert plan_removals(objects, width, height, *alphas) == _reference(
            objects, width, height, *alphas
        )


def test_agrees_with_the_paper_pseudo_code_where_the_contract_does() -> None:
    # Single-class plans coincide (up to the alpha3 boundary, avoided with alpha3 = 0.7 on
    # random fractional boxes); every multi-class plan of the contract is a pseudo-code plan,
    # which also accepts multi-class removals that hide kept classes or cover too much.
    rng = np.random.default_rng(1)
    for _ in range(300):
        objects, width, height = _random_scene(rng)
        plans = plan_removals(objects, width, height)
        single, multi = _pseudo_code(objects, width, height, 0.4, 0.8, 0.7)
        assert {p for p in plans if len(p) == 1} == single
        assert {p for p in plans if len(p) > 1} <= multi
