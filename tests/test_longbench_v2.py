"""LongBench v2: the official templates, fill order, middle cut, answer extraction, scores and splits,
data sources, the CoT two-step protocol, and a run end to end (hand-computed expectations; the official
``pred.py`` / ``result.py`` behaviour is quoted in docs/benchmarks.md section 6)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from lampe_eval.backends.rounds import evaluate_one
from lampe_eval.benchmarks import datafiles, get_benchmark
from lampe_eval.benchmarks import longbench_v2 as v2
from lampe_eval.benchmarks.base import Sample, SampleContext
from lampe_eval.data import hub
from lampe_eval.errors import LampeEvalError, MissingDataError
from lampe_eval.models import LoadedModel
from lampe_eval.testing import tiny_llama
from tests.fakebackend import ScriptedBackend

RECORD = {
    "_id": "r1", "domain": "Single-Document QA", "sub_domain": "Legal", "difficulty": "hard",
    "length": "medium", "question": "  Who signed?  ", "choice_A": " Ann ", "choice_B": "Bob",
    "choice_C": "Cid", "choice_D": "Dee", "answer": "B",
    "context": "\n Bob signed the contract on Monday. \n",
}  # fmt: skip


# --------------------------------------------------------------------------- templates and prompt


def test_templates_are_the_official_files() -> None:
    templates = v2.load_config().templates
    tail = 'Format your response as follows: "The correct answer is (insert answer here)".'
    assert templates["zero_shot"].startswith("Please read the following text and answer the question below.")
    assert templates["zero_shot"].endswith(tail) and templates["no_context"].endswith(tail)
    # the CoT files say "questions" and use a typographic apostrophe; the answer step omits the text
    assert templates["cot"].endswith("\n\nLet\u2019s think step by step:")
    assert "answer the questions below" in templates["cot"]
    assert "The text is too long and omitted here." in templates["cot_answer"]
    assert (
        "$DOC$" not in templates["cot_answer"]
        and "Let\u2019s think step by step: $COT$\n\n" in templates["cot_answer"]
    )
    assert "$DOC$" not in templates["no_context"] and templates["no_context"].startswith(
        "What is the correct"
    )
    assert v2.load_config().max_new_tokens == 128 and v2.load_config().cot_max_new_tokens == 1024


def test_fill_strips_each_field_and_replaces_in_order() -> None:
    text = v2.fill(v2.load_config().templates["zero_shot"], RECORD, RECORD["context"])
    assert "<text>\nBob signed the contract on Monday.\n</text>" in text
    assert "question: Who signed?\nChoices:\n(A) Ann\n(B) Bob\n(C) Cid\n(D) Dee\n\n" in text
    # str.replace in pred.py's order: a placeholder inside the context is filled by the later replaces
    assert v2.fill("$DOC$ | $Q$", RECORD, "see $Q$ and $C_A$") == "see Who signed? and Ann | Who signed?"


def test_middle_truncation_keeps_head_and_the_larger_tail(smollm2_tokenizer: Any) -> None:
    prompt = " ".join(f"word{i}" for i in range(400))
    ids = smollm2_tokenizer.encode(prompt)
    cut, count, truncated = v2.middle_truncate(prompt, smollm2_tokenizer, 101)
    assert truncated and count == len(ids) > 101
    # pred.py: ids[:101//2] + ids[-101//2:] = 50 + 51 tokens, decoded together (special tokens skipped)
    assert cut == smollm2_tokenizer.decode(ids[:50] + ids[-51:], skip_special_tokens=True)
    assert cut.startswith("word0 word1") and cut.endswith("word398 word399")
    same, count, truncated = v2.middle_truncate("short", smollm2_tokenizer, 101)
    assert same == "short" and not truncated and count == len(smollm2_tokenizer.encode("short"))


# --------------------------------------------------------------------------- answer extraction and scores


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("The correct answer is (B)", "B"),
        ("**The correct answer is (C)**", "C"),  # every * is dropped first
        ("The correct answer is *(*A*)*.", "A"),
        ("The correct answer is D.", "D"),  # the bare form
        (
            "The correct answer is B, no wait: The correct answer is (C)",
            "C",
        ),  # parentheses are searched first
        ("The correct answer is (A) or (B)", "A"),
        ("The correct answer is Alice", "A"),  # the bare form matches any word starting with A-D
        ("the correct answer is (A)", None),  # case-sensitive
        ("The correct answer is (a)", None),
        ("The correct answer is (E)", None),
        ("The correct answer is  (A)", None),  # two spaces: neither pattern
        ("The correct answer is:(A)", None),
        ("I think (B).", None),
        ("", None),
    ],
)
def test_extract_answer(response: str, expected: str | None) -> None:
    assert v2.extract_answer(response) == expected


def test_judge_and_compensation() -> None:
    assert v2.judge("  The correct answer is (B) \n", "B") == 1.0
    assert v2.judge("The correct answer is (A)", "B") == 0.0
    assert v2.judge("no idea", "B") == 0.0
    assert v2.judge("no idea", "B", compensated=True) == 0.25  # result.py with compensated = True
    assert v2.judge("The correct answer is (A)", "B", compensated=True) == 0.0


def test_scores_count_in_their_difficulty_and_length_splits() -> None:
    bench = get_benchmark("longbench_v2")

    def score(prediction: str, difficulty: str, length: str) -> dict[str, float]:
        sample = Sample("s", "longbench_v2", "", ["C"], meta={"difficulty": difficulty, "length": length})
        return bench.score(sample, {"prediction": prediction})

    assert score("The correct answer is (C)", "easy", "short") == {
        "accuracy": 100.0, "accuracy_easy": 100.0, "accuracy_short": 100.0,
    }  # fmt: skip
    assert score("The correct answer is (D)", "hard", "medium") == {
        "accuracy": 0.0, "accuracy_hard": 0.0, "accuracy_medium": 0.0,
    }  # fmt: skip
    # result.py: anything but "easy" is hard, anything but "short"/"medium" is long
    assert v2.split_keys("Easy", "LONG") == ("accuracy_hard", "accuracy_long")
    compensated = Sample("s", "longbench_v2", "", ["C"], meta={"difficulty": "easy", "length": "long",
                                                               "compensated": True})  # fmt: skip
    assert bench.score(compensated, {"prediction": "?"})["accuracy"] == 25.0


def test_aggregate_is_result_py_and_the_summary_its_row() -> None:
    bench = get_benchmark("longbench_v2")
    scores = [
        {"accuracy": 100.0, "accuracy_easy": 100.0, "accuracy_short": 100.0},
        {"accuracy": 0.0, "accuracy_hard": 0.0, "accuracy_short": 0.0},
        {"accuracy": 100.0, "accuracy_hard": 100.0, "accuracy_long": 100.0},
    ]
    aggregate = bench.aggregate("longbench_v2", scores)
    # 2/3 -> 66.7 (x100, 1 decimal); no medium question -> no medium column
    assert aggregate == {
        "accuracy": 66.7, "accuracy_easy": 100.0, "accuracy_hard": 50.0, "accuracy_short": 50.0,
        "accuracy_long": 100.0,
    }  # fmt: skip
    assert bench.summarize_aggregates({"longbench_v2": aggregate}) == {
        "Overall": 66.7, "Easy": 100.0, "Hard": 50.0, "Short": 50.0, "Long": 100.0,
    }  # fmt: skip
    assert bench.aggregate("longbench_v2", []) == {}


# --------------------------------------------------------------------------- samples and data


def test_fixture_samples(lm: LoadedModel) -> None:
    bench = get_benchmark("longbench_v2")
    samples = list(
        bench.samples("longbench_v2", SampleContext(lm=lm, length=4096, options={"fixture": True}))
    )
    records = datafiles.read_jsonl(datafiles.require_fixture("longbench_v2", "longbench_v2"))
    assert len(samples) == len(records) >= 4
    assert {r["difficulty"] for r in records} == {"easy", "hard"}
    assert {r["length"] for r in records} == {"short", "medium", "long"}
    for sample, record in zip(samples, records, strict=True):
        assert sample.sample_id == record["_id"] and sample.references == [record["answer"]]
        assert sample.max_new_tokens == 128 and not sample.meta["truncated"]
        assert sample.meta["chat_template"] and sample.prompt.startswith("<|im_start|>")
        assert (
            record["context"].strip() in sample.prompt
            and f"(D) {record['choice_D'].strip()}" in sample.prompt
        )
        assert sample.meta["data_source"] == "fixture:fixtures/longbench_v2/longbench_v2.jsonl"
        assert "cot_answer_template" not in sample.meta


def test_prompts_are_cut_to_the_length_before_the_chat_template(lm: LoadedModel) -> None:
    bench = get_benchmark("longbench_v2")
    options = {"fixture": True, "chat_template": False}
    (sample,) = list(bench.samples("longbench_v2", SampleContext(lm=lm, length=60, limit=1, options=options)))
    assert sample.meta["truncated"] and sample.meta["record_tokens"] > 60
    assert sample.prompt.startswith("Please read the following text")
    assert sample.prompt.endswith('"The correct answer is (insert answer here)".')
    assert abs(len(lm.tokenizer(sample.prompt)["input_ids"]) - 60) <= 3  # one re-tokenisation of the cut


def test_cot_and_no_context_modes(lm: LoadedModel) -> None:
    bench = get_benchmark("longbench_v2")
    ctx = SampleContext(lm=lm, length=4096, limit=1, options={"fixture": True, "cot": True})
    (sample,) = list(bench.samples("longbench_v2", ctx))
    assert sample.prompt.rstrip().endswith("Let\u2019s think step by step:<|im_end|>\n<|im_start|>assistant")
    template = sample.meta["cot_answer_template"]
    assert "$COT$" in template and "Which town does the narrator leave" in template
    assert "Ashby" in template and "printing house" not in template  # choices, not the context
    ctx = SampleContext(lm=lm, length=4096, limit=1, options={"fixture": True, "no_context": True})
    (sample,) = list(bench.samples("longbench_v2", ctx))
    assert "printing house" not in sample.prompt and "What is the single, most likely answer" in sample.prompt
    with pytest.raises(LampeEvalError, match="choose one of"):
        bench.check_job("longbench_v2", 4096, {"cot": "true", "no_context": "true"}, None)
    with pytest.raises(MissingDataError, match="longbench_v2_dir=/nonexistent is not a directory"):
        bench.check_job("longbench_v2", 4096, {"longbench_v2_dir": "/nonexistent"}, None)


def test_cot_is_two_steps(lm: LoadedModel) -> None:
    bench = get_benchmark("longbench_v2")
    ctx = SampleContext(lm=lm, length=4096, limit=1, options={"fixture": True, "cot": True})
    (sample,) = list(bench.samples("longbench_v2", ctx))
    backend = ScriptedBackend(lm, ["  The text says Mereford.  \n", "**The correct answer is (B)**"])
    output = evaluate_one(backend, bench.evaluate(sample, ctx))
    calls = [(r.prompt, r.max_new_tokens) for r in backend.requests]
    assert [n for _, n in calls] == [1024, 128] and calls[0][0] == sample.prompt
    second = calls[1][0]
    assert "Let\u2019s think step by step: The text says Mereford.\n\nBased on the above" in second
    assert "The text is too long and omitted here." in second and second.startswith("<|im_start|>")
    assert output["response_cot"] == "The text says Mereford." and output["pred"] == "B"
    assert output["new_tokens"] == 14 and output["seconds"] == 2.0
    assert bench.score(sample, output)["accuracy"] == 100.0


def test_data_dir_with_the_official_data_json(lm: LoadedModel, tmp_path: Path) -> None:
    (tmp_path / "data.json").write_text(json.dumps([RECORD, {**RECORD, "_id": "r2"}]))
    bench = get_benchmark("longbench_v2")
    samples = list(bench.samples("longbench_v2", SampleContext(lm=lm, length=4096, data_dir=str(tmp_path))))
    assert [s.sample_id for s in samples] == ["r1", "r2"]
    assert samples[0].meta["data_source"] == f"file:{tmp_path / 'data.json'}"
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "data.json").write_text(json.dumps([{"_id": "x"}]))
    with pytest.raises(MissingDataError, match="lacks the LongBench v2 field"):
        list(bench.samples("longbench_v2", SampleContext(lm=lm, length=4096, data_dir=str(tmp_path / "bad"))))


def test_offline_without_data_says_how_to_provide_it(
    lm: LoadedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hub, "hub_reachable", lambda: False)
    with pytest.raises(MissingDataError) as err:
        list(get_benchmark("longbench_v2").samples("longbench_v2", SampleContext(lm=lm, length=4096)))
    assert "--data-dir" in str(err.value) and "lampe-eval data fetch" in str(err.value)


# --------------------------------------------------------------------------- end to end


def test_runs_end_to_end_through_the_runner(
    smollm2_tokenizer: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fixture with CoT through the runner on a tiny random model with SmolLM2's tokenizer: records,
    both steps' outputs, the aggregate with its splits and the summary row (short budgets: a random model
    never stops, and 2 x 1024 tokens would dominate the test's time)."""
    config = dataclasses.replace(v2.load_config(), max_new_tokens=6, cot_max_new_tokens=10)
    monkeypatch.setattr(v2, "load_config", lambda: config)
    from lampe_eval.benchmarks.summaries import benchmark_summaries
    from lampe_eval.runner.experiment import Experiment
    from lampe_eval.runner.jobs import Job
    from lampe_eval.runner.local import run
    from lampe_eval.runner.store import ResultStore

    model = tiny_llama(vocab=len(smollm2_tokenizer), window=4096, layers=1)
    lm = LoadedModel("tiny", model, smollm2_tokenizer, 4096, True)
    store = ResultStore(tmp_path / "results")
    job = Job(
        "tiny", "rope", "longbench_v2", "longbench_v2", 1024, limit=2, options={"fixture": True, "cot": True}
    )
    experiment = Experiment.from_jobs([job], store.directory, load=lambda name: lm)
    summaries = run(experiment).raise_for_failures().summaries
    records = sorted(store.records(), key=lambda r: r["index"])
    assert [r["sample_id"] for r in records] == ["fixture-0001", "fixture-0002"]
    for record in records:
        assert "response_cot" in record["output"] and record["output"]["new_tokens"] <= 10 + 6
        assert set(record["scores"]) == {"accuracy", f"accuracy_{record['meta']['difficulty']}",
                                         f"accuracy_{record['meta']['length']}"}  # fmt: skip
    aggregate = summaries[job.key()]
    assert set(aggregate) == {
        "accuracy",
        "accuracy_easy",
        "accuracy_hard",
        "accuracy_short",
        "accuracy_medium",
    }
    ((_, row),) = benchmark_summaries([job], summaries)["longbench_v2"]
    assert (
        list(row) == ["Overall", "Easy", "Hard", "Short", "Medium"]
        and row["Overall"] == aggregate["accuracy"]
    )
