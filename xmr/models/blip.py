"""The ``blip`` family: BLIP image–text retrieval (Li et al. 2022) on transformers' BLIP.

An architecture is a JSON file in ``xmr/models/configs/blip/`` (:func:`list_archs`):

- ``blip-itm-{base,large}-{coco,flickr}``: the fine-tuned retrieval checkpoints of the Hub
  repos ``Salesforce/blip-itm-*``; their tokenizer is the repo's (BERT-base uncased).
- ``xmr-tiny-blip``: a tiny random-init model (64-px images, 2+2 layers, width 32) with its own
  small English WordPiece vocabulary shipped beside it; it works offline.

``pretrained`` (:class:`~xmr.models.base.ModelSpec`) means, for this family:

- ``None`` (``--pretrained none``): random init from the arch's config (seeded by
  :func:`~xmr.models.create_model`);
- ``"hub"``: the weights of the arch's Hub repo, via ``from_pretrained`` (the Hugging Face
  cache or a download; offline and not cached -> ``RuntimeError``);
- a local folder written by ``BlipForImageTextRetrieval.save_pretrained``: its weights (and its
  tokenizer files, if any). Its config must have the arch's shape.

The model (:attr:`BlipModel.module`, a :class:`BlipRetrievalModule`) is the transformers
``BlipForImageTextRetrieval`` plus BLIP's learnable contrastive temperature ``temp`` (init 0.07,
clamped to ``[0.001, 0.5]``), which lives in the module so checkpoints carry it; Hub weights
have no ``temp`` (the conversion dropped it), so it starts at 0.07.

Embeddings are BLIP's ITC space: the projected, L2-normalised ``[CLS]`` states of the ViT and of
the unimodal text encoder, exactly what ``BlipForImageTextRetrieval(..., use_itm_head=False)``
compares. :meth:`BlipModel.itm_logits` is the image-grounded text encoder's match logit, the
score BLIP's evaluation adds to the ITC similarity when it re-ranks the top-k
(:func:`xmr.retrieval.rerank`, :meth:`BlipModel.pair_scorer`). As in the original BLIP (and unlike
transformers' forward, which keeps ``[CLS]``), the first token of an ITM input is ``[ENC]``.

transformers and torchvision are imported where a model is built (seconds), not to check an
arch name: a command checks its flags, and a Ray driver prepares its work, without them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from xmr.models.base import Corpus, ModelSpec, RetrievalModel
from xmr.models.batch import TrainBatch
from xmr.models.gather import local_share
from xmr.models.losses import (
    LossConfig,
    contrastive_losses,
    fair_contrastive_t2i,
    mix_fair,
    same_image,
)
from xmr.models.objective import Objective
from xmr.pretrained import local_model_dir

if TYPE_CHECKING:  # imported where a model is built: checking an arch name needs neither
    from transformers import BlipConfig, BlipForImageTextRetrieval
    from transformers.tokenization_utils_base import PreTrainedTokenizerBase

CONFIGS = Path(__file__).parent / "configs" / "blip"
HUB = "hub"
"""The ``pretrained`` value that loads the arch's Hub repo."""

# BLIP's (= OpenAI CLIP's) pixel normalisation, per RGB channel.
MEAN = (0.48145466, 0.4578275, 0.40821073)
STD = (0.26862954, 0.26130258, 0.27577711)
TEMP_INIT, TEMP_MIN, TEMP_MAX = 0.07, 0.001, 0.5

# Config fields that fix the weights' shapes and the tokenizer: a local folder must match them.
_SHAPE_FIELDS = {
    "vision_config": ("hidden_size", "num_hidden_layers", "image_size", "patch_size"),
    "text_config": ("hidden_size", "num_hidden_layers", "vocab_size"),
}


@dataclass(frozen=True)
class BlipArch:
    """One architecture file of ``configs/blip/``.

    Attributes:
        name: the arch name (the file's stem).
        repo: its Hub repo (``None``: no pretrained weights).
        vocab: a WordPiece vocabulary file in ``configs/blip/`` (``None``: the repo's tokenizer).
        max_length: ``L``, tokens per text ([CLS] and [SEP] included; BLIP retrieval: 35).
        enc_token_id: BLIP's ``[ENC]`` id, the first token of an image-grounded (ITM) input.
        rerank_k: the top-k BLIP re-ranks with ITM at evaluation (COCO 256, Flickr 128).
        config: ``BlipConfig`` keyword arguments.
    """

    name: str
    repo: str | None
    vocab: str | None
    max_length: int
    enc_token_id: int
    rerank_k: int
    config: dict[str, Any]

    def blip_config(self) -> BlipConfig:
        from transformers import BlipConfig

        return BlipConfig(**self.config)


def list_archs() -> list[str]:
    """The arch files in ``xmr/models/configs/blip/``, sorted."""
    return sorted(path.stem for path in CONFIGS.glob("*.json"))


@cache
def default_rerank_k(arch: str) -> int:
    """The ITM re-ranking depth evaluation uses for ``arch`` (registry hook)."""
    return load_arch(arch).rerank_k


def load_arch(name: str) -> BlipArch:
    """The :class:`BlipArch` of ``name``. Raises ValueError for an unknown name."""
    path = CONFIGS / f"{name}.json"
    if not path.is_file():
        raise ValueError(f"unknown blip arch {name!r}; choose from {list_archs()}")
    return BlipArch(name=name, **json.loads(path.read_text()))


class BlipRetrievalModule(nn.Module):
    """``BlipForImageTextRetrieval`` (``.blip``) and BLIP's contrastive temperature (``.temp``).

    State-dict keys are ``blip.*`` and ``temp`` (a scalar, in cosine-similarity units).
    """

    def __init__(self, blip: BlipForImageTextRetrieval, temp: float = TEMP_INIT) -> None:
        super().__init__()
        self.blip = blip
        self.temp = nn.Parameter(torch.tensor(float(temp)))

    def vision_states(self, pixels: torch.Tensor) -> torch.Tensor:
        """``[B, 3, S, S]`` -> the ViT's last hidden states ``[B, P, Hv]`` (``P`` = 1 + patches)."""
        return self.blip.vision_model(pixel_values=pixels).last_hidden_state

    def image_embedding(self, states: torch.Tensor) -> torch.Tensor:
        """Vision states ``[B, P, Hv]`` -> unnormalised ITC image embedding ``[B, D]``."""
        return self.blip.vision_proj(states[:, 0])

    def text_embedding(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Token ids and mask ``[B, L]`` -> unnormalised ITC text embedding ``[B, D]``."""
        hidden = self.blip.text_encoder(input_ids=input_ids, attention_mask=attention_mask)
        return self.blip.text_proj(hidden.last_hidden_state[:, 0])

    def itm_logits(
        self,
        states: torch.Tensor,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        enc_token_id: int,
    ) -> torch.Tensor:
        """The ITM head's two logits ``[B, 2]`` (no match, match) for paired rows.

        ``states`` ``[B, P, Hv]`` (vision states), ``input_ids`` / ``attention_mask`` ``[B, L]``
        as tokenised; the first token is replaced by ``[ENC]`` (BLIP's image-grounded encoder).
        """
        ids = input_ids.clone()
        ids[:, 0] = enc_token_id
        image_mask = torch.ones(states.shape[:2], dtype=torch.long, device=states.device)
        hidden = self.blip.text_encoder(
            input_ids=ids,
            attention_mask=attention_mask,
            encoder_hidden_states=states,
            encoder_attention_mask=image_mask,
        ).last_hidden_state
        return self.blip.itm_head(hidden[:, 0])


class BlipModel(RetrievalModel):
    """A BLIP retrieval model: ITC embeddings, ITM re-ranking scores, BLIP's ITC+ITM objective.

    Attributes:
        arch: the :class:`BlipArch` it was built from.
        tokenizer: the BERT WordPiece tokenizer.
        rerank_k: BLIP's ITM re-ranking depth for this arch (see :func:`xmr.retrieval.rerank`).
    """

    module: BlipRetrievalModule

    def __init__(
        self,
        spec: ModelSpec,
        module: BlipRetrievalModule,
        arch: BlipArch,
        tokenizer: PreTrainedTokenizerBase,
    ) -> None:
        from torchvision import transforms

        config = module.blip.config
        size = config.vision_config.image_size
        super().__init__(spec, module, config.image_text_hidden_size, int(size))
        self.arch = arch
        self.tokenizer = tokenizer
        self.rerank_k = arch.rerank_k
        self._transform = transforms.Compose(
            [
                transforms.Resize(
                    (self.image_size, self.image_size),
                    interpolation=transforms.InterpolationMode.BICUBIC,
                ),
                transforms.ToTensor(),
                transforms.Normalize(MEAN, STD),
            ]
        )

    def preprocess(self, image: Image.Image) -> torch.Tensor:
        """BLIP's eval transform: RGB, bicubic resize to ``S x S`` (no crop), normalise.

        Returns ``[3, S, S]`` float32.
        """
        return self._transform(image.convert("RGB"))

    def tokenize(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        """``B`` strings -> ``{"input_ids", "attention_mask"}``, int64 ``[B, L]`` on CPU.

        Lower-cased WordPiece with ``[CLS] ... [SEP]``, truncated and padded to
        ``L = arch.max_length`` (so a text's tokens never depend on its batch).
        """
        encoded = self.tokenizer(
            list(texts),
            padding="max_length",
            truncation=True,
            max_length=self.arch.max_length,
            return_tensors="pt",
        )
        return {
            "input_ids": encoded["input_ids"].long(),
            "attention_mask": encoded["attention_mask"].long(),
        }

    def image_features(self, pixels: torch.Tensor) -> torch.Tensor:
        """``[B, 3, S, S]`` -> ``vision_proj(ViT [CLS])``, ``[B, D]``."""
        return self.module.image_embedding(self.module.vision_states(pixels))

    def text_features(self, texts: Sequence[str]) -> torch.Tensor:
        """``B`` strings -> ``text_proj(text encoder [CLS])``, ``[B, D]`` on :attr:`device`."""
        tokens = self.tokenize(texts)
        return self.module.text_embedding(
            tokens["input_ids"].to(self.device), tokens["attention_mask"].to(self.device)
        )

    def itm_logits(self, pixels: torch.Tensor, text: dict[str, torch.Tensor]) -> torch.Tensor:
        """ITM match logits of paired rows: image ``i`` with text ``i``.

        Args:
            pixels: ``[B, 3, S, S]`` (any device), :meth:`preprocess` applied.
            text: :meth:`tokenize` output, ``[B, L]`` tensors (any device).

        Returns:
            ``[B]`` float32 on :attr:`device`: the head's "match" logit (index 1), the score BLIP
            adds to the ITC similarity when re-ranking (not a log-odds: the "no match" logit is
            not subtracted).
        """
        with self._inference():
            states = self.module.vision_states(pixels.to(self.device))
            return self._itm_from_states(states, text)

    def _itm_from_states(self, states: torch.Tensor, text: dict[str, torch.Tensor]) -> torch.Tensor:
        """Match logits ``[B]`` float32 for vision states ``[B, P, Hv]`` and tokens ``[B, L]``."""
        logits = self.module.itm_logits(
            states,
            text["input_ids"].to(self.device),
            text["attention_mask"].to(self.device),
            self.arch.enc_token_id,
        )
        return logits[:, 1].float()

    def pair_scorer(
        self,
        images: Sequence[Image.Image],
        texts: Sequence[str],
        direction: Literal["i2t", "t2i"],
        *,
        image_batch: int = 32,
        pair_batch: int = 128,
    ) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
        """``score_pairs(query_idx, gallery_idx) -> [n]`` ITM match logits, for ``rerank``.

        Args:
            images: PIL images (a lazy sequence is fine: only those asked for are read), indexed
                by query index for ``"i2t"`` and by gallery index for ``"t2i"``.
            texts: the texts, indexed the other way round.
            direction: ``"i2t"`` (queries are images, the gallery texts) or ``"t2i"``.
            image_batch: images preprocessed and run through the ViT at once.
            pair_batch: image–text pairs per ITM forward.

        Returns:
            A function of two int ``[n]`` arrays (query and gallery index of each pair) that
            returns float32 ``[n]`` :meth:`itm_logits`, computed on :attr:`device`. It groups the
            pairs of one call by image, so each image of a call passes the ViT once: give it many
            queries per call (:func:`xmr.retrieval.rerank` does). Texts are tokenised once, here.
            Memory: one image batch of vision states and one pair batch on the device.
        """
        if direction not in ("i2t", "t2i"):
            raise ValueError(f"direction must be 'i2t' or 't2i', got {direction!r}")
        tokens = self.tokenize(texts)

        def score_pairs(query_idx: np.ndarray, gallery_idx: np.ndarray) -> np.ndarray:
            image_idx, text_idx = (
                (query_idx, gallery_idx) if direction == "i2t" else (gallery_idx, query_idx)
            )
            unique, local = np.unique(np.asarray(image_idx, dtype=np.int64), return_inverse=True)
            text_idx = torch.as_tensor(np.asarray(text_idx, dtype=np.int64))
            order = np.argsort(local, kind="stable")  # pairs grouped by image
            starts = np.searchsorted(
                local[order], np.arange(0, len(unique) + image_batch, image_batch)
            )
            scores = np.empty(len(local), dtype=np.float32)
            for chunk, first in enumerate(range(0, len(unique), image_batch)):
                batch = unique[first : first + image_batch]
                pixels = torch.stack([self.preprocess(images[int(i)]) for i in batch])
                pairs = order[starts[chunk] : starts[chunk + 1]]
                with self._inference():
                    states = self.module.vision_states(pixels.to(self.device))
                    for at in range(0, len(pairs), pair_batch):
                        part = pairs[at : at + pair_batch]
                        rows = torch.as_tensor(local[part] - first, device=self.device)
                        text = {k: v[text_idx[part]] for k, v in tokens.items()}
                        scores[part] = self._itm_from_states(states[rows], text).cpu().numpy()
            return scores

        return score_pairs

    def objective(self, loss: LossConfig, *, seed: int = 0) -> BlipObjective:
        """BLIP's fine-tuning loss (ITC + ITM with hard negatives); ``seed`` seeds the negatives."""
        return BlipObjective(self.module, loss, enc_token_id=self.arch.enc_token_id, seed=seed)


class BlipObjective(Objective):
    """BLIP's retrieval objective: ``ITC + loss.itm_weight * ITM``, FairSample on ITC text->image.

    Over the global batch: every data-parallel worker's pairs are ITC candidates and ITM
    negatives (:class:`~xmr.models.objective.Objective`).

    ITC: symmetric InfoNCE over the batch with logit scale ``1 / temp`` (the module's learnable
    ``temp``, clamped in place to ``[0.001, 0.5]`` before each step, as BLIP does); other captions
    of the same image are not negatives (:func:`~xmr.models.losses.contrastive_losses`). Its
    text->image half is ``mix_fair(plain, FairSample, loss.fair_alpha)``.

    ITM (BLIP's hard-negative mining): for each image one negative text drawn with probability
    ``softmax(sim / temp)`` over the texts of other images, and for each text one negative image
    likewise; cross-entropy of the ITM head over the ``B`` positives and the (up to) ``2B``
    negatives. A row whose every candidate shows its own image gets no negative. Draws use a
    CPU ``torch.Generator`` seeded with ``seed`` at construction (the same on every worker), so
    the same seed and global batches give the same negatives on any device and any number of
    workers. With ``itm_weight == 0`` the ITM forward is skipped
    (the ITM head then gets no gradient: DDP needs ``find_unused_parameters``).

    ``forward(batch)`` -> ``{"loss", "loss_itc", "loss_itm"}`` (parts detached).
    """

    def __init__(
        self, module: BlipRetrievalModule, loss: LossConfig, *, enc_token_id: int, seed: int
    ) -> None:
        super().__init__()
        self.module = module
        self.loss = loss
        self.enc_token_id = enc_token_id
        self.generator = torch.Generator().manual_seed(seed)

    def features(self, batch: TrainBatch) -> dict[str, torch.Tensor]:
        if not isinstance(batch.text, dict):
            raise TypeError(
                "blip expects batch.text as tokenize()'s dict of input_ids/attention_mask"
            )
        with torch.no_grad():
            self.module.temp.clamp_(TEMP_MIN, TEMP_MAX)
        ids, mask = batch.text["input_ids"], batch.text["attention_mask"]
        states = self.module.vision_states(batch.pixels)
        features = {
            "image": F.normalize(self.module.image_embedding(states), dim=-1),
            "text": F.normalize(self.module.text_embedding(ids, mask), dim=-1),
            **batch.labels(),
        }
        if self.loss.itm_weight != 0:
            # ITM pairs the rows with negatives from the whole global batch: their vision
            # states and tokens go with them (BLIP gathers them the same way).
            features.update(states=states, input_ids=ids, attention_mask=mask)
        return features

    def loss_from(self, rows: dict[str, torch.Tensor], local: slice) -> dict[str, torch.Tensor]:
        image, text, image_ids = rows["image"], rows["text"], rows["image_ids"]
        scale = 1.0 / self.module.temp
        i2t, t2i = contrastive_losses(image, text, scale, image_ids)
        fair = None
        if self.loss.fair_alpha > 0:
            gender = rows["image_gender"]
            fair_rows = self.loss.fair_applies(rows["caption_neutral"], gender)
            fair = fair_contrastive_t2i(image, text, scale, image_ids, gender, fair_rows)
        itc = (i2t.mean() + mix_fair(t2i, fair, self.loss.fair_alpha).mean()) / 2
        if self.loss.itm_weight != 0:
            itm = self._itm_loss(
                image, text, image_ids, rows["states"], rows["input_ids"],
                rows["attention_mask"], local,
            )  # fmt: skip
        else:
            itm = torch.zeros((), device=itc.device)
        loss = itc + self.loss.itm_weight * itm
        return {"loss": loss, "loss_itc": itc.detach(), "loss_itm": itm.detach()}

    def _itm_loss(
        self,
        image: torch.Tensor,
        text: torch.Tensor,
        image_ids: torch.Tensor,
        states: torch.Tensor,
        ids: torch.Tensor,
        mask: torch.Tensor,
        local: slice,
    ) -> torch.Tensor:
        """ITM cross-entropy of this worker's positives and mined negatives, as its share of
        the mean over the global batch's (:func:`~xmr.models.gather.local_share`; one worker:
        the mean).

        All arguments cover the global batch of ``N`` rows; ``local`` is this worker's rows.
        Every worker draws the negatives of all ``N`` rows from the same generator state, so
        the draws do not depend on the number of workers.
        """
        neg_text, neg_image = hard_negatives(
            image.detach() @ text.detach().T / self.module.temp.detach(),
            image_ids,
            self.generator,
        )
        terms = len(ids) + int((neg_text >= 0).sum()) + int((neg_image >= 0).sum())
        rows = torch.arange(len(ids), device=ids.device)[local]
        neg_text, neg_image = neg_text[local], neg_image[local]
        has_text, has_image = neg_text >= 0, neg_image >= 0
        # Pairs (image row, text row): positives, each text with its negative image, each image
        # with its negative text.
        image_rows = torch.cat([rows, neg_image[has_image], rows[has_text]])
        text_rows = torch.cat([rows, rows[has_image], neg_text[has_text]])
        logits = self.module.itm_logits(
            states[image_rows], ids[text_rows], mask[text_rows], self.enc_token_id
        )
        labels = (torch.arange(len(image_rows), device=ids.device) < len(rows)).long()
        return local_share(F.cross_entropy(logits.float(), labels, reduction="sum"), terms)


def hard_negatives(
    similarity: torch.Tensor, image_ids: torch.Tensor, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """BLIP's ITM hard negatives, drawn in proportion to the softmax of ``similarity``.

    Args:
        similarity: ``[B images, B texts]`` logits (ITC similarity / temperature).
        image_ids: ``[B]``; a row's negatives never show its own image.
        generator: a CPU generator (the draws run on CPU, whatever the device).

    Returns:
        ``(negative text of each image [B], negative image of each text [B])``, int64 row
        indices on ``similarity``'s device, ``-1`` where every candidate shows the same image.
    """
    allowed = ~same_image(image_ids).cpu()
    logits = similarity.detach().float().cpu()
    picks = []
    for scores in (logits, logits.T):  # images choose texts, texts choose images
        valid = allowed.any(dim=1)
        probs = torch.softmax(scores.masked_fill(~allowed, -torch.inf), dim=1)
        probs[~valid] = 1.0  # placeholder rows, discarded below
        drawn = torch.multinomial(probs, 1, generator=generator).squeeze(1)
        picks.append(torch.where(valid, drawn, -1).to(similarity.device))
    return picks[0], picks[1]


def _fetch_error(arch: BlipArch, what: str, exc: Exception) -> RuntimeError:
    return RuntimeError(
        f"the {what} of blip {arch.name!r} could not be loaded from the Hub repo {arch.repo!r} "
        "(no network and not in the Hugging Face cache?). Use --pretrained none for random "
        "init, --pretrained DIR for a local save_pretrained folder, or --checkpoint PATH for "
        f"local weights. Cause: {type(exc).__name__}: {exc}"
    )


def _tokenizer(arch: BlipArch, folder: Path | None) -> PreTrainedTokenizerBase:
    """The arch's shipped vocabulary, else ``folder``'s tokenizer files, else the repo's."""
    from transformers import AutoTokenizer, BertTokenizer

    if arch.vocab is not None:
        return BertTokenizer(vocab=str(CONFIGS / arch.vocab))
    if folder is not None and any((folder / f).is_file() for f in ("vocab.txt", "tokenizer.json")):
        return AutoTokenizer.from_pretrained(folder)
    try:
        return AutoTokenizer.from_pretrained(arch.repo)
    except Exception as exc:  # hub, HTTP and cache errors vary: all mean "not fetched"
        raise _fetch_error(arch, "tokenizer", exc) from exc


def _check_fits(config: BlipConfig, arch: BlipArch, folder: Path) -> None:
    """Raise ValueError when ``folder``'s config has another shape than ``arch``'s."""
    expected = arch.blip_config()
    wrong = [
        f"{part}.{name}: {getattr(getattr(config, part), name)} (arch: "
        f"{getattr(getattr(expected, part), name)})"
        for part, names in _SHAPE_FIELDS.items()
        for name in names
        if getattr(getattr(config, part), name) != getattr(getattr(expected, part), name)
    ]
    if config.image_text_hidden_size != expected.image_text_hidden_size:
        wrong.append(f"image_text_hidden_size: {config.image_text_hidden_size}")
    if wrong:
        raise ValueError(f"the model in {folder} is not a blip {arch.name!r}: {'; '.join(wrong)}")


def _load_weights(arch: BlipArch, pretrained: str) -> tuple[BlipForImageTextRetrieval, Path | None]:
    """``from_pretrained`` of the Hub repo (``"hub"``) or of a local folder; returns the folder."""
    from transformers import BlipConfig, BlipForImageTextRetrieval

    if pretrained == HUB:
        if arch.repo is None:
            raise ValueError(
                f"blip arch {arch.name!r} has no Hub weights; use --pretrained none, a local "
                "save_pretrained folder, or --checkpoint PATH"
            )
        try:
            return BlipForImageTextRetrieval.from_pretrained(arch.repo), None
        except Exception as exc:  # hub, HTTP and cache errors vary: all mean "not fetched"
            raise _fetch_error(arch, "weights", exc) from exc
    folder = local_model_dir(pretrained)
    if folder is None:
        raise ValueError(
            f"pretrained {pretrained!r} for blip {arch.name!r} is neither {HUB!r} (the repo "
            f"{arch.repo}) nor an existing folder; use --pretrained none for random init"
        )
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(
            f"{folder} has no config.json: not a save_pretrained folder of blip {arch.name!r}"
        )
    _check_fits(BlipConfig.from_pretrained(folder), arch, folder)
    return BlipForImageTextRetrieval.from_pretrained(folder), folder


def build(spec: ModelSpec, corpus: Corpus | None = None) -> BlipModel:
    """Build ``spec.arch`` on CPU: random init (``pretrained None``), Hub or local-folder weights.

    BLIP's WordPiece vocabulary is fixed: ``corpus`` is not needed.

    Raises:
        ValueError: unknown arch, a ``pretrained`` that is neither ``"hub"`` nor a folder, or a
            folder holding another architecture.
        FileNotFoundError: the folder does not exist or has no ``config.json``.
        RuntimeError: Hub weights or tokenizer could not be fetched.
    """
    from transformers import BlipForImageTextRetrieval

    arch = load_arch(spec.arch)
    if spec.pretrained is None:
        blip, folder = BlipForImageTextRetrieval(arch.blip_config()), None
    else:
        blip, folder = _load_weights(arch, spec.pretrained)
    return BlipModel(spec, BlipRetrievalModule(blip), arch, _tokenizer(arch, folder))
