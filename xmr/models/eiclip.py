"""The ``eiclip`` family: EI-CLIP (Ma et al., CVPR 2022), entity-aware CLIP for product retrieval.

A product's text is a description ``T^D`` and one tag entity ``a^k`` per metadata group ``k``
(brand, subcategory, season, composition, ...; :attr:`~xmr.data.records.ImageRecord.entities`).
Following the paper's §3.3 (eq. 6) and §4.1:

- **Image and description encoders**: an open_clip CLIP (any arch, as in the ``clip`` family);
  ``E^I = h^I(I)``, ``E^D = h^T(T^D)`` (the text tower's raw output).
- **EA-Learner**: one entity encoder per group, ``h_k^A`` = an embedding table over the group's
  entity vocabulary (an entity is one token: the whole normalised string, never sub-words)
  followed by one linear ("MLP") layer to the joint dimension ``D``.
- **CE-Selector**: a gate per group computed from the group's entity embedding,
  ``w_k = sigmoid(G_k(h_k^A(a^k)))`` with ``G_k`` a linear layer to one unit, so ``w_k ∈ (0, 1)``.
- **Text embedding**: ``E^T = E^D + Ê^A`` with ``Ê^A = Σ_k w_k · h_k^A(a^k)``; similarities are
  cosine, so ``E^T`` is L2-normalised after the sum.
- **Training**: InfoNCE between ``E^I`` and ``E^D + Ê^A``, plus InfoNCE between ``E^I`` and
  ``E^D`` and between ``E^I`` and ``Ê^A`` (the paper's disentangling losses), all three with
  CLIP's learnable temperature (:class:`EiClipObjective`).

Entity vocabularies (a :class:`~xmr.models.vocabulary.Vocabulary` per group, over
:func:`~xmr.data.records.normalise_entity` strings): id 0 is "unknown" (the empty value, an
unseen entity, or one seen fewer than ``min_count`` times in the training corpus); known
entities follow, most frequent first (ties alphabetical). An unknown entity contributes nothing
to ``Ê^A`` (its term is masked out), so a product without metadata is embedded by its
description alone. The vocabularies depend on the training data: :func:`build` makes them from
a :class:`~xmr.models.Corpus`, or reads the ones a checkpoint holds (``checkpoint_extra``:
``{"entity_vocab": {group: [values in id order]}, "entity_dim": int}``); a checkpoint's
vocabularies win, so fine-tuning keeps the ids.

:meth:`EiClipModel.text_features` is the description-only embedding ``E^D`` (so the generic
evaluation works unchanged); :meth:`EiClipModel.encode_product_texts` is the entity-aware one,
used by :mod:`xmr.eval.product_retrieval`.

>>> from xmr.models import Corpus, create_model
>>> corpus = Corpus(["Horse wool sweater in navy."] * 2, {"brand": ["horse", "dog"]})
>>> model = create_model("eiclip", arch="xmr-tiny", corpus=corpus)
>>> model.vocabularies["brand"].tokens
('', 'dog', 'horse')
>>> model.encode_product_texts(["A wool sweater."], {"brand": ["horse"]}).shape
torch.Size([1, 128])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from xmr.data.records import normalise_entity
from xmr.models import clip
from xmr.models.base import CheckpointError, Corpus, ModelSpec, read_checkpoint
from xmr.models.batch import TrainBatch
from xmr.models.losses import LossConfig, contrastive_losses, fair_contrastive_t2i, mix_fair
from xmr.models.objective import Objective
from xmr.models.vocabulary import Vocabulary

ENTITY_RESERVED = ("",)
"""The reserved tokens of an entity vocabulary: ``""``, the unknown or absent entity."""

UNKNOWN = len(ENTITY_RESERVED) - 1
"""The id of an unknown or absent entity in every group (0; its token in the vocabulary: "")."""

DEFAULT_MIN_COUNT = 1
"""A training entity joins its group's vocabulary from this many rows."""

ENTITY_INIT_STD = 0.02
"""Std of the entity embedding tables' normal init (CLIP's token embedding init): the entity
terms start small next to a pretrained ``E^D``."""


def list_archs() -> list[str]:
    """The open_clip architectures (as for ``clip``), ``xmr-tiny`` included."""
    return clip.list_archs()


def check_pretrained(spec: ModelSpec) -> None:
    """As the ``clip`` family's (:func:`xmr.models.clip.check_pretrained`): EI-CLIP's image
    and description encoders are a CLIP, ``--pretrained toy`` included."""
    clip.check_pretrained(spec)


# ---------------------------------------------------------------------------------------------
# Entity vocabularies


def entity_vocabularies(
    corpus: Corpus, min_count: int = DEFAULT_MIN_COUNT
) -> dict[str, Vocabulary]:
    """One vocabulary per entity group of ``corpus`` (sorted by name): ``""``, then every
    non-empty entity (normalised) seen in at least ``min_count`` rows, most frequent first, ties
    in alphabetical order. A group in which no entity reaches ``min_count`` rows is left out.

    Raises:
        ValueError: the corpus has no entity that frequent (EI-CLIP needs entity metadata), or a
            group name that cannot name a submodule ("" or containing ".").
    """
    vocabularies = {}
    for group in sorted(corpus.entities):
        if not group or "." in group:
            raise ValueError(f"entity group {group!r}: a group name must be non-empty, no '.'")
        values = (normalise_entity(value) for value in corpus.entities[group])
        vocabulary = Vocabulary.build(values, ENTITY_RESERVED, min_count)
        if len(vocabulary) > 1:
            vocabularies[group] = vocabulary
    if not vocabularies:
        raise ValueError(
            f"eiclip needs entity metadata (ImageRecord.entities): the training corpus has no "
            f"entity seen {min_count}+ times in groups {sorted(corpus.entities)}. Train it on a "
            "dataset with entities (Fashion-Gen, ToyWorld shop: `xmr data toyworld --mode shop`)."
        )
    return vocabularies


def _saved_vocabularies(path: Any, saved: Any) -> tuple[dict[str, Vocabulary], int] | None:
    """The vocabularies and entity embedding size a checkpoint holds, None when it has none."""
    vocab = saved.get("entity_vocab") if isinstance(saved, Mapping) else None
    if vocab is None:
        return None
    dim = saved.get("entity_dim")
    if not isinstance(vocab, Mapping) or not vocab or not isinstance(dim, int) or dim < 1:
        raise CheckpointError(
            f"{path}: its 'entity_vocab' must map groups to value lists and its 'entity_dim' be "
            f"a positive int, got {type(vocab).__name__} and {dim!r}"
        )
    return {
        str(group): Vocabulary.from_checkpoint(values, ENTITY_RESERVED, path, "entity_vocab")
        for group, values in vocab.items()
    }, dim


# ---------------------------------------------------------------------------------------------
# Networks


class EntityEncoder(nn.Module):
    """``h_k^A``: an embedding per whole entity, then a linear layer: ``[B]`` ids -> ``[B, D]``."""

    def __init__(self, vocab_size: int, entity_dim: int, embed_dim: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, entity_dim)
        self.proj = nn.Linear(entity_dim, embed_dim)
        nn.init.normal_(self.embedding.weight, std=ENTITY_INIT_STD)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.proj(self.embedding(ids))


class EiClipNet(nn.Module):
    """CLIP plus, per entity group, an :class:`EntityEncoder` and a gate ``G_k`` (``D -> 1``).

    Attributes:
        clip: the open_clip model (``encode_image``, ``encode_text``, ``logit_scale``).
        entity: group -> ``h_k^A``.
        gate: group -> ``G_k`` (before the sigmoid).
        groups: the group names, in the order of the ``K`` axis of :meth:`entities`.
    """

    def __init__(
        self, clip_model: nn.Module, vocab_sizes: Mapping[str, int], entity_dim: int, embed_dim: int
    ) -> None:
        super().__init__()
        self.clip = clip_model
        self.groups = tuple(vocab_sizes)
        self.entity = nn.ModuleDict(
            {g: EntityEncoder(n, entity_dim, embed_dim) for g, n in vocab_sizes.items()}
        )
        self.gate = nn.ModuleDict({g: nn.Linear(embed_dim, 1) for g in self.groups})

    @property
    def logit_scale(self) -> torch.Tensor:
        return self.clip.logit_scale

    def encode_image(self, pixels: torch.Tensor) -> torch.Tensor:
        """``E^I``: ``[B, 3, S, S]`` -> ``[B, D]`` (raw)."""
        return self.clip.encode_image(pixels)

    def encode_text(self, tokens: torch.Tensor) -> torch.Tensor:
        """``E^D``: ``[B, L]`` BPE ids -> ``[B, D]`` (raw)."""
        return self.clip.encode_text(tokens)

    def entities(
        self, ids: Mapping[str, torch.Tensor], batch_size: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The gated entity embedding of ``batch_size`` rows.

        Args:
            ids: group -> ``[B]`` int64 entity ids; a group that is absent is unknown in every
                row, groups the model does not know are ignored.

        Returns:
            ``Ê^A = Σ_k known_k · w_k · h_k^A(a^k)`` ``[B, D]``, the gates ``w`` ``[B, K]`` in
            ``(0, 1)``, and ``known`` ``[B, K]`` bool (the entity's id is not :data:`UNKNOWN`).
        """
        device = self.logit_scale.device
        embeddings, gates, known = [], [], []
        for group in self.groups:
            group_ids = ids.get(group)
            if group_ids is None:
                group_ids = torch.full((batch_size,), UNKNOWN, dtype=torch.int64, device=device)
            elif group_ids.shape != (batch_size,):
                raise ValueError(
                    f"entity ids of group {group!r}: expected [{batch_size}], "
                    f"got {list(group_ids.shape)}"
                )
            embedding = self.entity[group](group_ids)
            embeddings.append(embedding)
            gates.append(torch.sigmoid(self.gate[group](embedding)).squeeze(-1))
            known.append(group_ids != UNKNOWN)
        h = torch.stack(embeddings, dim=1)  # [B, K, D]
        w = torch.stack(gates, dim=1)  # [B, K]
        mask = torch.stack(known, dim=1)  # [B, K]
        fused = ((w * mask.to(w.dtype)).unsqueeze(-1) * h).sum(dim=1)
        return fused, w, mask


# ---------------------------------------------------------------------------------------------
# The model


class EiClipModel(clip.ClipModel):
    """EI-CLIP: a CLIP, its eval transform and tokenizer, and the entity vocabularies.

    The transform, tokenizer and image / description encoders are :class:`~xmr.models.clip.
    ClipModel`'s (``text_features`` is the description-only embedding ``E^D``).

    Attributes:
        vocabularies: group -> its entity :class:`~xmr.models.vocabulary.Vocabulary` (groups in
            the net's order).
        entity_dim: size of the entity embedding tables (before the linear layer to ``D``).
    """

    module: EiClipNet

    def __init__(
        self,
        spec: ModelSpec,
        net: EiClipNet,
        vocabularies: Mapping[str, Vocabulary],
        entity_dim: int,
        transform: Callable[[Image.Image], torch.Tensor],
        tokenizer: Callable[[list[str]], torch.Tensor],
    ):
        super().__init__(spec, net, transform, tokenizer)
        self.vocabularies = dict(vocabularies)
        self.entity_dim = entity_dim

    @property
    def groups(self) -> tuple[str, ...]:
        """The entity groups, in the order of the ``K`` axis of :meth:`gates`."""
        return self.module.groups

    def entity_ids(self, entities: Mapping[str, Sequence[str]]) -> dict[str, torch.Tensor]:
        """Group -> ``B`` entity strings ("" = none) to group -> ``[B]`` int64 ids on CPU; each
        string is normalised (:func:`~xmr.data.records.normalise_entity`) before its look-up.

        Every group of the model is returned (all :data:`UNKNOWN` when ``entities`` lacks it);
        groups the model does not know are ignored; ``{}`` for an empty mapping.

        Raises:
            ValueError: the groups hold different numbers of rows.
        """
        lengths = {group: len(values) for group, values in entities.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"entity groups of different lengths: {lengths}")
        if not lengths:
            return {}
        size = next(iter(lengths.values()))
        return {
            group: torch.tensor(
                vocabulary.ids(normalise_entity(value) for value in entities[group]),
                dtype=torch.int64,
            )
            if group in entities
            else torch.full((size,), UNKNOWN, dtype=torch.int64)
            for group, vocabulary in self.vocabularies.items()
        }

    def _entities(
        self, entities: Mapping[str, Sequence[str]], size: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """:meth:`EiClipNet.entities` of ``size`` rows given as group -> entity strings."""
        ids = {group: v.to(self.device) for group, v in self.entity_ids(entities).items()}
        return self.module.entities(ids, size)

    def gates(self, entities: Mapping[str, Sequence[str]]) -> torch.Tensor:
        """The CE-Selector's weights ``w``: group -> ``B`` entities to ``[B, K]`` in ``(0, 1)``
        (columns in :attr:`groups` order), in inference mode."""
        size = max((len(values) for values in entities.values()), default=0)
        with self._inference():
            return self._entities(entities, size)[1].float()

    def product_text_features(
        self, texts: Sequence[str], entities: Mapping[str, Sequence[str]]
    ) -> torch.Tensor:
        """Raw ``E^D + Σ_k w_k · h_k^A(a^k)``: ``B`` descriptions and group -> ``B`` entities
        (missing groups and "" are unknown) to ``[B, D]``."""
        fused, _, _ = self._entities(entities, len(texts))
        return self.text_features(texts) + fused

    def encode_product_texts(
        self, texts: Sequence[str], entities: Mapping[str, Sequence[str]]
    ) -> torch.Tensor:
        """The entity-aware text embedding, L2-normalised ``[B, D]`` float32 on :attr:`device`."""
        with self._inference():
            return F.normalize(self.product_text_features(texts, entities).float(), dim=-1)

    def objective(self, loss: LossConfig, *, seed: int = 0) -> EiClipObjective:
        """The three InfoNCE losses of the paper (deterministic: ``seed`` is unused)."""
        return EiClipObjective(self.module, loss)

    def checkpoint_extra(self) -> dict[str, Any]:
        """``{"entity_vocab": {group: [values in id order]}, "entity_dim": int}``."""
        return {
            "entity_vocab": {g: v.to_checkpoint() for g, v in self.vocabularies.items()},
            "entity_dim": self.entity_dim,
        }


class EiClipObjective(Objective):
    """EI-CLIP's training loss (paper §3.3, "Training") with CLIP's learnable temperature.

    ``forward(batch)`` -> ``{"loss", "loss_full", "loss_desc", "loss_entity"}`` with
    ``loss = loss_full + loss_desc + loss_entity``, each a symmetric InfoNCE (mean of the two
    directions, each averaged over its rows) between the images and, in turn, ``E^D + Ê^A``,
    ``E^D`` and ``Ê^A``, over the global batch (every data-parallel worker's pairs,
    :class:`~xmr.models.objective.Objective`); parts detached. ``loss_entity`` uses only the rows
    with at least one known entity (0 when there is none). With ``fair_alpha > 0`` each
    text->image part is ``α·FairSample + (1-α)·plain``.
    """

    def __init__(self, model: EiClipNet, loss: LossConfig) -> None:
        super().__init__()
        self.model = model
        self.loss = loss

    def _contrastive(
        self,
        image: torch.Tensor,
        text: torch.Tensor,
        scale: torch.Tensor,
        labels: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
        rows: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Symmetric InfoNCE of ``[R, D]`` normalised rows: all rows, or those where the ``[N]``
        bool ``rows`` is true (``image`` and ``text`` already restricted to them); ``labels``
        are the ``[N]`` image ids, image genders and caption-neutral flags."""
        ids, gender, neutral = labels
        if rows is not None:
            ids, gender, neutral = ids[rows], gender[rows], neutral[rows]
        i2t, t2i = contrastive_losses(image, text, scale, ids)
        fair = None
        if self.loss.fair_alpha > 0:
            fair_rows = self.loss.fair_applies(neutral, gender)
            fair = fair_contrastive_t2i(image, text, scale, ids, gender, fair_rows)
        t2i = mix_fair(t2i, fair, self.loss.fair_alpha)
        return (i2t.mean() + t2i.mean()) / 2

    def features(self, batch: TrainBatch) -> dict[str, torch.Tensor]:
        fused, _, known = self.model.entities(batch.entities, len(batch))
        return {
            "image": F.normalize(self.model.encode_image(batch.pixels), dim=-1),
            "desc": self.model.encode_text(batch.text),
            "fused": fused,
            "known": known,
            **batch.labels(),
        }

    def loss_from(self, rows: dict[str, torch.Tensor], local: slice) -> dict[str, torch.Tensor]:
        image, desc, fused = rows["image"], rows["desc"], rows["fused"]
        labels = (rows["image_ids"], rows["image_gender"], rows["caption_neutral"])
        scale = self.model.logit_scale.exp().clamp(max=100.0)
        loss_full = self._contrastive(image, F.normalize(desc + fused, dim=-1), scale, labels)
        loss_desc = self._contrastive(image, F.normalize(desc, dim=-1), scale, labels)
        entity_rows = rows["known"].any(dim=1)
        if entity_rows.all():
            loss_entity = self._contrastive(image, F.normalize(fused, dim=-1), scale, labels)
        elif entity_rows.any():
            entity = F.normalize(fused[entity_rows], dim=-1)
            loss_entity = self._contrastive(image[entity_rows], entity, scale, labels, entity_rows)
        else:
            loss_entity = image.new_zeros(())
        loss = loss_full + loss_desc + loss_entity
        return {
            "loss": loss,
            "loss_full": loss_full.detach(),
            "loss_desc": loss_desc.detach(),
            "loss_entity": loss_entity.detach(),
        }


def _vocabularies(
    spec: ModelSpec, corpus: Corpus | None, min_count: int, entity_dim: int | None, embed_dim: int
) -> tuple[dict[str, Vocabulary], int]:
    """The checkpoint's vocabularies when it has some (its weights are tied to them), else the
    corpus's; neither is an error."""
    if spec.checkpoint is not None:
        saved = _saved_vocabularies(spec.checkpoint, read_checkpoint(spec.checkpoint))
        if saved is not None:
            return saved
        if corpus is None:
            raise CheckpointError(
                f"{spec.checkpoint} holds no EI-CLIP entity vocabularies ('entity_vocab'): "
                "EI-CLIP needs the entity ids its weights were trained with. Save EI-CLIP models "
                "with xmr.models.save_checkpoint (which stores them), or pass the training corpus."
            )
    if corpus is not None:
        return entity_vocabularies(corpus, min_count), entity_dim or embed_dim
    raise ValueError(
        f"eiclip {spec.arch!r} needs entity vocabularies built from its training data: train it "
        "with `xmr train --model eiclip` on a dataset with entities, or pass --checkpoint PATH of "
        "a trained EI-CLIP model (its vocabularies are saved in it); in Python, "
        "create_model(..., corpus=Corpus(captions, entities))."
    )


def build(
    spec: ModelSpec,
    corpus: Corpus | None = None,
    *,
    min_count: int = DEFAULT_MIN_COUNT,
    entity_dim: int | None = None,
) -> EiClipModel:
    """Build ``spec.arch`` on CPU: CLIP random or ``spec.pretrained``, entity encoders random.

    The vocabularies come from ``spec.checkpoint`` when it holds them (then ``corpus``,
    ``min_count`` and ``entity_dim`` are unused), else from ``corpus.entities`` (one group per
    entity group with an entity seen ``min_count``+ times). ``entity_dim``: size of the entity
    embeddings, default the joint ``embed_dim`` (the paper: 512 for ViT-B/32's 512). The
    checkpoint's weights are loaded by :func:`xmr.models.create_model`.

    Raises:
        ValueError: unknown pretrained tag; no vocabularies (no corpus and no checkpoint, or a
            corpus without entities).
        CheckpointError: a checkpoint without usable vocabularies and no corpus.
        RuntimeError: pretrained weights could not be fetched.
    """
    open_clip = clip.registered_open_clip()
    config = open_clip.get_model_config(spec.arch)
    if config is None:
        raise ValueError(f"eiclip arch {spec.arch!r} has no open_clip config")
    vocabularies, dim = _vocabularies(spec, corpus, min_count, entity_dim, config["embed_dim"])
    model, transform = clip.create_open_clip(spec.arch, spec.pretrained)
    sizes = {group: len(vocabulary) for group, vocabulary in vocabularies.items()}
    net = EiClipNet(model, sizes, dim, config["embed_dim"])
    return EiClipModel(spec, net, vocabularies, dim, transform, open_clip.get_tokenizer(spec.arch))


__all__ = [
    "DEFAULT_MIN_COUNT",
    "ENTITY_RESERVED",
    "UNKNOWN",
    "EiClipModel",
    "EiClipNet",
    "EiClipObjective",
    "EntityEncoder",
    "build",
    "check_pretrained",
    "entity_vocabularies",
    "list_archs",
]
