"""Which packages the distribution holds (the rest of the metadata is in pyproject.toml).

Every ``xmr*`` package, as ``[tool.setuptools.packages.find] include = ["xmr*"]`` would list
them, plus the shipped search spaces: the top-level ``tune_spaces/`` folder, installed as the
package ``xmr.tune_spaces`` so that every install has them (found with ``importlib.resources``
by :func:`xmr.tune.space.shipped_spaces`). pyproject.toml cannot add a package to the ones it
finds, hence this file.
"""

from setuptools import find_namespace_packages, setup

setup(
    packages=[*find_namespace_packages(include=["xmr*"]), "xmr.tune_spaces"],
    package_dir={"xmr.tune_spaces": "tune_spaces"},
)
