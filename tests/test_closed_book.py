"""The closed-book control (``--opt no_context=true``) of every benchmark with a context: the same samples
(ids, references, budgets), each prompt the normal prompt with one contiguous span, the context, cut out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lampe_eval.benchmarks.base import BENCHMARKS, CLOSED_BOOK, SampleContext, get_benchmark, is_closed_book
from lampe_eval.models import LoadedModel

RULER_DATA = str(Path(__file__).parent / "fixtures" / "ruler")
BOOK = " ".join(f"The road ran on past hill number {i} and the river bent west." for i in range(400))

# (benchmark, task, length, options): fixtures and generators that need no network
CASES = [
    ("longbench", "hotpotqa", 8192, {"fixture": True}),
    ("longbench", "trec", 8192, {"fixture": True}),
    ("leval", "coursera", 8192, {"fixture": True}),
    ("leval", "gsm100", 8192, {"fixture": True}),
    ("longbench_v2", "longbench_v2", 8192, {"fixture": True}),
    ("infinitebench", "longbook_qa_eng", 8192, {"fixture": True}),
    ("infinitebench", "passkey", 2048, {"source": "generate", "cache": False}),
    ("infinitebench", "kv_retrieval", 2048, {"source": "generate", "cache": False}),
    ("ruler", "niah_multikey_2", 1024, {"cache": False}),
    ("ruler", "vt", 1024, {"cache": False}),
    ("ruler", "cwe", 1024, {"cache": False}),
    ("ruler", "fwe", 1024, {"cache": False}),
    ("ruler", "qa_1", 1024, {"cache": False}),
    ("babilong", "qa2", 512, {"fixture": True, "cache": False}),
]


def _samples(lm: LoadedModel, case: tuple[str, str, int, dict[str, Any]], tmp: Path, **extra: Any) -> list:
    benchmark, task, length, options = case
    options = {**options, **extra}
    if benchmark == "babilong":
        (tmp / "books").mkdir(exist_ok=True)
        (tmp / "books" / "road.txt").write_text(BOOK)
        options["background_dir"] = str(tmp / "books")
    data_dir = RULER_DATA if benchmark == "ruler" else None
    ctx = SampleContext(lm=lm, length=length, limit=2, data_dir=data_dir, options=options)
    return list(get_benchmark(benchmark).samples(task, ctx))


def _cut(normal: str, closed: str) -> str:
    """The one span of ``normal`` that ``closed`` lacks ('' when ``closed`` is not ``normal`` less a span)."""
    prefix = 0
    while prefix < min(len(normal), len(closed)) and normal[prefix] == closed[prefix]:
        prefix += 1
    suffix = 0
    while suffix < len(closed) - prefix and normal[-1 - suffix] == closed[-1 - suffix]:
        suffix += 1
    return normal[prefix : len(normal) - suffix] if prefix + suffix == len(closed) else ""


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_closed_book_prompt_is_the_prompt_without_its_context(
    lm: LoadedModel, case: tuple[str, str, int, dict[str, Any]], tmp_path: Path
) -> None:
    normal = _samples(lm, case, tmp_path)
    closed = _samples(lm, case, tmp_path, **{CLOSED_BOOK: True})
    assert normal and [s.sample_id for s in closed] == [s.sample_id for s in normal]
    for a, b in zip(normal, closed, strict=True):
        assert b.references == a.references and b.max_new_tokens == a.max_new_tokens
        if case[0] == "longbench_v2":  # its official no-context template is a text of its own
            middle = a.prompt[len(a.prompt) // 2 :][:60]  # inside the document
            assert middle not in b.prompt and len(b.prompt) < len(a.prompt)
            continue
        removed = _cut(a.prompt, b.prompt)
        assert len(removed) > 100, (len(removed), b.prompt[:300])  # the fixtures' contexts are small
        assert a.prompt.replace(removed, "", 1) == b.prompt
        if case[1].startswith(("niah", "passkey", "kv_")):  # the needles went with the context
            assert all(r in removed and r not in b.prompt for r in a.references[:1])


def test_every_benchmark_with_a_context_declares_the_control() -> None:
    with_context = set(BENCHMARKS.names()) - {"pg19"}
    for name in with_context:
        assert any(o.name == CLOSED_BOOK for o in BENCHMARKS.get(name).options), name
    assert is_closed_book("ruler", {CLOSED_BOOK: True}) and not is_closed_book("ruler", {})
    assert not is_closed_book("pg19", {CLOSED_BOOK: True})  # pg19 declares no such option
