"""Dataset files that may live in an object store (``--data s3://bucket/coco``).

A dataset's root is a local (or shared-filesystem) folder, a :class:`~pathlib.Path` as given,
or a URI, an :class:`~xmr.storage.ObjectPath`. Readers use only the methods both share
(``/``, ``is_file``, ``read_bytes``, ...), so a record's image path is of the root's kind.

Asking an object store whether each of 118k images exists is 118k requests; :class:`FileIndex`
lists each folder once instead (one paged listing) and answers from that.
"""

from __future__ import annotations

from xmr.storage import ObjectPath, StoragePath


class FileIndex:
    """Whether files exist, for checking many files of a few folders.

    A local path is asked directly (``Path.is_file``, as readers always did). An object path's
    folder is listed on first use and its file names kept: one listing per folder rather than
    one request per file.
    """

    def __init__(self) -> None:
        self._folders: dict[ObjectPath, frozenset[str]] = {}

    def is_file(self, path: StoragePath) -> bool:
        """Whether ``path`` is a file (an object, in an object store)."""
        if not isinstance(path, ObjectPath):
            return path.is_file()
        folder = path.parent
        names = self._folders.get(folder)
        if names is None:
            names = self._folders[folder] = _file_names(folder)
        return path.name in names


def _file_names(folder: ObjectPath) -> frozenset[str]:
    """The names of the files (not sub-folders) directly in ``folder``; none if it is absent."""
    import pyarrow.fs as pafs

    selector = pafs.FileSelector(folder.path, allow_not_found=True, recursive=False)
    infos = folder.filesystem.get_file_info(selector)
    return frozenset(info.base_name for info in infos if info.type == pafs.FileType.File)
