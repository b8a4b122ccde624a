"""The ``vsepp`` family: VSE++ (Faghri et al., BMVC 2018) as the odmap paper trains it (appendix B).

- **Image encoder**: a torchvision CNN (VGG19's fc7, 4096-d, or ResNet's pooled features), its
  features L2-normalised as in VSE++'s ``EncoderImageFull``, then a linear projection to
  ``embed_dim`` (Xavier init).
- **Text encoder**: word embeddings (``word_dim``, uniform ±0.1 init) -> a bidirectional GRU over
  the true caption lengths (``pack_padded_sequence``); the caption embedding is the mean of the two
  directions' final hidden states (of the last layer), projected to ``embed_dim`` when the GRU is
  narrower.
- **Vocabulary**: word level, lower-cased, NLTK's ``TreebankWordTokenizer`` (needs no NLTK data);
  ``<pad>`` = 0, ``<start>``, ``<end>``, ``<unk>``, then every training word seen at least
  ``min_word_count`` times (VSE++: 4), most frequent first (ties alphabetical). It depends on the
  training data: :func:`build` makes it (:func:`word_vocabulary`, a
  :class:`~xmr.models.vocabulary.Vocabulary`) from a :class:`~xmr.models.Corpus`, or reads the
  one a checkpoint holds (``checkpoint_extra`` saves it as ``{"vocab": [words in id order]}``).
- **Objective**: the hinge triplet loss on the hardest negative, summed over the batch
  (:class:`VseppObjective`), with FairSample on text->image when ``fair_alpha > 0``.

Architectures are data: one JSON file per arch in ``configs/vsepp/`` (:class:`VseppConfig`).
``vgg19`` and ``resnet152`` are the paper's (pretrained tags are torchvision's weights names,
e.g. ``IMAGENET1K_V1``, downloaded by torchvision); ``xmr-tiny-vgg`` and ``xmr-tiny-resnet`` are
small random-init configs for CPU tests and demos.

>>> from xmr.models import Corpus, create_model
>>> corpus = Corpus(["a dog with a frisbee", "a dog on the grass"] * 4)
>>> model = create_model("vsepp", arch="xmr-tiny-vgg", corpus=corpus)
>>> model.vocab.tokens[:6]
('<pad>', '<start>', '<end>', '<unk>', 'a', 'dog')
>>> model.encode_texts(["a dog"]).shape
torch.Size([1, 64])
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
import torchvision
from PIL import Image
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence
from torchvision import transforms as T
from torchvision.models.resnet import BasicBlock, Bottleneck, ResNet
from torchvision.models.vgg import VGG, make_layers

from xmr.models.base import CheckpointError, Corpus, ModelSpec, RetrievalModel, read_checkpoint
from xmr.models.batch import TrainBatch
from xmr.models.losses import LossConfig, fair_triplet_t2i, mix_fair, triplet_losses
from xmr.models.objective import Objective, pair_features
from xmr.models.vocabulary import Vocabulary

CONFIGS = Path(__file__).parent / "configs" / "vsepp"

SPECIALS = ("<pad>", "<start>", "<end>", "<unk>")
"""The special tokens, in id order: ids 0-3."""
PAD, START, END, UNK = range(4)

_RESNET_BLOCKS = {"basic": BasicBlock, "bottleneck": Bottleneck}


# ---------------------------------------------------------------------------------------------
# Architectures as data


@dataclass(frozen=True)
class VseppConfig:
    """One architecture, read from ``configs/vsepp/<name>.json`` (every field but ``name``).

    Attributes:
        name: the arch name (the file's stem).
        backbone: ``{"kind": "vgg" | "resnet", ...}``. With ``"name"`` (``vgg19``,
            ``resnet152``, ...) a torchvision builder, whose weights tags are the pretrained
            tags. Otherwise a small torchvision ``VGG`` (``layers``: a ``make_layers`` cfg,
            ``batch_norm``, ``pool``: adaptive pool side, ``hidden``: classifier width,
            ``dropout``) or ``ResNet`` (``block``: ``basic`` | ``bottleneck``, ``layers``: 4
            block counts), random init only.
        image_size: side of the square input.
        resize_size: the eval transform resizes the shorter side to this, then centre-crops.
        embed_dim: the joint embedding size (1024 in the paper).
        word_dim: word embedding size (300).
        text_hidden: the GRU's hidden size per direction.
        text_layers: GRU layers.
        min_word_count: a training word joins the vocabulary from this many occurrences.
        max_length: token ids per caption, ``<start>`` and ``<end>`` included (longer captions
            are truncated).
        mean, std: per-channel pixel normalisation (ImageNet's).
        description: free text.
    """

    name: str
    backbone: Mapping[str, Any]
    image_size: int
    resize_size: int
    embed_dim: int
    word_dim: int
    text_hidden: int
    text_layers: int
    min_word_count: int
    max_length: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    description: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "mean", tuple(self.mean))
        object.__setattr__(self, "std", tuple(self.std))
        kind = self.backbone.get("kind")
        if kind not in ("vgg", "resnet"):
            raise ValueError(
                f"vsepp arch {self.name!r}: backbone kind {kind!r} is not vgg or resnet"
            )
        if "name" not in self.backbone and "layers" not in self.backbone:
            raise ValueError(f"vsepp arch {self.name!r}: backbone needs a 'name' or 'layers'")
        if self.max_length < 3:
            raise ValueError(
                f"vsepp arch {self.name!r}: max_length must be >= 3 (<start>, a word, <end>)"
            )
        if len(self.mean) != 3 or len(self.std) != 3:
            raise ValueError(f"vsepp arch {self.name!r}: mean and std need 3 channels each")


def list_archs() -> list[str]:
    """The arch names: the JSON files of ``configs/vsepp/``, sorted."""
    return sorted(path.stem for path in CONFIGS.glob("*.json"))


def load_config(arch: str) -> VseppConfig:
    """The :class:`VseppConfig` of ``arch``.

    Raises:
        ValueError: unknown arch, or a config file with missing, unknown or invalid fields.
    """
    path = CONFIGS / f"{arch}.json"
    if not path.is_file():
        raise ValueError(f"unknown vsepp arch {arch!r}; choose from {list_archs()}")
    data = json.loads(path.read_text())
    allowed = {f.name for f in fields(VseppConfig)} - {"name"}
    unknown, missing = data.keys() - allowed, allowed - {"description"} - data.keys()
    if unknown or missing:
        raise ValueError(
            f"{path}: unknown fields {sorted(unknown)}, missing fields {sorted(missing)}"
        )
    return VseppConfig(name=arch, **data)


def pretrained_tags(arch: str) -> list[str]:
    """The pretrained tags of ``arch``: its torchvision backbone's weights names (tiny: none)."""
    name = load_config(arch).backbone.get("name")
    if name is None:
        return []
    return [weights.name for weights in torchvision.models.get_model_weights(name)]


def fetch_backbone_weights(arch: str, tag: str) -> dict[str, torch.Tensor]:
    """The ImageNet state dict ``tag`` of ``arch``'s backbone, downloaded by torchvision.

    Weights are cached in torch's hub folder (``$TORCH_HOME``), so a second call is offline.

    Raises:
        ValueError: ``tag`` is not one of :func:`pretrained_tags` (the message lists them).
        RuntimeError: the weights could not be fetched (no network); the message says to use
            ``--pretrained none`` or a checkpoint.
    """
    tags = pretrained_tags(arch)
    if tag not in tags:
        choices = f"its tags are {tags}" if tags else "it has no pretrained weights"
        raise ValueError(
            f"unknown pretrained tag {tag!r} for vsepp arch {arch!r}: {choices}; "
            "use --pretrained none for random init or --checkpoint PATH for local weights"
        )
    weights = torchvision.models.get_model_weights(load_config(arch).backbone["name"])[tag]
    try:
        return torch.hub.load_state_dict_from_url(
            weights.url, progress=False, check_hash=True, map_location="cpu", weights_only=True
        )
    except Exception as exc:  # URL, HTTP, hash and file errors all mean "not fetched"
        raise RuntimeError(
            f"the pretrained weights {tag!r} of vsepp {arch!r} ({weights.url}) could not be "
            f"fetched (no network?): {type(exc).__name__}: {exc}. Use --pretrained none for "
            "random init, or --checkpoint PATH to load local weights."
        ) from exc


# ---------------------------------------------------------------------------------------------
# Vocabulary


@functools.cache
def _treebank() -> Any:
    from nltk.tokenize import TreebankWordTokenizer  # NLTK is slow to import: on first use

    return TreebankWordTokenizer()


def word_tokenize(text: str) -> list[str]:
    """VSE++'s words: ``text`` lower-cased, split by NLTK's ``TreebankWordTokenizer``."""
    return _treebank().tokenize(text.lower())


def word_vocabulary(captions: Iterable[str], min_count: int) -> Vocabulary:
    """:data:`SPECIALS`, then every word of ``captions`` (:func:`word_tokenize`) seen at least
    ``min_count`` times, most frequent first (ties in alphabetical order).

    Raises:
        ValueError: no caption, or no word that frequent.
    """
    captions = list(captions)
    if not captions:
        raise ValueError("cannot build a VSE++ vocabulary from a corpus without captions")
    words = (word for caption in captions for word in word_tokenize(caption))
    vocab = Vocabulary.build(words, SPECIALS, min_count)
    if len(vocab) == len(SPECIALS):
        raise ValueError(
            f"no word occurs {min_count} times (min_word_count) in the {len(captions)} corpus "
            "captions"
        )
    return vocab


def needs_corpus(spec: ModelSpec) -> bool:
    """Whether ``spec`` needs training captions to build: its word vocabulary comes from them,
    or from its checkpoint."""
    return spec.checkpoint is None


def _vocabulary(spec: ModelSpec, config: VseppConfig, corpus: Corpus | None) -> Vocabulary:
    """The checkpoint's vocabulary when it has one (its weights are tied to it), else the
    corpus's; neither is an error."""
    if spec.checkpoint is not None:
        saved = read_checkpoint(spec.checkpoint)
        words = saved.get("vocab") if isinstance(saved, Mapping) else None
        if words is not None:
            return Vocabulary.from_checkpoint(words, SPECIALS, spec.checkpoint, "vocab")
        if corpus is None:
            raise CheckpointError(
                f"{spec.checkpoint} holds no VSE++ vocabulary ('vocab'): VSE++ needs the word "
                "vocabulary its weights were trained with. Save VSE++ models with "
                "xmr.models.save_checkpoint (which stores it), or pass the training corpus."
            )
    if corpus is not None:
        return word_vocabulary(corpus.captions, config.min_word_count)
    raise ValueError(
        f"vsepp {spec.arch!r} needs a word vocabulary built from its training captions: train "
        "it with `xmr train --model vsepp` (which builds the vocabulary from the training data), "
        "or pass --checkpoint PATH of a trained VSE++ model (its vocabulary is saved in it); "
        "in Python, create_model(..., corpus=Corpus(captions))."
    )


# ---------------------------------------------------------------------------------------------
# Networks


def _init_like_vgg(module: nn.Module) -> None:
    """torchvision ``VGG``'s own initialisation, for the parts xmr replaces."""
    for m in module.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0, 0.01)
            nn.init.zeros_(m.bias)


def _small_vgg(backbone: Mapping[str, Any]) -> tuple[VGG, int]:
    """A torchvision ``VGG`` from a ``make_layers`` cfg with a narrow fc6/fc7 classifier."""
    with torch.device("meta"):  # VGG hard-codes a 25088x4096 classifier: never allocate it
        net = VGG(nn.Identity(), init_weights=False)
    layers = list(backbone["layers"])
    channels = [v for v in layers if v != "M"][-1]
    pool, hidden = backbone.get("pool", 7), backbone["hidden"]
    dropout = backbone.get("dropout", 0.5)
    net.features = make_layers(layers, batch_norm=backbone.get("batch_norm", False))
    net.avgpool = nn.AdaptiveAvgPool2d((pool, pool))
    net.classifier = nn.Sequential(  # VGG's classifier without its last layer (fc7 output)
        nn.Linear(channels * pool * pool, hidden),
        nn.ReLU(True),
        nn.Dropout(p=dropout),
        nn.Linear(hidden, hidden),
        nn.ReLU(True),
        nn.Dropout(p=dropout),
    )
    _init_like_vgg(net)
    return net, hidden


def build_backbone(
    config: VseppConfig, state_dict: Mapping[str, torch.Tensor] | None = None
) -> tuple[nn.Module, int]:
    """The torchvision CNN of ``config`` minus its classification layer, and its feature size.

    VGG keeps ``features + avgpool + classifier`` without the last layer (fc7); ResNet's ``fc``
    becomes the identity (pooled features). ``state_dict``: torchvision weights for a named
    backbone, loaded before the classification layer is dropped.
    """
    backbone = config.backbone
    kind, name = backbone["kind"], backbone.get("name")
    if name is not None:
        net = torchvision.models.get_model(name, weights=None)
        if state_dict is not None:
            net.load_state_dict(state_dict)
    elif state_dict is not None:
        raise ValueError(f"vsepp arch {config.name!r} has no pretrained weights")
    elif kind == "vgg":
        return _small_vgg(backbone)
    else:
        net = ResNet(_RESNET_BLOCKS[backbone["block"]], list(backbone["layers"]))
    if kind == "vgg":
        dim = net.classifier[-1].in_features
        net.classifier = nn.Sequential(*list(net.classifier.children())[:-1])
    else:
        dim = net.fc.in_features
        net.fc = nn.Identity()
    return net, dim


def _xavier(linear: nn.Linear) -> nn.Linear:
    """VSE++'s init of its projections: Xavier uniform weights, zero bias."""
    nn.init.xavier_uniform_(linear.weight)
    nn.init.zeros_(linear.bias)
    return linear


class ImageEncoder(nn.Module):
    """Backbone features, L2-normalised, then ``fc`` to ``embed_dim`` (VSE++'s EncoderImageFull).

    Attributes:
        backbone: the torchvision CNN (freeze it to train only ``fc``, VSE++'s default).
        fc: the projection to the joint space.
        feature_dim: the backbone's output size (4096 for VGG19 fc7, 2048 for ResNet152).
    """

    def __init__(
        self, config: VseppConfig, backbone_state: Mapping[str, torch.Tensor] | None = None
    ):
        super().__init__()
        self.backbone, self.feature_dim = build_backbone(config, backbone_state)
        self.fc = _xavier(nn.Linear(self.feature_dim, config.embed_dim))

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        """``[B, 3, S, S]`` -> ``[B, embed_dim]`` (not normalised)."""
        return self.fc(F.normalize(self.backbone(pixels), dim=-1))


class TextEncoder(nn.Module):
    """Word embeddings -> bidirectional GRU -> mean of both directions' final states -> proj."""

    def __init__(self, vocab_size: int, config: VseppConfig):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, config.word_dim)
        nn.init.uniform_(self.embed.weight, -0.1, 0.1)
        self.rnn = nn.GRU(
            config.word_dim,
            config.text_hidden,
            config.text_layers,
            batch_first=True,
            bidirectional=True,
        )
        self.proj: nn.Module = (
            _xavier(nn.Linear(config.text_hidden, config.embed_dim))
            if config.text_hidden != config.embed_dim
            else nn.Identity()
        )
        self.out_dim = config.embed_dim

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """``[B, L]`` ids padded with :data:`PAD` at the end -> ``[B, embed_dim]``."""
        if ids.shape[0] == 0:
            return self.embed.weight.new_zeros(0, self.out_dim)
        lengths = (ids != PAD).sum(dim=1).clamp(min=1)
        packed = pack_padded_sequence(
            self.embed(ids), lengths.cpu(), batch_first=True, enforce_sorted=False
        )
        _, hidden = self.rnn(packed)  # [layers * 2, B, H], in the batch's order
        return self.proj((hidden[-2] + hidden[-1]) / 2)


class VseppNet(nn.Module):
    """The two encoders; ``encode_image`` / ``encode_text`` give raw (unnormalised) embeddings."""

    def __init__(
        self,
        config: VseppConfig,
        vocab_size: int,
        backbone_state: Mapping[str, torch.Tensor] | None = None,
    ):
        super().__init__()
        self.image = ImageEncoder(config, backbone_state)
        self.text = TextEncoder(vocab_size, config)

    def encode_image(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.image(pixels)

    def encode_text(self, ids: torch.Tensor) -> torch.Tensor:
        return self.text(ids)


# ---------------------------------------------------------------------------------------------
# The family's model and objective


class VseppModel(RetrievalModel):
    """A :class:`VseppNet` with its vocabulary, transforms and tokenizer.

    Attributes:
        config: the architecture.
        vocab: the word vocabulary (saved by :meth:`checkpoint_extra`).
    """

    module: VseppNet

    def __init__(self, spec: ModelSpec, config: VseppConfig, vocab: Vocabulary, net: VseppNet):
        super().__init__(spec, net, config.embed_dim, config.image_size)
        self.config = config
        self.vocab = vocab
        normalize = T.Normalize(config.mean, config.std)
        self._eval_transform = T.Compose(
            [T.Resize(config.resize_size), T.CenterCrop(config.image_size), T.ToTensor(), normalize]
        )
        self._train_transform = T.Compose(
            [
                T.RandomResizedCrop(config.image_size),
                T.RandomHorizontalFlip(),
                T.ToTensor(),
                normalize,
            ]
        )

    def preprocess(self, image: Image.Image) -> torch.Tensor:
        """RGB, resize the shorter side to ``resize_size``, centre-crop, normalise."""
        return self._eval_transform(image.convert("RGB"))

    def train_transform(self, image: Image.Image) -> torch.Tensor:
        """VSE++'s: RGB, ``RandomResizedCrop(image_size)``, horizontal flip, normalise.

        Draws from torch's global RNG (training seeds it per pair and epoch,
        :func:`xmr.train.data.collate`).
        """
        return self._train_transform(image.convert("RGB"))

    def tokenize(self, texts: Sequence[str]) -> torch.Tensor:
        """``B`` strings -> ``[B, max_length]`` int64: ``<start>``, word ids (``<unk>`` for
        unknown words), ``<end>``, then ``<pad>`` (0); longer captions are truncated."""
        if isinstance(texts, str):
            texts = [texts]
        length = self.config.max_length
        rows = []
        for text in texts:
            ids = [START, *self.vocab.ids(word_tokenize(text)[: length - 2]), END]
            rows.append(ids + [PAD] * (length - len(ids)))
        return torch.tensor(rows, dtype=torch.int64).reshape(len(rows), length)

    def image_features(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.module.encode_image(pixels)

    def text_features(self, texts: Sequence[str]) -> torch.Tensor:
        return self.module.encode_text(self.tokenize(texts).to(self.device))

    def objective(self, loss: LossConfig, *, seed: int = 0) -> VseppObjective:
        """The triplet objective (deterministic: ``seed`` is unused)."""
        return VseppObjective(self.module, loss)

    def checkpoint_extra(self) -> dict[str, Any]:
        """``{"vocab": [words in id order]}``."""
        return {"vocab": self.vocab.to_checkpoint()}


class VseppObjective(Objective):
    """VSE++'s hinge triplet loss on L2-normalised embeddings, summed over the global batch
    (every data-parallel worker's pairs, :class:`~xmr.models.objective.Objective`).

    ``forward(batch)`` -> ``{"loss", "loss_i2t", "loss_t2i"}`` with ``loss = loss_i2t +
    loss_t2i`` (parts detached). Margin and hardest-negative come from the :class:`LossConfig`;
    with ``fair_alpha > 0`` the text->image part is ``α·FairSample + (1-α)·plain`` (gender paper
    eq. 6); rows of the same image are never each other's negatives.

    From random init (the tiny archs, or ``--pretrained none``) the hardest-negative loss tends
    to collapse: every score becomes equal and the loss sticks at ``2·B·margin``. VSE++ trains
    it from an ImageNet backbone; otherwise warm up on the summed loss first
    (``LossConfig.max_violation_after``, ``xmr train --max-violation-after N``: the training
    loop sets each epoch's :meth:`~xmr.models.losses.LossConfig.for_epoch` as ``loss``).
    """

    def __init__(self, model: VseppNet, loss: LossConfig) -> None:
        super().__init__()
        self.model = model
        self.loss = loss

    def features(self, batch: TrainBatch) -> dict[str, torch.Tensor]:
        return pair_features(self.model, batch)

    def loss_from(self, rows: dict[str, torch.Tensor], local: slice) -> dict[str, torch.Tensor]:
        image, text, image_ids = rows["image"], rows["text"], rows["image_ids"]
        margin, hardest = self.loss.margin, self.loss.max_violation
        i2t, t2i = triplet_losses(image, text, image_ids, margin=margin, max_violation=hardest)
        if self.loss.fair_alpha > 0:
            gender = rows["image_gender"]
            fair_rows = self.loss.fair_applies(rows["caption_neutral"], gender)
            fair = fair_triplet_t2i(
                image, text, image_ids, gender, fair_rows, margin=margin, max_violation=hardest
            )
            t2i = mix_fair(t2i, fair, self.loss.fair_alpha)
        loss_i2t, loss_t2i = i2t.sum(), t2i.sum()
        return {
            "loss": loss_i2t + loss_t2i,
            "loss_i2t": loss_i2t.detach(),
            "loss_t2i": loss_t2i.detach(),
        }


def build(spec: ModelSpec, corpus: Corpus | None = None) -> VseppModel:
    """Build ``spec.arch`` on CPU.

    The vocabulary comes from ``spec.checkpoint`` when it holds one (the checkpoint's weights
    are tied to it; ``corpus`` is then unused), else from ``corpus``. ``spec.pretrained``: a
    torchvision weights name for the backbone (the projections and the text encoder start random,
    as in VSE++). The checkpoint's weights are loaded by :func:`xmr.models.create_model`.

    Raises:
        ValueError: unknown arch or pretrained tag; no vocabulary (no corpus and no checkpoint).
        CheckpointError: a checkpoint without a usable vocabulary and no corpus.
        RuntimeError: pretrained weights could not be fetched.
    """
    config = load_config(spec.arch)
    vocab = _vocabulary(spec, config, corpus)
    state = fetch_backbone_weights(spec.arch, spec.pretrained) if spec.pretrained else None
    return VseppModel(spec, config, vocab, VseppNet(config, len(vocab), state))


__all__ = [
    "END",
    "PAD",
    "SPECIALS",
    "START",
    "UNK",
    "ImageEncoder",
    "TextEncoder",
    "VseppConfig",
    "VseppModel",
    "VseppNet",
    "VseppObjective",
    "build",
    "build_backbone",
    "fetch_backbone_weights",
    "list_archs",
    "load_config",
    "pretrained_tags",
    "word_tokenize",
    "word_vocabulary",
]
