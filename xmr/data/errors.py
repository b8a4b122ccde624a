"""Errors and skip records for bad input. Every message names the file and the item."""

from __future__ import annotations

from typing import NamedTuple


class DataError(ValueError):
    """Bad input data. The message names the file and the row / item it came from."""


class DataIssue(NamedTuple):
    """A bad item a batch job skipped: ``item`` names it (file, image id, annotation id).

    ``image_id`` is set when the skipped item is an object annotation of an image that was kept
    without it: jobs that must see every object of an image (removing a class) skip that image.
    """

    item: str
    reason: str
    image_id: int | None = None


def report(issue: DataIssue, issues: list[DataIssue] | None) -> None:
    """Raise ``issue`` as a :class:`DataError`, or append it to ``issues`` when collecting.

    Readers take ``issues: list[DataIssue] | None``: ``None`` (the API default) fails fast,
    a list makes them skip the bad item and record why (what batch commands do).
    """
    if issues is None:
        raise DataError(f"{issue.item}: {issue.reason}")
    issues.append(issue)
