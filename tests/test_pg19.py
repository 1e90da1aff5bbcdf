"""PG-19 perplexity: the offline corpus, the truncation protocol, the chunked loss, scoring."""

from __future__ import annotations

import math
import os
import shutil

import pytest
import torch

from lampe_eval.backends.hf import HFBackend, chunked_nll_rows
from lampe_eval.backends.hf.patch import apply_method
from lampe_eval.backends.rounds import evaluate_one
from lampe_eval.benchmarks import SampleContext, get_benchmark
from lampe_eval.benchmarks.pg19 import (
    Passage,
    format_ppl,
    select_passages,
    special_prefix,
)
from lampe_eval.data import corpus
from lampe_eval.errors import MissingDataError
from lampe_eval.methods import create_method
from lampe_eval.models import LoadedModel
from lampe_eval.testing import tiny_llama

HAVE_BIBLE = shutil.which("bible") is not None
needs_corpus = pytest.mark.skipif(
    not HAVE_BIBLE and not os.environ.get("CI"),
    reason="offline corpus not installed (apt-get install bible-kjv)",
)


class CharTokenizer:
    """A character tokenizer over a 128-token vocabulary (id 1 = BOS when ``bos``)."""

    def __init__(self, bos: bool = False) -> None:
        self.bos = bos

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        ids = [2 + ord(c) % 126 for c in text]
        return {"input_ids": ([1] if self.bos and add_special_tokens else []) + ids}

    def decode(self, ids: list[int]) -> str:
        return "".join(chr(i - 2) if i >= 2 else "" for i in ids)


def tiny_lm(bos: bool = False) -> LoadedModel:
    return LoadedModel("tiny", tiny_llama(window=256), CharTokenizer(bos), 256, False)


# ------------------------------------------------------------------------------------ offline corpus
@needs_corpus
def test_offline_books_are_the_66_kjv_books():
    books = corpus.offline_books()
    assert len(books) == 66
    assert [b.title for b in books[:2]] == ["Genesis", "Exodus"] and books[-1].title == "Revelation"
    assert books[0].text.startswith(
        "Genesis\n\nChapter 1\n\n1 In the beginning God created the heaven and the earth."
    )
    assert "\nChapter 50\n" in books[0].text and "\nChapter 51\n" not in books[0].text
    assert books[-1].text.rstrip().endswith("The grace of our Lord Jesus Christ be with you all. Amen.")
    assert sum(len(b.text) for b in books) > 4_000_000
    psalms = next(b for b in books if b.title == "Psalms")
    assert psalms.text.count("\nChapter ") == 150
    assert "bible-kjv" in corpus.corpus_description() and all("bible-kjv-text" in b.source for b in books)


def test_parse_kjv_output_format():
    raw = (
        "\nGenesis 1\n\n  1 In the beginning.\n  2 And the earth.\n\nGenesis 2\n\n  1 Thus the heavens.\n"
        "\n1 Samuel 1\n\n  1 Now there was\n    a certain man.\n"
    )
    books = corpus.parse_kjv(raw)
    assert [b.title for b in books] == ["Genesis", "1 Samuel"]
    expected = (
        "Genesis\n\nChapter 1\n\n1 In the beginning.\n2 And the earth.\n\nChapter 2\n\n1 Thus the heavens.\n"
    )
    assert books[0].text == expected
    assert books[1].text.endswith("1 Now there was a certain man.\n")


def test_missing_corpus_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("LAMPE_EVAL_BIBLE", "/nonexistent/bible")
    monkeypatch.setattr(corpus.shutil, "which", lambda name: None)
    corpus._books.cache_clear()
    try:
        with pytest.raises(MissingDataError, match="apt-get install -y bible-kjv"):
            corpus.offline_books()
    finally:
        corpus._books.cache_clear()


# ---------------------------------------------------------------------------------- truncation protocol
def test_select_passages_truncates_long_enough_documents_in_order():
    lengths = [100, 5000, 3000, 20000, 4096]
    assert select_passages(lengths, 4096, count=None) == [
        Passage(1, 0, 4096),
        Passage(3, 0, 4096),
        Passage(4, 0, 4096),
    ]
    assert select_passages(lengths, 4096, count=2) == [Passage(1, 0, 4096), Passage(3, 0, 4096)]
    two = select_passages(lengths, 4096, count=None, per_doc=2)
    assert two == [Passage(1, 0, 4096), Passage(3, 0, 4096), Passage(3, 4096, 4096), Passage(4, 0, 4096)]
    # min_tokens keeps the same documents for every length
    assert select_passages(lengths, 1024, count=None, min_tokens=4096) == [
        Passage(1, 0, 1024),
        Passage(3, 0, 1024),
        Passage(4, 0, 1024),
    ]
    # a BOS prefix takes one of the L tokens: a document of exactly L - 1 tokens qualifies
    assert select_passages([4095], 4096, count=None, prefix=1) == [Passage(0, 0, 4096)]
    assert select_passages([4095], 4096, count=None, prefix=0) != [Passage(0, 0, 4096)]


def test_select_passages_reads_lengths_lazily_and_falls_back_to_a_volume():
    seen = []

    def lengths():
        for n in [5000, 6000, 7000]:
            seen.append(n)
            yield n

    assert len(select_passages(lengths(), 4096, count=1)) == 1 and seen == [5000]
    volume = select_passages([3000, 3000, 3000], 4096, count=5)
    assert volume == [Passage(-1, 0, 4096, True), Passage(-1, 4096, 4096, True)]


def test_samples_are_exact_length_deterministic_and_start_with_bos(tmp_path):
    for i, n in enumerate([50, 700, 900, 2000]):
        (tmp_path / f"book{i}.txt").write_text("".join(chr(97 + (j * 7 + i) % 26) for j in range(n)))
    lm = tiny_lm(bos=True)
    bench = get_benchmark("pg19")
    ctx = SampleContext(lm=lm, length=512, limit=None, options={"pg19_dir": str(tmp_path), "pg19_per_doc": 2})
    samples = list(bench.samples("pg19", ctx))
    assert [s.sample_id for s in samples] == ["book1@0", "book2@0", "book3@0", "book3@511"]
    again = list(get_benchmark("pg19").samples("pg19", ctx))
    assert [s.prompt for s in samples] == [s.prompt for s in again]
    text = (tmp_path / "book3.txt").read_text()
    window = samples[3].input_ids
    assert (
        len(window) == 512
        and window[0] == 1
        and window[1:] == lm.tokenizer(text[511:1022], False)["input_ids"]
    )
    assert samples[3].meta["title"] == "book3" and samples[3].meta["prompt_tokens"] == 512
    assert special_prefix(CharTokenizer(bos=True)) == [1] and special_prefix(CharTokenizer()) == []


# ----------------------------------------------------------------------------------------------- loss
def manual_nll(model, ids: torch.Tensor, tail_from: int) -> tuple[float, float]:
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, :-1].double()
    nll = torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="none")
    positions = torch.arange(1, ids.shape[1])
    return float(nll.sum()), float(nll[positions >= tail_from].sum())


@pytest.mark.parametrize("length,chunk", [(2, 1), (97, 16), (300, 64), (300, 1024)])
def test_chunked_loss_equals_the_full_loss(length, chunk):
    model = tiny_llama(window=256)
    ids = torch.randint(0, 128, (1, length))
    total, count, tail, count_tail = chunked_nll_rows(model, ids, chunk=chunk)[0]
    assert count == length - 1 and count_tail == length // 4
    with torch.no_grad():
        hf = model(input_ids=ids, labels=ids).loss
    assert total / count == pytest.approx(float(hf), rel=1e-5)
    full, full_tail = manual_nll(model, ids, length - length // 4)
    assert total == pytest.approx(full, rel=1e-5) and tail == pytest.approx(full_tail, rel=1e-5, abs=1e-6)


def test_the_loss_follows_the_lm_head_to_its_device(monkeypatch):
    """With --device-map auto the LM head may sit on another GPU than the input ids: the targets must move
    to the logits' device. This CPU has one device, so the head here hands its logits to the meta device
    and the loss checks that its targets are there too (the same numbers otherwise)."""
    model = tiny_llama(window=256)
    ids = torch.randint(0, 128, (1, 97))
    expected = chunked_nll_rows(model, ids, chunk=16)[0]
    head = model.get_output_embeddings()
    real_ce = torch.nn.functional.cross_entropy
    chunks = iter(ids[0, 1:].split(16))  # the CPU targets, chunk by chunk
    seen = []

    class OtherDevice(torch.nn.Module):
        def forward(self, hidden):
            logits = head(hidden)
            seen.append(logits)
            return logits.to("meta")

    def loss_on_one_device(logits, target, **kwargs):
        assert logits.device == target.device, f"logits on {logits.device}, targets on {target.device}"
        return real_ce(seen.pop(), next(chunks), **kwargs)

    monkeypatch.setattr(model, "get_output_embeddings", lambda: OtherDevice())
    monkeypatch.setattr(torch.nn.functional, "cross_entropy", loss_on_one_device)
    assert chunked_nll_rows(model, ids, chunk=16)[0] == pytest.approx(expected, rel=1e-12)


def test_one_chunk_of_logits_is_alive_at_a_time():
    """The loss holds one [chunk, vocab] fp32 logits block at a time (the previous one is freed before the
    next is made): the peak is that block and its log-softmax, under 2.25 blocks (three before)."""
    from lampe_eval.attention.counts import peak_memory

    model = tiny_llama(window=256, vocab=8192)
    ids = torch.randint(0, 8192, (1, 4096), generator=torch.Generator().manual_seed(0))
    _, peak = peak_memory(chunked_nll_rows, model, ids, chunk=1024)
    assert 2 * 1024 * 8192 * 4 <= peak < 2.25 * 1024 * 8192 * 4


def test_chunked_loss_goes_through_the_method_patch():
    model = tiny_llama(window=64)
    ids = torch.randint(0, 128, (1, 200))
    plain = chunked_nll_rows(model, ids, chunk=50)[0][0]
    method = create_method("lampe", 64, 200)
    with apply_method(model, method, window=64):
        patched = chunked_nll_rows(model, ids, chunk=50)[0][0]
        full, _ = manual_nll(model, ids, 150)
    assert patched == pytest.approx(full, rel=1e-5)
    assert abs(patched - plain) > 1e-3  # the patch changed the positions beyond the window


def test_evaluate_score_and_token_weighted_aggregate(tmp_path):
    (tmp_path / "a.txt").write_text("In the beginning was the word. " * 20)
    lm = tiny_lm()
    bench = get_benchmark("pg19")
    ctx = SampleContext(lm=lm, length=256, limit=1, options={"pg19_dir": str(tmp_path), "pg19_chunk": 100})
    (sample,) = bench.samples("pg19", ctx)
    output = evaluate_one(HFBackend(lm), get_benchmark("pg19").evaluate(sample, ctx))  # another instance
    scores = bench.score(sample, output)
    ids = torch.tensor([sample.input_ids])
    full, tail = manual_nll(lm.model, ids, 256 - 64)
    assert scores["ppl"] == pytest.approx(math.exp(full / 255), rel=1e-5)
    assert scores["ppl_last_quarter"] == pytest.approx(math.exp(tail / 64), rel=1e-5)
    assert list(scores)[0] == "ppl" and output["prompt_tokens"] == 256

    a = {"nll": 1.0, "tokens": 100.0, "nll_last_quarter": 2.0, "tokens_last_quarter": 25.0}
    b = {"nll": 3.0, "tokens": 300.0, "nll_last_quarter": 4.0, "tokens_last_quarter": 75.0}
    agg = bench.aggregate("pg19", [a, b])
    assert agg["nll"] == pytest.approx(2.5) and agg["ppl"] == pytest.approx(math.exp(2.5))
    assert agg["ppl_last_quarter"] == pytest.approx(math.exp(3.5)) and agg["passages"] == 2


def test_format_ppl_saturates_like_the_paper():
    assert format_ppl(7.1234) == "7.12" and format_ppl(99.99) == "99.99"
    assert (
        format_ppl(100.5) == ">10^2" and format_ppl(math.inf) == ">10^2" and format_ppl(math.nan) == ">10^2"
    )


@pytest.mark.slow
@needs_corpus
def test_real_model_on_the_offline_corpus(smollm2):
    bench = get_benchmark("pg19")
    ctx = SampleContext(lm=smollm2, length=512, limit=1, options={"pg19_source": "offline"})
    (sample,) = bench.samples("pg19", ctx)
    assert sample.meta["title"] == "Genesis" and sample.meta["prompt_tokens"] == 512
    assert sample.meta["data_source"] == "offline:kjv"
    scores = bench.score(sample, evaluate_one(HFBackend(smollm2), bench.evaluate(sample, ctx)))
    assert 1.5 < scores["ppl"] < 20, scores  # real English prose, not noise (a random model: ~49152)
