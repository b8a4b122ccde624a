"""What only the BiAug method's D′ uses (:class:`BiAugConfig`): how many objects the LLM
proposes, which attribute categories it edits, the §4.1 proposal filters and the object
vocabulary.

Its fields are ``xmr synth`` flags (:data:`xmr.synth.config.OPTION_ORDER` places them), hashed
with the shared :class:`~xmr.synth.config.SynthConfig` (:func:`xmr.synth.config.fingerprint`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from xmr.biaug import ProposalFilter
from xmr.biaug.validation import normalise_name
from xmr.fields import check_options, option, resolve_paths

BIAUG_FILLS = ("sd", "render")
"""``--mode biaug`` fills: Stable Diffusion inpainting with the attributive phrase, or (ToyWorld
only) the world's own renderer re-drawing the object in the named colour."""
BIAUG_ATTRIBUTES = ("color", "shape", "material", "other")


@dataclass(frozen=True)
class BiAugConfig:
    """The BiAug method's own options (the checks that need the shared ``--fill`` and
    ``--dataset`` are :meth:`check`)."""

    max_objects: int = option(5, "biaug: objects the LLM proposes per caption.", ge=1, le=20)
    attributes: str | None = option(
        None,
        f"biaug: attribute categories, comma-separated (default {','.join(BIAUG_ATTRIBUTES)}; "
        "color with --fill render).",
    )
    min_box_share: float = option(
        0.05, "biaug: drop boxes smaller than this share of the image.", gt=0, lt=1
    )
    max_box_share: float = option(
        0.8, "biaug: drop boxes larger than this share of the image.", gt=0, le=1
    )
    max_overlap: float = option(
        0.7, "biaug: drop an object whose box covers more of a kept one's box.", gt=0, le=1
    )
    filter_confidence: bool = option(
        False, "biaug: keep only detections scoring above --min-confidence (the paper's filter)."
    )
    min_confidence: float = option(
        0.9, "biaug: the score --filter-confidence asks for.", gt=0, lt=1
    )
    llm_max_tokens: int = option(1024, "biaug: the longest LLM answer, in tokens.", ge=16)
    object_vocabulary: Path | None = option(
        None,
        "biaug: a text file of object names, one per line: proposals naming another object are "
        "dropped (validation:object_vocabulary).",
    )

    def __post_init__(self) -> None:
        check_options(self)
        resolve_paths(self)

    def check(self, fill: str, dataset: str) -> None:
        """Refuse what contradicts the shared ``fill`` and ``dataset`` of a ``--mode biaug``
        build, and boxes bounds that keep nothing (one line naming the flags)."""
        categories = self.attribute_categories(fill)
        unknown = sorted(set(categories) - set(BIAUG_ATTRIBUTES))
        if unknown or not categories or len(set(categories)) != len(categories):
            raise ValueError(
                f"--attributes {self.attributes!r}: give distinct categories of "
                f"{', '.join(BIAUG_ATTRIBUTES)}"
            )
        if fill == "render":
            if dataset != "toyworld":
                raise ValueError(
                    "--fill render re-draws ToyWorld objects: it needs --dataset toyworld"
                )
            if categories != ("color",):
                raise ValueError("--fill render draws colours only: use --attributes color")
        if self.min_box_share >= self.max_box_share:
            raise ValueError(
                f"--min-box-share {self.min_box_share} must be below --max-box-share "
                f"{self.max_box_share}"
            )
        self.proposal_filter()

    def proposal_filter(self) -> ProposalFilter:
        """The §4.1 filters these options set (``--filter-confidence``: the paper's optional
        confidence filter)."""
        return ProposalFilter(
            min_area_share=self.min_box_share,
            max_area_share=self.max_box_share,
            max_overlap=self.max_overlap,
            min_confidence=self.min_confidence if self.filter_confidence else None,
        )

    def attribute_categories(self, fill: str) -> tuple[str, ...]:
        """``--attributes`` as a tuple; by default all four, or color with ``fill`` ``render``
        (the shared ``--fill``)."""
        if self.attributes is None:
            return ("color",) if fill == "render" else BIAUG_ATTRIBUTES
        return tuple(part.strip() for part in self.attributes.split(",") if part.strip())

    def object_names(self) -> frozenset[str] | None:
        """``--object-vocabulary``'s names, normalised (:func:`~xmr.biaug.validation.
        normalise_name`); None without one. Read in the driver, where the path is.

        Raises:
            ValueError: the file cannot be read or names no object (the message names the
                flag and the file).
        """
        if self.object_vocabulary is None:
            return None
        try:
            lines = self.object_vocabulary.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"--object-vocabulary {self.object_vocabulary}: {exc}") from None
        names = frozenset(filter(None, (normalise_name(line) for line in lines)))
        if not names:
            raise ValueError(f"--object-vocabulary {self.object_vocabulary} names no object")
        return names

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (the vocabulary's path as a string)."""
        data = asdict(self)
        vocabulary = self.object_vocabulary
        data["object_vocabulary"] = None if vocabulary is None else str(vocabulary)
        return data

    def hashed(self) -> dict[str, Any]:
        """The fields as the config hash takes them: the vocabulary's names, not where its file
        is (no key without one: the hashes predate it)."""
        data = self.to_dict()
        if self.object_vocabulary is None:
            data.pop("object_vocabulary")
        else:
            data["object_vocabulary"] = sorted(self.object_names() or ())
        return data
