"""One entry point for both kinds of ToyWorld: ``scene`` (default.yaml) and ``shop`` (shop.yaml).

A world YAML may say which it is with a top-level ``mode`` key; a YAML without one overrides the
defaults of the mode asked for (scene when none is).
"""

from __future__ import annotations

from pathlib import Path

from xmr.toyworld.config import ModeConfig, read_world_yaml, resolve_config
from xmr.toyworld.scene.generate import SCENE
from xmr.toyworld.shop.generate import SHOP
from xmr.toyworld.world import WorldMode, write_world

MODES: dict[str, WorldMode] = {mode.name: mode for mode in (SCENE, SHOP)}
"""The kinds of world by name, the default (scene) first."""


def config_mode(path: str | Path) -> str | None:
    """The ``mode`` key of world YAML ``path``, None when it has none.

    Raises ``FileNotFoundError`` for a missing file, ``ValueError`` naming the file for bad YAML
    or a mode outside :data:`MODES`.
    """
    data = read_world_yaml(path)
    if "mode" not in data:
        return None
    if data["mode"] not in MODES:
        raise ValueError(f"{path}: mode: must be one of {list(MODES)}, got {data['mode']!r}")
    return data["mode"]


def generate(
    out_dir: str | Path,
    config: ModeConfig | str | Path | None = None,
    *,
    mode: str | None = None,
    seed: int | None = None,
    progress: bool = False,
) -> Path:
    """Generate a scene or shop ToyWorld into ``out_dir`` (created; must be empty if it exists).

    Args:
        out_dir: output folder.
        config: a mode's config (:class:`~xmr.toyworld.scene.config.WorldConfig`,
            :class:`~xmr.toyworld.shop.config.ShopConfig`), a world YAML path or a packaged
            world's name, or None for the packaged defaults of the mode.
        mode: ``scene`` or ``shop``; None: the config's (its type, or a YAML's ``mode`` key),
            else ``scene``.
        seed: overrides the config's seed.
        progress: show progress (images; a bar on a terminal, else a line per tenth).

    Returns:
        ``out_dir`` as a Path.

    Raises:
        ValueError: an unknown mode or one that contradicts the config, an invalid config, or
            ``out_dir`` is not empty.
        FileNotFoundError: the config file does not exist.
    """
    if mode is not None and mode not in MODES:
        raise ValueError(f"unknown ToyWorld mode {mode!r}; choose one of {', '.join(MODES)}")
    if config is None or isinstance(config, str | Path):
        own = None if config is None else config_mode(config)
        source = str(config)
    else:
        own = config.mode
        source = type(config).__name__
    if mode is not None and own is not None and mode != own:
        raise ValueError(f"{source}: mode: the config is a {own} world, asked for {mode}")
    kind = MODES[mode or own or SCENE.name]
    cfg = resolve_config(config, seed, kind.config_type, kind.load_config)
    return write_world(out_dir, cfg, kind, progress=progress)
