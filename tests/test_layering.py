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
    "errors",  # xmr/errors.py: the errors a user meets as one line (bad input, an unready machine)
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
    "xmr.pipeline.ray_idle",  # Ray Data's scheduling loop, paused while it only spins
    "xmr.llm.vllm_processor",  # ray.data.llm's vLLM processor (Ray imported in its builder)
    "xmr.train.run",  # the Ray Train driver
    "xmr.train.loop",  # the Ray Train worker loop
    "xmr.train.loader",  # the Ray Data stage that decodes training batches
    "xmr.tune.sweep",  # the Ray Tune driver
    "xmr.tune.trials",  # the Ray Tune trial functions
    "xmr.tune.trial_lines",  # the Ray Tune callback that prints a sweep's progress
})  # fmt: skip
"""The only modules whose import may load Ray."""


RAY_MODULE_LINES = 450
"""The most lines a Ray wiring module may have: wiring, not algorithms (those go below it)."""

RAY_FUNCTION_LINES = 60
"""The most lines of code (its docstring aside) a function in a Ray wiring module may have: a
loop, a plan or a record growing inside the wiring goes below it (``xmr.train.fit``,
``xmr.train.plan``, ``xmr.train.record``)."""

RAY_SURFACE = {
    "xmr.pipeline.ray_executor": {
        "RayExecutor",
        "StagePool",
        "cluster_gpus",
        "cpus_per_gpu",
        "init_ray",
        "map_stage",
    },
    "xmr.pipeline.ray_idle": {"pause_when_idle"},
    "xmr.llm.vllm_processor": {"build_vllm_processor"},
    "xmr.train.run": {"train"},
    "xmr.train.loop": set(),
    "xmr.train.loader": set(),
    "xmr.tune.sweep": {"run_sweep"},
    "xmr.tune.trials": set(),
    "xmr.tune.trial_lines": set(),
}
"""What other modules may import from a wiring module: its entry points. A statistic, a constant
or a formatter another module needs lives below Ray, so calling it never starts Ray."""


def _module_paths() -> dict[str, Path]:
    """Every xmr module's dotted name -> its file (a package's is its ``__init__.py``)."""
    paths = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        paths[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return paths


def _modules() -> list[str]:
    """The importable modules (entry points, ``__main__``, run rather than imported)."""
    return [name for name in _module_paths() if not name.endswith(".__main__")]


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
    comparing = [
        (module, path)
        for module, path in _module_paths().items()
        if _layer(module) == "compare"
        or module in ("xmr.tune.pareto", "xmr.jobs.comparison", "xmr.jobs.gender")
    ]
    wrong = [
        f"{module}:{line} imports {target}"
        for module, path in comparing
        for line, target in _imports(path, module)
        if target in RAY_WIRING
    ]  # Ray itself: test_only_the_wiring_modules_import_ray_even_at_call_time
    assert not wrong, "\n".join(wrong)


def test_every_package_is_in_the_dependency_order() -> None:
    layers = {_layer(m) for m in _modules()}
    assert layers <= set(LAYERS), f"add {sorted(layers - set(LAYERS))} to LAYERS and README"


def test_packages_import_only_downward() -> None:
    rank = {name: i for i, name in enumerate(LAYERS)}
    wrong = []
    for module, path in _module_paths().items():
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


def _circle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import circle in ``edges`` (module -> modules it imports), or None."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in sorted(edges[module]):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (found := visit(target)):
                return found
        state[module] = 2
        path.pop()
        return None

    for module in sorted(edges):
        if module not in state and (found := visit(module)):
            return found
    return None


def test_no_import_circles_between_the_files_of_a_package() -> None:
    paths = _module_paths()
    files = {m for m, p in paths.items() if p.name != "__init__.py"}
    edges = {
        module: {
            target
            for _, target in _imports(paths[module], module)
            if target in files
            and target != module
            and target.rpartition(".")[0] == module.rpartition(".")[0]
        }
        for module in files
    }
    circle = _circle(edges)
    assert circle is None, "import circle (lazy imports count): " + " -> ".join(circle or [])


def test_only_the_wiring_modules_import_ray_even_at_call_time() -> None:
    wrong = []
    for module, path in _module_paths().items():
        if module in RAY_WIRING:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            wrong += [
                f"{path.relative_to(REPO)}:{node.lineno} imports {name}"
                for name in names
                if name == "ray" or name.startswith("ray.")
            ]
    assert not wrong, "Ray outside the wiring modules:\n" + "\n".join(wrong)


def test_what_leaves_a_wiring_module_is_an_entry_point() -> None:
    wrong = []
    for module, path in _module_paths().items():
        if module in RAY_WIRING:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module in RAY_WIRING:
                wrong += [
                    f"{path.relative_to(REPO)}:{node.lineno} imports {node.module}.{a.name}"
                    for a in node.names
                    if a.name not in RAY_SURFACE[node.module]
                ]
    assert not wrong, "move these below Ray, or add an entry point to RAY_SURFACE:\n" + "\n".join(
        wrong
    )


def test_the_wiring_modules_stay_thin() -> None:
    sizes = {
        m: len(p.read_text().splitlines()) for m, p in _module_paths().items() if m in RAY_WIRING
    }
    fat = {m: n for m, n in sizes.items() if n > RAY_MODULE_LINES}
    assert not fat, f"over {RAY_MODULE_LINES} lines (move what is not Ray below it): {fat}"


def _code_lines(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """A function's lines, its docstring's left out."""
    lines = function.end_lineno - function.lineno + 1
    first = function.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
        lines -= first.end_lineno - first.lineno + 1
    return lines


def test_the_wiring_functions_stay_short() -> None:
    long = []
    for module, path in _module_paths().items():
        if module not in RAY_WIRING:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            function = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            if function and (lines := _code_lines(node)) > RAY_FUNCTION_LINES:
                long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name}: {lines}")
    assert not long, f"over {RAY_FUNCTION_LINES} lines of code:\n" + "\n".join(long)


def _fast_test_files() -> list[Path]:
    """Test files with at least one case outside ``slow`` (the fast tier)."""
    fast = []
    for path in sorted((REPO / "tests").glob("test_*.py")):
        tree = ast.parse(path.read_text(), str(path))
        if any(_is_slow_mark(n) for n in _module_marks(tree)):
            continue
        tests = [
            n
            for n in tree.body
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            and n.name.lower().startswith("test")
        ]
        if any(not any(_is_slow_mark(d) for d in t.decorator_list) for t in tests):
            fast.append(path)
    return fast


def _module_marks(tree: ast.Module) -> list[ast.expr]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
        ):
            value = node.value
            return list(value.elts) if isinstance(value, ast.List | ast.Tuple) else [value]
    return []


def _is_slow_mark(node: ast.expr) -> bool:
    return ast.unparse(node) == "pytest.mark.slow"


def test_the_fast_tier_covers_every_package() -> None:
    covered = set()
    for path in _fast_test_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("xmr"):
                covered.add(_layer(node.module))
            elif isinstance(node, ast.Import):
                covered |= {_layer(a.name) for a in node.names if a.name.startswith("xmr")}
    missing = [name for name in LAYERS if name != "xmr" and name not in covered]
    assert not missing, f"no fast test imports {missing}: add one outside `slow`"


def test_the_training_driver_reaches_tracking_only_through_its_record() -> None:
    """``xmr/train/run.py`` plans, opens the record and fits on Ray; what it logs goes through
    ``xmr.train.record`` (it names tracking's run type, and calls nothing there)."""
    path = PACKAGE / "train" / "run.py"
    names = {
        alias.name
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module == "xmr.tracking"
        for alias in node.names
    }
    assert names <= {"TrackedRun"}
