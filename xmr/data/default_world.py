"""The embedded default dataset: a ToyWorld generated once into the user's cache, no download."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path


def cache_dir() -> Path:
    """``$XMR_CACHE_DIR``, else ``$XDG_CACHE_HOME/xmr``, else ``~/.cache/xmr``."""
    if "XMR_CACHE_DIR" in os.environ:
        return Path(os.environ["XMR_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "xmr"


def default_toyworld(seed: int = 0, *, mode: str = "scene", progress: bool = True) -> Path:
    """Path of the default ToyWorld of ``mode`` (``scene`` or ``shop``) for ``seed``, generating it
    on first use (``<cache>/toyworld/default-...`` or ``shop-...``, named by the xmr version
    and :data:`~xmr.data.toyworld.world.WORLD_FORMAT`).

    Generation writes to a temporary folder renamed into place at the end, so an interrupted
    run never leaves a half-written world behind.
    """
    from xmr import __version__
    from xmr.data.toyworld import MODES, generate_world
    from xmr.data.toyworld.world import WORLD_FORMAT

    if mode not in MODES:
        raise ValueError(f"unknown ToyWorld mode {mode!r}; choose one of {', '.join(MODES)}")
    name = "default" if mode == "scene" else mode
    root = cache_dir() / "toyworld" / f"{name}-v{__version__}-f{WORLD_FORMAT}-seed{seed}"
    if (root / "world.json").is_file():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".toyworld-", dir=root.parent))
    try:
        generate_world(tmp, mode=mode, seed=seed, progress=progress)
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
