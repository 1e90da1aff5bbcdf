"""InfiniteBench: official scorers on hand-computed cases, records, prompts, middle truncation, data sources
and the local generation of the synthetic retrieval tasks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lampe_eval.benchmarks import SampleContext, get_benchmark
from lampe_eval.benchmarks.infinitebench import benchmark as ib
from lampe_eval.benchmarks.infinitebench.config import load_config
from lampe_eval.benchmarks.infinitebench.data import (
    Record,
    fill_template,
    gold,
    normalize_record,
    read_jsonl,
    template_fields,
)
from lampe_eval.benchmarks.infinitebench.scoring import SCORERS, score_one
from lampe_eval.benchmarks.infinitebench.synthetic import (
    SyntheticTask,
    TooShortError,
    depth_index,
    depth_stride,
    fit_size,
    number_string_key,
    sample_rng,
)
from lampe_eval.errors import LampeEvalError, MissingDataError, UnknownNameError
from lampe_eval.models import LoadedModel

FIXTURES = Path(__file__).parents[1] / "lampe_eval" / "resources" / "fixtures" / "infinitebench"
TABLE2 = [
    "longbook_choice_eng",
    "longbook_qa_eng",
    "longbook_sum_eng",
    "code_debug",
    "kv_retrieval",
    "number_string",
    "passkey",
]
OFFICIAL_MAX_NEW_TOKENS = {
    "passkey": 6,
    "number_string": 12,
    "kv_retrieval": 50,
    "longbook_sum_eng": 1200,
    "longbook_choice_eng": 40,
    "longbook_qa_eng": 40,
    "longbook_qa_chn": 40,
    "longdialogue_qa_eng": 40,
    "math_find": 3,
    "math_calc": 30000,
    "code_run": 5,
    "code_debug": 5,
}


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAMPE_EVAL_CACHE", str(tmp_path / "cache"))


def _score(task: str, prediction: Any, label: list[str]) -> float:
    return round(100 * score_one(task, prediction, label), 2)


# ------------------------------------------------------------------------------- scorers by hand
@pytest.mark.parametrize(
    ("prediction", "label", "expected"),
    [
        ("The pass key is 40213.", "40213", 100),
        (" 40213 is the pass key", "40213", 100),
        ("-40213", "40213", 100),  # signs are not digits: the first digit run is 40213
        ("4021", "40213", 0),
        ("402135", "40213", 0),
        ("40 213", "40213", 0),  # the first run is "40"
        ("7715", "07715", 0),  # compared as strings: the leading zero matters
        ("key: 07715.", "07715", 100),
        ("The key is 12 and then 40213", "40213", 0),  # only the first run counts
        ("", "40213", 0),
        ("no digits at all", "40213", 0),
        (None, "40213", 0),
    ],
)
def test_passkey_scorer(prediction: Any, label: str, expected: float) -> None:
    assert _score("passkey", prediction, [label]) == expected
    assert _score("number_string", prediction, [label]) == expected


def test_kv_retrieval_scorer() -> None:
    value = "a9e8d7c6-b5a4-4f3e-8d2c-1b0a9f8e7d6c"
    assert _score("kv_retrieval", f"{value}", [value]) == 100
    assert _score("kv_retrieval", f'The value is "{value}".', [value]) == 100
    assert _score("kv_retrieval", f"value:{value},", [value]) == 100  # ':' and ',' separate words
    assert _score("kv_retrieval", f"{{{value}}}", [value]) == 100
    assert _score("kv_retrieval", f"{value}-0", [value]) == 0  # '-' does not separate: one longer word
    assert _score("kv_retrieval", f"({value})", [value]) == 0  # parentheses are not separators
    assert _score("kv_retrieval", value[:-1], [value]) == 0
    assert _score("kv_retrieval", "", [value]) == 0
    assert _score("kv_retrieval", value, value) == 100  # a bare string label (the raw JSONL form)


def test_choice_scorer() -> None:
    label = ["A brass compass", "B"]
    cases = {
        "B": 100,
        "B. A brass compass": 100,
        "  B": 100,
        "C": 0,
        "A brass compass": 0,  # first character 'A' is read as the letter A (official quirk)
        "a brass compass": 0,  # not the whole option text (case), no prefix, no letter word
        "The answer is B": 100,  # prefix "answer is", then the text one character later
        "The answer is: B.": 100,
        "The answer is: (B)": 0,  # "(B)" does not start with the letter
        "The correct option is B": 100,  # "option is" prefix
        "The answer is": 0,  # prefix at the very end
        "I pick B because": 100,  # no prefix: first word that is a substring of "ABCD"
        "I think it is C": 0,
        "Perhaps the compass": 0,
        "": 0,
        "   \n": 0,
    }
    for prediction, expected in cases.items():
        assert _score("longbook_choice_eng", prediction, label) == expected, prediction
    assert _score("longbook_choice_eng", "Tamsin", ["Tamsin", "D"]) == 100  # the whole text is the option


def test_code_debug_scorer() -> None:
    label = ["greet", "C"]
    cases = {
        "C.": 100,
        "C: greet": 100,
        "C": 0,  # a bare letter is wrong (official)
        "C greet": 0,
        "B.": 0,
        "The answer is: C": 100,
        "The correct option is: greet": 100,  # "is:" is found first; the function name counts
        "answer: **C**": 100,  # '*' becomes a space
        "Option C": 0,  # "Option" is removed; no prefix is left
        "The answer is: B": 0,
        "The answer is:": 0,  # prefix at the end
        "": 0,
    }
    for prediction, expected in cases.items():
        assert _score("code_debug", prediction, label) == expected, prediction


def test_qa_f1_scorer() -> None:
    assert _score("longbook_qa_eng", "The Pale Heron.", ["the Pale Heron"]) == 100
    # tokens [pale, heron, schooner] vs [pale, heron]: P = 2/3, R = 1, F1 = 0.8
    assert _score("longbook_qa_eng", "Pale Heron schooner", ["the Pale Heron"]) == 80
    # max over golds: "forty-one" normalises to "fortyone" (0); "41" gives P = 1/2, R = 1 -> 2/3
    assert _score("longbook_qa_eng", "41 vessels", ["forty-one", "41"]) == 66.67
    assert _score("longbook_qa_eng", "Forty-one!", ["forty-one", "41"]) == 100
    # repeated tokens count once per occurrence: [heron, heron] vs [pale, heron]: P = 1/2, R = 1/2
    assert _score("longbook_qa_eng", "heron heron", ["pale heron"]) == 50
    assert _score("longbook_qa_eng", "the a an", ["the Pale Heron"]) == 0  # only articles: no tokens
    assert _score("longbook_qa_eng", "", ["the Pale Heron"]) == 0
    assert _score("longbook_qa_eng", "anything", []) == 0


def test_qa_f1_zh_scorer() -> None:
    assert _score("longbook_qa_chn", "苍鹭号。", ["苍鹭号"]) == 100  # CJK punctuation removed
    assert _score("longbook_qa_chn", "苍鹭", ["苍鹭号"]) == 80  # characters: P = 1, R = 2/3
    assert _score("longbook_qa_chn", "苍 鹭 号", ["苍鹭号"]) == 100  # whitespace removed
    assert _score("longbook_qa_chn", "", ["苍鹭号"]) == 0


def test_rouge_lsum_scorer() -> None:
    # one sentence each: LCS 3 of 3 predicted and 6 reference tokens -> P = 1, R = 1/2, F = 2/3
    assert _score("longbook_sum_eng", "the cat sat", ["the cat sat on the mat"]) == 66.67
    # newlines split the summary-level LCS: each reference sentence is fully matched -> 1.0
    # (plain ROUGE-L on the same texts would give 0.5)
    assert _score("longbook_sum_eng", "on the mat the cat sat", ["the cat sat\non the mat"]) == 100
    # the default tokenizer lowercases and drops punctuation; several references: the best one
    assert _score("longbook_sum_eng", "The Cat, sat!", ["dog", "the cat sat"]) == 100
    assert _score("longbook_sum_eng", "", ["the cat sat"]) == 0
    assert _score("longbook_sum_eng", "!!!", ["the cat sat"]) == 0


def test_dialogue_scorer() -> None:
    assert _score("longdialogue_qa_eng", "ORLA", ["ORLA"]) == 100
    assert _score("longdialogue_qa_eng", "It is Orla.", ["ORLA"]) == 100  # words are uppercased
    assert _score("longdialogue_qa_eng", "ORLANDO", ["ORLA"]) == 0  # whole words only
    assert _score("longdialogue_qa_eng", "TAMSIN", ["ORLA", "TAMSIN"]) == 0  # only the first gold counts
    assert _score("longdialogue_qa_eng", "", ["ORLA"]) == 0


def test_code_run_scorer() -> None:
    assert _score("code_run", "-3", ["-3"]) == 100
    assert _score("code_run", "The return value is: -3.", ["-3"]) == 100  # last word after separators
    assert _score("code_run", "-3 is the value", ["-3"]) == 0  # the last word is not a number
    assert _score("code_run", "3", ["-3"]) == 0
    assert _score("code_run", "", ["-3"]) == 0


def test_math_find_scorer() -> None:
    assert _score("math_find", "91", ["91"]) == 100
    assert _score("math_find", "-91", ["91"]) == 100  # no sign in the pattern
    assert _score("math_find", "It is 91, not 87", ["91"]) == 100
    assert _score("math_find", "87 or 91", ["91"]) == 0
    assert _score("math_find", "91.0", ["91"]) == 0  # int label vs a decimal: official ValueError -> 0
    assert _score("math_find", "5.5", ["5.5"]) == 100
    assert _score("math_find", "5", ["5.5"]) == 0
    assert _score("math_find", "50", ["50.0"]) == 100  # a float label compares as float
    assert _score("math_find", "none", ["91"]) == 0


def test_math_calc_scorer() -> None:
    label = ["8", "6", "16"]
    assert _score("math_calc", "[8, 6, 16]", label) == 100
    assert _score("math_calc", "[8, 6, 17]", label) == 66.67
    assert _score("math_calc", "8, -6, 16", label) == 100  # signs are ignored
    assert _score("math_calc", "[5, 8, 6, 16]", label) == 0  # stops at the first mismatch
    assert _score("math_calc", "[8]", label) == 33.33
    assert _score("math_calc", "", label) == 0


def test_math_calc_gpt4_rule_drops_the_first_number() -> None:
    """compute_scores.py: ``if model_name == "gpt4": pred_nums = pred_nums[1:]`` (GPT-4 echoes the first
    operand); off by default, ``--opt math_calc_gpt4=true`` to rescore published GPT-4 predictions."""
    label = ["8", "6", "16"]
    assert score_one("math_calc", "5, 8, 6, 16", label, gpt4=True) == 1.0
    assert score_one("math_calc", "5, 8, 6, 16", label) == 0.0
    assert score_one("math_calc", "8, 6, 16", label, gpt4=True) == 0.0
    assert score_one("passkey", "12345", ["12345"], gpt4=True) == 1.0  # only Math.Calc has the rule


def test_math_calc_gpt4_option_reaches_the_scorer(lm: LoadedModel) -> None:
    bench = get_benchmark("infinitebench")
    options = {"fixture": True, "math_calc_gpt4": "true"}
    on = next(iter(bench.samples("math_calc", SampleContext(lm=lm, length=4096, options=options))))
    off = next(iter(bench.samples("math_calc", SampleContext(lm=lm, length=4096, options={"fixture": True}))))
    echoed = "0, " + ", ".join(on.references)
    assert bench.score(on, {"prediction": echoed}) == {on.meta["metric"]: 100.0}
    assert bench.score(off, {"prediction": echoed})[off.meta["metric"]] < 100.0


def test_every_task_has_a_scorer_and_the_official_budget() -> None:
    config = load_config()
    assert set(config.tasks) == set(SCORERS) == set(OFFICIAL_MAX_NEW_TOKENS)
    for name, spec in config.tasks.items():
        assert spec.max_new_tokens == OFFICIAL_MAX_NEW_TOKENS[name]
        for family, templates in config.templates.items():
            assert name in templates, (family, name)


# ------------------------------------------------------------------------------- records and prompts
def test_records_normalise_the_raw_types() -> None:
    row = {"id": 3, "context": "c", "input": "q", "answer": 91, "options": []}
    assert normalize_record(row, 0) == Record("3", "c", "q", ["91"], [])
    assert normalize_record({"content": "c", "answer": [[1, 2]]}, 7).answer == ["1", "2"]
    assert normalize_record({"content": "c", "answer": None}, 7) == Record("7", "c", "", [], [])
    debug = read_jsonl(FIXTURES / "code_debug.jsonl")
    assert gold("code_debug", debug[0]) == ["greet", "C"]  # answer as a str
    assert gold("code_debug", debug[1]) == ["greet", "A"]  # answer as a one-element list
    pair = Record("0", "", "", ["greet", "B"], ["a", "greet", "c", "d"])
    assert gold("code_debug", pair) == ["greet", "B"]
    with pytest.raises(LampeEvalError, match="not one of the options"):
        gold("longbook_choice_eng", Record("0", "", "", ["zzz"], ["a", "b", "c", "d"]))


def test_template_fields() -> None:
    run = read_jsonl(FIXTURES / "code_run.jsonl")[0]
    fields = template_fields("code_run", run)
    assert fields["func_call"] == "func_1(-4)" and fields["func"] == "func_1"
    find = read_jsonl(FIXTURES / "math_find.jsonl")
    assert (
        template_fields("math_find", find[0])["prefix"] == "What is the largest number in the following list?"
    )
    assert (
        template_fields("math_find", find[1])["prefix"] == "What is the median number in the following list?"
    )
    template = load_config().template("yarn_mistral", "longbook_choice_eng")
    prompt = fill_template(
        template, "longbook_choice_eng", read_jsonl(FIXTURES / "longbook_choice_eng.jsonl")[0]
    )
    assert prompt.endswith("A. A silver bell\nB. A brass compass\nC. A green ledger\nD. A coil of rope\n\n"
                           "The letter of the correct answer is")  # fmt: skip
    assert "Question: What did the captain give Orla?" in prompt


def test_task_names_and_aliases() -> None:
    bench = get_benchmark("infinitebench")
    assert bench.default_tasks() == TABLE2
    assert len(bench.tasks()) == 12
    assert bench.check_task("passkey") == "passkey"
    assert bench.check_task("Retrieve.KV") == "kv_retrieval"
    assert bench.check_task("en.mc") == "longbook_choice_eng"
    assert bench.check_task("number") == "number_string"
    with pytest.raises(UnknownNameError):
        bench.check_task("passkeys")


def test_every_fixture_task_builds_prompts_and_truncates_in_the_middle(lm: LoadedModel) -> None:
    bench = get_benchmark("infinitebench")
    length = 300
    for task in bench.tasks():
        ctx = SampleContext(lm=lm, length=length, options={"fixture": True})
        samples = list(bench.samples(task, ctx))
        assert samples, task
        for sample in samples:
            assert sample.meta["data_source"] == f"fixture:fixtures/infinitebench/{task}.jsonl"
            assert sample.sample_id.startswith("fixture-")
            assert sample.max_new_tokens == OFFICIAL_MAX_NEW_TOKENS[task]
            tokens = len(lm.tokenizer(sample.prompt, add_special_tokens=False)["input_ids"])
            assert tokens == sample.meta["prompt_tokens"] <= length
            # the completion-style templates are fed raw: the answer cue ends the prompt
            assert not sample.prompt.startswith("<|im_start|>") and sample.meta["chat_template"] is False
    long_sample = list(
        bench.samples("longbook_qa_eng", SampleContext(lm=lm, length=length, options={"fixture": True}))
    )[1]
    meta = long_sample.meta
    assert (
        meta["truncated"] and meta["original_tokens"] > 1000 and length - 3 <= meta["prompt_tokens"] <= length
    )
    # the instruction (head) and the question (tail) survive; the middle of the book is gone
    assert "Read the book and answer the question." in long_sample.prompt
    assert "Question: How many vessels did Orla count" in long_sample.prompt
    assert "Interlude 20." not in long_sample.prompt


def test_chat_template_off_and_gpt4_templates(lm: LoadedModel) -> None:
    bench = get_benchmark("infinitebench")
    # defaults: the chat-style gpt4 family goes through the chat template, the completion-style one does not
    gpt4 = next(
        iter(
            bench.samples(
                "passkey", SampleContext(lm=lm, length=4096, options={"fixture": True, "template": "gpt4"})
            )
        )
    )
    assert gpt4.prompt.startswith("<|im_start|>system") and gpt4.prompt.endswith("<|im_start|>assistant\n")
    raw = next(iter(bench.samples("passkey", SampleContext(lm=lm, length=4096, options={"fixture": True}))))
    assert raw.prompt.rstrip().endswith("The pass key is") and raw.meta["chat_template"] is False
    chat = SampleContext(lm=lm, length=4096, options={"fixture": True, "chat_template": "true"})
    assert next(iter(bench.samples("passkey", chat))).prompt.startswith("<|im_start|>system")
    ctx = SampleContext(
        lm=lm, length=4096, options={"fixture": True, "chat_template": False, "template": "gpt4"}
    )
    sample = next(iter(bench.samples("passkey", ctx)))
    assert sample.prompt.startswith("There is an important info hidden inside a lot of irrelevant text.")
    assert sample.prompt.endswith("What is the pass key?")
    assert sample.meta["template"] == "gpt4" and sample.meta["chat_template"] is False


def test_data_sources(lm: LoadedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lampe_eval.data import hub

    bench = get_benchmark("infinitebench")
    monkeypatch.setattr(hub, "hub_reachable", lambda: False)
    ctx = SampleContext(lm=lm, length=4096)
    with pytest.raises(MissingDataError) as err:
        list(bench.samples("longbook_qa_eng", ctx))
    message = str(err.value)
    assert message.startswith(
        "infinitebench/longbook_qa_eng: xinrongzhang2022/InfiniteBench: longbook_qa_eng"
    )
    assert "\n" not in message and "--data-dir" in message and "lampe-eval data fetch" in message

    # --data-dir with an official file
    row = {
        "id": 42,
        "context": "Orla kept the lamp.",
        "input": "Who kept the lamp?",
        "answer": ["Orla"],
        "options": [],
    }
    (tmp_path / "longbook_qa_eng.jsonl").write_text(json.dumps(row) + "\n", encoding="utf-8")
    samples = list(
        bench.samples("longbook_qa_eng", SampleContext(lm=lm, length=4096, data_dir=str(tmp_path)))
    )
    assert [s.sample_id for s in samples] == ["42"] and samples[0].references == ["Orla"]
    assert samples[0].meta["data_source"] == f"file:{tmp_path / 'longbook_qa_eng.jsonl'}"
    with pytest.raises(MissingDataError):
        list(bench.samples("code_debug", SampleContext(lm=lm, length=4096, options={"source": "dir"})))
    with pytest.raises(LampeEvalError, match="not synthetic"):
        list(bench.samples("code_debug", SampleContext(lm=lm, length=4096, options={"source": "generate"})))


def test_benchmark_score_keys() -> None:
    bench = get_benchmark("infinitebench")
    from lampe_eval.benchmarks import Sample

    sample = Sample("0", "passkey", "p", ["40213"], 6)
    assert bench.score(sample, {"prediction": "40213."}) == {"accuracy": 100.0}
    sample = Sample("0", "longbook_qa_eng", "p", ["the Pale Heron"], 40)
    assert bench.score(sample, {"prediction": "Pale Heron schooner"}) == {"qa_f1": pytest.approx(80.0)}
    assert bench.aggregate("passkey", [{"accuracy": 100.0}, {"accuracy": 0.0}]) == {"accuracy": 50.0}


# ------------------------------------------------------------------------------- synthetic data
def test_depth_order_covers_every_depth() -> None:
    for depths in (59, 500):
        stride = depth_stride(depths)
        assert 1 < stride < depths
        assert sorted(depth_index(i, depths) for i in range(depths)) == list(range(depths))
    assert [depth_index(i, 59) for i in range(4)] == [0, 36, 13, 49]


def test_keys_follow_the_official_recipe() -> None:
    for index in range(50):
        key = number_string_key(sample_rng("number_string", 0, index))
        assert len(key) == 10 and key.isdigit()
        # built by duplicating digits in place: some digit appears twice in a row
        assert any(a == b for a, b in zip(key, key[1:], strict=False))
    recipe = load_config().synthetic
    task = SyntheticTask("passkey", recipe["passkey"], recipe["noise"], seed=0)
    record, meta = task.build(1, 100)
    key = record.answer[0]
    assert len(key) == 5 and key.isdigit()
    lines = record.context.splitlines(keepends=True)
    assert (
        len(lines) == 101
        and lines[meta["position"]] == f"The pass key is {key}. Remember it. {key} is the pass key.\n"
    )
    assert meta["position"] == round(36 * 100 / 58)  # depth grid point 36 of 0..58
    assert SyntheticTask("passkey", recipe["passkey"], recipe["noise"], seed=1).build(1, 100)[0].answer != [
        key
    ]


def test_kv_recipe() -> None:
    recipe = load_config().synthetic
    task = SyntheticTask("kv_retrieval", recipe["kv_retrieval"], recipe["noise"], seed=0)
    record, meta = task.build(1, 40)
    assert record.context.startswith('JSON data:\n{"') and record.context.endswith('"}')
    pairs = json.loads(record.context[len("JSON data:\n") :])
    assert len(pairs) == 40
    key = record.input.split('"')[1]
    assert record.input == f'\nKey: "{key}"\nThe value associated with the specified key is: '
    assert pairs[key] == record.answer[0]
    assert list(pairs).index(key) == meta["position"] == depth_index(1, 500) * 40 // 500
    assert task.build(1, 40) == (record, meta)  # deterministic


def test_fit_size_finds_the_largest_fitting_size() -> None:
    def tokens_at(n: int) -> int:
        return 50 + 7 * n + (n // 10)  # not exactly linear

    for budget in (50, 57, 1000, 16384):
        fit = fit_size(tokens_at, budget)
        assert tokens_at(fit.size) <= budget < tokens_at(fit.size + 1)
        assert fit.evaluations < 20
        again = fit_size(tokens_at, budget, start=fit.size + 40, rate=3.0)
        assert again.size == fit.size
    with pytest.raises(TooShortError):
        fit_size(tokens_at, 49)


@pytest.mark.parametrize("task", ["passkey", "number_string", "kv_retrieval"])
def test_generated_samples_fill_the_length_and_are_cached(lm: LoadedModel, task: str) -> None:
    bench = get_benchmark("infinitebench")
    length = 2048
    ctx = SampleContext(lm=lm, length=length, limit=2, seed=5, options={})
    samples = list(bench.samples(task, ctx))
    assert [s.sample_id for s in samples] == ["gen-0", "gen-1"]
    for sample in samples:
        assert sample.meta["data_source"] == "generated:seed5" and not sample.meta["truncated"]
        tokens = len(lm.tokenizer(sample.prompt, add_special_tokens=False)["input_ids"])
        assert tokens == sample.meta["prompt_tokens"] <= length
        per_unit = 100 if task == "kv_retrieval" else 40  # one more unit would not fit
        assert tokens > length - per_unit
        assert sample.references[0] in sample.prompt
    cache = list(
        (Path(ib.cache_dir()) / "infinitebench" / "synthetic" / task).glob(
            "2048-smollm2-135m-*-seed5-*.jsonl"
        )
    )
    assert len(cache) == 1 and len(cache[0].read_text().splitlines()) == 2
    # a larger limit extends the cache and keeps the first samples identical
    more = list(bench.samples(task, SampleContext(lm=lm, length=length, limit=3, seed=5, options={})))
    assert [s.prompt for s in more[:2]] == [s.prompt for s in samples]
    assert len(cache[0].read_text().splitlines()) == 3
    # without the cache: the same samples
    fresh = list(
        bench.samples(task, SampleContext(lm=lm, length=length, limit=2, seed=5, options={"cache": False}))
    )
    assert [s.prompt for s in fresh] == [s.prompt for s in samples]


def test_a_cache_line_cut_by_a_kill_is_regenerated(lm: LoadedModel) -> None:
    bench = get_benchmark("infinitebench")
    first = list(bench.samples("passkey", SampleContext(lm=lm, length=1024, limit=2, options={})))
    (cache,) = (Path(ib.cache_dir()) / "infinitebench" / "synthetic" / "passkey").glob("1024-*.jsonl")
    with cache.open("a", encoding="utf-8") as handle:
        handle.write('{"index": 2, "n"')  # a kill in the middle of a line
    again = list(bench.samples("passkey", SampleContext(lm=lm, length=1024, limit=3, options={})))
    assert [s.prompt for s in again[:2]] == [s.prompt for s in first]
    lines = [json.loads(line) for line in cache.read_text().splitlines()]
    assert [line["index"] for line in lines] == [0, 1, 2]


def test_generation_too_short_is_a_clear_error(lm: LoadedModel) -> None:
    bench = get_benchmark("infinitebench")
    with pytest.raises(LampeEvalError, match="length 40"):
        list(bench.samples("passkey", SampleContext(lm=lm, length=40, limit=1, options={"cache": False})))


# ------------------------------------------------------------------------------- the real model
@pytest.mark.slow
def test_end_to_end_passkey_with_the_real_model(smollm2: LoadedModel, tmp_path: Path) -> None:
    from lampe_eval.runner.experiment import Experiment
    from lampe_eval.runner.jobs import Job
    from lampe_eval.runner.local import run
    from lampe_eval.runner.store import ResultStore

    store = ResultStore(tmp_path / "results")
    job = Job("smollm2-135m", "rope", "infinitebench", "passkey", 1024, limit=1, options={"cache": False})
    experiment = Experiment.from_jobs([job], store.directory, load=lambda name: smollm2)
    summaries = run(experiment).raise_for_failures().summaries
    records = list(store.records())
    assert len(records) == 1
    record = records[0]
    assert record["output"]["prompt_tokens"] <= 1024 and record["output"]["new_tokens"] <= 6
    assert (
        isinstance(record["output"]["prediction"], str) and record["meta"]["data_source"] == "generated:seed0"
    )
    assert set(summaries[job.key()]) == {"accuracy"}


def test_limit_takes_a_seeded_spread_of_sorted_official_files() -> None:
    from lampe_eval.benchmarks.infinitebench.benchmark import limited
    from lampe_eval.benchmarks.infinitebench.data import normalize_record

    # passkey files are sorted by needle depth: the first 5 would all be depth 0
    records = [normalize_record({"id": i, "context": "", "input": "", "answer": "1"}, i) for i in range(59)]
    five = limited(records, 5, "passkey:0", shuffle=True)
    ids = [int(r.id) for r in five]
    assert len(ids) == 5 and ids != [0, 1, 2, 3, 4] and ids == sorted(ids)  # file order kept
    assert max(ids) > 20  # spread over the file
    assert {r.id for r in five} <= {r.id for r in limited(records, 9, "passkey:0", shuffle=True)}
    assert [r.id for r in limited(records, 5, "passkey:0", shuffle=False)] == ["0", "1", "2", "3", "4"]
    assert limited(records, 100, "passkey:0", shuffle=True) == records
