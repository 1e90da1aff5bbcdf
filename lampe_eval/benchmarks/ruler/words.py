"""Random needles and word lists, as RULER draws them.

- keys/values: ``numbers`` (7-digit integers), ``uuids`` (version-4 UUIDs from 128 random bits) and
  ``words`` ("adjective-noun" from the ``wonderwords`` package's bundled lists).
- common-words vocabulary: ``wonderwords`` nouns + adjectives + verbs; when a length needs more
  distinct words than that, the larger English list of the ``english-words`` package (its ``web2``
  list) stands in for RULER's Git-LFS ``english_words.json``.
"""

from __future__ import annotations

import importlib.resources
import random
import uuid
from functools import lru_cache

from ...errors import MissingDataError

NEEDLE_TYPES = ("numbers", "words", "uuids")


def _wonderwords_list(name: str) -> list[str]:
    try:
        text = importlib.resources.files("wonderwords.assets").joinpath(name).read_text(encoding="utf-8")
    except ModuleNotFoundError as err:  # pragma: no cover - a core dependency
        raise MissingDataError("RULER needs the wonderwords package: pip install wonderwords") from err
    return [line.rstrip() for line in text.splitlines() if line.strip()]


@lru_cache(maxsize=1)
def adjectives_and_nouns() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Sorted unique adjectives and nouns: keys of type ``words`` are ``f"{adj}-{noun}"``."""
    adjs = tuple(sorted(set(_wonderwords_list("adjectivelist.txt"))))
    nouns = tuple(sorted(set(_wonderwords_list("nounlist.txt"))))
    return adjs, nouns


@lru_cache(maxsize=1)
def common_words_vocabulary() -> tuple[str, ...]:
    """wonderwords nouns + adjectives + verbs, sorted unique (the cwe vocabulary)."""
    words = (
        _wonderwords_list("nounlist.txt")
        + _wonderwords_list("adjectivelist.txt")
        + _wonderwords_list("verblist.txt")
    )
    return tuple(sorted(set(words)))


@lru_cache(maxsize=1)
def large_english_vocabulary() -> tuple[str, ...]:
    """A large English word list for cwe at lengths that need more words than wonderwords has."""
    try:
        from english_words import get_english_words_set
    except ImportError as err:
        raise MissingDataError(
            "cwe at this length needs more distinct words than wonderwords ships: pip install english-words"
        ) from err
    return tuple(sorted(get_english_words_set(["web2"], lower=True, alpha=True)))


def random_number(rng: random.Random, digits: int = 7) -> str:
    return str(rng.randint(10 ** (digits - 1), 10**digits - 1))


def random_uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def random_word(rng: random.Random) -> str:
    """A uniform draw over the adjective x noun combinations (RULER materialises the sorted list of all
    ~6M "adj-noun" strings and picks one; drawing the two halves gives the same distribution)."""
    adjs, nouns = adjectives_and_nouns()
    return f"{rng.choice(adjs)}-{rng.choice(nouns)}"


def random_needle(rng: random.Random, kind: str) -> str:
    if kind == "numbers":
        return random_number(rng)
    if kind == "words":
        return random_word(rng)
    if kind == "uuids":
        return random_uuid(rng)
    raise ValueError(f"unknown needle type {kind!r}; choose one of {', '.join(NEEDLE_TYPES)}")
