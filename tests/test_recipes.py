"""docs/architecture.md's recipes cannot drift: each code block marked ``<!-- recipe: PATH -->``
is the file PATH under tests/recipes/, word for word, and each of those files runs here."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from recipes.my_job import app as my_job_app
from recipes.precision import precision_hits
from recipes.train_in_process import train_in_process
from typer.testing import CliRunner

from xmr.metrics import Direction, direction, metric_direction
from xmr.models import create_model, registry
from xmr.models.batch import TrainBatch
from xmr.models.losses import LossConfig
from xmr.toyworld import generate
from xmr.train.convergence import STOPPED_EPOCH
from xmr.train.fit import MODEL_FILE

REPO = Path(__file__).resolve().parents[1]
ARCHITECTURE = REPO / "docs" / "architecture.md"
RECIPES = REPO / "tests" / "recipes"
MARKED_BLOCK = re.compile(r"^( *)<!-- recipe: (\S+) -->\n\1```python\n(.*?)^\1```", re.M | re.S)
"""A marker line, then the fenced block it names, both at the same indent (a list item's)."""


def marked_blocks() -> dict[str, str]:
    """architecture.md's marked blocks: recipe path -> the block's code, dedented."""
    found = MARKED_BLOCK.findall(ARCHITECTURE.read_text())
    return {path: textwrap.dedent(code) for _, path, code in found}


def test_every_marked_block_is_its_recipe_file_and_every_file_is_shown() -> None:
    blocks = marked_blocks()
    files = {f"tests/recipes/{p.name}" for p in RECIPES.glob("*.py")}
    assert set(blocks) == files, "a recipe file that architecture.md does not show, or the reverse"
    for path, code in blocks.items():
        assert code == (REPO / path).read_text(), f"docs/architecture.md's block for {path} drifted"


def test_the_metric_recipe_computes_precision_and_declares_its_direction(monkeypatch) -> None:
    scores = np.array(
        [[0.9, 0.8, 0.1, 0.0], [0.1, 0.2, 0.9, 0.3], [0.5, 0.4, 0.3, 0.2]], dtype=np.float32
    )
    positives = [{0, 1}, {3}, set()]  # top 2 per query: (0, 1), (2, 3), (0, 1)
    hits = precision_hits(scores, positives, ks=(1, 2))
    np.testing.assert_allclose(hits[1], [1.0, 0.0, 0.0])
    np.testing.assert_allclose(hits[2], [1.0, 0.5, 0.0])
    with pytest.raises(direction.UnknownMetricError):
        metric_direction("test/precision_t2i_at_5")
    line = (r"precision_(i2t|t2i)_at_\d+", Direction.HIGHER)  # the recipe's step 3
    monkeypatch.setattr(direction, "DIRECTIONS", (*direction.DIRECTIONS, line))
    assert metric_direction("test/precision_t2i_at_5") is Direction.HIGHER


def test_the_in_process_training_recipe_trains_to_a_plateau_tests_and_resumes(tmp_path) -> None:
    (tmp_path / "world.yaml").write_text("splits: {train: 24, val: 4, test: 4}\n")
    world = generate(tmp_path / "world", tmp_path / "world.yaml", seed=3)
    options = {"batch_size": 16, "patience": 1, "min_delta": 600, "max_epochs": 3, "seed": 2}
    final = train_in_process(world, tmp_path / "runs", **options)
    assert final[STOPPED_EPOCH] == 2 and "test/recall_t2i_at_1" in final  # patience 1
    folder = tmp_path / "runs" / "in-process"
    assert (folder / "best.pt").is_file() and (folder / "epoch_0002" / MODEL_FILE).is_file()
    assert (
        train_in_process(world, tmp_path / "runs", **options) == {}
    )  # finished: resumes to the end


def test_the_model_family_recipe_builds_embeds_and_trains(monkeypatch) -> None:
    monkeypatch.setitem(registry.MODEL_FAMILIES, "mini", "recipes.mini")  # the recipe's step 2
    model = create_model("mini", arch="xmr-tiny", pretrained="none", seed=0)
    assert model.name == "mini/xmr-tiny" and "mini" in registry.list_models()
    pixels = torch.rand(4, 3, model.image_size, model.image_size)
    captions = ["a red cup", "a blue car", "a dog on a bench", "a horse"]
    for features, n in ((model.encode_images(pixels), 4), (model.encode_texts(captions), 4)):
        assert features.shape == (n, 128)
        torch.testing.assert_close(features.norm(dim=-1), torch.ones(n))
    batch = TrainBatch(
        pixels=pixels,
        text=model.tokenize(captions),
        image_ids=torch.arange(4),
        image_gender=torch.zeros(4, dtype=torch.int64),
        caption_neutral=torch.ones(4, dtype=torch.bool),
    )
    losses = model.objective(LossConfig(), seed=0)(batch)
    assert set(losses) == {"loss", "loss_i2t", "loss_t2i"} and torch.isfinite(losses["loss"])
    losses["loss"].backward()


def test_the_job_recipe_plans_its_step_and_refuses_a_bad_flag(tmp_path) -> None:
    (tmp_path / "world.yaml").write_text("splits: {train: 8, val: 4, test: 4}\n")
    world = generate(tmp_path / "world", tmp_path / "world.yaml", seed=0)
    args = ["--data", str(world), "--epochs", "1", "--storage", str(tmp_path / "jobs")]
    planned = CliRunner().invoke(my_job_app, [*args, "--dry-run"])
    assert planned.exit_code == 0 and "train on D" in planned.output, planned.output
    refused = CliRunner().invoke(my_job_app, [*args, "--epochs", "-1", "--dry-run"])
    assert refused.exit_code == 2 and "--epochs" in refused.output, refused.output


def test_the_d_prime_method_recipe_blurs_inside_the_removed_boxes_and_loses_no_row(
    monkeypatch, tmp_path
) -> None:
    import pyarrow.parquet as pq
    from recipes.blur_out import BlurOutMethod
    from recipes.blur_out_config import BlurConfig

    from xmr.data import load_image, read_toyworld
    from xmr.data.images import decode_image
    from xmr.pipeline import LocalExecutor
    from xmr.removal.planning import box_mask
    from xmr.synth import config as synth_config
    from xmr.synth.config import SynthOptions, SynthRuntime
    from xmr.synth.runner import build

    # the recipe's step 3, for this test: the mode, its config and its flag
    monkeypatch.setitem(synth_config.METHOD_CONFIGS, "blur-out", BlurConfig)
    monkeypatch.setattr(synth_config, "MODES", (*synth_config.MODES, "blur-out"))
    monkeypatch.setattr(synth_config, "OPTION_ORDER", (*synth_config.OPTION_ORDER, "blur_radius"))
    (tmp_path / "world.yaml").write_text("splits: {train: 6, val: 2, test: 2}\n")
    world = generate(tmp_path / "world", tmp_path / "world.yaml", seed=1)
    options = SynthOptions.of(mode="blur-out", data=world, blur_radius=4)
    runtime = SynthRuntime(out=tmp_path / "out")
    result = build(BlurOutMethod(options, runtime), runtime, LocalExecutor)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["planned"] == manifest["written"] + manifest["errors"] > 0, manifest
    assert manifest["config"]["blur_radius"] == 4 and result is not None
    records = {r.image_id: r for r in read_toyworld(world, "train")}
    rows = [row for part in sorted((tmp_path / "out" / "data").glob("*.parquet"))
            for row in pq.read_table(part).to_pylist()]  # fmt: skip
    assert len(rows) == manifest["written"] and {row["fill"] for row in rows} == {"blur-out"}
    for row in rows:
        source = np.asarray(load_image(records[row["source_image_id"]].path))
        blurred = np.asarray(decode_image(row["image"]))
        mask = box_mask(row["removed_boxes"], row["width"], row["height"])
        assert np.array_equal(blurred[~mask], source[~mask])
        assert not np.array_equal(blurred[mask], source[mask])
