"""The examples in xmr's docstrings run, one test per module that has any."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "xmr"


def _modules_with_examples() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name != "__main__.py" and ">>> " in path.read_text():
            parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


@pytest.mark.parametrize("module", _modules_with_examples())
def test_docstring_examples(module: str, nltk_tagger: None) -> None:
    result = doctest.testmod(
        importlib.import_module(module), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    )
    assert result.attempted > 0, f"{module} has '>>> ' but no doctest ran"
    assert result.failed == 0
