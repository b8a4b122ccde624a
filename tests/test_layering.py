"""The package layering: Ray and MLflow stay in the wiring layer, and packages import downward.

``LAYERS`` is the dependency order, bottom first; README's Layout section lists the same
packages in the same order. A module may import its own package and those listed before it.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "xmr"

LAYERS = (
    "xmr",  # xmr/__init__.py: the version
    "pretrained",
    "stops",  # xmr/stops.py: SIGINT and SIGTERM as one stop, what runs first, the exit code
    "storage",  # xmr/storage.py: local paths and object-store URIs (pyarrow filesystems)
    "tracking",
    "job_env",  # xmr/job_env.py: the variables xmr forwards to a Ray job's processes
    "fields",  # xmr/fields.py: options declared on dataclasses: flags, defaults, help, bounds
    "options",  # xmr/options.py: the typer commands built from those dataclasses
    "progress",  # xmr/progress.py: console progress, bars on a terminal, lines in a log (tqdm)
    "logs",  # xmr/logs.py: other libraries' INFO off the console
    "data",  # the readers (COCO, Flickr30k, Fashion-Gen, ToyWorld folders, D′) and ImageRecord
    "removal",  # odmap §3.1: an ImageRecord's removal plans, box masks, fills
    "toyworld",  # the ToyWorld generator: a shared world core, scene/ and shop/ (plans removals)
    "text",
    "metrics",
    "benchmarks",  # ARO / SugarCrepe readers and scoring rules (plain numpy, no models)
    "compare",  # paired statistics, verdicts, runs from tracking, tables: eval, tune, jobs use it
    "retrieval",
    "debias",
    "detection",
    "pipeline",
    "llm",  # LLM backends (OpenAI-compatible HTTP, local transformers, vLLM)
    "biaug",  # the BiAug method: prompts, strict answer parsing, proposal filters, oracle
    "models",
    "synth",
    "eval",
    "train",
    "tune",
    "jobs",  # the papers' experiments as resumable step sequences (ray_jobs/ submits them)
    "demo",
    "cluster",  # xmr/cluster.py: `xmr cluster up/down` (ray start, mlflow server as subprocesses)
    "cli",
)
"""Packages (and top-level modules) in dependency order, bottom first."""

RAY_WIRING = frozenset({
    "xmr.pipeline.ray_executor",  # Ray Data: stages onto actor pools and tasks
    "xmr.llm.vllm",  # ray.data.llm's vLLM processor (Ray imported inside its builder only)
    "xmr.train.run",  # the Ray Train driver
    "xmr.train.loop",  # the Ray Train worker loop
    "xmr.train.loader",  # the Ray Data stage that decodes training batches
    "xmr.tune.sweep",  # the Ray Tune driver
    "xmr.tune.trials",  # the Ray Tune trial functions
    "xmr.tune.trial_lines",  # the Ray Tune callback that prints a sweep's progress
})  # fmt: skip
"""The only modules whose import may load Ray."""


def _modules() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts[-1] == "__main__":
            continue  # entry points run, they are not imported
        names.append(".".join(parts))
    return names


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "xmr"


def _first_importers(modules: list[str]) -> dict[str, str | None]:
    """Import ``modules`` one after another in a fresh interpreter: for ray and for mlflow, the
    first module whose import loaded it (None: none did)."""
    code = (
        "import importlib, json, sys\n"
        "first = {'ray': None, 'mlflow': None}\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "    for heavy in first:\n"
        "        if first[heavy] is None and heavy in sys.modules:\n"
        "            first[heavy] = name\n"
        "print(json.dumps(first))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_library_modules_import_neither_ray_nor_mlflow() -> None:
    first = _first_importers([m for m in _modules() if m not in RAY_WIRING])
    assert first["ray"] is None, f"importing {first['ray']} loads ray"
    assert first["mlflow"] is None, f"importing {first['mlflow']} loads mlflow"


def _imports(path: Path, module: str) -> list[tuple[int, str]]:
    """(line, imported xmr module) of every import in ``path``, lazy ones included."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append((node.lineno, target))
    return [(line, name) for line, name in found if name == "xmr" or name.startswith("xmr.")]


def test_comparing_imports_no_ray_wiring_even_at_call_time() -> None:
    """Paired statistics, ties and verdicts live in ``xmr.compare``; the modules that compare
    (and the Pareto fronts and the job step that ask for ties) import neither Ray nor a wiring
    module, not even inside a function (as ``jobs/gender.py`` once imported ``tune.sweep``)."""
    comparing = [*sorted((PACKAGE / "compare").glob("*.py")), PACKAGE / "tune" / "pareto.py"]
    comparing += [PACKAGE / "jobs" / "comparison.py", PACKAGE / "jobs" / "gender.py"]
    wrong = []
    for path in comparing:
        parts = path.relative_to(REPO).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        tree = ast.parse(path.read_text(), str(path))
        names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        wrong += [f"{module} imports {n}" for n in names if n == "ray" or n.startswith("ray.")]
        wrong += [f"{module}:{line} imports {t}" for line, t in _imports(path, module)
                  if t in RAY_WIRING]  # fmt: skip
    assert not wrong, "\n".join(wrong)


def test_every_package_is_in_the_dependency_order() -> None:
    layers = {_layer(m) for m in _modules()}
    assert layers <= set(LAYERS), f"add {sorted(layers - set(LAYERS))} to LAYERS and README"


def test_packages_import_only_downward() -> None:
    rank = {name: i for i, name in enumerate(LAYERS)}
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        own = rank[_layer(module)]
        for line, target in _imports(path, module):
            if rank[_layer(target)] > own:
                wrong.append(f"{path.relative_to(REPO)}:{line} imports {target}")
    assert not wrong, "upward imports (see LAYERS):\n" + "\n".join(wrong)


def test_readme_layout_lists_the_packages_in_dependency_order() -> None:
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Layout", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^xmr/(\w+)(?:/|\.py)", section, flags=re.M)
    assert listed == [name for name in LAYERS if name != "xmr"]
