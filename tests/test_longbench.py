"""LongBench: task table, prompts, middle truncation, chat-template rule, data sources, scoring,
LongBench-E buckets, categories; one slow end-to-end sample with the real model."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from lampe_eval.benchmarks import get_benchmark
from lampe_eval.benchmarks import longbench as lb
from lampe_eval.benchmarks.base import Sample, SampleContext
from lampe_eval.benchmarks.summaries import benchmark_summaries, summary_tables
from lampe_eval.errors import MissingDataError
from lampe_eval.models import LoadedModel

FIXTURES = Path(__file__).parents[1] / "lampe_eval" / "resources" / "fixtures" / "longbench"
ENGLISH_16 = [
    "narrativeqa", "qasper", "multifieldqa_en", "hotpotqa", "2wikimqa", "musique", "gov_report", "qmsum",
    "multi_news", "trec", "triviaqa", "samsum", "passage_count", "passage_retrieval_en", "lcc", "repobench-p",
]  # fmt: skip
NO_CHAT = {"trec", "triviaqa", "samsum", "lsht", "lcc", "repobench-p"}


def ctx(lm: LoadedModel, length: int = 8192, limit: int | None = None, **options: Any) -> SampleContext:
    return SampleContext(lm=lm, length=length, limit=limit, options={"fixture": True, **options})


# --------------------------------------------------------------------------- task table


def test_task_table_matches_the_official_configuration() -> None:
    config = lb.load_config()
    assert len(config.datasets) == 21
    assert config.categories == (
        "Single-Doc QA", "Multi-Doc QA", "Summarization", "Few-shot", "Synthetic", "Code",
    )  # fmt: skip
    assert {n for n, s in config.datasets.items() if not s.chat_template} == NO_CHAT
    assert {n for n, s in config.datasets.items() if s.first_line} == {"trec", "triviaqa", "samsum", "lsht"}
    assert [n for n, s in config.datasets.items() if s.newline_stop] == ["samsum"]
    budgets = {n: s.max_new_tokens for n, s in config.datasets.items()}
    assert budgets["narrativeqa"] == budgets["qasper"] == budgets["dureader"] == budgets["samsum"] == 128
    assert budgets["gov_report"] == budgets["vcsum"] == 512
    assert budgets["multifieldqa_en"] == budgets["trec"] == budgets["lcc"] == 64
    assert budgets["hotpotqa"] == budgets["passage_count"] == budgets["triviaqa"] == 32
    e_sets = [n for n, s in config.datasets.items() if s.longbench_e]
    assert len(e_sets) == 13 and "narrativeqa" not in e_sets and "lcc" in e_sets
    metrics = {n: s.metric for n, s in config.datasets.items()}
    assert (
        metrics["multifieldqa_zh"] == "qa_f1_zh" and metrics["dureader"] == metrics["vcsum"] == "rouge_l_zh"
    )
    assert metrics["trec"] == metrics["lsht"] == "classification" and metrics["samsum"] == "rouge_l"
    assert metrics["passage_retrieval_zh"] == "retrieval_zh" and metrics["repobench-p"] == "code_sim"
    members = {c: [n for n, s in config.datasets.items() if s.category == c] for c in config.categories}
    assert members["Synthetic"] == ["passage_count", "passage_retrieval_en", "passage_retrieval_zh"]
    assert members["Few-shot"] == ["trec", "triviaqa", "samsum", "lsht"]
    bench = get_benchmark("longbench")
    assert bench.default_tasks() == list(config.datasets)
    assert len(bench.tasks()) == 34 and "qasper_e" in bench.tasks()


def test_templates_keep_the_official_quirks() -> None:
    d = lb.load_config().datasets
    assert "asconcisely" in d["narrativeqa"].template
    assert "\n\n Answer the question based on the above article" in d["qasper"].template
    assert d["passage_count"].template.endswith("The final answer is: ")
    assert d["passage_retrieval_en"].template.endswith("The answer is: ")
    assert d["lcc"].template == "Please complete the code given below. \n{context}Next line of code:\n"
    assert d["repobench-p"].template.endswith("{context}{input}Next line of code:\n")
    assert d["multifieldqa_zh"].template.endswith("问题：{input}\n回答：")
    record = {"context": "CTX {x}", "input": "Q?", "answers": ["a"], "_id": "1"}
    # str.format(**record): braces inside the record's text are not re-interpreted
    assert lb.build_prompt(d["trec"], record) == (
        "Please determine the type of the question below. Here are some examples of questions.\n\nCTX {x}\nQ?"
    )


# --------------------------------------------------------------------------- prompts


def test_middle_truncation(smollm2_tokenizer: Any) -> None:
    head = "Read the text and answer the question at the end. "
    tail = " Question: what colour was the door? Answer:"
    prompt = head + " ".join(f"word{i}" for i in range(3000)) + tail
    ids = smollm2_tokenizer(prompt)["input_ids"]
    cut, count, truncated = lb.middle_truncate(prompt, smollm2_tokenizer, 500)
    assert truncated and count == len(ids) > 500
    half = 250
    expected = smollm2_tokenizer.decode(ids[:half], skip_special_tokens=True) + smollm2_tokenizer.decode(
        ids[-half:], skip_special_tokens=True
    )
    assert cut == expected
    assert cut.startswith(head) and cut.endswith(tail)
    assert abs(len(smollm2_tokenizer(cut)["input_ids"]) - 500) <= 4
    same, count, truncated = lb.middle_truncate("short prompt", smollm2_tokenizer, 500)
    assert (same, truncated) == ("short prompt", False)


def test_samples_from_fixture_apply_the_chat_rule(lm: LoadedModel) -> None:
    bench = get_benchmark("longbench")
    qasper = list(bench.samples("qasper", ctx(lm, limit=3)))
    assert len(qasper) == 3
    first = qasper[0]
    record = json.loads((FIXTURES / "qasper.jsonl").read_text().splitlines()[0])
    assert first.sample_id == record["_id"] and first.references == record["answers"]
    assert first.max_new_tokens == 128
    assert first.meta["data_source"] == "fixture:fixtures/longbench/qasper.jsonl"
    assert first.meta["chat_template"] is True and first.meta["truncated"] is False
    assert first.prompt == lm.format_prompt(lb.build_prompt(lb.load_config().datasets["qasper"], record))
    trec = next(iter(bench.samples("trec", ctx(lm, limit=1))))
    assert trec.meta["chat_template"] is False and trec.prompt.endswith("\nType:")
    assert trec.meta["all_classes"] and "City" in trec.meta["all_classes"]
    lcc = next(iter(bench.samples("lcc", ctx(lm, limit=1))))
    assert (
        lcc.prompt.startswith("Please complete the code given below.")
        and lcc.meta["code_sim_backend"] == "difflib"
    )
    plain = next(iter(bench.samples("qasper", ctx(lm, limit=1, chat_template=False))))
    assert plain.meta["chat_template"] is False and plain.prompt.endswith("Answer:")


def test_truncated_samples_fit_the_length(lm: LoadedModel) -> None:
    sample = next(iter(get_benchmark("longbench").samples("qasper", ctx(lm, length=200, limit=1))))
    assert sample.meta["truncated"] and sample.meta["record_tokens"] > 200
    body = sample.prompt.split("<|im_start|>user\n", 1)[1]
    assert body.startswith("You are given a scientific article") and "Question: How many articles" in body


def test_every_fixture_builds_samples(lm: LoadedModel) -> None:
    bench = get_benchmark("longbench")
    for task in bench.tasks():
        samples = list(bench.samples(task, ctx(lm, limit=2)))
        assert samples, task
        assert all(s.meta["dataset"] == task.removesuffix("_e") for s in samples)


# --------------------------------------------------------------------------- data sources


def test_missing_data_says_how_to_provide_it(lm: LoadedModel) -> None:
    context = SampleContext(lm=lm, length=4096, options={})
    with pytest.raises(MissingDataError) as err:
        list(get_benchmark("longbench").samples("qasper", context))
    message = str(err.value)
    assert message.startswith("longbench/qasper: zai-org/LongBench: data.zip: not in the hub cache")
    assert "lampe-eval data fetch" in message and "--data-dir" in message and "\n" not in message


def test_data_dir_with_official_files(lm: LoadedModel, tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    record = {
        "input": "Who?", "context": "Ann wrote it.", "answers": ["Ann"], "length": 5, "dataset": "hotpotqa",
        "language": "en", "all_classes": None, "_id": "abc",
    }  # fmt: skip
    (tmp_path / "data" / "hotpotqa.jsonl").write_text(json.dumps(record) + "\n")
    context = SampleContext(lm=lm, length=4096, data_dir=str(tmp_path), options={})
    (sample,) = list(get_benchmark("longbench").samples("hotpotqa", context))
    assert sample.meta["data_source"] == f"file:{tmp_path / 'data' / 'hotpotqa.jsonl'}"
    assert sample.sample_id == "abc" and "Ann wrote it." in sample.prompt
    bad = SampleContext(lm=lm, length=4096, options={"longbench_dir": str(tmp_path / "nowhere")})
    with pytest.raises(MissingDataError, match="longbench_dir"):
        list(get_benchmark("longbench").samples("hotpotqa", bad))


# --------------------------------------------------------------------------- scoring


def sample(task: str, references: list[str], **meta: Any) -> Sample:
    return Sample(sample_id="s", task=task, prompt="", references=references, meta=meta)


def test_score_uses_first_line_for_few_shot() -> None:
    bench = get_benchmark("longbench")
    classes = ["City", "Individual", "Date"]
    # first line "Date" -> 0; the second line's "City" is never seen
    assert bench.score(sample("trec", ["City"], all_classes=classes), {"prediction": "\nDate\nCity"}) == {
        "classification": 0.0
    }
    assert bench.score(sample("trec", ["City"], all_classes=classes), {"prediction": "City\nDate"}) == {
        "classification": 100.0
    }
    triviaqa = bench.score(
        sample("triviaqa", ["Queensland", "QLD"]), {"prediction": "\n\nQueensland\nPassage: x"}
    )
    assert triviaqa == {"qa_f1": 100.0}
    # not a few-shot dataset: the whole prediction counts ("paris london" vs "paris": F1 2/3)
    hotpot = bench.score(sample("hotpotqa", ["Paris"]), {"prediction": "Paris\nLondon"})
    assert hotpot["qa_f1"] == pytest.approx(200 / 3)


def test_score_prediction_per_metric() -> None:
    assert lb.score_prediction("passage_count", "3 or 4", ["3"]) == 0.5
    assert lb.score_prediction("passage_retrieval_zh", "段落2", ["段落2"]) == 1.0
    assert lb.score_prediction("lcc", "axb", ["xcba"]) == 0.29
    assert lb.score_prediction("lcc", "axb", ["xcba"], code_sim_backend="levenshtein") == 0.57
    assert lb.score_prediction("multifieldqa_zh", "我爱北京", ["北京", "上海"]) == pytest.approx(0.5)
    assert lb.score_prediction("gov_report", "", ["A summary."]) == 0.0
    assert lb.score_prediction("qasper", "anything", []) == 0.0


def test_aggregate_rounds_like_eval_py_and_buckets_longbench_e() -> None:
    bench = get_benchmark("longbench")
    scores = [{"qa_f1": 100.0}, {"qa_f1": 0.0}, {"qa_f1": 50.0 / 3}]
    assert bench.aggregate("qasper", scores) == {"qa_f1": 38.89}
    e_scores = [
        {"qa_f1": 100.0, "length": 100.0},
        {"qa_f1": 0.0, "length": 3999.0},
        {"qa_f1": 40.0, "length": 4000.0},
        {"qa_f1": 60.0, "length": 12000.0},
    ]
    assert bench.aggregate("qasper_e", e_scores) == {"qa_f1": 50.0, "0-4k": 50.0, "4-8k": 40.0, "8k+": 60.0}
    scored = bench.score(sample("qasper_e", ["yes"], length=5000), {"prediction": "yes"})
    assert scored == {"qa_f1": 100.0, "length": 5000.0}


def test_longbench_categories() -> None:
    scores = {name: float(i) for i, name in enumerate(ENGLISH_16)}  # 0..15
    scores["multifieldqa_zh"] = 100.0  # Chinese: not in the English table
    cats = lb.longbench_categories(scores)
    assert cats == {
        "Single-Doc QA": 1.0,  # (0 + 1 + 2) / 3
        "Multi-Doc QA": 4.0,
        "Summarization": 7.0,
        "Few-shot": 10.0,
        "Synthetic": 12.5,
        "Code": 14.5,
        "Avg": 7.5,  # the paper's average: mean over the 16 tasks
        "Avg (categories)": pytest.approx((1 + 4 + 7 + 10 + 12.5 + 14.5) / 6),
    }
    everything = lb.longbench_categories(scores, language="all")
    assert everything["Single-Doc QA"] == pytest.approx((0 + 1 + 2 + 100) / 4)
    zh = lb.longbench_categories({"multifieldqa_zh": 30.0, "lcc": 50.0, "qasper": 99.0}, language="zh")
    assert zh == {"Single-Doc QA": 30.0, "Code": 50.0, "Avg": 40.0, "Avg (categories)": 40.0}
    e = lb.longbench_categories({"qasper_e": 10.0, "lcc_e": 30.0, "qasper": 99.0}, longbench_e=True)
    assert e["Single-Doc QA"] == 10.0 and e["Avg"] == 20.0
    assert lb.longbench_categories({}) == {}


def test_run_summary_is_the_english_table_plus_the_chinese_average() -> None:
    bench = get_benchmark("longbench")
    both = bench.summarize_tasks({"qasper": 10.0, "lcc": 30.0, "multifieldqa_zh": 50.0})
    assert both == {
        "Single-Doc QA": 10.0, "Code": 30.0, "Avg": 20.0, "Avg (categories)": 20.0,
        "Avg zh (categories)": 40.0,
    }  # fmt: skip
    assert bench.summarize_tasks({"multifieldqa_zh": 50.0, "lcc": 30.0})["Avg"] == 40.0  # Chinese table
    assert bench.summarize_tasks({"qasper_e": 10.0, "lcc_e": 30.0})["Avg"] == 20.0  # LongBench-E


def test_summary_tables_group_jobs() -> None:
    def job(task: str, method: str) -> SimpleNamespace:
        key = f"{method}-{task}"
        return SimpleNamespace(
            model="m",
            method=method,
            method_params={},
            benchmark="longbench",
            task=task,
            length=8192,
            key=lambda: key,
        )

    jobs = [job("qasper", "rope"), job("lcc", "rope"), job("qasper", "lampe")]
    summaries = {
        "rope-qasper": {"qa_f1": 20.0},
        "rope-lcc": {"code_sim": 60.0},
        "lampe-qasper": {"qa_f1": 30.0},
    }
    rows = benchmark_summaries(jobs, summaries)["longbench"]
    assert rows[0] == (("m", "rope", 8192), lb.longbench_categories({"qasper": 20.0, "lcc": 60.0}))
    assert rows[1][1]["Avg"] == 30.0
    assert len(summary_tables(jobs, summaries)) == 1


# --------------------------------------------------------------------------- samsum generation


def test_samsum_generation_stops_at_newline(smollm2_tokenizer: Any) -> None:
    import torch

    from lampe_eval.backends.hf import HFBackend
    from lampe_eval.backends.rounds import evaluate_one

    seen: dict[str, Any] = {}

    class FakeModel:
        def parameters(self) -> Any:
            return iter([torch.zeros(1)])

        def generate(self, input_ids: torch.Tensor, **kwargs: Any) -> torch.Tensor:
            seen.update(kwargs)
            new = torch.tensor([smollm2_tokenizer.encode("Fine", add_special_tokens=False)])
            return torch.cat([input_ids, new], dim=1)

    fake = LoadedModel("fake", FakeModel(), smollm2_tokenizer, 8192, False)
    bench = get_benchmark("longbench")
    ctx = SampleContext(lm=fake, length=1024)
    out = evaluate_one(HFBackend(fake), bench.evaluate(sample("samsum", ["x"], newline_stop=True), ctx))
    newline = smollm2_tokenizer.encode("\n", add_special_tokens=False)[-1]
    assert seen["eos_token_id"] == sorted({smollm2_tokenizer.eos_token_id, newline})
    assert seen["min_new_tokens"] == 1 and seen["do_sample"] is False
    assert out["prediction"] == "Fine" and out["new_tokens"] == 1


# --------------------------------------------------------------------------- real model


@pytest.mark.slow
def test_end_to_end_with_the_real_model(smollm2: LoadedModel) -> None:
    from lampe_eval.backends.hf import HFBackend
    from lampe_eval.backends.rounds import evaluate_one

    bench = get_benchmark("longbench")
    context = SampleContext(lm=smollm2, length=1024, limit=1, options={"fixture": True})
    (first,) = list(bench.samples("passage_retrieval_en", context))
    output = evaluate_one(HFBackend(smollm2), bench.evaluate(first, context))
    scores = bench.score(first, output)
    assert set(scores) == {"retrieval"} and 0.0 <= scores["retrieval"] <= 100.0
    assert output["new_tokens"] <= 32 and output["prompt_tokens"] > 100
