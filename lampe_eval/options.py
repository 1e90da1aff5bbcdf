"""Typed settings: benchmark options (``--opt key=value``) and the strict value parsing they share with
method parameters (``--param key=value``).

A value comes either as text (the command line) or as YAML data (experiment files, method configs);
both are checked against the declared type, and anything else is a one-line error: ``s1=1.5`` for an
integer, ``fixture=maybe`` for a flag, a misspelt name ("did you mean ...?").
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import LampeEvalError, suggestion

TRUE = frozenset({"1", "true", "yes", "on"})
FALSE = frozenset({"0", "false", "no", "off"})
TYPE_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string", Path: "a path"}


def split_list(values: Iterable[str] | None) -> list[str]:
    """Repeated and/or comma-separated names (``--method rope,lampe --method yarn``), blanks dropped."""
    out: list[str] = []
    for value in values or []:
        out.extend(v.strip() for v in value.split(",") if v.strip())
    return out


def parse_flag(value: Any, what: str = "value") -> bool:
    """The one boolean parser: true/false, yes/no, on/off, 1/0 (any case), or a YAML boolean."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in TRUE | FALSE:
        return value.strip().lower() in TRUE
    raise LampeEvalError(f"{what} must be true or false, got {value!r}")


def parse_typed(value: Any, kind: type, what: str) -> Any:
    """``value`` (text or YAML data) as ``kind`` (bool, int, float, str or Path), strictly."""
    if kind is bool:
        return parse_flag(value, what)
    parse = _PARSERS.get(kind)
    if parse is None:
        raise TypeError(f"unsupported option type {kind!r}")
    expected = f"{what} must be {TYPE_NAMES.get(kind, kind.__name__)}, got {value!r}"
    if isinstance(value, (bool, list, dict, tuple)) or value is None:
        raise LampeEvalError(expected)
    parsed = parse(value)
    if parsed is None:
        raise LampeEvalError(expected)
    return parsed


def _number(value: object) -> float | None:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _parse_int(value: object) -> int | None:
    if isinstance(value, int):
        return value
    number = _number(value)
    if number is None or not math.isfinite(number) or not number.is_integer():
        return None
    return int(number)


def _parse_float(value: object) -> float | None:
    number = _number(value)
    return None if number is None or math.isnan(number) else number


def _parse_path(value: object) -> str | None:
    text = str(value).strip()
    return os.path.abspath(os.path.expanduser(text)) if text else None  # the same path from any cwd


def _parse_str(value: object) -> str | None:
    if isinstance(value, (int, float)):
        return str(value)
    return value if isinstance(value, str) else None


# Each parser gives None for a value its type cannot take (then one line says what was expected).
_PARSERS: dict[type, Callable[[object], object]] = {
    int: _parse_int,
    float: _parse_float,
    Path: _parse_path,
    str: _parse_str,
}


@dataclass(frozen=True)
class Option:
    """One benchmark option: ``--opt name=value``.

    ``affects_results``: whether it can change a sample or its score (then it is part of a job's
    identity, so a rerun with another value computes afresh); progress, caching and memory knobs do not.
    ``default=None`` means "not set" (the benchmark decides, e.g. no data directory).
    """

    name: str
    type: type
    default: Any
    help: str
    affects_results: bool = True
    choices: tuple[str, ...] = ()

    def parse(self, value: Any, where: str = "") -> Any:
        what = f"{where}option {self.name}"
        if value is None:
            return self.default
        parsed = parse_typed(value, self.type, what)
        if self.choices and parsed not in self.choices:
            hint = suggestion(str(parsed), self.choices)
            raise LampeEvalError(f"{what}={parsed}: choose one of {', '.join(self.choices)}{hint}")
        return parsed

    def type_name(self) -> str:
        if self.choices:
            return "|".join(self.choices)
        return {bool: "bool", int: "int", float: "float", str: "str", Path: "path"}[self.type]


def parse_options(
    declared: Iterable[Option], values: Mapping[str, Any], where: str, *, strict: bool = True
) -> dict[str, Any]:
    """Every declared option typed (defaults filled in) from ``values``.

    ``strict``: a name that is not declared is an error with the closest declared name.
    """
    table = {o.name: o for o in declared}
    if strict:
        for name in values:
            if name not in table:
                hint = suggestion(name, list(table))
                known = f" (its options: {', '.join(table)})" if table and not hint else ""
                raise LampeEvalError(f"unknown option {name} for {where}{hint}{known}")
    return {name: option.parse(values.get(name), f"{where}: ") for name, option in table.items()}


def identity(declared: Iterable[Option], values: Mapping[str, Any]) -> dict[str, Any]:
    """The options that make a job what it is: those that affect results, when not at their default."""
    out = {}
    for option in declared:
        if option.affects_results and option.name in values and values[option.name] != option.default:
            out[option.name] = values[option.name]
    return out
