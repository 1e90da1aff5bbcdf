"""``lampe-eval import`` and ``lampe-eval rescore``.

Files in each official prediction format (RULER's call_api.py, LongBench's and LongBench v2's pred.py,
InfiniteBench's eval_*.py), written to their documented schema from the packaged fixtures, become records
whose scores equal the benchmark's scorer applied directly, and whose report values equal the scorer's
task score; a shape lampe-eval does not know, a bad line and a missing key are one line each;
``--skip-bad-lines`` counts; imported records stand beside a run's records of the same method in a report
(paired on their sample ids); ``rescore`` repairs altered scores (and changes nothing the second time)
atomically, losing no append made meanwhile."""

from __future__ import annotations

import csv
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from lampe_eval.benchmarks.infinitebench.data import gold, normalize_record
from lampe_eval.benchmarks.infinitebench.scoring import score_one
from lampe_eval.benchmarks.longbench import score_prediction as longbench_score
from lampe_eval.benchmarks.longbench_v2 import judge
from lampe_eval.benchmarks.ruler.scoring import corpus_score, postprocess, string_match_all
from lampe_eval.cli import main
from lampe_eval.records import SampleRecord, read_records
from lampe_eval.report import BootstrapSettings, build_report
from lampe_eval.runner.store import ResultStore, rewrite_records

FIXTURES = Path(__file__).resolve().parents[1] / "lampe_eval" / "resources" / "fixtures"


def fixture(bench: str, task: str) -> list[dict[str, Any]]:
    path = FIXTURES / bench / f"{task}.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def write_jsonl(path: Path, lines: list[Any]) -> Path:
    text = "".join(
        (line if isinstance(line, str) else json.dumps(line, ensure_ascii=False)) + "\n" for line in lines
    )
    path.write_text(text, encoding="utf-8")
    return path


def cli(args: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_:
        main([str(a) for a in args])
    out = capsys.readouterr()
    return int(exit_.value.code or 0), out.out, out.err


def import_args(
    files: list[Path], bench: str, task: str, out: Path, *extra: str, method: str = "rope"
) -> list[Any]:
    return [
        "import",
        *files,
        "--bench",
        bench,
        "--task",
        task,
        "--len",
        "4k",
        "--model",
        "m1",
        "--method",
        method,
        "--out",
        out,
        *extra,
    ]


def records_of(out: Path) -> list[SampleRecord]:
    return list(read_records(out / "records.jsonl"))


def leaderboard(out: Path, tmp: Path) -> list[dict[str, str]]:
    report = tmp / "report"
    build_report(
        [out], report, formats=["csv"], plots=False, bootstrap=BootstrapSettings(resamples=200, seed=0)
    )
    with open(report / "leaderboard.csv", newline="") as handle:
        return list(csv.DictReader(handle))


# ------------------------------------------------------------------------------------------- RULER
RULER_PREDICTIONS = [  # (prediction, references): RULER's call_api.py writes `pred` and the data's `outputs`
    (" The special magic number for x is: 1234567.", ["1234567"]),
    ("8888888", ["7654321"]),
    ("numbers: 111, 222\n\x01", ["111", "222", "333"]),
    ("", ["42"]),
]


def ruler_lines() -> list[dict[str, Any]]:
    return [
        {
            "index": i,
            "pred": pred,
            "input": f"Some long haystack ... question {i}?",
            "outputs": refs,
            "others": {},
            "truncation": -1,
            "length": 4000 + i,
        }
        for i, (pred, refs) in enumerate(RULER_PREDICTIONS)
    ]


def test_ruler_predictions_score_as_rulers_scorer(tmp_path, capsys):
    path = write_jsonl(tmp_path / "niah_multivalue.jsonl", ruler_lines())
    code, out, err = cli(import_args([path], "ruler", "niah_multivalue", tmp_path / "st"), capsys)
    assert code == 0, err
    assert "RULER's call_api.py output" in out and "imported 4 record(s)" in out
    records = sorted(records_of(tmp_path / "st"), key=lambda r: r.index)
    assert [r.sample_id for r in records] == ["0", "1", "2", "3"]
    for record, (pred, refs) in zip(records, RULER_PREDICTIONS, strict=True):
        assert record.scores == {"string_match_all": 100.0 * string_match_all(postprocess(pred), refs)}
        assert record.references == refs and record.output == {"prediction": pred}
        assert record.engine is not None and record.engine["backend"] == "import"
        assert record.engine["file"] == str(path) and len(record.engine["sha256"]) == 64
        assert record.variant_params == {"source": "import"} and record.length == 4096
    assert records[1].meta["length"] == 4001 and records[1].prompt_excerpt["head"].startswith("Some long")
    expected = corpus_score(
        "string_match_all", [p for p, _ in RULER_PREDICTIONS], [r for _, r in RULER_PREDICTIONS]
    )
    (row,) = leaderboard(tmp_path / "st", tmp_path)
    assert (
        float(row["score"]) == pytest.approx(expected) and row["method"] == "rope" and row["samples"] == "4"
    )
    assert f"string_match_all {expected:.2f} over 4 sample(s)" in out
    # the same file again adds nothing; a run never takes these records for its own (a job key of their own)
    code, out, _ = cli(import_args([path], "ruler", "niah_multivalue", tmp_path / "st"), capsys)
    assert "imported 0 record(s)" in out and "4 already there" in out
    assert len((tmp_path / "st" / "records.jsonl").read_text().splitlines()) == 4


def test_ruler_sample_id_from_others_id(tmp_path, capsys):
    lines = ruler_lines()[:2]
    lines[0]["others"] = {"id": "abc"}
    path = write_jsonl(tmp_path / "vt.jsonl", lines)
    assert cli(import_args([path], "ruler", "vt", tmp_path / "st"), capsys)[0] == 0
    assert sorted(r.sample_id for r in records_of(tmp_path / "st")) == ["1", "abc"]


# --------------------------------------------------------------------------------------- LongBench
def test_longbench_pred_py_output_with_length_buckets(tmp_path, capsys):
    records = fixture("longbench", "trec_e")
    preds = [r["answers"][0] if i % 2 == 0 else "Food" for i, r in enumerate(records)]
    lines = [  # LongBench/pred.py: pred, answers, all_classes, length
        {"pred": p, "answers": r["answers"], "all_classes": r["all_classes"], "length": r["length"]}
        for p, r in zip(preds, records, strict=True)
    ]
    path = write_jsonl(tmp_path / "trec_e.jsonl", lines)
    code, out, err = cli(import_args([path], "longbench", "trec_e", tmp_path / "st"), capsys)
    assert code == 0, err
    assert "LongBench's pred.py output" in out
    stored = sorted(records_of(tmp_path / "st"), key=lambda r: r.index)
    assert [r.sample_id for r in stored] == [str(n) for n in range(1, len(records) + 1)]  # the line numbers
    direct = [
        100.0 * longbench_score("trec", p, r["answers"], r["all_classes"])
        for p, r in zip(preds, records, strict=True)
    ]
    assert [r.scores["classification"] for r in stored] == direct
    assert [r.scores["length"] for r in stored] == [
        float(r["length"]) for r in records
    ]  # LongBench-E's buckets
    (row,) = leaderboard(tmp_path / "st", tmp_path)
    assert float(row["score"]) == pytest.approx(round(sum(direct) / len(direct), 2))


# ------------------------------------------------------------------------------------ LongBench v2
def test_longbench_v2_pred_py_output_keeps_its_own_judge(tmp_path, capsys):
    records = fixture("longbench_v2", "longbench_v2")
    responses = [
        f"The correct answer is ({records[0]['answer']})",
        "The correct answer is (D)",
        "I cannot tell.",
        f"**The correct answer is {records[3]['answer']}**",
    ]
    lines = []
    for record, response in zip(records, responses, strict=True):
        item = {k: v for k, v in record.items() if k != "context"}
        pred = judge_pred(response)
        lines.append(
            {
                **item,
                "context": record["context"][:1000],
                "response": response,
                "pred": pred,
                "judge": pred == record["answer"],
            }
        )
    lines[1]["judge"] = True  # a file whose own judge disagrees with the scorer once
    path = write_jsonl(tmp_path / "model.jsonl", lines)
    code, out, err = cli(import_args([path], "longbench_v2", "longbench_v2", tmp_path / "st"), capsys)
    assert code == 0, err
    assert "differs from lampe-eval's on 1 of 4 sample(s)" in out
    stored = {r.sample_id: r for r in records_of(tmp_path / "st")}
    for record, response, line in zip(records, responses, lines, strict=True):
        mine = stored[record["_id"]]
        assert mine.scores["accuracy"] == 100.0 * judge(response, record["answer"])
        assert mine.meta["file_score"] == line["judge"] and mine.meta["difficulty"] == record["difficulty"]
        assert set(mine.scores) == {
            "accuracy",
            f"accuracy_{record['difficulty']}",
            f"accuracy_{record['length']}",
        }
    (row,) = leaderboard(tmp_path / "st", tmp_path)
    assert float(row["score"]) == pytest.approx(50.0)  # two of four right


def judge_pred(response: str) -> str | None:
    from lampe_eval.benchmarks.longbench_v2 import extract_answer

    return extract_answer(response)


# ----------------------------------------------------------------------------------- InfiniteBench
@pytest.mark.parametrize("task", ["longbook_choice_eng", "passkey", "math_calc"])
def test_infinitebench_eval_output(tmp_path, capsys, task):
    rows = fixture("infinitebench", task)
    lines = []
    for i, row in enumerate(rows):  # eval_yarn_mistral.py: id, prediction, ground_truth (get_answer)
        truth = gold(task, normalize_record(row, i))
        answer = row["answer"] if task != "longbook_choice_eng" else truth
        prediction = f"The answer is {truth[-1]}" if i % 2 == 0 else "no idea"
        lines.append({"id": i, "prediction": prediction, "ground_truth": answer})
    path = write_jsonl(tmp_path / f"preds_{task}.jsonl", lines)
    code, out, err = cli(import_args([path], "infinitebench", task, tmp_path / "st"), capsys)
    assert code == 0, err
    stored = {r.sample_id: r for r in records_of(tmp_path / "st")}
    for i, (row, line) in enumerate(zip(rows, lines, strict=True)):
        expected = 100.0 * score_one(task, line["prediction"], gold(task, normalize_record(row, i)))
        assert next(iter(stored[str(i)].scores.values())) == expected


# ------------------------------------------------------------------------------ any JSONL, mapped
def test_a_field_mapping_reads_any_jsonl(tmp_path, capsys):
    lines = [
        {"qid": "q1", "answer_text": "It is 1234567.", "needle": "1234567", "tokens": 4000, "ok": 1},
        {"qid": "q2", "answer_text": "no", "needle": ["7654321"], "tokens": 3999, "ok": 1},
    ]
    path = write_jsonl(tmp_path / "mine.jsonl", lines)
    args = import_args([path], "ruler", "niah_single_1", tmp_path / "st")
    code, out, err = cli(args, capsys)  # an unknown shape: one line naming its keys and the options
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "answer_text, needle, ok, qid, tokens" in err and "--field prediction=KEY" in err
    assert not (tmp_path / "st" / "records.jsonl").exists()
    fields = ["--field", "prediction=answer_text", "--field", "references=needle", "--field", "id=qid"]
    fields += ["--field", "prompt_tokens=tokens", "--field", "score=ok"]
    code, out, err = cli([*args, *fields], capsys)
    assert code == 0, err
    stored = {r.sample_id: r for r in records_of(tmp_path / "st")}
    assert stored["q1"].scores == {"string_match_all": 100.0} and stored["q2"].scores == {
        "string_match_all": 0.0
    }
    assert stored["q2"].references == ["7654321"] and stored["q1"].prompt_tokens == 4000
    assert "differs from lampe-eval's on 2 of 2 sample(s)" in out  # 1 is not 100 on lampe-eval's scale
    code, _, err = cli([*args, "--field", "prediction=answer", "--field", "references=needle"], capsys)
    assert code == 2 and "--field prediction=answer" in err and "no key 'answer'" in err


def test_a_file_of_another_benchmark_is_named(tmp_path, capsys):
    path = write_jsonl(tmp_path / "niah.jsonl", ruler_lines())
    code, _, err = cli(import_args([path], "longbench", "trec", tmp_path / "st"), capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "it looks like RULER's call_api.py output" in err and "--bench ruler" in err


# ------------------------------------------------------------------------------ bad lines and input
def test_a_bad_line_is_one_error_or_skipped_and_counted(tmp_path, capsys):
    lines: list[Any] = ruler_lines()
    lines.insert(2, '{"index": 9, "pred": "tor')
    lines.insert(4, {"index": 10, "pred": "no outputs", "input": "x"})
    path = write_jsonl(tmp_path / "qa_1.jsonl", lines)
    code, _, err = cli(import_args([path], "ruler", "qa_1", tmp_path / "st"), capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"{path}: line 3: not a JSON object" in err and "--skip-bad-lines" in err
    assert not (tmp_path / "st" / "records.jsonl").exists()  # nothing written when a file fails
    code, out, err = cli([*import_args([path], "ruler", "qa_1", tmp_path / "st"), "--skip-bad-lines"], capsys)
    assert code == 0, err
    assert "2 bad line(s) skipped (line 3: not a JSON object)" in out and "skipped 2 bad line(s)" in out
    assert len(records_of(tmp_path / "st")) == 4


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (["--bench", "rulr"], "unknown benchmark 'rulr'; did you mean ruler?"),
        (["--task", "niah_single_9"], "unknown ruler task 'niah_single_9'"),
        (["--bench", "pg19", "--task", "pg19"], "pg19 scores no predictions made elsewhere"),
        (["--len", "4k,8k"], "--len takes one length"),
        (["--field", "prediction"], "bad --field 'prediction': use key=value"),
    ],
)
def test_bad_options_are_one_line_before_reading(tmp_path, capsys, change, message):
    path = tmp_path / "missing.jsonl"  # never read: the options fail first
    args = import_args([path], "ruler", "niah_single_1", tmp_path / "st")
    args = args[: args.index("--out")]
    for i in range(0, len(change), 2):
        key = change[i]
        if key in args and key != "--field":
            args[args.index(key) + 1] = change[i + 1]
        else:
            args += change[i : i + 2]
    code, _, err = cli([*args, "--out", tmp_path / "st"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and message in err, err


def test_a_missing_file_is_one_line(tmp_path, capsys):
    code, _, err = cli(import_args([tmp_path / "nope.jsonl"], "ruler", "vt", tmp_path / "st"), capsys)
    assert code == 2 and "prediction file" in err and "does not exist" in err


# -------------------------------------------------------------------------- beside a run's records
def test_a_report_pairs_imported_records_with_a_runs(tmp_path, capsys):
    """A run's records (as the runner writes them: engine hf) and imported predictions of the same model,
    method and samples: two rows, compared on the samples both have."""
    out = tmp_path / "st"
    store = ResultStore(out)
    n = 12
    for i in range(n):
        store.append(
            SampleRecord(
                key=f"runjob:{i}",
                job_key="runjob",
                sample_id=str(i),
                index=i,
                model="m1",
                method="rope",
                benchmark="ruler",
                task="niah_single_1",
                length=4096,
                scores={"string_match_all": 100.0 if i % 4 else 0.0},
                references=[str(i)],
                output={"prediction": str(i) if i % 4 else "x"},
                engine={"backend": "hf", "device": "cpu"},
                meta={"data_source": "generated"},
            )
        )
    lines = [
        {
            "index": i,
            "pred": "nothing",
            "input": "q",
            "outputs": [str(i)],
            "others": {},
            "truncation": -1,
            "length": 4000,
        }
        for i in range(n)
    ]
    path = write_jsonl(tmp_path / "niah_single_1.jsonl", lines)
    assert cli(import_args([path], "ruler", "niah_single_1", out), capsys)[0] == 0
    rows = {r["variant"]: r for r in leaderboard(out, tmp_path)}
    assert set(rows) == {"rope", "rope(source=import)"}
    assert float(rows["rope"]["score"]) == 75.0 and float(rows["rope(source=import)"]["score"]) == 0.0
    with open(tmp_path / "report" / "comparisons.csv", newline="") as handle:
        compared = [r for r in csv.DictReader(handle) if r["variant"] == "rope(source=import)"]
    assert compared and compared[0]["versus"] == "rope"
    assert float(compared[0]["diff"]) == -75.0 and compared[0]["significant"] == "true"


# ------------------------------------------------------------------------------------------ rescore
def test_rescore_repairs_altered_scores_and_then_changes_nothing(tmp_path, capsys):
    path = write_jsonl(tmp_path / "niah_multivalue.jsonl", ruler_lines())
    out = tmp_path / "st"
    assert cli(import_args([path], "ruler", "niah_multivalue", out), capsys)[0] == 0
    records_file = out / "records.jsonl"
    right = {r.key: r.scores for r in records_of(out)}
    lines = records_file.read_text().splitlines()
    altered = []
    for number in (0, 2):
        data = json.loads(lines[number])
        data["scores"] = {"string_match_all": -1.0}
        lines[number] = json.dumps(data)
        altered.append(data["key"])
    foreign = {"key": "x:1", "job_key": "x", "sample_id": "1", "index": 0, "model": "m", "method": "rope"}
    foreign |= {"benchmark": "unknown_bench", "task": "t", "length": 10, "scores": {"a": 1.0}}
    records_file.write_text("\n".join([*lines, json.dumps(foreign), "torn {"]) + "\n")
    code, out_text, err = cli(["rescore", out], capsys)
    assert code == 0, err
    assert "rescored 4 records: 2 changed" in out_text
    assert "unknown_bench: 1 record(s) cannot be rescored" in err and "1 unreadable line(s)" in err
    assert {r.key: r.scores for r in records_of(out) if r.key in right} == right
    assert "torn {" in records_file.read_text()  # other lines kept as they were
    code, out_text, _ = cli(["rescore", out], capsys)
    assert "rescored 4 records: 0 changed" in out_text
    assert cli(["rescore", tmp_path / "nowhere"], capsys)[0] == 2


def test_rescore_of_a_runs_records(tmp_path, capsys):
    """Records as a run writes them (references, meta and output of the sample) rescore from their output."""
    out = tmp_path / "st"
    store = ResultStore(out)
    record = SampleRecord(
        key="j:0",
        job_key="j",
        sample_id="0",
        index=0,
        model="m1",
        method="rope",
        benchmark="longbench",
        task="trec",
        length=4096,
        scores={"classification": 0.0},
        references=["City"],
        output={"prediction": "City\nmore"},
        engine={"backend": "hf"},
        meta={"all_classes": ["City", "Food"], "length": 77},
    )
    store.append(record)
    code, text, err = cli(["rescore", out], capsys)
    assert code == 0 and "rescored 1 records: 1 changed" in text, err
    (stored,) = records_of(out)
    assert stored.scores == {
        "classification": 100.0 * longbench_score("trec", "City\nmore", ["City"], ["City", "Food"])
    }
    assert stored.scores["classification"] == 100.0


def test_a_rewrite_loses_no_append_made_meanwhile(tmp_path):
    """An appender that opened the file before the rewrite replaced it, and waited for the lock, appends
    to the new file; a store reading along reads the new file from its start."""
    out = tmp_path / "st"
    store = ResultStore(out)

    def record(i: int, score: float) -> SampleRecord:
        return SampleRecord(
            key=f"j:{i}",
            job_key="j",
            sample_id=str(i),
            index=i,
            model="m",
            method="rope",
            benchmark="ruler",
            task="vt",
            length=1024,
            scores={"string_match_all": score},
            references=["a"],
            output={"prediction": "a"},
        )

    for i in range(3):
        store.append(record(i, 0.0))
    reader = ResultStore(out)
    appender = ResultStore(out, load=False)
    thread = threading.Thread(target=lambda: appender.append(record(3, 100.0)))

    def update(data: dict[str, Any]) -> dict[str, Any]:
        if not thread.is_alive():
            thread.start()
            time.sleep(0.3)  # the appender opens the file and waits for the lock
        return {**data, "scores": {"string_match_all": 100.0}}

    assert rewrite_records(out / "records.jsonl", update) == 3
    thread.join(10)
    assert not thread.is_alive()
    stored = list(read_records(out / "records.jsonl"))
    assert sorted(r.sample_id for r in stored) == ["0", "1", "2", "3"]
    assert all(r.scores == {"string_match_all": 100.0} for r in stored)
    reader.refresh()
    assert len(reader) == 4 and reader.problems.unreadable == 0
