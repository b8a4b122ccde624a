"""The search spaces shipped with ``xmr tune`` (one YAML file each), installed as the package
``xmr.tune_spaces`` (see setup.py)."""
