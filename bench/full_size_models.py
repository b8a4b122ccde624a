"""Random-weight models with the real architectures of Stable Diffusion 2 inpainting and
GroundingDINO Swin-T, for timing the GPU stages where the pretrained weights cannot be downloaded.

A model's speed depends on its architecture and input sizes, not on its weights: these folders
load through the same ``from_pretrained`` paths as ``stabilityai/stable-diffusion-2-inpainting``
and ``IDEA-Research/grounding-dino-tiny`` and cost the same FLOPs per image. Their outputs are
noise. The tokenizers are stand-ins with the real ones' conventions (CLIP's BPE from open_clip;
a small WordPiece vocabulary at BERT's ids), which only changes the text each prompt maps to.

    python bench/full_size_models.py OUT   # OUT/sd2-inpainting (fp16), OUT/grounding-dino-tiny
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from tiny_grounding_dino import bert_tokenizer  # tests/tiny_grounding_dino.py
from tiny_sd import (  # tests/tiny_sd.py
    clip_text_encoder,
    clip_tokenizer,
    save_inpainting_pipeline,
)

SEED = 0
GROUNDING_DINO_TEXT_LENGTH = 256  # grounding-dino-tiny's max_text_len


def build_sd2_inpainting(out_dir: Path, dtype: torch.dtype = torch.float16) -> Path:
    """Save a random-weight pipeline shaped as ``stabilityai/stable-diffusion-2-inpainting``.

    UNet: 9 input channels, blocks of 320/640/1280/1280 channels, 2 layers per block, linear
    attention projections, head dims 5/10/20/20, cross-attention width 1024 (865 M parameters).
    VAE: SD's (128/256/512/512, latents at 1/8 of the image side). Text encoder: OpenCLIP ViT-H's
    text tower as ``CLIPTextModel`` (23 layers, width 1024, 16 heads). DDIM scheduler, SD's beta
    schedule. Saved in ``dtype`` (safetensors); returns ``out_dir``.
    """
    from diffusers import AutoencoderKL, UNet2DConditionModel

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        unet = UNet2DConditionModel(
            sample_size=64,
            in_channels=9,
            out_channels=4,
            block_out_channels=(320, 640, 1280, 1280),
            layers_per_block=2,
            down_block_types=(
                "CrossAttnDownBlock2D",
                "CrossAttnDownBlock2D",
                "CrossAttnDownBlock2D",
                "DownBlock2D",
            ),
            up_block_types=(
                "UpBlock2D",
                "CrossAttnUpBlock2D",
                "CrossAttnUpBlock2D",
                "CrossAttnUpBlock2D",
            ),
            cross_attention_dim=1024,
            attention_head_dim=(5, 10, 20, 20),
            use_linear_projection=True,
        )
        vae = AutoencoderKL(
            in_channels=3,
            out_channels=3,
            block_out_channels=(128, 256, 512, 512),
            down_block_types=("DownEncoderBlock2D",) * 4,
            up_block_types=("UpDecoderBlock2D",) * 4,
            layers_per_block=2,
            latent_channels=4,
            sample_size=512,
        )
        tokenizer = clip_tokenizer()
        text_encoder = clip_text_encoder(
            tokenizer,
            hidden_size=1024,
            intermediate_size=4096,
            layers=23,
            heads=16,
            hidden_act="gelu",
            projection_dim=512,
        )
    return save_inpainting_pipeline(
        out_dir, unet.to(dtype), vae.to(dtype), text_encoder.to(dtype), tokenizer
    )


def build_grounding_dino_tiny(out_dir: Path) -> Path:
    """Save a random-weight GroundingDINO shaped as ``IDEA-Research/grounding-dino-tiny``
    (transformers' default ``GroundingDinoConfig``: Swin-T backbone, BERT-base text encoder,
    d_model 256, 6 encoder and 6 decoder layers, 900 queries, 256 text tokens) with its image
    processor (shortest side 800 px, longest at most 1333); returns ``out_dir``."""
    from transformers import (
        GroundingDinoConfig,
        GroundingDinoForObjectDetection,
        GroundingDinoImageProcessor,
        GroundingDinoProcessor,
    )

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        model = GroundingDinoForObjectDetection(GroundingDinoConfig()).eval()
    model.save_pretrained(out_dir)
    GroundingDinoProcessor(
        image_processor=GroundingDinoImageProcessor(),
        tokenizer=bert_tokenizer(GROUNDING_DINO_TEXT_LENGTH),
    ).save_pretrained(out_dir)
    return Path(out_dir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="folder of sd2-inpainting/, grounding-dino-tiny/")
    args = parser.parse_args()
    for name, build in (
        ("sd2-inpainting", build_sd2_inpainting),
        ("grounding-dino-tiny", build_grounding_dino_tiny),
    ):
        start = time.perf_counter()
        folder = build(args.out / name)
        size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
        seconds = time.perf_counter() - start
        print(f"{folder}: {size / 2**30:.2f} GiB, built in {seconds:.0f} s", flush=True)


if __name__ == "__main__":
    main()
