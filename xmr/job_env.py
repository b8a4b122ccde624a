"""The environment variables xmr reads, as a Ray job's processes need them.

A Ray worker, and the driver that ``ray job submit`` starts, sees the environment of the ``ray
start`` that started its node, not the submitting shell's. xmr passes what it reads through the
job's runtime environment (``runtime_env={"env_vars": ...}``): its driver does so when it
connects to or starts Ray (:func:`~xmr.pipeline.ray_executor.init_ray`), and ``xmr job-env``
prints them for the submitting shell: ``ray job submit --runtime-env-json "$(xmr job-env)"``.

:func:`forwarded_env` is the list: ``NLTK_DATA`` (its folders made absolute),
``MLFLOW_TRACKING_URI`` (a relative sqlite path made absolute), every ``XMR_*``
(``XMR_STORAGE`` and ``XMR_CACHE_DIR`` made absolute) and the AWS settings that are not secret
(:data:`AWS_SETTINGS`). A runtime environment is shown in Ray's dashboard and job API, so
nothing secret is forwarded: no AWS key or session token, no ``XMR_*`` whose name says key,
secret, token or password. Credentials reach a node through its own environment or instance
profile.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping

from xmr.storage import STORAGE_ENV, storage_path
from xmr.tracking import absolute_sqlite_uri

AWS_SETTINGS = ("AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE")
"""The AWS variables forwarded: where the object store is, never the credentials."""
FORWARDED = ("NLTK_DATA", "MLFLOW_TRACKING_URI", *AWS_SETTINGS)
"""The variables forwarded by name; every ``XMR_*`` is forwarded too."""
PREFIX = "XMR_"
SECRET = re.compile("KEY|SECRET|TOKEN|PASSWORD|CREDENTIAL", re.IGNORECASE)
"""An ``XMR_*`` name that says it holds a secret: never forwarded."""
FOLDER_LISTS = ("NLTK_DATA", "XMR_CACHE_DIR")
"""Variables holding folders (``os.pathsep``-separated), made absolute where xmr runs."""


def forwarded_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables of ``environ`` (default: this process's) that xmr forwards to a Ray job's
    processes, relative paths made absolute against the working directory; unset and empty
    ones left out. See the module docstring for which."""
    environ = os.environ if environ is None else environ
    own = sorted(n for n in environ if n.startswith(PREFIX) and not SECRET.search(n))
    values = {name: _absolute(name, environ.get(name) or "") for name in (*FORWARDED, *own)}
    return {name: value for name, value in values.items() if value}


def _absolute(name: str, value: str) -> str:
    """``value`` of variable ``name`` as a process in another folder reads it."""
    if not value:
        return value
    if name in FOLDER_LISTS:
        folders = value.split(os.pathsep)
        return os.pathsep.join(os.path.abspath(folder) for folder in folders if folder)
    if name == "MLFLOW_TRACKING_URI":
        return absolute_sqlite_uri(value)
    if name == STORAGE_ENV:
        return str(storage_path(value))
    return value


def runtime_env_json(environ: Mapping[str, str] | None = None) -> str:
    """``{"env_vars": {...}}`` of :func:`forwarded_env`: the value of ``ray job submit
    --runtime-env-json``.

    >>> runtime_env_json({"XMR_STORAGE": "s3://bucket/xmr", "AWS_SECRET_ACCESS_KEY": "x"})
    '{"env_vars": {"XMR_STORAGE": "s3://bucket/xmr"}}'
    """
    return json.dumps({"env_vars": forwarded_env(environ)})
