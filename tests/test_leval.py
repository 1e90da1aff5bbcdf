"""L-Eval closed-ended tasks: prompts, document truncation, answer extraction and exact match (hand-computed
from Evaluation/auto_eval.py and em.py), sci_fi's two answers, data sources."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lampe_eval.backends.rounds import evaluate_one
from lampe_eval.benchmarks import get_benchmark
from lampe_eval.benchmarks import leval as le
from lampe_eval.benchmarks.base import Sample, SampleContext
from lampe_eval.errors import LampeEvalError, MissingDataError
from lampe_eval.models import LoadedModel
from tests.fakebackend import ScriptedBackend

FIXTURES = Path(__file__).parents[1] / "lampe_eval" / "resources" / "fixtures" / "leval"


def ctx(lm: LoadedModel, length: int = 8192, limit: int | None = None, **options: Any) -> SampleContext:
    return SampleContext(lm=lm, length=length, limit=limit, options={"fixture": True, **options})


# --------------------------------------------------------------------------- answer extraction


def test_mc_gold() -> None:
    assert le.mc_gold("(B) Their subconscious knew.") == "B"
    assert le.mc_gold("ABC") == "ABC"
    assert le.mc_gold("none of these") == "A"  # no letter: the official "random guess"


def test_mc_answer_single_choice() -> None:
    assert le.mc_answer("B") == "B"
    assert le.mc_answer("  ") == "None"
    assert le.mc_answer("") == "None"
    assert le.mc_answer("(C) The old electrolysis unit.") == "C"
    # the first A-D character *anywhere*: the capital of "Based" wins over the stated answer
    assert le.mc_answer("Based on the text, the answer is C") == "B"
    assert le.mc_answer("the answer is c") == "A"  # no capital A-D at all -> "A"


def test_mc_answer_coursera_multiple_answers() -> None:
    assert le.mc_answer("AB", multi=True) == "AB"  # a substring of "ABCD": as it is
    assert le.mc_answer("BA", multi=True) == "AB"  # leading run of 2+: sorted, unique
    assert le.mc_answer("ACD is right", multi=True) == "ACD"
    # run "A", then capitals followed by whitespace/"."/")": "\nC." -> "AC"
    assert le.mc_answer("A. Analyze data\nC. Answer questions", multi=True) == "AC"
    assert le.mc_answer("The answer is B and D.", multi=True) == "BD"
    # text after "Question" is ignored
    assert le.mc_answer("B\nQuestion 2. A", multi=True) == "B"
    # no option pattern: the first run of A-D characters, unsorted
    assert le.mc_answer("xxBADxx", multi=True) == "BAD"
    assert le.mc_answer(" C. It refers to another table", multi=True) == "C"


def test_exact_match_rules() -> None:
    assert le.exact_match("AB", "AB") == 1.0
    assert le.exact_match("A", "AB") == 0.25  # a subset of the correct options
    assert le.exact_match("AC", "AB") == 0.0
    assert le.exact_match("None", "B") == 0.0
    assert le.exact_match("BAD", "ABD") == 0.25  # unsorted letters are not equal, but a subset
    assert le.exact_match("18", "18") == 1.0
    assert le.exact_match("018", "18") == 1.0  # numeric equality
    assert le.exact_match("", "18") == 0.0
    assert le.exact_match("true", "true") == 1.0
    assert le.exact_match("<error>", "false") == 0.0
    assert le.exact_match("the answer is Paris", "paris") == 1.0  # substring, case and spaces ignored


def test_math_answer() -> None:
    assert le.math_answer("She makes $18 every day.\nThe answer is $18.") == "18"
    assert le.math_answer("The answer is 12.50") == "12"  # digits up to the first "."
    assert (
        le.math_answer("so it costs 3,000 dollars\n\nQuestion: 7 cats") == "3000"
    )  # last number before "\n\n"
    assert le.math_answer("no number here") == ""


def test_judge_answers() -> None:
    assert le.judge_gold("True [fact: False]") == ("true", "false")
    assert le.judge_answers("True. [fact: It is false.]") == ("true", "false")
    assert le.judge_answers("I am not sure [fact: unknown]") == ("<error>", "<error>")
    assert le.judge_answers("Untrue!") == ("true", "<error>")  # the first word containing "true"


def test_score_prediction_per_task() -> None:
    assert le.score_prediction("coursera", "A", "AB") == {"exact_match": 0.25}
    assert le.score_prediction("quality", "I pick (B).", "(B) Their subconscious.") == {"exact_match": 1.0}
    # the capital of "Answer" is the first A-D character: extracted "A" -> wrong
    assert le.score_prediction("quality", "Answer: (B).", "(B) Their subconscious.") == {"exact_match": 0.0}
    assert le.score_prediction("tpo", "B", "B") == {"exact_match": 1.0}
    assert le.score_prediction("gsm100", "5 x 12 = 60.\nThe answer is 60", "60") == {"exact_match": 1.0}
    assert le.score_prediction("sci_fi", "True [fact: True]", "True [fact: False]") == {
        "exact_match": 0.5,
        "loyalty": 1.0,
        "fact": 0.0,
    }


# --------------------------------------------------------------------------- prompts


def test_task_table() -> None:
    config = le.load_config()
    assert list(config.tasks) == ["coursera", "gsm100", "quality", "tpo", "sci_fi"]
    assert config.max_new_tokens == 512
    assert "multiple correct options" in config.tasks["coursera"].system
    assert config.tasks["gsm100"].system.startswith("Given several question answer pairs")
    assert config.tasks["quality"].system == config.tasks["tpo"].system
    assert [t for t, s in config.tasks.items() if s.fact_check] == ["sci_fi"]


def test_prompt_styles(lm: LoadedModel) -> None:
    bench = get_benchmark("leval")
    record = json.loads((FIXTURES / "coursera.jsonl").read_text().splitlines()[0])
    question = record["instructions"][0]
    llama2 = next(iter(bench.samples("coursera", ctx(lm, limit=1, leval_prompt="llama2"))))
    system = le.load_config().tasks["coursera"].system
    assert llama2.prompt == (
        f"[INST]<<SYS>>\n{system}\n<</SYS>>\n\n"
        f"Document is as follows. {record['input']} \nQuestion: {question}.  "
        "Please directly give the answer without any additional output or explanation [/INST]\nAnswer:"
    )
    chat = next(iter(bench.samples("coursera", ctx(lm, limit=1))))
    assert chat.prompt.startswith(f"<|im_start|>system\n{system}") and chat.prompt.endswith(
        "assistant\n\nAnswer:"
    )
    plain = next(iter(bench.samples("coursera", ctx(lm, limit=1, chat_template=False))))
    assert (
        plain.prompt.startswith(system + "Document is as follows.") and plain.meta["prompt_style"] == "plain"
    )
    gsm = next(iter(bench.samples("gsm100", ctx(lm, limit=1, leval_prompt="llama2"))))
    assert "[/INST]" not in gsm.prompt and gsm.prompt.endswith("Let's think step by step\n")
    with pytest.raises(LampeEvalError, match="leval_prompt"):
        list(bench.samples("coursera", ctx(lm, limit=1, leval_prompt="bogus")))


def test_samples_one_per_question_with_limit(lm: LoadedModel) -> None:
    bench = get_benchmark("leval")
    samples = list(bench.samples("coursera", ctx(lm, limit=3)))
    assert [s.sample_id for s in samples] == ["0-0", "0-1", "0-2"]
    assert [s.references for s in samples] == [["A"], ["AB"], ["AB"]]
    assert all(s.max_new_tokens == 512 for s in samples)
    assert samples[0].meta["data_source"] == "fixture:fixtures/leval/coursera.jsonl"
    assert len(list(bench.samples("gsm100", ctx(lm)))) == 2  # two documents, one question each


def test_document_truncation(smollm2_tokenizer: Any) -> None:
    document = " ".join(f"w{i}" for i in range(1000))
    kept, original, truncated = le.truncate_document(document, smollm2_tokenizer, 300)
    assert truncated and original > 300
    # first round keeps 300 words (too many tokens), then 50, 0, ...: the first fit is a prefix in words
    assert document.startswith(kept)
    assert len(smollm2_tokenizer(kept)["input_ids"]) <= 300
    words = len(kept.split(" "))
    assert words in (300, 50) or kept == ""
    same, _, truncated = le.truncate_document("short", smollm2_tokenizer, 300)
    assert (same, truncated) == ("short", False)


def test_sci_fi_asks_the_fact_question(lm: LoadedModel) -> None:
    bench = get_benchmark("leval")
    sample = next(iter(bench.samples("sci_fi", ctx(lm, limit=1))))
    fact_prompt = sample.meta["fact_prompt"]
    assert "based on the real-world knowledge and facts up until your last training" in fact_prompt
    assert fact_prompt.endswith(
        "Please directly answer without any additional output or explanation. \nAnswer:"
    )
    backend = ScriptedBackend(lm, [" True.", " False"])
    output = evaluate_one(backend, bench.evaluate(sample, ctx(lm)))
    assert [r.prompt for r in backend.requests] == [sample.prompt, fact_prompt]
    assert output["prediction"] == " True. [fact:  False]" and output["new_tokens"] == 14
    assert bench.score(sample, output) == {"exact_match": 100.0, "loyalty": 100.0, "fact": 100.0}


def test_aggregate() -> None:
    bench = get_benchmark("leval")
    assert bench.aggregate(
        "coursera", [{"exact_match": 100.0}, {"exact_match": 25.0}, {"exact_match": 0.0}]
    ) == {"exact_match": pytest.approx(41.6667)}
    sci = [
        {"exact_match": 50.0, "loyalty": 100.0, "fact": 0.0},
        {"exact_match": 100.0, "loyalty": 100.0, "fact": 100.0},
    ]
    assert bench.aggregate("sci_fi", sci) == {"exact_match": 75.0, "loyalty": 100.0, "fact": 50.0}
    assert bench.summarize_tasks({"coursera": 40.0, "tpo": 60.0, "other": 0.0}) == {"Avg": 50.0}


def test_score_takes_the_best_reference() -> None:
    bench = get_benchmark("leval")
    s = Sample(sample_id="0-0", task="tpo", prompt="", references=["C", "B"])
    assert bench.score(s, {"prediction": "B"}) == {"exact_match": 100.0}


def test_missing_data_and_data_dir(lm: LoadedModel, tmp_path: Path) -> None:
    bench = get_benchmark("leval")
    with pytest.raises(
        MissingDataError, match="^leval/tpo: L4NLP/LEval: LEval/Exam/tpo.jsonl: not in the hub"
    ):
        list(bench.samples("tpo", SampleContext(lm=lm, length=4096)))
    folder = tmp_path / "LEval-data" / "Closed-ended-tasks"
    folder.mkdir(parents=True)
    record = {"instructions": ["q?\nA. x\nB. y"], "outputs": ["B"], "input": "doc", "evaluation": "exam"}
    (folder / "tpo.jsonl").write_text(json.dumps(record) + "\n")
    (sample,) = list(bench.samples("tpo", SampleContext(lm=lm, length=4096, data_dir=str(tmp_path))))
    assert sample.meta["data_source"] == f"file:{folder / 'tpo.jsonl'}"


def test_documents_with_braces_are_substituted_verbatim(lm: LoadedModel, tmp_path: Path) -> None:
    bench = get_benchmark("leval")
    document = "code: def f(x): return {x: 1} # {instruction} {document}"
    record = {"instructions": ["What does f return?"], "outputs": ["A"], "input": document}
    (tmp_path / "tpo.jsonl").write_text(json.dumps(record) + "\n")
    (sample,) = bench.samples("tpo", SampleContext(lm=lm, length=4096, data_dir=str(tmp_path)))
    assert document in sample.prompt  # neither placeholder inside the document was filled
    assert sample.prompt.count("What does f return?") == 1
