"""What only the removal method's D′ uses (:class:`RemovalConfig`): the odmap paper's
thresholds and how the captions are rewritten.

Its fields are ``xmr synth`` flags (:data:`xmr.synth.config.OPTION_ORDER` places them), hashed
with the shared :class:`~xmr.synth.config.SynthConfig` (:func:`xmr.synth.config.fingerprint`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from xmr.fields import check_options, option
from xmr.pretrained import local_model_dir
from xmr.synth.removal.captions import CAPTION_METHODS, DEFAULT_CAPTIONER


@dataclass(frozen=True)
class RemovalConfig:
    """The removal method's own options: ``alpha1``–``alpha3`` bound what a removal plan may
    hide (shares of a class's or the image's area, in (0, 1]); ``caption`` is how a caption
    loses the removed objects, ``captioner_model`` the model of ``caption`` ``blip``."""

    alpha1: float = option(0.4, "Max share of a kept class hidden.", gt=0, le=1)
    alpha2: float = option(
        0.8, "Share hidden under a removed class that removes it too.", gt=0, le=1
    )
    alpha3: float = option(0.7, "Max removed share of the image.", gt=0, le=1)
    caption: str = option("np-removal", " | ".join(CAPTION_METHODS))
    captioner_model: str = option(DEFAULT_CAPTIONER, "Image-captioning repo id or local folder.")

    def __post_init__(self) -> None:
        if self.caption not in CAPTION_METHODS:
            raise ValueError(
                f"--caption {self.caption!r} is not one of {', '.join(CAPTION_METHODS)}"
            )
        check_options(self)
        try:
            local_model_dir(self.captioner_model)
        except FileNotFoundError as exc:
            raise FileNotFoundError(f"--captioner-model: {exc}") from exc

    def check(self, fill: str, dataset: str) -> None:
        """Nothing of the shared config contradicts a removal config (the protocol of
        :data:`~xmr.synth.config.METHOD_CONFIGS`)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields."""
        return asdict(self)

    def hashed(self) -> dict[str, Any]:
        """The fields as the config hash takes them: all of them."""
        return self.to_dict()
