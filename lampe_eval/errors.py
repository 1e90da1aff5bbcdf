"""User-facing errors: the CLI prints their message on one line and exits non-zero."""

from __future__ import annotations

import difflib
from collections.abc import Sequence


class LampeEvalError(Exception):
    """Base class for errors caused by bad input (not bugs)."""


class UnknownNameError(LampeEvalError, KeyError):
    """A method, benchmark, task or model preset name that is not registered."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class UnsupportedModelError(LampeEvalError):
    """The model's architecture cannot be patched by this method."""


class BackendGone(LampeEvalError):
    """The engine or server a backend speaks to is gone (every endpoint down): nothing more can run on it in
    this run, so a worker's later units fail at once with this line; a rerun resumes them."""


class MissingDataError(LampeEvalError):
    """A dataset or file that a benchmark needs is not available."""


def suggestion(name: str, known: Sequence[str]) -> str:
    """``"; did you mean X?"`` for the closest known name, or "" when none is close."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.5)
    if not close:
        lowered = {k.lower(): k for k in known}
        close = [lowered[name.lower()]] if name.lower() in lowered else []
    return f"; did you mean {close[0]}?" if close else ""


def unknown(kind: str, name: str, known: Sequence[str]) -> UnknownNameError:
    """An UnknownNameError with the closest known name, else the list of what is available."""
    hint = suggestion(name, known)
    if hint:
        return UnknownNameError(f"unknown {kind} {name!r}{hint}")
    return UnknownNameError(f"unknown {kind} {name!r}; choose one of: {', '.join(sorted(known))}")


def clip(value: object, limit: int = 80) -> str:
    """``value`` for an error message: its repr (strings quoted) on one line, cut to ``limit`` characters."""
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
