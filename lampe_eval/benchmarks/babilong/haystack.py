"""Local BABILong generation: bAbI facts hidden in background book text, sized with the model's tokenizer.

The recipe is ``babilong_utils.py`` (``SentenceSampler``, ``NoiseInjectionDataset``) as
``data/create_tasks.py`` runs it (facts: ``docs/benchmarks.md`` section 7.5), per sample:

1. Background: pick a random book, start at a random character, cut ``size * 10`` characters, split them
   into sentences with NLTK's (untrained) ``PunktSentenceTokenizer``, drop the first and the last sentence,
   tokenize each as ``" " + sentence``, skip those under 10 tokens, and take sentences until ``size`` tokens
   are reached, cutting the last one to hit ``size`` exactly (another random book when one runs out).
2. Facts: each fact tokenized as ``" " + fact``; ``size`` = haystack budget minus the facts' tokens.
3. Each fact goes before a background sentence drawn uniformly with replacement among the
   ``len(sentences) + 1`` slots; the slots are sorted, so the facts keep their order.
4. The tokens are decoded into the context (stripped); the question goes into the prompt, not the haystack.

Sizing: the haystack budget is fitted so that the whole prompt, as the model gets it (template, chat
template, special tokens), has at most ``length - max_new_tokens`` tokens (``create_tasks.py`` instead
builds ``length - 300`` GPT-2 tokens of haystack for every model). Samples with more than
``budget // 8`` lines of facts and question are left out, as ``create_tasks.py`` does (``max_n_facts``).

Background text (``--opt background=``, resolved without looking at the network, never substituted): a
folder of ``*.txt`` books (``--opt background_dir=`` or ``DATA_DIR/pg19``), else PG-19's test split from the
hub (``--opt background_dataset=``, default ``emozilla/pg19-test``; downloaded into the hub cache or read from
it offline); the offline book corpus of :mod:`lampe_eval.data` (chapter headings and verse numbers removed)
with ``background=offline``, and by default for the hand-written fixture (``--opt fixture=true``: a smoke
setup that runs anywhere). Every sample records which (``meta["background"]``) and the books it drew from.

Each sample draws from its own generator, seeded by (task, length, seed, index), so sample ``i`` is the
same whatever ``--limit`` is; which bAbI question sample ``i`` asks is the ``i``-th of a seeded shuffle of
the eligible questions. The official script seeds nothing (not bit-reproducible) and one background
sampler carries leftover sentences from one sample to the next; here samples are independent.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ...data import hub
from ...data.sources import DataSource
from ...errors import LampeEvalError, MissingDataError
from ..books import book_files, directory_documents, hub_documents

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)

MIN_SENTENCE_TOKENS = 10  # SentenceSampler(min_sentence_len=10)
CHARS_PER_TOKEN_CUT = 10  # text[:sample_size * 10]
TOKENS_PER_FACT = 8  # create_tasks.py: max_n_facts = message_length // 8
DEFAULT_BACKGROUND_DATASET = "emozilla/pg19-test"
BACKGROUND_MODES = ("auto", "pg19", "offline")


# --------------------------------------------------------------------------- background books


@dataclass
class Background:
    """Where background text comes from (``label``, recorded per sample) and its books (loaded when used)."""

    label: str
    description: str
    load: Callable[[], list[tuple[str, str]]] = field(repr=False)
    _books: list[tuple[str, str]] | None = field(default=None, repr=False)

    @property
    def books(self) -> list[tuple[str, str]]:
        """(title, text) of every book with text."""
        if self._books is None:
            self._books = [(title, text) for title, text in self.load() if text]
            if not self._books:
                raise MissingDataError(f"babilong: the background text {self.description!r} is empty")
        return self._books


def _offline_books() -> list[tuple[str, str]]:
    from ...data import offline_books, prose

    return [(book.title, prose(book.text)) for book in offline_books()]


@lru_cache(maxsize=2)
def _hub_books(dataset: str, copies: tuple[Path, ...]) -> list[tuple[str, str]]:
    return [(doc.title, doc.text) for doc in hub_documents(dataset, "test", copies=list(copies))[1]]


def _dir_books(directory: str) -> list[tuple[str, str]]:
    return [(doc.title, doc.text) for doc in directory_documents(directory)]


def _dir_fingerprint(directory: str) -> str:
    files = sorted((p.name, p.stat().st_size) for p in Path(directory).glob("*.txt"))
    return hashlib.sha256(repr(files).encode()).hexdigest()[:10]


def background_source(
    mode: str, dataset: str, directory: str | None, data_dir: str | None, fixture: bool
) -> DataSource:
    """Where a job's background text comes from (see the module docstring), without reading it."""
    if mode not in BACKGROUND_MODES:
        raise LampeEvalError(f"babilong: background={mode}: choose one of {', '.join(BACKGROUND_MODES)}")
    offline = DataSource("babilong", "background text (offline stand-in for PG-19)", "corpus", "kjv")
    if mode == "offline" or (mode == "auto" and fixture and not directory):
        return offline
    if not directory and data_dir and (Path(data_dir) / "pg19").is_dir():
        directory = str(Path(data_dir) / "pg19")
    if directory:
        if not Path(directory).is_dir():
            raise MissingDataError(f"babilong: background_dir={directory} is not a directory")
        return DataSource("babilong", "background books", "file", str(directory))
    files = book_files(dataset, "test")
    fix = "lampe-eval data fetch --bench babilong, or --opt background=offline (the KJV stand-in)"
    return hub.hub_source("babilong", "background text (PG-19 test set)", files, data_dir, fix)


def resolve_background(
    mode: str, dataset: str, directory: str | None, data_dir: str | None, fixture: bool = False
) -> Background:
    """The background of a job (books load lazily, only when a sample is generated)."""
    from ...data import corpus_description

    source = background_source(mode, dataset, directory, data_dir, fixture)
    if source.kind == "file" and source.hub is None:
        where = source.location
        label = f"dir:{where}:{_dir_fingerprint(where)}"
        return Background(label, f"books in {where}", lambda: _dir_books(where))
    if source.hub is not None:  # the PG-19 test set: on the hub, or a copy under --data-dir
        copies = tuple(hub.copy_folders(data_dir, "babilong"))
        try:  # the files now (their commit names the background), the books when a sample needs them
            snapshot = hub.read(source.hub, copies=copies)
        except MissingDataError as err:
            raise MissingDataError(f"babilong background: {err}") from err
        label = f"pg19:{snapshot.label()}"
        return Background(label, f"PG-19 test ({dataset})", lambda: _hub_books(dataset, copies))
    corpus = corpus_description().replace("; stands in for PG-19 offline", "")
    return Background("offline:kjv", f"offline stand-in for PG-19: {corpus}", _offline_books)


# --------------------------------------------------------------------------- the recipe


@lru_cache(maxsize=1)
def sentence_splitter() -> Callable[[str], list[str]]:
    """NLTK's ``PunktSentenceTokenizer()`` with default (untrained) parameters, as ``SentenceSampler``."""
    from nltk.tokenize.punkt import PunktSentenceTokenizer

    return PunktSentenceTokenizer().tokenize


def tokenize_pieces(tokenizer: PreTrainedTokenizerBase, pieces: list[str]) -> list[list[int]]:
    """Each piece's tokens, no special tokens (one batched call)."""
    if not pieces:
        return []
    return [list(ids) for ids in tokenizer(pieces, add_special_tokens=False, verbose=False)["input_ids"]]


def sample_background(
    books: list[tuple[str, str]], size: int, tokenizer: PreTrainedTokenizerBase, rng: np.random.Generator
) -> tuple[list[list[int]], list[str]]:
    """``SentenceSampler.get_sample(size)`` in shuffle mode: tokenized sentences adding up to exactly
    ``size`` tokens, and the titles of the books they came from."""
    if size <= 0:
        return [], []
    split = sentence_splitter()
    sentences: list[list[int]] = []
    titles: list[str] = []
    total = 0
    for _ in range(100_000):  # a corpus without any usable sentence would loop forever
        title, text = books[int(rng.integers(len(books)))]
        start = int(rng.integers(len(text)))
        chunk = text[start:][: size * CHARS_PER_TOKEN_CUT]
        found = split(chunk)[1:-1]
        if not found:
            continue
        titles.append(title)
        for batch_start in range(0, len(found), 256):
            batch = found[batch_start : batch_start + 256]
            for ids in tokenize_pieces(tokenizer, [" " + s for s in batch]):
                if len(ids) < MIN_SENTENCE_TOKENS:
                    continue
                sentences.append(ids)
                total += len(ids)
                if total >= size:
                    if total > size:
                        sentences[-1] = sentences[-1][: len(ids) - (total - size)]
                    return sentences, titles
    raise MissingDataError("babilong: the background text has no sentences of 10 tokens or more")


def inject_facts(facts: list[list[int]], background: list[list[int]], rng: np.random.Generator) -> list[int]:
    """``NoiseInjectionDataset``: each fact before a background sentence chosen uniformly, with replacement,
    among the ``len(background) + 1`` slots; slots sorted, so the facts stay in order."""
    positions = np.sort(rng.choice(len(background) + 1, size=len(facts))) if facts else []
    slots: list[list[list[int]]] = [[] for _ in range(len(background) + 1)]
    for fact, position in zip(facts, positions, strict=True):
        slots[int(position)].append(fact)
    for i, sentence in enumerate(background):
        slots[i].append(sentence)
    return [token for slot in slots for piece in slot for token in piece]


def seed_of(*parts: object) -> int:
    """A 64-bit seed from any parts (stable across processes, unlike ``hash``)."""
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "little")


def build_haystack(
    facts: list[str], size: int, books: list[tuple[str, str]], tokenizer: PreTrainedTokenizerBase, seed: int
) -> tuple[str, dict[str, Any]]:
    """The context of one sample with ``size`` haystack tokens (facts + background), and its provenance."""
    rng = np.random.default_rng(seed)
    fact_ids = tokenize_pieces(tokenizer, [" " + f for f in facts])
    fact_tokens = sum(len(ids) for ids in fact_ids)
    if fact_tokens > size:
        raise TooShortError(
            f"the {len(facts)} facts take {fact_tokens} tokens, more than the {size} available"
        )
    background, titles = sample_background(books, size - fact_tokens, tokenizer, rng)
    tokens = inject_facts(fact_ids, background, rng)
    context = tokenizer.decode(tokens).strip()
    return context, {"fact_tokens": fact_tokens, "background_books": sorted(set(titles))}


class TooShortError(LampeEvalError):
    """The length leaves no room for a sample's facts."""
