"""Files that ship inside the package, and the user directory that overrides them.

Package data (read with :mod:`importlib.resources`, so it works from an installed wheel)::

    tasks/<benchmark>/<benchmark>.yaml    task tables of the table-driven benchmarks
    method_configs/<method>-<model>.yaml  per-model method settings (see lampe_eval.method_configs)
    experiments/<name>.yaml               named grids: lampe-eval run --experiment <name>
    fixtures/<benchmark>/<task>.jsonl     tiny hand-written records: --opt fixture=true
    paper_tables/<name>.yaml              a paper's numbers: lampe-eval report --paper <name>

**User directory.** ``$LAMPE_EVAL_HOME`` (default ``~/.config/lampe-eval``) has the same layout. A file
there wins over the packaged file of the same relative path (edit a task table or a method config
without touching the installation), and its extra files are found too (your own experiments, method
configs for other models, task tables and fixtures of benchmarks you add with ``--import``).
``lampe-eval fit`` writes its fitted config there by default.
"""

from __future__ import annotations

import os
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, TypeAlias

import yaml

from ..errors import LampeEvalError

HOME_ENV = "LAMPE_EVAL_HOME"

Resource: TypeAlias = Traversable  # a pathlib.Path (user directory) or the package's own files


def user_dir() -> Path:
    """The user directory that overrides and extends the package data."""
    env = os.environ.get(HOME_ENV)
    return Path(env).expanduser() if env else Path.home() / ".config" / "lampe-eval"


def packaged(relative: str = "") -> Traversable:
    """A file or folder of the package data (it may not exist)."""
    root = files(__name__)
    return root.joinpath(*relative.split("/")) if relative else root


def find(relative: str) -> Resource | None:
    """The user directory's file at ``relative`` (``tasks/ruler/ruler.yaml``), else the package's, or None."""
    mine = user_dir() / relative
    if mine.is_file():
        return mine
    shipped = packaged(relative)
    return shipped if shipped.is_file() else None


def listing(folder: str, suffix: str) -> dict[str, Resource]:
    """Files ``folder/*suffix`` by name (without the suffix), package data overridden by the user's."""
    out: dict[str, Resource] = {}
    for root in (packaged(folder), user_dir() / folder):
        if root.is_dir():
            for entry in root.iterdir():
                if entry.name.endswith(suffix) and entry.is_file():
                    out[entry.name[: -len(suffix)]] = entry
    return dict(sorted(out.items()))


def read_yaml(resource: Resource | Path) -> dict[str, Any]:
    """A YAML file whose top level is a mapping (empty: {}); anything else is one line naming the file."""
    where = display(resource)
    try:
        data = yaml.safe_load(resource.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as err:
        raise LampeEvalError(f"{where}: not valid YAML: {err}".splitlines()[0]) from err
    except OSError as err:
        raise LampeEvalError(f"{where}: cannot read it ({err.strerror or err})") from err
    if not isinstance(data, dict):
        raise LampeEvalError(f"{where}: expected a mapping at the top level")
    return data


def mapping(value: Any, where: str) -> dict[str, Any]:
    """``value`` as a mapping (None: empty), else a one-line error naming ``where``."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise LampeEvalError(f"{where} must be a mapping")
    return value


def display(resource: Resource | Path | str) -> str:
    """A short name for messages: package data relative to the package, other paths as they are."""
    text = str(resource)
    root = str(packaged())
    return "lampe_eval/resources" + text[len(root) :] if text.startswith(root) else text
