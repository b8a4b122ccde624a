"""A tiny random-weight Stable Diffusion inpainting pipeline, saved in diffusers layout.

Tests load it through the real ``StableDiffusionInpaintPipeline.from_pretrained`` path. The
tokenizer is CLIP's real BPE (open_clip ships it; token ids match open_clip's tokenizer); every
model is a few hundred kilobytes of random weights, so the pipeline runs at 64 x 64 px with 2
steps on a CPU in about a second and paints noise.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import torch
from diffusers import (
    AutoencoderKL,
    DDIMScheduler,
    StableDiffusionInpaintPipeline,
    UNet2DConditionModel,
)
from open_clip.tokenizer import bytes_to_unicode, default_bpe
from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

SEED = 0
TEXT_DIM = 32  # CLIP text width = UNet cross-attention width
N_MERGES = 49152 - 256 - 2  # CLIP's BPE merges (open_clip and transformers both keep these)


def clip_tokenizer() -> CLIPTokenizer:
    """CLIP's BPE tokenizer (vocab 49408, context 77) from open_clip's bundled merges file."""
    with gzip.open(default_bpe(), "rt", encoding="utf-8") as f:
        lines = f.read().split("\n")
    merges = [tuple(line.split()) for line in lines[1 : N_MERGES + 1]]
    chars = list(bytes_to_unicode().values())
    tokens = chars + [c + "</w>" for c in chars] + ["".join(m) for m in merges]
    tokens += ["<|startoftext|>", "<|endoftext|>"]
    vocab = {token: i for i, token in enumerate(tokens)}
    return CLIPTokenizer(vocab=vocab, merges=merges, model_max_length=77)


def build_tiny_sd_inpainting(out_dir: Path) -> Path:
    """Build a tiny random ``StableDiffusionInpaintPipeline`` and ``save_pretrained`` it.

    UNet: 9 input channels (4 latent + 1 mask + 4 masked-image latent), blocks of 32 and 64
    channels, cross-attention width 32. VAE: 2 blocks, so latents are 1/2 of the image size.
    Text encoder: 2-layer CLIP, width 32, full CLIP vocabulary. DDIM scheduler with Stable
    Diffusion's beta schedule. No safety checker (``requires_safety_checker=False``). Weights come
    from fixed seeds, so two builds are identical; the global torch RNG is left untouched.

    Args:
        out_dir: folder to write the pipeline into (``model_index.json`` and one subfolder per
            component); created if missing.

    Returns:
        ``out_dir``, loadable with ``StableDiffusionInpaintPipeline.from_pretrained(out_dir)``.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        unet = UNet2DConditionModel(
            sample_size=32,
            in_channels=9,
            out_channels=4,
            block_out_channels=(32, 64),
            layers_per_block=1,
            down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
            up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
            cross_attention_dim=TEXT_DIM,
            attention_head_dim=8,
        )
        torch.manual_seed(SEED)
        vae = AutoencoderKL(
            block_out_channels=(32, 64),
            down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
            up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"),
            latent_channels=4,
            sample_size=64,
        )
        torch.manual_seed(SEED)
        tokenizer = clip_tokenizer()
        text_encoder = clip_text_encoder(
            tokenizer, hidden_size=TEXT_DIM, intermediate_size=37, layers=2, heads=4
        )
    return save_inpainting_pipeline(out_dir, unet, vae, text_encoder, tokenizer)


def clip_text_encoder(
    tokenizer: CLIPTokenizer,
    *,
    hidden_size: int,
    intermediate_size: int,
    layers: int,
    heads: int,
    **config: object,
) -> CLIPTextModel:
    """A random ``CLIPTextModel`` of the given size over ``tokenizer``'s vocabulary and
    special tokens, 77 positions (``config``: further ``CLIPTextConfig`` fields)."""
    return CLIPTextModel(
        CLIPTextConfig(
            vocab_size=len(tokenizer),
            hidden_size=hidden_size,
            intermediate_size=intermediate_size,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            max_position_embeddings=77,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
            **config,
        )
    )


def save_inpainting_pipeline(
    out_dir: Path,
    unet: UNet2DConditionModel,
    vae: AutoencoderKL,
    text_encoder: CLIPTextModel,
    tokenizer: CLIPTokenizer,
) -> Path:
    """Assemble an inpainting pipeline from its parts with a DDIM scheduler on Stable
    Diffusion's beta schedule and no safety checker, ``save_pretrained`` it into ``out_dir``
    (created if missing) and return ``out_dir``."""
    scheduler = DDIMScheduler(
        beta_start=0.00085,
        beta_end=0.012,
        beta_schedule="scaled_linear",
        clip_sample=False,
        set_alpha_to_one=False,
        steps_offset=1,
    )
    pipeline = StableDiffusionInpaintPipeline(
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        unet=unet,
        scheduler=scheduler,
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    out_dir = Path(out_dir)
    pipeline.save_pretrained(out_dir)
    return out_dir
