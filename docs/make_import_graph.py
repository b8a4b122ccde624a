"""Write docs/imports.md: the picture of which xmr package imports which, drawn from the code.

    python docs/make_import_graph.py           # rewrite docs/imports.md
    python docs/make_import_graph.py --check   # exit 1 if docs/imports.md is stale

Every import counts, lazy ones (inside a function) and ``TYPE_CHECKING`` ones included. The
picture keeps an arrow ``a --> b`` ("a imports b") only where no longer path says it already
(the transitive reduction), so the layers read top to bottom; the table under it lists every
package's direct imports in full. It refuses to draw a circle: packages import downward only
(``tests/test_layering.py`` checks the same, and ``tests/test_docs.py`` runs ``--check``).
"""

from __future__ import annotations

import ast
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "xmr"
OUTPUT = REPO / "docs" / "imports.md"

HEADER = """\
# Which package imports which

Drawn from the code by `python docs/make_import_graph.py` (`tests/test_docs.py` fails when this
file differs from what it would draw; do not edit it by hand). An arrow `a --> b` means `a`
imports `b`; arrows that a longer path already implies are left out, so each package sits below
everything that needs it. Every import counts, those inside functions too. There is no circle:
the generator refuses one, and `tests/test_layering.py` keeps the order of
[README's Layout](../README.md#layout).
"""


def package_of(module: str) -> str:
    """``xmr.train.run`` -> ``train``; top-level modules are their own package (``cli``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "xmr"


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(path: Path, module: str) -> set[str]:
    """The xmr modules ``path`` imports (relative imports resolved)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                found.add(".".join(base + ([node.module] if node.module else [])))
            else:
                found.add(node.module or "")
    return {name for name in found if name == "xmr" or name.startswith("xmr.")}


def package_imports() -> dict[str, set[str]]:
    """Package -> the other packages its modules import."""
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        if module == "xmr":
            continue  # the version only
        own = package_of(module)
        targets = {package_of(name) for name in _imported(path, module)} - {own, "xmr"}
        graph.setdefault(own, set()).update(targets)
    return graph


def reduction(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The arrows of ``graph`` that no longer path implies (``graph`` has no circle)."""

    def reachable(start: str) -> set[str]:
        seen: set[str] = set()
        stack = list(graph[start])
        while stack:
            node = stack.pop()
            if node not in seen:
                seen.add(node)
                stack += graph.get(node, set())
        return seen

    below = {node: reachable(node) for node in graph}
    return {
        node: {t for t in targets if not any(t in below[o] for o in targets - {t})}
        for node, targets in graph.items()
    }


def render() -> str:
    graph = package_imports()
    try:
        sorter = TopologicalSorter({node: sorted(graph[node]) for node in sorted(graph)})
        order = list(sorter.static_order())  # imported packages first, the same every run
    except CycleError as exc:
        raise SystemExit(f"import circle between packages: {' -> '.join(exc.args[1])}") from None
    kept = reduction(graph)
    lines = [HEADER, "```mermaid", "flowchart TD"]
    for node in reversed(order):
        lines += [f"    {node} --> {target}" for target in sorted(kept.get(node, ()))]
    lines += ["```", "", "| package | imports |", "|---|---|"]
    for node in reversed(order):
        lines.append(f"| `{node}` | {', '.join(f'`{t}`' for t in sorted(graph.get(node, ())))} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not OUTPUT.is_file() or OUTPUT.read_text() != text:
            print(f"{OUTPUT.relative_to(REPO)} is stale: run python docs/make_import_graph.py")
            return 1
        return 0
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
