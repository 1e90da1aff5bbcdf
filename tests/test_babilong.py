"""BABILong: the official prompt template and answer check (hand-computed cases of ``babilong/metrics.py``
``compare_answers``), bAbI parsing, the haystack recipe (background sentences, fact injection), the data
sources, one-line errors, the summary row and a run end to end (facts: docs/benchmarks.md section 7)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lampe_eval.benchmarks import get_benchmark
from lampe_eval.benchmarks.babilong import benchmark as babilong_benchmark
from lampe_eval.benchmarks.babilong import compare_answers, format_input, haystack, preprocess_output
from lampe_eval.benchmarks.babilong.config import load_config
from lampe_eval.benchmarks.babilong.data import eligible, parse_babi
from lampe_eval.benchmarks.base import SampleContext
from lampe_eval.errors import LampeEvalError, MissingDataError
from lampe_eval.models import LoadedModel
from lampe_eval.testing import tiny_llama

QA1 = load_config().tasks["qa1"].labels
BOOK = " ".join(
    f"The {w} traveller walked slowly along the old stone road towards the distant village number {i}."
    for i, w in enumerate(["tired", "young", "quiet", "brave", "lonely", "curious"] * 40)
)


@pytest.fixture
def books(tmp_path: Path) -> Path:
    folder = tmp_path / "books"
    folder.mkdir()
    (folder / "road.txt").write_text(BOOK)
    return folder


def context(lm: LoadedModel, length: int, limit: int | None = None, **options: Any) -> SampleContext:
    return SampleContext(lm=lm, length=length, limit=limit, options={"cache": False, **options})


# --------------------------------------------------------------------------- answer check


@pytest.mark.parametrize(
    ("target", "output", "question", "labels", "correct"),
    [
        ("garden", "The most recent location of Mary is garden.", "Where is Mary? ", QA1, True),
        ("garden", "GARDEN", "Where is Mary?", QA1, True),  # lower-cased
        ("garden", "Mary is in the garden or the kitchen.", "Where is Mary?", QA1, False),  # two labels
        (
            "garden",
            "Mary is in the garden. Before, the kitchen.",
            "Where is Mary?",
            QA1,
            True,
        ),  # 1st sentence
        ("garden", "kitchen", "Where is Mary?", QA1, False),
        ("garden", "", "Where is Mary?", QA1, False),
        # a label named in the question is never counted (qa4: "What is the kitchen south of?")
        ("bedroom", "the kitchen is south of the bedroom", "What is the kitchen south of?", QA1, True),
        ("kitchen", "kitchen", "What is the kitchen south of?", QA1, False),
        ("garden", "garden <example> kitchen", "Where?", QA1, True),  # cut at <example>
        ("garden", "garden <context> kitchen", "Where?", QA1, True),  # cut at <context>
        # substrings: "none" contains "one", so "none" can never be the only label (qa7)
        ("none", "none", "How many?", ("none", "one", "three", "two"), False),
        ("two", "two", "How many?", ("none", "one", "three", "two"), True),
        ("one", "someone", "How many?", ("none", "one", "three", "two"), True),
        # qa8: several answers need all of them and nothing else
        (
            "apple,milk",
            "milk and apple",
            "What is he carrying?",
            ("apple", "football", "milk", "nothing"),
            True,
        ),
        ("apple,milk", "apple", "What is he carrying?", ("apple", "football", "milk", "nothing"), False),
        ("apple,milk", "apple, milk, football", "What?", ("apple", "football", "milk", "nothing"), False),
        # qa19's labels hold a comma but are 3 characters: one label, matched as a substring
        ("n,e", "n,e", "How do you go?", ("e,e", "n,e", "n,n"), True),
        ("Mary", "mary", "Who gave the apple?", ("Bill", "Fred", "Jeff", "Mary", "apple"), True),
        ("maybe", "Maybe", "Is Julie in the park?", ("maybe", "no", "yes"), True),
    ],
)
def test_compare_answers(target: str, output: str, question: str, labels: Any, correct: bool) -> None:
    assert compare_answers(target, output, question, labels) is correct


def test_preprocess_output_keeps_the_first_sentence() -> None:
    assert preprocess_output("The Garden. Then <context>") == "the garden"
    assert preprocess_output("a <EXAMPLE> b.") == "a "  # lower-cased before the cuts


def test_labels_and_prompts_cover_qa1_to_qa20() -> None:
    config = load_config()
    assert list(config.tasks) == [f"qa{i}" for i in range(1, 21)]
    assert config.default_tasks == tuple(f"qa{i}" for i in range(1, 11))
    assert config.headline_tasks == ("qa1", "qa2", "qa3", "qa4", "qa5")
    assert config.tasks["qa7"].labels == ("none", "one", "three", "two")
    assert config.tasks["qa2"].instruction.count("question.You need") == 1  # the official typo, kept
    assert config.max_new_tokens == 20


# --------------------------------------------------------------------------- prompt


def test_format_input_is_the_official_template() -> None:
    spec = load_config().tasks["qa1"]
    template = load_config().template
    everything = dict.fromkeys(("instruction", "examples", "post_prompt"), True)
    text = format_input(template, spec, everything, "  Mary went home.\n", "Where is Mary? ")
    assert text == (
        f"{spec.instruction}\n\n{spec.examples}\n\n{spec.post_prompt}\n\n<context>\nMary went home.\n"
        "</context>\n\nQuestion: Where is Mary?"
    )
    # a part switched off is '' and its separators stay; the whole is stripped
    text = format_input(template, spec, dict.fromkeys(everything, False), "x", "q")
    assert text == "<context>\nx\n</context>\n\nQuestion: q"


# --------------------------------------------------------------------------- bAbI files


def test_parse_babi_keeps_each_story_before_its_question() -> None:
    text = "1 Mary moved to the bathroom.\n2 Where is Mary? \tbathroom\t1\n3 John went to the hallway.\n"
    text += "4 Where is John? \thallway\t3\n1 Sandra went to the garden.\n2 Where is Sandra? \tgarden\t1\n"
    samples = parse_babi(text)
    assert [s.question for s in samples] == ["Where is Mary? ", "Where is John? ", "Where is Sandra? "]
    assert samples[1].facts == ("Mary moved to the bathroom.", "John went to the hallway.")
    assert samples[2].facts == ("Sandra went to the garden.",)  # a new story at line 1
    assert samples[1].answer == "hallway" and samples[1].supporting == (3,)
    # create_tasks.py keeps a question when facts + question fit max_n_facts
    assert eligible(samples, 2) == [0, 2] and eligible(samples, 3) == [0, 1, 2]
    with pytest.raises(MissingDataError, match="bAbI line 1"):
        parse_babi("Mary moved.\n")


# --------------------------------------------------------------------------- the haystack recipe


def test_inject_facts_keeps_their_order_and_every_sentence() -> None:
    background = [[10, 11], [12], [13, 14, 15]]
    facts = [[1], [2, 2], [3]]
    for seed in range(20):
        tokens = haystack.inject_facts(facts, background, np.random.default_rng(seed))
        assert len(tokens) == 10 and [t for t in tokens if t >= 10] == [10, 11, 12, 13, 14, 15]
        assert [t for t in tokens if t < 10] == [1, 2, 2, 3]
        # a fact sits before a sentence (or at the end), never inside one
        assert all(tokens[tokens.index(a) + 1] == b for a, b in ((10, 11), (13, 14), (14, 15)))


def test_background_has_exactly_the_budget_of_whole_sentences(smollm2_tokenizer: Any) -> None:
    rng = np.random.default_rng(0)
    sentences, titles = haystack.sample_background([("road", BOOK)], 300, smollm2_tokenizer, rng)
    assert sum(len(s) for s in sentences) == 300 and titles and set(titles) == {"road"}
    assert all(len(s) >= haystack.MIN_SENTENCE_TOKENS for s in sentences[:-1])
    first = smollm2_tokenizer.decode(sentences[0])
    assert first.startswith(" The ") and first.endswith(".")  # " " + a whole sentence
    assert haystack.sample_background([("road", BOOK)], 0, smollm2_tokenizer, rng) == ([], [])


def test_build_haystack_hides_the_facts_in_order(smollm2_tokenizer: Any) -> None:
    facts = ["Mary moved to the bathroom.", "John went to the hallway."]
    text, provenance = haystack.build_haystack(facts, 200, [("road", BOOK)], smollm2_tokenizer, seed=3)
    assert text.index(facts[0]) < text.index(facts[1]) and provenance["background_books"] == ["road"]
    assert abs(len(smollm2_tokenizer.encode(text)) - 200) <= 2  # decoded and re-tokenised
    again, _ = haystack.build_haystack(facts, 200, [("road", BOOK)], smollm2_tokenizer, seed=3)
    assert again == text
    with pytest.raises(haystack.TooShortError):
        haystack.build_haystack(facts, 5, [("road", BOOK)], smollm2_tokenizer, seed=3)


# --------------------------------------------------------------------------- generated samples


def test_generated_samples_fit_the_length(lm: LoadedModel, books: Path) -> None:
    bench = get_benchmark("babilong")
    ctx = context(lm, 512, limit=3, fixture=True, background_dir=str(books))
    samples = list(bench.samples("qa1", ctx))
    assert [s.sample_id for s in samples] == ["gen-0", "gen-1", "gen-2"]
    for sample in samples:
        tokens = len(lm.tokenizer(sample.prompt, add_special_tokens=False)["input_ids"])
        assert tokens == sample.meta["prompt_tokens"] <= 512 - 20 and tokens > 512 - 60
        assert (
            sample.prompt.startswith("<|im_start|>")
            and f"Question: {sample.meta['question'].strip()}" in sample.prompt
        )
        assert sample.references[0] in QA1 and sample.max_new_tokens == 20
        assert sample.meta["background"].startswith(f"dir:{books}") and sample.meta["background_books"] == [
            "road"
        ]
        assert sample.meta["facts"] == "fixture:fixtures/babilong/qa1_single-supporting-fact_train.txt"
    # sample i does not depend on --limit; another seed gives other samples
    (first,) = list(bench.samples("qa1", context(lm, 512, limit=1, fixture=True, background_dir=str(books))))
    assert first.prompt == samples[0].prompt
    other = SampleContext(lm=lm, length=512, limit=1, seed=1, options=ctx.options)
    assert next(iter(bench.samples("qa1", other))).prompt != first.prompt


def test_prompt_parts_and_chat_template_can_be_switched_off(lm: LoadedModel, books: Path) -> None:
    options = {"fixture": True, "background_dir": str(books), "examples": False, "chat_template": False}
    (sample,) = list(get_benchmark("babilong").samples("qa1", context(lm, 512, limit=1, **options)))
    spec = load_config().tasks["qa1"]
    assert sample.prompt.startswith(f"{spec.instruction}\n\n\n\n{spec.post_prompt}\n\n<context>\n")
    assert "<example>" not in sample.prompt


def test_generation_uses_the_bAbI_files_of_the_data_dir(lm: LoadedModel, books: Path, tmp_path: Path) -> None:
    folder = tmp_path / "data" / "tasks_1-20_v1-2" / "en-10k"
    folder.mkdir(parents=True)
    facts = "1 Mary moved to the office.\n2 Where is Mary? \toffice\t1\n"
    (folder / "qa1_single-supporting-fact_train.txt").write_text(facts)
    ctx = SampleContext(lm=lm, length=300, data_dir=str(tmp_path / "data"),
                        options={"cache": False, "background_dir": str(books)})  # fmt: skip
    (sample,) = list(get_benchmark("babilong").samples("qa1", ctx))
    assert sample.meta["facts"] == f"file:{folder / 'qa1_single-supporting-fact_train.txt'}"
    assert "Mary moved to the office." in sample.prompt and sample.references == ["office"]


def test_generation_cache_is_reused(lm: LoadedModel, books: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("LAMPE_EVAL_CACHE", str(tmp_path / "cache"))
    options = {"fixture": True, "background_dir": str(books)}
    bench = get_benchmark("babilong")
    first = list(bench.samples("qa2", SampleContext(lm=lm, length=512, limit=2, options=options)))
    (cached,) = (tmp_path / "cache" / "babilong" / "samples" / "qa2").glob("*.jsonl")
    assert len(cached.read_text().splitlines()) == 2

    def no_build(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a cached sample was generated again")

    monkeypatch.setattr(babilong_benchmark, "build_haystack", no_build)
    again = list(bench.samples("qa2", SampleContext(lm=lm, length=512, limit=2, options=options)))
    assert [s.prompt for s in again] == [s.prompt for s in first]


# --------------------------------------------------------------------------- pre-built sets


def test_prebuilt_lengths_accept_both_kilos() -> None:
    config = load_config()
    assert config.length_name(4096) == config.length_name(4000) == "4k"
    assert config.length_name(1024 * 1024) == config.length_name(1_000_000) == "1M"
    assert config.length_name(5000) is None and config.length_name(0) is None


def test_prebuilt_file_in_the_data_dir(lm: LoadedModel, tmp_path: Path) -> None:
    records = [{"input": "Mary went to the garden.", "question": "Where is Mary?", "target": "garden"}] * 3
    (tmp_path / "qa1").mkdir()
    (tmp_path / "qa1" / "4k.json").write_text(json.dumps(records))
    bench = get_benchmark("babilong")
    ctx = SampleContext(lm=lm, length=4096, limit=2, data_dir=str(tmp_path))
    samples = list(bench.samples("qa1", ctx))
    assert len(samples) == 2 and samples[0].references == ["garden"]
    assert samples[0].meta["data_source"] == f"file:{tmp_path / 'qa1' / '4k.json'}"
    assert "<context>\nMary went to the garden.\n</context>\n\nQuestion: Where is Mary?" in samples[0].prompt
    output = {"prediction": "The most recent location of Mary is garden."}
    assert bench.score(samples[0], output) == {"accuracy": 100.0}
    with pytest.raises(LampeEvalError, match="no pre-built set of length 5000.*source=generate"):
        bench.check_job("qa1", 5000, {"source": "dir"}, str(tmp_path))
    with pytest.raises(MissingDataError, match="no qa2/4k.json"):
        bench.check_job("qa2", 4096, {"source": "dir"}, str(tmp_path))


def test_offline_without_data_says_how_to_provide_it(lm: LoadedModel) -> None:
    bench = get_benchmark("babilong")
    missing = "^babilong/qa1 \\(4k\\): RMT-team/babilong: config 4k, split qa1: not in the hub cache"
    with pytest.raises(MissingDataError, match=missing):
        list(bench.samples("qa1", SampleContext(lm=lm, length=4096)))
    with pytest.raises(MissingDataError, match="no bAbI facts.*unreachable.*data fetch.*--data-dir"):
        list(bench.samples("qa1", SampleContext(lm=lm, length=5000)))
    with pytest.raises(LampeEvalError, match="fixture=true generates samples"):
        bench.check_job("qa1", 4096, {"fixture": "true", "source": "hub"}, None)
    with pytest.raises(LampeEvalError, match="source=web: choose one of auto, dir, hub, generate"):
        bench.check_job("qa1", 4096, {"source": "web"}, None)
    for name in ("babilong_dir", "background_dir"):
        with pytest.raises(MissingDataError, match=f"{name}=/nonexistent is not a directory"):
            bench.check_job("qa1", 4096, {name: "/nonexistent"}, None)


def test_too_short_a_length_is_one_line(lm: LoadedModel, books: Path) -> None:
    with pytest.raises(LampeEvalError, match="length 64 leaves no room for the facts"):
        list(
            get_benchmark("babilong").samples("qa1", context(lm, 64, fixture=True, background_dir=str(books)))
        )


# --------------------------------------------------------------------------- summary and a run


def test_summary_is_the_official_averages() -> None:
    bench = get_benchmark("babilong")
    scores = {f"qa{i}": 10.0 * i for i in range(1, 11)}
    assert bench.summarize_tasks(scores) == {"Avg qa1-qa5": 30.0, "Avg qa1-qa10": 55.0}
    del scores["qa7"]
    assert bench.summarize_tasks(scores) == {"Avg qa1-qa5": 30.0}  # collect_results.py: a gap, no average
    del scores["qa1"]
    assert bench.summarize_tasks(scores) == {}


def test_runs_end_to_end_through_the_runner(smollm2_tokenizer: Any, books: Path, tmp_path: Path) -> None:
    from lampe_eval.runner.experiment import Experiment
    from lampe_eval.runner.jobs import Job
    from lampe_eval.runner.local import run
    from lampe_eval.runner.store import ResultStore

    model = tiny_llama(vocab=len(smollm2_tokenizer), window=4096, layers=1)
    lm = LoadedModel("tiny", model, smollm2_tokenizer, 4096, True)
    store = ResultStore(tmp_path / "results")
    options = {"fixture": True, "background_dir": str(books), "cache": False}
    jobs = [Job("tiny", "rope", "babilong", task, 512, limit=1, options=options) for task in ("qa1", "qa8")]
    summaries = run(Experiment.from_jobs(jobs, store.directory, load=lambda name: lm)).raise_for_failures()
    records = {r["task"]: r for r in store.records()}
    assert set(records) == {"qa1", "qa8"}
    for task, record in records.items():
        expected = 100.0 * compare_answers(
            record["references"][0],
            record["output"]["prediction"].strip(),
            record["meta"]["question"],
            load_config().tasks[task].labels,
        )
        assert record["scores"] == {"accuracy": expected} and record["output"]["new_tokens"] <= 20
        assert record["meta"]["data_source"].startswith("generated:seed0 from fixture:fixtures/babilong/qa")
        assert " in dir:" in record["meta"]["data_source"]  # the test's background books
    assert summaries.summaries[jobs[0].key()] == {"accuracy": records["qa1"]["scores"]["accuracy"]}
