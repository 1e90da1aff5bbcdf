"""Context lengths as people write them: "4096", "4k", "64K", "128k" (K = 1024)."""

from __future__ import annotations

import re

from .errors import LampeEvalError

_LENGTH_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmM]?)\s*$")
_MULTIPLIER = {"": 1, "k": 1024, "m": 1024 * 1024}


class BadLengthError(LampeEvalError, ValueError):
    """A length string that is not a positive token count."""


def parse_length(text: str | int) -> int:
    """Parse one length: 4096, "4096", "4k", "64K", "1.5k" (must give a whole number of tokens)."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        match = _LENGTH_RE.match(str(text))
        if not match:
            raise BadLengthError(f"bad length {text!r}: use a token count like 4096, 4k, 64K or 128k")
        number, unit = match.groups()
        scaled = float(number) * _MULTIPLIER[unit.lower()]
        if not scaled.is_integer():
            raise BadLengthError(f"bad length {text!r}: it is not a whole number of tokens")
        value = int(scaled)
    if value <= 0:
        raise BadLengthError(f"bad length {text!r}: must be positive")
    return value


def parse_lengths(values: list[str] | str) -> list[int]:
    """Parse repeated and/or comma-separated lengths, keeping order and dropping duplicates."""
    items = [values] if isinstance(values, str) else list(values)
    out: list[int] = []
    for item in items:
        for part in str(item).split(","):
            if part.strip():
                length = parse_length(part)
                if length not in out:
                    out.append(length)
    if not out:
        raise BadLengthError("no length given: use e.g. --len 4k or --len 4k,16k")
    return out


def format_length(tokens: int) -> str:
    """The short form used in tables and file names: 16384 -> "16k", 1000 -> "1000"."""
    if tokens % 1024 == 0:
        return f"{tokens // 1024}k"
    return str(tokens)
