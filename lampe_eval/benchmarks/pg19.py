"""PG-19 perplexity for length extrapolation (``--bench pg19``, one task ``pg19``).

Protocol (the extrapolation papers' "truncate" setting, e.g. YaRN's ``--truncate``; LaMPE Appendix D):
for an evaluation length L, walk the documents in their fixed order, keep those with at least
``max(L, pg19_min_tokens)`` tokens, and cut each to exactly L tokens (its first L; with
``pg19_per_doc=2`` also the next L, the paper's "200 passages from 100 books"). Documents are never
concatenated, except when no single document is long enough: then the corpus is read as one volume (all
documents joined in order) and cut into consecutive L-token passages (``meta.concatenated``). Each passage
gets one forward pass; every predicted token (L - 1 of them) is scored, and separately the last quarter
of the passage (its last L // 4 tokens, where extrapolation bites). When the tokenizer adds special tokens
in front of a text (a BOS), every passage starts with them (YaRN prepends a BOS per window) and they count
in L.

Averaging: the task-level perplexity is exp(token-weighted mean NLL) over all passages (``aggregate``);
every passage of a job has the same length, so this is also exp(mean of the passages' mean NLLs).

Memory is O(L): the model's decoder returns hidden states (L x hidden), and the LM head + cross-entropy
run over chunks of ``pg19_chunk`` positions (default 1024), so no L x vocab logits tensor ever exists.

Data (first that applies; recorded in ``meta["data_source"]``, never substituted):

* ``--opt pg19_dir=DIR`` (or ``DATA_DIR/pg19`` with ``--data-dir``): every ``*.txt`` file is one document
  (sorted by name), e.g. PG-19 books saved as text;
* ``--opt pg19_source=offline``: the offline corpus of :mod:`lampe_eval.data` (66 public-domain books, the
  KJV, from a Debian package), a stand-in for PG-19 on machines without the data, when asked for;
* otherwise (``pg19_source=hub``) the PG-19 test set on the hub: the Parquet files of the ``pg19_split``
  (test) split of ``pg19_dataset`` (``emozilla/pg19-test``; ``pg19_field`` (text) and ``pg19_title_field``
  (short_book_title) name its columns), downloaded into the hub cache or read from it offline
  (``deepmind/pg19`` holds only a loading script, which ``datasets`` >= 4 refuses).

Other options: ``pg19_min_tokens`` (keep the same documents across lengths), ``pg19_per_doc``,
``pg19_chunk`` (all declared in :attr:`PG19.options`; ``lampe-eval list`` shows them).

Each sample carries its passage's exact token ids (``Sample.input_ids``): ``evaluate`` feeds those.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..backends.base import NLLRequest, Rounds, TokenNLL
from ..data import hub
from ..data.sources import DataSource
from ..errors import LampeEvalError, MissingDataError
from ..options import Option
from .base import BENCHMARKS, Benchmark, Metric, Sample, SampleContext
from .books import (
    DEFAULT_DATASET,
    Document,
    book_files,
    directory_documents,
    hub_documents,
    offline_documents,
)

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

DEFAULT_CHUNK = 1024
SOURCES = ("hub", "offline")
SATURATION = 100.0  # tables print ">10^2" above this (the paper's Appendix D); raw results keep the value
PPL = Metric("ppl", "perplexity", higher_is_better=False, cap=SATURATION, cap_text=">10^2", log_scale=True)
PPL_LAST_QUARTER = Metric(
    "ppl_last_quarter",
    "perplexity of the last quarter",
    higher_is_better=False,
    cap=SATURATION,
    cap_text=">10^2",
    log_scale=True,
    own_table=True,  # where extrapolation bites: its own by-length table
)


# metric -> (per-passage mean NLL, its token count, whether the metric is exp of the weighted mean)
TOKEN_WEIGHTED = {
    "ppl": ("nll", "tokens", True),
    "nll": ("nll", "tokens", False),
    "ppl_last_quarter": ("nll_last_quarter", "tokens_last_quarter", True),
    "nll_last_quarter": ("nll_last_quarter", "tokens_last_quarter", False),
}


def documents_source(options: Mapping[str, Any], data_dir: str | None) -> DataSource:
    """Where a job's documents come from (the order in the module docstring), without reading them."""
    if options.get("pg19_dir"):
        return DataSource("pg19", "PG-19 documents", "file", str(options["pg19_dir"]))
    if options["pg19_source"] == "offline":
        return DataSource("pg19", "offline stand-in for PG-19", "corpus", "kjv")
    files = book_files(str(options["pg19_dataset"]), str(options["pg19_split"]))
    fix = "lampe-eval data fetch --bench pg19, or --opt pg19_source=offline (the KJV stand-in)"
    source = hub.hub_source("pg19", "PG-19 test set", files, data_dir, fix)  # a copy under data_dir first
    books = Path(data_dir) / "pg19" if data_dir else None
    if source.kind == "hub" and books is not None and any(books.glob("*.txt")):
        return DataSource("pg19", "PG-19 documents", "file", str(books))
    return source


def resolve_documents(options: Mapping[str, Any], data_dir: str | None) -> tuple[str, list[Document]]:
    """(source label, documents) for a job's typed options, following the order in the module docstring."""
    source = documents_source(options, data_dir)
    if source.kind == "file" and source.hub is None:
        return f"dir:{source.location}", directory_documents(source.location)
    if source.kind == "corpus":
        return "offline:kjv", offline_documents()
    try:
        return hub_documents(
            str(options["pg19_dataset"]),
            str(options["pg19_split"]),
            str(options["pg19_field"]),
            str(options["pg19_title_field"]),
            copies=hub.copy_folders(data_dir, "pg19"),
        )
    except MissingDataError as err:
        raise MissingDataError(f"pg19: {err}") from err


# ------------------------------------------------------------------------------------------ passages
def special_prefix(tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """Tokens the tokenizer puts in front of any text (a BOS), [] when it adds none."""
    plain = list(tokenizer("a", add_special_tokens=False)["input_ids"])
    full = list(tokenizer("a")["input_ids"])
    if len(full) > len(plain) and full[len(full) - len(plain) :] == plain:
        return full[: len(full) - len(plain)]
    return []


@dataclass(frozen=True)
class Passage:
    """``length`` tokens: the special prefix + document tokens [offset, offset + length - len(prefix))."""

    doc_index: int
    offset: int
    length: int
    concatenated: bool = False


def select_passages(
    doc_lengths: Iterable[int],
    length: int,
    *,
    count: int | None,
    per_doc: int = 1,
    min_tokens: int = 0,
    prefix: int = 0,
) -> list[Passage]:
    """The truncation protocol on token counts alone (pure, for tests).

    ``doc_lengths`` are the documents' token counts without special tokens (read lazily: documents after
    the ``count``-th passage are never tokenized); a passage takes ``length - prefix`` document tokens.
    Documents qualify with at least ``max(length - prefix, min_tokens)`` tokens; each gives up to
    ``per_doc`` consecutive non-overlapping passages from its start. With no qualifying document, one
    concatenated volume (index -1) is cut into consecutive passages instead.
    """
    body = length - prefix
    if body < 2:
        raise LampeEvalError(f"pg19: length {length} is too short for a perplexity passage")
    if count is not None and count < 1:
        return []
    need = max(body, min_tokens)
    out: list[Passage] = []
    total = 0
    for index, n in enumerate(doc_lengths):
        total += n
        if n < need:
            continue
        for k in range(min(per_doc, n // body)):
            out.append(Passage(index, k * body, length))
            if count is not None and len(out) >= count:
                return out
    if out:
        return out
    wanted = total // body if count is None else min(count, total // body)
    return [Passage(-1, k * body, length, concatenated=True) for k in range(wanted)]


class TokenizedCorpus:
    """Documents tokenized lazily, once per (corpus, tokenizer)."""

    def __init__(self, docs: list[Document], tokenizer: PreTrainedTokenizerBase) -> None:
        self.docs = docs
        self.tokenizer = tokenizer
        self._ids: dict[int, list[int]] = {}
        self._volume: list[int] | None = None

    def ids(self, index: int) -> list[int]:
        if index < 0:  # all documents in order, a blank line between them
            if self._volume is None:
                separator = list(self.tokenizer("\n\n", add_special_tokens=False)["input_ids"])
                self._volume = []
                for i in range(len(self.docs)):
                    self._volume.extend((separator if i else []) + self.ids(i))
            return self._volume
        if index not in self._ids:
            text = self.docs[index].text
            self._ids[index] = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        return self._ids[index]

    def lengths(self) -> Iterator[int]:
        for i in range(len(self.docs)):
            yield len(self.ids(i))


_CORPORA: dict[tuple[str, int], TokenizedCorpus] = {}


def tokenized_corpus(
    source: str, docs: list[Document], tokenizer: PreTrainedTokenizerBase
) -> TokenizedCorpus:
    key = (source, id(tokenizer))
    cached = _CORPORA.get(key)
    if cached is None or cached.tokenizer is not tokenizer or cached.docs != docs:
        _CORPORA.clear()  # one corpus at a time (a PG-19 test set is ~10M tokens)
        _CORPORA[key] = TokenizedCorpus(docs, tokenizer)
    return _CORPORA[key]


def format_ppl(value: float) -> str:
    """A table cell: ``>10^2`` past saturation (as the paper's Appendix D), else two decimals."""
    return PPL.cap_text if PPL.saturated(value) else PPL.format(value)


def _ppl(nll: float) -> float:
    return math.exp(nll) if nll < 700 else math.inf


# ------------------------------------------------------------------------------------------- benchmark
@BENCHMARKS.register("pg19")
class PG19(Benchmark):
    summary = (
        "perplexity of book passages cut to exactly the length (PG-19 test set; offline: the KJV stand-in)"
    )
    loss_only = True
    metrics = (
        PPL,
        PPL_LAST_QUARTER,
        Metric("nll", "mean NLL per token", higher_is_better=False),
        Metric("nll_last_quarter", "mean NLL per token, last quarter", higher_is_better=False),
        Metric("tokens", "predicted tokens"),
        Metric("tokens_last_quarter", "predicted tokens, last quarter"),
        Metric("passages"),
    )
    options = (
        Option("pg19_dir", Path, None, "directory of *.txt documents, one book per file (sorted by name)"),
        Option(
            "pg19_source", str, "hub", "hub: PG-19 (pg19_dataset); offline: the KJV stand-in", choices=SOURCES
        ),
        Option("pg19_dataset", str, DEFAULT_DATASET, "hub repository of the PG-19 test set (Parquet)"),
        Option("pg19_split", str, "test", "split of pg19_dataset"),
        Option("pg19_field", str, "text", "text field of pg19_dataset"),
        Option("pg19_title_field", str, "short_book_title", "title field (shown in records)", False),
        Option("pg19_min_tokens", int, 0, "only documents this long (the same books at every length)"),
        Option("pg19_per_doc", int, 1, "consecutive passages per document (the paper: 2)"),
        Option("pg19_chunk", int, DEFAULT_CHUNK, "positions per LM-head chunk (memory only)", False),
    )
    truncation = "each passage is --len tokens of its document from meta.offset (the rest is not read)"

    def tasks(self) -> list[str]:
        return ["pg19"]

    def data_sources(
        self, task: str, length: int, options: Mapping[str, Any], data_dir: str | None
    ) -> list[DataSource]:
        return [documents_source(self.typed_options(options), data_dir)]

    def samples(self, task: str, ctx: SampleContext) -> Iterator[Sample]:
        self.check_task(task)
        options = self.option_values(ctx)
        source, docs = resolve_documents(options, ctx.data_dir)
        tokenizer = ctx.lm.tokenizer
        prefix = special_prefix(tokenizer)
        corpus = tokenized_corpus(source, docs, tokenizer)
        passages = select_passages(
            corpus.lengths(),
            ctx.length,
            count=ctx.limit,
            per_doc=options["pg19_per_doc"],
            min_tokens=options["pg19_min_tokens"],
            prefix=len(prefix),
        )
        if not passages:
            raise MissingDataError(f"pg19: the corpus ({source}) has fewer than {ctx.length} tokens")
        for passage in passages:
            body = passage.length - len(prefix)
            window = prefix + corpus.ids(passage.doc_index)[passage.offset : passage.offset + body]
            if passage.concatenated:
                title, doc_id = "(all documents, concatenated)", "volume"
            else:
                doc = docs[passage.doc_index]
                title, doc_id = doc.title, doc.doc_id
            yield Sample(
                sample_id=f"{doc_id}@{passage.offset}",
                task=task,
                prompt=tokenizer.decode(window),
                input_ids=window,
                meta={
                    "data_source": source,
                    "doc_id": doc_id,
                    "title": title,
                    "offset": passage.offset,
                    "prompt_tokens": len(window),
                    "prefix_tokens": len(prefix),
                    "concatenated": passage.concatenated,
                },
            )

    def evaluate(self, sample: Sample, ctx: SampleContext) -> Rounds:
        """One forward pass over the passage's exact token ids: the NLL sums of all and of the last
        quarter's predicted tokens."""
        if sample.input_ids is None:
            raise LampeEvalError(f"pg19: sample {sample.sample_id} has no token ids")
        chunk = self.option_values(ctx)["pg19_chunk"]
        (result,) = yield [NLLRequest(tuple(sample.input_ids), chunk=chunk)]
        assert isinstance(result, TokenNLL)
        return {
            "nll_sum": result.nll_sum,
            "tokens": result.tokens,
            "nll_sum_last_quarter": result.nll_sum_tail,
            "tokens_last_quarter": result.tokens_tail,
            "prompt_tokens": len(sample.input_ids),
        }

    def score(self, sample: Sample, output: dict[str, Any]) -> dict[str, float]:
        nll = output["nll_sum"] / output["tokens"]
        nll_tail = output["nll_sum_last_quarter"] / max(1, output["tokens_last_quarter"])
        return {
            "ppl": _ppl(nll),
            "ppl_last_quarter": _ppl(nll_tail),
            "nll": nll,
            "nll_last_quarter": nll_tail,
            "tokens": float(output["tokens"]),
            "tokens_last_quarter": float(output["tokens_last_quarter"]),
        }

    def resample(
        self, task: str, scores: Sequence[Mapping[str, float]], counts: np.ndarray, metric: str
    ) -> np.ndarray:
        """``aggregate`` over resamples of the passages: token-weighted, as the headline is (a passage drawn
        twice counts its tokens twice)."""
        if metric not in TOKEN_WEIGHTED:
            return super().resample(task, scores, counts, metric)
        nll_key, tokens_key, as_ppl = TOKEN_WEIGHTED[metric]
        nll = np.array([s[nll_key] for s in scores], dtype=np.float64)
        tokens = np.array([s[tokens_key] for s in scores], dtype=np.float64)
        weights = np.asarray(counts, dtype=np.float64)
        mean_nll = (weights @ (nll * tokens)) / np.maximum(weights @ tokens, 1.0)
        if not as_ppl:
            return mean_nll
        return np.where(mean_nll < 700, np.exp(np.minimum(mean_nll, 700.0)), math.inf)

    def aggregate(self, task: str, scores: Sequence[dict[str, float]]) -> dict[str, float]:
        """Token-weighted: PPL = exp(sum of NLL / number of predicted tokens) over all passages."""
        if not scores:
            return {}
        tokens = sum(s["tokens"] for s in scores)
        tokens_tail = sum(s["tokens_last_quarter"] for s in scores)
        nll = sum(s["nll"] * s["tokens"] for s in scores) / tokens
        nll_tail = sum(s["nll_last_quarter"] * s["tokens_last_quarter"] for s in scores) / max(
            1.0, tokens_tail
        )
        return {
            "ppl": _ppl(nll),
            "ppl_last_quarter": _ppl(nll_tail),
            "nll": nll,
            "nll_last_quarter": nll_tail,
            "tokens": float(tokens),
            "passages": float(len(scores)),
        }
