"""What a paired difference says: B better, A better, or ``≈`` (the test set cannot tell).

A difference ``B − A`` with a paired bootstrap interval (:mod:`xmr.compare.bootstrap`) is
called when its interval excludes 0 (significant at ``1 − confidence``, two-sided) and judged
by the metric's declared direction (:func:`xmr.metrics.find_direction`: higher, lower, or
closer to 0 for a signed metric such as Bias@K); when the interval holds 0 it is a tie,
:data:`TIE`. Text that has no room for a verdict marks a called difference with
:data:`SIGNIFICANT` instead (:func:`change_text`).
"""

from __future__ import annotations

from xmr.metrics.direction import find_direction

TIE = "≈"
"""The verdict on a difference whose interval holds 0: not distinguishable."""
SIGNIFICANT = "*"
"""After a difference whose interval excludes 0, where there is no verdict column."""


def verdict(metric: str, first: float, second: float, significant: bool) -> str:
    """Which run is better on ``metric`` by its declared direction (``B better``, ``A nearer
    0`` for a signed metric, ``B higher`` for a diagnostic or one without a direction), or
    :data:`TIE` when the interval holds 0 (``significant`` False)."""
    if not significant:
        return TIE
    direction = find_direction(metric)
    if direction is None or not direction.judges:
        return "B higher" if second > first else "A higher"
    if direction.signed:
        return "B nearer 0" if abs(second) < abs(first) else "A nearer 0"
    return "B better" if direction.better(second, first) else "A better"


def change_verdict(low: float, high: float, better: bool | None) -> str:
    """A change's verdict where the runs are not named (a job's conditions): ``better`` or
    ``worse`` (``better``: the change improves the metric by its direction; None: a diagnostic,
    ``changed``) when ``[low, high]`` excludes 0, :data:`TIE` when it holds 0."""
    if low <= 0.0 <= high:
        return TIE
    if better is None:
        return "changed"
    return "better" if better else "worse"


def bounds_text(low: float, high: float) -> str:
    """An interval as ``[+0.010, +0.090]`` (signed, 3 decimals)."""
    return f"[{low:+.3f}, {high:+.3f}]"


def change_text(change: float, low: float, high: float, *, mark: bool = False) -> str:
    """A change with its interval, ``+0.050 [+0.010, +0.090]``; with ``mark``, followed by
    :data:`SIGNIFICANT` when the interval excludes 0."""
    called = mark and not low <= 0.0 <= high
    return f"{change:+.3f} {bounds_text(low, high)}{SIGNIFICANT if called else ''}"
