"""How the optional ``groundingdino-py`` backend is installed, and the check that it is.

Cheap to import (no torch, no ``groundingdino``): :mod:`xmr.detection.backends` checks a job's
detector settings with it before Ray starts, and :mod:`xmr.detection.groundingdino_py` names the
install command in its import error.
"""

from __future__ import annotations

import importlib.util

# groundingdino-py 0.4.0 declares opencv-python (the GUI build, which would replace xmr's
# opencv-python-headless) and supervision==0.6.0 (only for its drawing helpers): it is installed
# without its declared dependencies, and the extra lists the ones its model code imports.
GROUNDINGDINO_PY_INSTALL = (
    'pip install -e ".[groundingdino]" && pip install --no-deps groundingdino-py==0.4.0'
)

# Modules the model code of groundingdino-py imports (groundingdino itself, then the extra's).
_GROUNDINGDINO_PY_MODULES = ("groundingdino", "addict", "yapf")


def require_groundingdino_py() -> None:
    """Raise ``ModuleNotFoundError`` (one line, with the install command) unless installed.

    Looks the modules up without importing them (importing ``groundingdino`` takes seconds).
    """
    for module in _GROUNDINGDINO_PY_MODULES:
        if importlib.util.find_spec(module) is None:
            raise ModuleNotFoundError(
                f"--detector groundingdino-py needs the {module!r} module, which is not "
                f"installed; install the backend with: {GROUNDINGDINO_PY_INSTALL}",
                name=module,
            )
