"""On-disk caches of generated samples (RULER, InfiniteBench's synthetic tasks).

A cache is one JSON Lines file per (task, length, model, tokenizer, seed, generator settings): line i is
sample i. Files are named by the tokenizer's content (:func:`tokenizer_fingerprint`), extended under a lock
shared by parallel workers, and survive a kill: a torn last line is cut off and regenerated.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

Line = dict[str, Any]
_FINGERPRINTS: dict[int, tuple[Any, str]] = {}


def tokenizer_fingerprint(tokenizer: PreTrainedTokenizerBase) -> str:
    """A short content hash of a tokenizer (vocabulary, merges, normaliser, chat template, BOS); ""
    without a tokenizer."""
    if tokenizer is None:
        return ""
    cached = _FINGERPRINTS.get(id(tokenizer))
    if cached is not None and cached[0] is tokenizer:
        return cached[1]
    h = hashlib.sha256()
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        h.update(backend.to_str().encode("utf-8"))
    elif hasattr(tokenizer, "get_vocab"):
        h.update(json.dumps(sorted(tokenizer.get_vocab().items())).encode("utf-8"))
    else:  # a hand-made tokenizer (tests): its class is all we know
        h.update(f"{type(tokenizer).__module__}.{type(tokenizer).__qualname__}".encode())
    h.update(str(getattr(tokenizer, "chat_template", "") or "").encode("utf-8"))
    h.update(str(getattr(tokenizer, "bos_token", "")).encode("utf-8"))
    digest = h.hexdigest()[:10]
    _FINGERPRINTS[id(tokenizer)] = (tokenizer, digest)
    return digest


@contextlib.contextmanager
def locked(lock_path: Path) -> Iterator[None]:
    """An exclusive lock between processes (parallel workers share a cache file)."""
    with lock_path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def read_lines(path: Path) -> list[Line]:
    """The valid leading lines of a cache file (line i has ``"index": i``); a torn tail is cut off."""
    if not path.exists():
        return []
    # split on "\n" only: str.splitlines() also breaks at U+2028 etc., which QA documents contain unescaped
    raw = path.read_text(encoding="utf-8").split("\n")
    raw = [text + "\n" for text in raw[:-1]] + ([raw[-1]] if raw[-1] else [])
    lines: list[Line] = []
    good = 0
    for text in raw:
        try:
            line = json.loads(text)
        except json.JSONDecodeError:
            break
        if not text.endswith("\n") or line.get("index") != len(lines):
            break
        lines.append(line)
        good += len(text.encode("utf-8"))
    if len(lines) < len(raw):
        with path.open("r+b") as handle:
            handle.truncate(good)
    return lines


def cached_lines(path: Path | None, count: int, make: Callable[[int, Line | None], Line]) -> list[Line]:
    """Lines 0..count-1: read from ``path`` and generated (and appended) as needed.

    ``make(i, first)`` builds line i; ``first`` is line 0 (its fitted size seeds the later searches).
    ``path=None`` generates in memory only.
    """
    if path is None:
        out: list[Line] = []
        for i in range(count):
            out.append(make(i, out[0] if out else None))
        return out
    path.parent.mkdir(parents=True, exist_ok=True)
    with locked(path.with_name(path.name + ".lock")):
        lines = read_lines(path)
        if len(lines) < count:
            with path.open("a", encoding="utf-8") as handle:
                for i in range(len(lines), count):
                    line = make(i, lines[0] if lines else None)
                    handle.write(json.dumps(line, ensure_ascii=False, sort_keys=True) + "\n")
                    handle.flush()
                    lines.append(line)
    return lines[:count]
