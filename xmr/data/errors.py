"""Errors and skip records for bad input. Every message names the file and the item."""

from __future__ import annotations

from typing import NamedTuple


class DataError(ValueError):
    """Bad input data. The message names the file and the row / item it came from."""


class DataIssue(NamedTuple):
    """A bad item a batch job skipped: ``item`` names it (file, image id, annotation id).

    ``image_id`` names the image the item belongs to, when the reader knows it: jobs that must
    see every annotation of an image (removing a class) leave out the images with an issue.
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
