"""Real public-domain book-length text that installs from a package registry (offline stand-in for PG-19).

The corpus is the King James Version of the Bible (1611, public domain) as shipped by the Debian package
``bible-kjv-text`` (4.38): its ``bible`` command (package ``bible-kjv``) prints the text. We split it into its
66 books (Genesis ... Revelation); each :class:`Book` is one of them, with its chapters and numbered verses
laid out as plain text. 24 books are longer than 16K SmolLM2 tokens (Psalms: 60K).

``make setup`` installs it (``apt-get install -y bible-kjv`` as root). Hub datasets such as PG-19 itself are
loaded elsewhere (``lampe_eval.benchmarks.pg19``) for users with hub access.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from functools import lru_cache

from ..errors import MissingDataError

INSTALL_HINT = "install it with: apt-get install -y bible-kjv (Debian/Ubuntu; `make setup` does this as root)"
SOURCE = "Debian package bible-kjv-text (King James Version, 1611, public domain), printed by `bible`"
_CHAPTER = re.compile(r"^(\S.*) (\d+)$")
_VERSE = re.compile(r"^\s+(\d+) (.*)$")
_HEADING = re.compile(r"^\s*Chapter \d+\s*$", re.MULTILINE)
_VERSE_NUMBER = re.compile(r"^\d+ ", re.MULTILINE)


@dataclass
class Book:
    """One book-length public-domain text."""

    title: str
    text: str
    source: str


def _bible_command() -> str:
    path = os.environ.get("LAMPE_EVAL_BIBLE") or shutil.which("bible") or "/usr/bin/bible"
    if not os.path.isfile(path):
        raise MissingDataError(f"the offline book corpus needs the `bible` command; {INSTALL_HINT}")
    return path


def check_installed() -> None:
    """A one-line error naming the install when the corpus is not on this machine (nothing is read)."""
    _bible_command()


def _print_kjv() -> str:
    command = [_bible_command(), "-l0", "-m", "8192", "gen1:1-rev22:21"]
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
    except (OSError, subprocess.SubprocessError) as err:
        message = f"cannot read the KJV text with {' '.join(command)}: {err}; {INSTALL_HINT}"
        raise MissingDataError(message) from err
    return out.stdout


def parse_kjv(raw: str) -> list[Book]:
    """Split the output of ``bible -l0`` (chapter headers ``Book N``, indented numbered verses) into books."""
    books: list[tuple[str, list[str]]] = []
    for line in raw.splitlines():
        if not line.strip():
            continue
        chapter = _CHAPTER.match(line)
        if chapter:
            title, number = chapter.group(1), chapter.group(2)
            if not books or books[-1][0] != title:
                books.append((title, [title]))
            books[-1][1].append(f"\nChapter {number}\n")
            continue
        verse = _VERSE.match(line)
        if verse and books:
            books[-1][1].append(f"{verse.group(1)} {verse.group(2).strip()}")
        elif books:  # a wrapped continuation line (only if the output was not printed with -l0)
            books[-1][1][-1] += " " + line.strip()
    return [Book(title=title, text="\n".join(lines).strip() + "\n", source=SOURCE) for title, lines in books]


@lru_cache(maxsize=1)
def _books() -> tuple[Book, ...]:
    books = parse_kjv(_print_kjv())
    if len(books) != 66:
        raise MissingDataError(f"expected 66 books from `bible`, got {len(books)}; {INSTALL_HINT}")
    return tuple(books)


def offline_books() -> list[Book]:
    """The 66 books of the KJV in canonical order (Genesis first); MissingDataError if not installed."""
    return list(_books())


def prose(text: str) -> str:
    """A book's text as plain prose: chapter headings and leading verse numbers removed (no-ops for a text
    without them), so the only numbers left are the text's own (haystacks hide numeric needles in it)."""
    return _VERSE_NUMBER.sub("", _HEADING.sub("\n", text))


def corpus_description() -> str:
    """One line naming the corpus, for reports and results."""
    return (
        "King James Version of the Bible, 66 books (public domain), from the Debian package "
        "bible-kjv-text 4.38 via its `bible` command; stands in for PG-19 offline"
    )
