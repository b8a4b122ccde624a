"""One entry point for both kinds of ToyWorld: ``scene`` (default.yaml) and ``shop`` (shop.yaml).

A world YAML may say which it is with a top-level ``mode`` key; a YAML without one overrides the
defaults of the mode asked for (scene when none is).
"""

from __future__ import annotations

from pathlib import Path

from xmr.data.toyworld.config import WorldConfig, read_world_yaml
from xmr.data.toyworld.generate import generate
from xmr.data.toyworld.shop import generate_shop
from xmr.data.toyworld.shop_config import ShopConfig

MODES = ("scene", "shop")


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


def generate_world(
    out_dir: str | Path,
    config: WorldConfig | ShopConfig | str | Path | None = None,
    *,
    mode: str | None = None,
    seed: int | None = None,
    progress: bool = False,
) -> Path:
    """Generate a scene or shop ToyWorld into ``out_dir``.

    The mode is ``mode``, else the config's (its type, or a YAML's ``mode`` key), else
    ``scene``; a ``mode`` that contradicts the config raises ``ValueError``. Other arguments and
    errors as :func:`~xmr.data.toyworld.generate.generate`.
    """
    if mode is not None and mode not in MODES:
        raise ValueError(f"unknown ToyWorld mode {mode!r}; choose one of {', '.join(MODES)}")
    if isinstance(config, WorldConfig | ShopConfig):
        own = config.mode
        source = type(config).__name__
    else:
        own = None if config is None else config_mode(config)
        source = str(config)
    if mode is not None and own is not None and mode != own:
        raise ValueError(f"{source}: mode: the config is a {own} world, asked for {mode}")
    if (mode or own or "scene") == "shop":
        return generate_shop(out_dir, config, seed=seed, progress=progress)
    return generate(out_dir, config, seed=seed, progress=progress)
