"""The first thing a job script runs: one line, not a traceback, when the job's Python is not
the one xmr is installed in.

``ray job submit -- python ray_jobs/<job>.py`` runs whichever ``python`` the head node's PATH
finds. ``xmr cluster up`` puts its own interpreter first on the nodes' PATH and records it in
``XMR_PYTHON``; a job started by another one (another venv, the system's) stops here and says
which ran it and which to use. Plain Python: it must run where xmr cannot be imported.
"""

from __future__ import annotations

import importlib.util
import os
import sys


def interpreter_problem(executable: str, prefix: str, expected: str | None) -> str | None:
    """Why this interpreter cannot run a job (None: it can). ``expected``: ``XMR_PYTHON``, the
    interpreter of the cluster's ``xmr cluster up`` (unset on other clusters)."""
    if expected:
        use = f"run the job as `{expected} ray_jobs/...`"
    else:
        use = "run it with the Python xmr is installed in (`-- <venv>/bin/python ray_jobs/...`)"
    folder = os.path.dirname(os.path.abspath(executable))
    if expected and os.path.dirname(os.path.abspath(expected)) != folder:
        return f"error: this job runs under {executable} (prefix {prefix}), not {expected}: {use}"
    if importlib.util.find_spec("xmr") is None:
        return f"error: {executable} cannot import xmr: {use}"
    return None


def require_xmr_python() -> None:
    """Exit with status 2 and :func:`interpreter_problem`'s line when there is one."""
    problem = interpreter_problem(sys.executable, sys.prefix, os.environ.get("XMR_PYTHON"))
    if problem:
        print(problem, file=sys.stderr)
        raise SystemExit(2)
