"""The one loader of the benchmarks' task tables: ``tasks/<benchmark>/<benchmark>.yaml``.

A table is package data (:mod:`lampe_eval.resources`), overridden by the same path under the user
directory. Each benchmark turns the raw mapping into its own typed config with a ``parse`` function;
any error in the file (YAML syntax, a missing or misspelt key, a wrong type) is one line naming the file.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from .. import resources
from ..errors import LampeEvalError
from ..resources import mapping

__all__ = ["load_table", "mapping", "read_table", "table_location"]

T = TypeVar("T")
_CACHE: dict[tuple[str, str, Callable[..., Any]], Any] = {}


def table_location(benchmark: str) -> resources.Resource:
    relative = f"tasks/{benchmark}/{benchmark}.yaml"
    found = resources.find(relative)
    if found is None:
        mine = resources.user_dir() / relative
        raise LampeEvalError(f"{benchmark} task table not found: {relative} (package data, or {mine})")
    return found


def read_table(benchmark: str) -> tuple[dict[str, Any], str]:
    """The raw mapping of a benchmark's task table and where it was read (for messages)."""
    found = table_location(benchmark)
    return resources.read_yaml(found), resources.display(found)


def load_table(benchmark: str, parse: Callable[[dict[str, Any], str], T]) -> T:
    """``parse(raw mapping, where)`` of the benchmark's table, cached per file; errors are one line."""
    where = resources.display(table_location(benchmark))
    key = (benchmark, where, parse)
    if key not in _CACHE:
        data, where = read_table(benchmark)
        try:
            _CACHE[key] = parse(data, where)
        except LampeEvalError:
            raise
        except (TypeError, ValueError, KeyError, AttributeError) as err:
            message = str(err.args[0]) if isinstance(err, KeyError) and err.args else str(err)
            raise LampeEvalError(f"{where}: bad task table: {message}".splitlines()[0]) from err
    return _CACHE[key]
