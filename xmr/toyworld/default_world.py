"""The embedded default dataset: a ToyWorld generated once into the user's cache, no download."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from xmr import __version__
from xmr.storage import cache_dir
from xmr.toyworld.modes import MODES, generate
from xmr.toyworld.world import WORLD_FORMAT


def default_toyworld(seed: int = 0, *, mode: str = "scene", progress: bool = True) -> Path:
    """Path of the default ToyWorld of ``mode`` (``scene`` or ``shop``) for ``seed``, generating it
    on first use (``<cache>/toyworld/default-...`` or ``shop-...`` under
    :func:`~xmr.storage.cache_dir`, named by the xmr version and
    :data:`~xmr.toyworld.world.WORLD_FORMAT`).

    Generation writes to a temporary folder renamed into place at the end, so an interrupted
    run never leaves a half-written world behind.
    """
    if mode not in MODES:
        raise ValueError(f"unknown ToyWorld mode {mode!r}; choose one of {', '.join(MODES)}")
    name = "default" if mode == "scene" else mode
    root = cache_dir() / "toyworld" / f"{name}-v{__version__}-f{WORLD_FORMAT}-seed{seed}"
    if (root / "world.json").is_file():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".toyworld-", dir=root.parent))
    try:
        generate(tmp, mode=mode, seed=seed, progress=progress)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        tmp.rename(root)
    except OSError:  # another process finished first: keep theirs
        shutil.rmtree(tmp, ignore_errors=True)
        if not (root / "world.json").is_file():
            raise
    return root
