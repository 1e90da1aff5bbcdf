"""Per-model method settings: ``method_configs/<method>-<model>.yaml``.

A file holds ``params:`` (the method's hyperparameters for that model) and may hold anything else
(provenance, sweep data); only ``params`` is read here. Lookup order for a parameter:
method default (from the window and target length) < this file < ``--param`` on the command line.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from .errors import LampeEvalError


def config_dir() -> Path:
    env = os.environ.get("LAMPE_EVAL_METHOD_CONFIGS")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent.parent / "method_configs"


def config_path(method: str, model: str) -> Path:
    return config_dir() / f"{method}-{model}.yaml"


def load_method_params(method: str, model: str) -> dict[str, Any]:
    path = config_path(method, model)
    if not path.is_file():
        return {}
    data = yaml.safe_load(path.read_text()) or {}
    params = data.get("params", {})
    if not isinstance(params, dict):
        raise LampeEvalError(f"{path}: 'params' must be a mapping")
    return params
