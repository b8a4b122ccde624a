from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from xmr.fields import check_options, option


@dataclass(frozen=True)
class BlurConfig:
    """The blur-out method's own options."""

    blur_radius: int = option(8, "blur-out: Gaussian sigma in pixels.", ge=1)

    def __post_init__(self) -> None:
        check_options(self)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def hashed(self) -> dict[str, Any]:  # what the config hash takes
        return self.to_dict()

    def check(self, fill: str, dataset: str) -> None:  # against the shared config
        """Nothing of the shared config contradicts a blur radius."""
