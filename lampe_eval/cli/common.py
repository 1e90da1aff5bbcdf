"""What every command shares: the consoles, one-line errors, ``key=value`` parsing and the request fields
every tool shares."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.text import Text

from ..errors import LampeEvalError

console = Console()
err_console = Console(stderr=True)


def say_error(label: str, message: str) -> None:
    """``label message`` on one stderr line: never wrapped, never read as markup."""
    line = Text.assemble((label, "bold red"), " ", message.replace("\n", " "))
    err_console.print(line, soft_wrap=True, highlight=False)


def fail(message: str) -> NoReturn:
    """One-line error, exit code 2."""
    say_error("error:", message)
    raise typer.Exit(2)


def say_failures(failures: Sequence[Mapping[str, object]]) -> None:
    """A run's failed jobs, one stderr line each, then exit code 1 (nothing when none failed)."""
    if not failures:
        return
    for failure in failures:
        say_error("failed:", f"{failure['describe']}: {failure['error']}")
    raise typer.Exit(1)


def print_line(text: str) -> None:
    """``text`` on stdout as it is: no markup, no highlighting, never wrapped."""
    console.print(text, highlight=False, markup=False, soft_wrap=True)


def parse_key_values(values: list[str] | None, what: str) -> dict[str, str]:
    """``key=value`` pairs as text; the declared type of each key parses its value."""
    out: dict[str, str] = {}
    for item in values or []:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise LampeEvalError(f"bad {what} {item!r}: use key=value")
        out[key.strip()] = raw.strip()
    return out


def command_line(name: str) -> str:
    """This process's command line when it runs the command ``name`` (recorded with a fit), else ''."""
    return " ".join(["lampe-eval", *sys.argv[1:]]) if sys.argv[1:2] == [name] else ""


def tool_request_fields(
    command: str,
    *,
    opt: list[str] | None,
    out: Path,
    config: Path | None,
    write: bool,
    device: str | None,
    dtype: str | None,
    backend: str,
) -> dict[str, Any]:
    """The fields every tool's request shares (:class:`~lampe_eval.tools.common.ToolRequest`) from the
    options every tool command takes; ``command`` names the command whose command line is recorded."""
    return {
        "options": parse_key_values(opt, "--opt"),
        "out": out,
        "config": config,
        "write": write,
        "device": device,
        "dtype": dtype,
        "backend": backend,
        "command": command_line(command),
    }
