"""The D′ builds give the same bytes for the same config and seed: two removal D′s and a BiAug
D′ (``--llm oracle --boxes gt --fill render``) of a tiny ToyWorld, each compared with golden
digests of what it wrote (shard rows and images, the plan, errors, reasons, the manifest but
its timings), computed from the builds before they shared one runner (on Ray Data). They run in
this process (:class:`~xmr.pipeline.LocalExecutor`), and once on Ray (``slow``).

Paths and the package version are taken out first: the world's folder is ``<world>`` in every
file, and the version is pinned (the config hash includes it), so that only a change of what a
build writes changes a digest.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import sys
from collections.abc import Callable
from dataclasses import fields
from functools import partial
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from xmr.pipeline import Executor, LocalExecutor
from xmr.toyworld import WorldConfig, generate

SYNTH_MODULES = ("xmr.synth.runner", "xmr.synth.removal.method", "xmr.synth.biaug.method")
"""The modules that write a build's version."""
VOLATILE = ("created", "timings_s", "busy_s", "rows_per_second")
"""Manifest keys that say when and how fast a build ran, not what it wrote."""

GOLDEN: dict[str, dict[str, str]] = {
    "removal": {
        "data/part-00000.parquet": "e500f3a630b05cb4",
        "data/part-00001.parquet": "10f12bc1847cbfac",
        "errors.parquet": "282fdf4c3d091a89",
        "manifest.json": "c85b5f3f18b1de16",
        "plan.parquet": "1f2a690d3720ab2e",
        "plan_errors.parquet": "282fdf4c3d091a89",
        "shard_errors/part-00000.parquet": "282fdf4c3d091a89",
        "shard_errors/part-00001.parquet": "282fdf4c3d091a89",
    },
    "removal-prompt": {
        "data/part-00000.parquet": "e066283289be4c2f",
        "data/part-00001.parquet": "3ca6ff678bd9b7d9",
        "data/part-00002.parquet": "5d029f88811c5818",
        "data/part-00003.parquet": "87b5b6344ff3cf35",
        "data/part-00004.parquet": "f82e38d9ae8e7523",
        "data/part-00005.parquet": "42269f1689203cbd",
        "errors.parquet": "282fdf4c3d091a89",
        "manifest.json": "c35272b2acb3aeb6",
        "plan.parquet": "94e9b338372977ad",
        "plan_errors.parquet": "282fdf4c3d091a89",
        "shard_errors/part-00000.parquet": "282fdf4c3d091a89",
        "shard_errors/part-00001.parquet": "282fdf4c3d091a89",
        "shard_errors/part-00002.parquet": "282fdf4c3d091a89",
        "shard_errors/part-00003.parquet": "282fdf4c3d091a89",
        "shard_errors/part-00004.parquet": "282fdf4c3d091a89",
        "shard_errors/part-00005.parquet": "282fdf4c3d091a89",
    },
    "biaug": {
        "data/part-00000.parquet": "c262dbf716ef3d4f",
        "data/part-00001.parquet": "e421bd2721774089",
        "errors.parquet": "dab1257bd5de8474",
        "manifest.json": "3893d5995f5fce73",
        "plan.parquet": "a9677163b1565664",
        "plan_errors.parquet": "dab1257bd5de8474",
        "plan_reasons.parquet": "fea5931a2c30faf2",
        "reasons.parquet": "fea5931a2c30faf2",
        "shard_errors/part-00000.parquet": "282fdf4c3d091a89",
        "shard_errors/part-00001.parquet": "282fdf4c3d091a89",
    },
}
"""Per build: output file -> the first 16 hex digits of the sha256 of its normalised content
(:func:`digests`), from the builds before they shared one runner."""


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    """Twelve 64-px train images (seed 5)."""
    config = WorldConfig.from_dict({"image_size": 64, "splits": {"train": 12, "test": 2}})
    return generate(tmp_path_factory.mktemp("runner-world") / "w", config, seed=5)


@pytest.fixture
def pinned_version(monkeypatch) -> None:
    """Every synth module's ``__version__`` is ``golden`` (manifests and config hashes)."""
    for loaded in SYNTH_MODULES:  # so that their versions are pinned too
        importlib.import_module(loaded)
    for name, module in list(sys.modules.items()):
        if name.startswith("xmr.synth") and hasattr(module, "__version__"):
            monkeypatch.setattr(module, "__version__", "golden")


BUILDS = {
    "removal": {},  # the defaults: box masks, Telea, noun-phrase removal
    "removal-prompt": {"fill": "ns", "caption": "prompt", "captions_per_image": "all"},
    "biaug": {"mode": "biaug", "boxes": "gt", "fill": "render"},
}
"""Per build: its options besides the world, ``--out`` and the quiet ones."""


def _options(build: str, world: Path, out: Path) -> dict:
    return {"data": world, "out": out, "rows_per_shard": 16, "progress": False,
            "log_mlflow": False, **BUILDS[build]}  # fmt: skip


def _build(build: str, world: Path, out: Path, executor: Callable[[], Executor]):
    from xmr.synth.config import load_configs, load_llm_spec
    from xmr.synth.methods import synthesize

    config, runtime = load_configs(None, _options(build, world, out))
    llm = load_llm_spec(None, {"backend": "oracle"}) if config.mode == "biaug" else None
    return synthesize(config, runtime, llm, executor=executor)


def _normalised(value: object, world: Path) -> str:
    """``value`` as canonical JSON: bytes by their sha256, the world's folder as ``<world>``."""

    def plain(item: object) -> object:
        if isinstance(item, bytes):
            return hashlib.sha256(item).hexdigest()
        if isinstance(item, dict):
            return {key: plain(v) for key, v in item.items()}
        if isinstance(item, list | tuple):
            return [plain(v) for v in item]
        return item

    return json.dumps(plain(value), sort_keys=True).replace(str(world), "<world>")


def digests(out: Path, world: Path) -> dict[str, str]:
    """Output file (relative to ``out``) -> the sha256 (16 hex digits) of its normalised
    content: Parquet files by their rows and metadata, the manifest without :data:`VOLATILE`."""
    found = {}
    for path in sorted(out.rglob("*")):
        name = path.relative_to(out).as_posix()
        if path.suffix == ".parquet":
            table = pq.read_table(path)
            metadata = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
            metadata.pop("ARROW:schema", None)
            value = {"schema": str(table.schema.remove_metadata()), "metadata": metadata,
                     "rows": table.to_pylist()}  # fmt: skip
        elif path.name == "manifest.json":
            value = {k: v for k, v in json.loads(path.read_text()).items() if k not in VOLATILE}
        else:
            continue
        found[name] = hashlib.sha256(_normalised(value, world).encode()).hexdigest()[:16]
    return found


@pytest.mark.parametrize("build", list(BUILDS))
def test_a_build_writes_the_golden_bytes(
    build, world, tmp_path, pinned_version, nltk_tagger
) -> None:
    out = tmp_path / "out"
    result = _build(build, world, out, LocalExecutor)
    assert result.manifest["written"] >= 8 and result.manifest["counts"]["shards"] > 1
    assert digests(out, world) == GOLDEN[build]


@pytest.mark.slow
@pytest.mark.parametrize("build", list(BUILDS))
def test_a_build_on_ray_writes_the_golden_bytes(
    build, world, tmp_path, pinned_version, local_ray, nltk_tagger
) -> None:
    from xmr.pipeline.ray_executor import RayExecutor

    out = tmp_path / "out"
    _build(build, world, out, partial(RayExecutor, progress=False))
    assert digests(out, world) == GOLDEN[build]


def test_a_finished_build_reruns_without_an_executor(world, tmp_path, nltk_tagger) -> None:
    """A rerun into a finished ``--out`` plans nothing and makes no row: its executor is never
    made, and every shard counts as resumed."""
    out = tmp_path / "out"
    first = _build("biaug", world, out, LocalExecutor)
    files = {
        name: digest for name, digest in digests(out, world).items() if name != "manifest.json"
    }

    def no_executor() -> Executor:
        raise AssertionError("a finished build made an executor")

    again = _build("biaug", world, out, no_executor)
    counts = again.manifest["counts"]
    assert counts["shards_resumed"] == counts["shards"] and counts["rows_this_run"] == 0
    assert {n: d for n, d in digests(out, world).items() if n != "manifest.json"} == files
    assert again.manifest["written"] == first.manifest["written"]


def test_every_mode_has_its_config_its_flags_and_its_builder() -> None:
    """A D′ method is one entry in each registry: its config (METHOD_CONFIGS), whose fields
    are flags in OPTION_ORDER (checked on import), and its builder (METHODS)."""
    from xmr.synth.config import CONFIGS, METHOD_CONFIGS, MODES, OPTION_ORDER, SynthOptions
    from xmr.synth.methods import METHODS

    assert set(METHODS) == set(METHOD_CONFIGS) == set(MODES)
    declared = [f.name for config in CONFIGS for f in fields(config)]
    assert sorted(declared) == sorted(OPTION_ORDER)
    for mode in MODES:
        options = SynthOptions.of(mode=mode)
        assert options.own is options.methods[mode]
