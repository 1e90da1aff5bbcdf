"""Tables, leaderboard CSV, paper comparison and plots from fixture stores written here."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import tests.fakebench  # noqa: F401  (registers "fake")
from lampe_eval.cli import app
from lampe_eval.errors import LampeEvalError
from lampe_eval.records import SampleRecord
from lampe_eval.report import LEADERBOARD_COLUMNS, build_report
from lampe_eval.report.data import load_records, task_scores, variant_labels
from lampe_eval.report.leaderboard import leaderboard_rows
from lampe_eval.report.paper import (
    compare,
    comparison_csv,
    load_paper_table,
    paper_table_names,
    paper_value,
    required_jobs,
    validate_spec,
)
from lampe_eval.report.tables import generic_tables, to_csv, to_latex, to_markdown
from lampe_eval.report.uncertainty import Bootstrap, BootstrapSettings
from lampe_eval.runner.store import ResultStore

ROOT = Path(__file__).resolve().parents[1] / "lampe_eval" / "resources"
PPL = {  # (method, length) -> perplexity of the fixture passages
    ("rope", 4096): 8.0,
    ("rope", 8192): 150.0,
    ("dca", 4096): 8.5,
    ("dca", 8192): 7.5,
    ("lampe", 4096): 8.25,
    ("lampe", 8192): 7.25,
}


def pg19_record(model: str, method: str, length: int, i: int, ppl: float) -> dict:
    nll = math.log(ppl)
    tail = 2 * ppl  # the last quarter is harder: its own table must show these, not the headline
    tokens = length - 1
    return {
        "key": f"{model}-{method}-{length}:{i}",
        "job_key": f"{model}-{method}-{length}",
        "sample_id": str(i),
        "index": i,
        "model": model,
        "method": method,
        "method_params": {},
        "variant_params": {},
        "benchmark": "pg19",
        "task": "pg19",
        "length": length,
        "prompt_tokens": length,
        "output": {},
        "scores": {
            "ppl": ppl,
            "ppl_last_quarter": tail,
            "nll": nll,
            "nll_last_quarter": math.log(tail),
            "tokens": float(tokens),
            "tokens_last_quarter": float(length // 4),
        },
        "seconds": 2.0,
        "git": "abc1234",
    }


def fake_record(
    method: str, variant: dict, task: str, length: int, i: int, score: float, tokens: int
) -> dict:
    return {
        "key": f"{method}{json.dumps(variant)}-{task}-{length}:{i}",
        "job_key": f"{method}-{task}-{length}",
        "sample_id": str(i),
        "index": i,
        "model": "smollm2-135m",
        "method": method,
        "method_params": variant,
        "variant_params": variant,
        "benchmark": "fake",
        "task": task,
        "length": length,
        "prompt_tokens": tokens,
        "output": {"prediction": "x"},
        "scores": {"acc": score},
        "seconds": 1.0,
        "git": "abc1234",
    }


@pytest.fixture
def store(tmp_path: Path) -> Path:
    out = tmp_path / "results"
    s = ResultStore(out)
    for (method, length), ppl in PPL.items():
        for i in range(2):
            s.append_json(pg19_record("llama3-8b-instruct", method, length, i, ppl))
    for method, variant, base in (
        ("rope", {}, 40.0),
        ("selfextend", {"group_size": 4}, 50.0),
        ("selfextend", {"group_size": 8}, 55.0),
        ("lampe", {}, 60.0),
    ):
        for task, bonus in (("alpha", 0.0), ("beta", 10.0)):
            for length in (1024, 2048):
                for i, tokens in enumerate((500, 900, 1500, 2000)):
                    score = base + bonus - (5.0 if length == 2048 else 0.0) + (10.0 if tokens < 1000 else 0.0)
                    s.append_json(fake_record(method, variant, task, length, i, score, min(tokens, length)))
    # a duplicate key written twice (e.g. a store merged from two runs): the last one wins
    s.append_json({**pg19_record("llama3-8b-instruct", "rope", 4096, 0, 8.0)})
    with open(s.path, "ab") as handle:
        handle.write(b'{"key": "torn')
    return out


def test_scores_use_the_benchmark_aggregate_and_dedupe(store):
    records = load_records([store])
    scores = task_scores(records)
    pg = {(s.variant.method, s.length): s for s in scores if s.benchmark == "pg19"}
    assert pg[("rope", 4096)].samples == 2
    assert pg[("rope", 4096)].metric == "ppl"
    assert pg[("dca", 8192)].score == pytest.approx(7.5)
    fake = [s for s in scores if s.benchmark == "fake"]
    assert len(fake) == 4 * 2 * 2  # variants x tasks x lengths
    labels = variant_labels(s.variant for s in fake)
    assert sorted(labels.values()) == [
        "lampe",
        "rope",
        "selfextend(group_size=4)",
        "selfextend(group_size=8)",
    ]


def test_generic_tables_have_methods_as_rows_and_bold_best(store):
    tables = {t.key: t for t in generic_tables(task_scores(load_records([store])))}
    ppl = tables["pg19-llama3-8b-instruct-by-length"]
    assert ppl.columns == ["4k", "8k", "Avg."]
    assert [label for label, _ in ppl.rows] == ["rope", "dca", "lampe"]  # baseline first, LaMPE last
    rows = dict(ppl.rows)
    assert rows["rope"][0].bold and not rows["lampe"][0].bold  # lowest perplexity wins at 4K
    assert rows["lampe"][1].bold
    assert ppl.text(rows["rope"][1]) == ">10^2" and rows["rope"][2].value is None  # saturated: no Avg.
    assert rows["dca"][2].value == pytest.approx(8.0)
    tail = tables["pg19-llama3-8b-instruct-by-length-ppl-last-quarter"]
    assert "ppl_last_quarter" in tail.title and tail.columns == ppl.columns
    assert dict(tail.rows)["dca"][2].value == pytest.approx(16.0)
    assert "fake-smollm2-135m-by-length-ppl-last-quarter" not in tables  # only where every result has it
    by_task = tables["fake-smollm2-135m-1k"]
    assert by_task.columns == ["alpha", "beta", "Avg."]
    cells = dict(by_task.rows)
    assert cells["lampe"][2].bold and cells["lampe"][2].value == pytest.approx(
        (60 + 5 + 70 + 5) / 2  # mean over tasks of the per-task means (2 of 4 samples get +10)
    )
    md = to_markdown(by_task)
    assert "| method | alpha | beta | Avg. |" in md and "**70.00**" in md
    tex = to_latex(by_task)
    assert r"\textbf{70.00}" in tex and r"selfextend(group\_size=4)" in tex and r"\toprule" in tex
    rows_csv = list(csv.DictReader(io.StringIO(to_csv([by_task]))))
    assert len(rows_csv) == 4 * 3 and rows_csv[0]["table"] == "fake-smollm2-135m-1k"


def test_leaderboard_has_one_row_per_model_method_benchmark_length(store):
    scores = task_scores(load_records([store]))
    rows = leaderboard_rows(scores)
    assert len(rows) == 3 * 2 + 4 * 2
    assert list(rows[0]) == LEADERBOARD_COLUMNS
    dca = next(r for r in rows if r["method"] == "dca" and r["length"] == 8192)
    assert dca["score"] == pytest.approx(7.5) and dca["higher_is_better"] == "false"
    assert dca["metric"] == "ppl" and dca["samples"] == 2 and dca["git"] == "abc1234"
    assert dca["seconds_per_sample"] == pytest.approx(2.0) and dca["length_label"] == "8k"
    se = [r for r in rows if r["method"] == "selfextend"]
    assert {r["variant"] for r in se} == {"selfextend(group_size=4)", "selfextend(group_size=8)"}
    assert {r["tasks"] for r in se} == {2}


def test_paper_comparison_puts_ours_next_to_the_paper_with_the_difference(store):
    spec = load_paper_table("ppl")
    comparisons = compare(spec, task_scores(load_records([store])))
    llama3 = next(c for c in comparisons if "llama3-8b-instruct" in c.table.title)
    rows = dict(llama3.table.rows)
    assert llama3.table.text(rows["Llama3-8B-Instruct"][0]) == "8.00 / 8.81 (-0.81)"
    assert llama3.table.text(rows["Llama3-8B-Instruct"][1]) == ">10^2 / 8.14"  # saturated: no difference
    assert llama3.table.text(rows["+ DCA"][1]) == "7.50 / 8.11 (-0.61)"
    assert llama3.table.text(rows["+ Ours"][2]) == "- / 7.21"  # 16K not run
    assert llama3.table.text(rows["+ Ours"][7]) == "- / 7.23"
    cells = [r for r in llama3.rows if r["row"] == "+ DCA" and r["column"] == "8K"]
    assert cells[0]["paper"] == 8.11 and cells[0]["diff"] == pytest.approx(-0.61)
    llama2 = next(c for c in comparisons if "llama2" in c.table.title)
    assert all(c.value is None for _, row in llama2.table.rows for c in row)  # no Llama-2 results
    # --as-model: compare another model's results with every block (the smoke runs)
    other = compare(spec, task_scores(load_records([store])), as_model="llama3-8b-instruct")
    assert dict(other[0].table.rows)["+ DCA"][0].value == pytest.approx(8.5)
    # --as-length: our results at one length against every column (smoke runs at short lengths)
    short = compare(spec, task_scores(load_records([store])), as_model="llama3-8b-instruct", as_length=8192)
    assert [c.value for c in dict(short[1].table.rows)["+ DCA"][:3]] == pytest.approx([7.5, 7.5, 7.5])
    assert "(ours: llama3-8b-instruct at 8k)" in short[1].table.title


# A paper table over the fake benchmark that reaches every branch of ``compare``: a column at its own
# length, columns at the row's length (one number, or one per benchmark), a column with a task we never
# ran, averages of complete and of incomplete columns, pinned parameters, two variants to choose from,
# a method never run, saturated and unreported paper values, a block of a model never run.
PINNED_SPEC = {
    "name": "pinned",
    "title": "Pinned",
    "source": "this test",
    "metric": "acc",
    "groups": [["fake", 4], ["mean", 2]],
    "columns": [
        {"label": "A 1k", "benchmark": "fake", "tasks": ["alpha"], "length": "1k"},
        {"label": "B", "benchmark": "fake", "tasks": ["beta"]},
        {"label": "AB", "benchmark": "fake", "tasks": ["alpha", "beta"]},
        {"label": "A+G", "benchmark": "fake", "tasks": ["alpha", "gamma"]},
        {"label": "Avg.", "average": ["A 1k", "B"]},
        {"label": "Avg. G", "average": ["AB", "A+G"]},
    ],
    "blocks": [
        {
            "model": "smollm2-135m",
            "label": "2K",
            "rows": [
                {
                    "label": "base",
                    "method": "rope",
                    "length": {"fake": "2k"},
                    "values": [50, ">1e2", None, 1, 2, 3],
                },
                {"label": "SE", "method": "selfextend", "length": "1k", "values": [55.5, 60, 61, 62, 63, 64]},
                {
                    "label": "SE g8",
                    "method": "selfextend",
                    "params": {"group_size": 8},
                    "length": 2048,
                    "values": [1, 2, 3, 4, 5, 6],
                },
                {
                    "label": "SE g3",
                    "method": "selfextend",
                    "params": {"group_size": 3},
                    "length": "2k",
                    "values": [1, 2, 3, 4, 5, 6],
                },
                {"label": "ours", "method": "lampe", "length": "2k", "values": [70, 71, 72, 73, 74, ">1e2"]},
                {"label": "dca", "method": "dca", "length": "1k", "values": [None] * 6},
            ],
        },
        {
            "model": "never-run",
            "rows": [{"label": "base", "method": "rope", "length": "1k", "values": [1] * 6}],
        },
    ],
}


def paper_snapshot(comparisons) -> str:
    out = []
    for comparison in comparisons:
        table = comparison.table
        out += [f"key: {table.key}", to_markdown(table)]
        for label, cells in table.rows:
            for column, cell in zip(table.columns, cells, strict=True):
                parts = [(p.model, p.variant.method, p.variant.params, p.task, p.length) for p in cell.parts]
                interval = None if cell.interval is None else [cell.interval.low, cell.interval.high]
                out.append(f"{label} | {column}: {cell.value!r} {cell.reference!r} {interval} {parts}")
    return "\n".join(out) + "\n" + comparison_csv(comparisons)


def test_paper_comparison_is_pinned(store):
    """Every table, cell and CSV row of ``compare`` on the fake and the PG-19 fixture, as they were."""
    scores = task_scores(load_records([store]))
    bootstrap = Bootstrap(BootstrapSettings(resamples=200, seed=0))
    found = [
        paper_snapshot(compare(PINNED_SPEC, scores)),
        paper_snapshot(compare(PINNED_SPEC, scores, bootstrap=bootstrap)),
        paper_snapshot(compare(PINNED_SPEC, scores, as_model="smollm2-135m", as_length=1024)),
        paper_snapshot(compare(load_paper_table("ppl"), scores, bootstrap=bootstrap)),
        paper_snapshot(
            compare(load_paper_table("ppl"), scores, as_model="llama3-8b-instruct", as_length=8192)
        ),
    ]
    expected = (Path(__file__).parent / "fixtures" / "paper_compare_pinned.txt").read_text()
    assert "\n=====\n".join(found) == expected


# Averages the paper prints that differ from the mean of its own task scores (by more than rounding);
# each is noted in its paper_tables/*.yaml.
PAPER_AVERAGE_TYPOS = {
    ("ruler", "24K (Table 6)", "SelfExtend"),  # 69.44, task mean 69.10
    ("ruler", "32K (Table 6)", "SelfExtend"),  # 69.06, task mean 69.61
    ("ruler", "32K (Table 6)", "DCA"),  # 61.99, task mean 61.97
    ("ruler", "32K (Table 6)", "YaRN"),  # 69.06, task mean 58.36
    ("ruler", "128K (Table 6)", "SelfExtend"),  # 35.97, task mean 36.26
    ("table1", "", "Llama3-8B-Ins"),  # L-Eval 67.07, task mean 67.70
    ("table1", "", "+ SelfExtend(16K)"),  # Llama3 LongBench 24.71, task mean 24.65
    ("table2", "128K", "+ DCA (128K)"),  # 57.55, task mean 57.57
}


def paper_average_mismatches(name: str) -> set[tuple[str, str, str]]:
    spec = load_paper_table(name)
    columns = spec["columns"]
    out = set()
    for block in spec["blocks"]:
        for row in block["rows"]:
            values = dict(zip([c["label"] for c in columns], map(paper_value, row["values"]), strict=True))
            for i, column in enumerate(columns):
                printed = paper_value(row["values"][i])
                if column["label"] != "Avg." or printed is None:
                    continue
                if "average" in column:
                    parts = [values[label] for label in column["average"]]
                    if any(p is None or math.isinf(p) for p in parts):
                        continue
                    expected = sum(parts) / len(parts)
                else:  # task-weighted mean of the other columns of the same benchmark
                    pairs = [
                        (paper_value(row["values"][j]), len(c["tasks"]))
                        for j, c in enumerate(columns)
                        if c["label"] != "Avg." and c.get("benchmark") == column["benchmark"]
                    ]
                    expected = sum(v * n for v, n in pairs) / sum(n for _, n in pairs)
                if abs(expected - printed) > 0.011:
                    out.add((name, str(block.get("label", "")), row["label"]))
    return out


LAMPE_PAPER_TABLES = {"table1", "table2", "ruler", "ppl"}  # other papers' rows: tests/test_paper_rows.py


def test_paper_tables_are_consistent():
    assert set(paper_table_names()) >= LAMPE_PAPER_TABLES
    mismatches = set()
    for name in sorted(LAMPE_PAPER_TABLES):
        spec = load_paper_table(name)
        assert required_jobs(spec)
        assert sum(len(b["rows"]) for b in spec["blocks"]) >= 14
        mismatches |= paper_average_mismatches(name)
    # the transcription reproduces the paper's averages, except the paper's own typos
    assert mismatches == PAPER_AVERAGE_TYPOS
    # RoPE inside the window runs at the official per-benchmark budgets (LongBench 3500, L-Eval 4000)
    table1 = required_jobs(load_paper_table("table1"))
    assert ("llama2-7b-chat", "rope", "longbench", "qasper", 3500) in table1
    assert ("llama2-7b-chat", "rope", "leval", "coursera", 4000) in table1
    spec = load_paper_table("table1")
    spec["blocks"][0]["rows"][0]["length"] = {"longbench": 3500}  # no L-Eval length
    with pytest.raises(LampeEvalError, match="needs a length for leval"):
        validate_spec(spec, "table1")


def expand_experiment(path: Path) -> set[tuple[str, str, str, str, int]]:
    """The (model, method, benchmark, task, length) cells of an experiment file, without running it."""
    from lampe_eval.lengths import parse_lengths

    data = yaml.safe_load(path.read_text())
    out = set()
    for grid in data["grid"]:
        for model in grid["models"]:
            for method in grid["methods"]:
                name = method if isinstance(method, str) else method["name"]
                for bench, tasks in grid["benchmarks"].items():
                    for task in tasks:
                        for length in parse_lengths([str(x) for x in grid["lengths"]]):
                            out.add((model, name, bench, task, length))
    return out


@pytest.mark.parametrize(
    ("experiment", "paper"),
    [("table1", "table1"), ("table2", "table2"), ("table-ruler", "ruler"), ("table-ppl", "ppl")],
)
def test_paper_experiments_run_every_cell_of_their_table(experiment, paper):
    planned = expand_experiment(ROOT / "experiments" / f"{experiment}.yaml")
    if paper == "ruler":  # the experiment lists the tasks as "all"
        from lampe_eval.benchmarks import get_benchmark

        tasks = get_benchmark("ruler").tasks()
        data = yaml.safe_load((ROOT / "experiments" / f"{experiment}.yaml").read_text())
        for grid in data["grid"]:
            grid["benchmarks"] = {"ruler": tasks}
        planned = set()
        from lampe_eval.lengths import parse_lengths

        for grid in data["grid"]:
            for method in grid["methods"]:
                for task in tasks:
                    for length in parse_lengths([str(x) for x in grid["lengths"]]):
                        planned.add((grid["models"][0], method, "ruler", task, length))
    missing = set(required_jobs(load_paper_table(paper))) - planned
    assert not missing, sorted(missing)[:5]


def test_build_report_writes_tables_leaderboard_comparison_and_plots(store, tmp_path):
    out = tmp_path / "report"
    report = build_report([store], out, formats=["md", "latex", "csv"], papers=["ppl"], bucket_edges=[1000])
    names = {p.name for p in report.files}
    assert {"tables.md", "tables.tex", "tables.csv", "leaderboard.csv"} <= names
    assert {"paper-ppl.md", "paper-ppl.tex", "paper-ppl.csv", "paper-ppl-cells.csv"} <= names
    assert {"pg19-by-length.png", "fake-by-length.png"} <= names
    for png in (p for p in report.files if p.suffix == ".png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    header = (out / "leaderboard.csv").read_text().splitlines()[0]
    assert header == ",".join(LEADERBOARD_COLUMNS)
    # both passages have the same perplexity: a zero-width interval, and the paper's number outside it
    assert "8.00 [8.00, 8.00] / 8.81 (-0.81) ∉" in (out / "paper-ppl.md").read_text()
    assert "comparisons.csv" in names


def test_bucket_plot(store, tmp_path):
    from lampe_eval.report.plots import plot_by_bucket

    path = plot_by_bucket(load_records([store]), ["fake"], tmp_path / "b.png", edges=[1000])
    assert path is not None and path.read_bytes()[:4] == b"\x89PNG"
    assert plot_by_bucket(load_records([store]), ["longbench"], tmp_path / "c.png") is None
    from lampe_eval.report.plots import input_tokens

    # a record of a benchmark this process does not know: the input-length keys of every benchmark
    record = {**fake_record("rope", {}, "alpha", 4096, 0, 1.0, 4000), "benchmark": "unregistered"}
    assert input_tokens(SampleRecord.from_json({**record, "meta": {"record_tokens": 20000}})) == 20000
    assert input_tokens(SampleRecord.from_json(record)) == 4000


def test_report_cli(store, tmp_path):
    out = tmp_path / "cli-report"
    result = CliRunner().invoke(
        app, ["report", str(store), "--out", str(out), "--paper", "ppl", "--format", "md,csv"]
    )
    assert result.exit_code == 0, result.output
    assert "| method | 4k | 8k | Avg. |" in result.output
    assert "8.00 [8.00, 8.00] / 8.81 (-0.81) ∉" in result.output
    assert (out / "leaderboard.csv").exists() and (out / "tables.csv").exists()
    plain = CliRunner().invoke(
        app, ["report", str(store), "--out", str(out), "--paper", "ppl", "--resamples", "0"]
    )
    assert plain.exit_code == 0 and "8.00 / 8.81 (-0.81)" in plain.output  # intervals off: as before
    assert "∉" not in plain.output and "[low, high]" not in plain.output
    assert not (out / "report.html").exists()
    html_only = ["report", str(store), "--out", str(out), "--format", "html", "--no-plots"]
    page = CliRunner().invoke(app, html_only)
    assert page.exit_code == 0 and "| method |" not in page.output  # html alone: no table on stdout
    assert f"wrote {out / 'report.html'}" in page.output and "<table" in (out / "report.html").read_text()
    bad = CliRunner().invoke(app, ["report", str(store), "--format", "pdf"])
    assert bad.exit_code != 0 and "bad --format" in bad.output
    negative = CliRunner().invoke(app, ["report", str(store), "--resamples", "-1"])
    assert negative.exit_code != 0 and "--resamples" in negative.output
    missing = CliRunner().invoke(app, ["report", str(tmp_path / "nothing")])
    assert missing.exit_code != 0 and "does not exist" in missing.output


def errbench_store(out: Path) -> Path:
    """Records of ``errbench`` (tests/reportplugin.py: ``err``, lower is better) and of a method no module
    registers."""
    s = ResultStore(out)
    for method, err in (("rope", 30.0), ("lampe", 10.0), ("mystery", 20.0)):
        for i in range(3):
            record = fake_record(method, {}, "one", 1024, i, err + i, 500)
            s.append_json({**record, "benchmark": "errbench", "scores": {"err": err + i}})
    return out


def test_report_import_gives_a_plugin_benchmark_its_declared_direction(tmp_path):
    import sys

    store = errbench_store(tmp_path / "results")
    args = ["report", str(store), "--format", "csv", "--no-plots", "--resamples", "0"]
    mystery = "warning: records of method 'mystery', which this process does not know"
    unknown = "warning: records of benchmark 'errbench', which this process does not know"
    if "tests.reportplugin" not in sys.modules:  # (a session that imported it knows it already)
        plain = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "plain")])
        assert plain.exit_code == 0, plain.output
        assert plain.output.count(unknown) == 1 and plain.output.count(mystery) == 1, plain.output
        with open(tmp_path / "plain" / "leaderboard.csv") as handle:
            assert {row["higher_is_better"] for row in csv.DictReader(handle)} == {"true"}
    result = CliRunner().invoke(
        app, [*args, "--out", str(tmp_path / "out"), "--import", "tests.reportplugin"]
    )
    assert result.exit_code == 0, result.output
    assert unknown not in result.output and result.output.count(mystery) == 1, result.output
    with open(tmp_path / "out" / "leaderboard.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert {row["higher_is_better"] for row in rows} == {"false"}
    assert [row["method"] for row in rows] == ["rope", "lampe", "mystery"]  # the unknown method last
    with open(tmp_path / "out" / "tables.csv") as handle:
        bold = [row["row"] for row in csv.DictReader(handle) if row["bold"] == "1"]
    assert set(bold) == {"lampe"}  # the lowest error is the best (each column)
    missing = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "x"), "--import", "no_such_module_x"])
    assert missing.exit_code != 0 and "cannot import no_such_module_x" in missing.output


def test_report_import_registers_a_format_of_its_own(store, tmp_path, monkeypatch):
    """docs/reports.md's format module as written: saved as ``myformats.py`` in a directory on the Python
    path, imported with ``--import myformats``; afterwards forgotten (no other test sees its format)."""
    import re
    import sys

    from lampe_eval.report import REPORT_FORMATS

    page = (Path(__file__).resolve().parents[1] / "docs" / "reports.md").read_text()
    files = dict(re.findall(r"<!-- file: (\S+) -->\n```python\n(.*?)```", page, flags=re.S))
    assert set(files) == {"myformats.py"}
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "myformats.py").write_text(files["myformats.py"])
    monkeypatch.syspath_prepend(str(plugins))
    args = ["report", str(store), "--no-plots", "--resamples", "0"]
    try:
        unknown = CliRunner().invoke(app, [*args, "--format", "scores-json", "--out", str(tmp_path / "x")])
        assert unknown.exit_code != 0 and "bad --format 'scores-json'" in unknown.output, unknown.output
        out = tmp_path / "out"
        imports = ["--import", "myformats"]
        result = CliRunner().invoke(app, [*args, "--format", "md,scores-json", "--out", str(out), *imports])
        assert result.exit_code == 0, result.output
        assert "| method |" in result.output and "scores.json" in result.output
        rows = json.loads((out / "scores.json").read_text())
        assert {(r["method"], r["task"]) for r in rows} >= {("rope", "pg19"), ("lampe", "alpha")}
        assert (out / "tables.md").exists() and (out / "leaderboard.csv").exists()
        assert "scores-json" in REPORT_FORMATS.names() and REPORT_FORMATS.names()[:5] == [
            "md", "latex", "csv", "leaderboard", "html"
        ]  # fmt: skip
    finally:
        REPORT_FORMATS.remove("scores-json")
        sys.modules.pop("myformats", None)


def test_a_report_format_must_declare_its_files_and_writer():
    from lampe_eval.registry import Registry
    from lampe_eval.report.formats import ReportFormat, _check_format

    formats: Registry[ReportFormat] = Registry("report format", check=_check_format)

    class NoWriter(ReportFormat):
        files = ("x.txt",)

    class NoFiles(ReportFormat):
        def write(self, inputs):
            return []

    with pytest.raises(TypeError, match="must implement write"):
        formats.register("nowriter")(NoWriter)
    with pytest.raises(TypeError, match="must declare the files it writes"):
        formats.register("nofiles")(NoFiles)


def test_methods_declare_their_order_baseline_and_highlight(store, tmp_path):
    from lampe_eval.methods import METHODS
    from lampe_eval.report.data import Presentation, Variant, baseline_variant, method_order

    order = [v.method for v in method_order([Variant(name) for name in [*METHODS.names(), "zzz"]])]
    assert order[0] == "rope" and order[-2:] == ["lampe", "zzz"]  # every registered method, unknown last
    assert {"string", "streamingllm", "lm_infinite", "longrope", "llama3", "ntk_by_parts"} <= set(order)
    assert order.index("selfextend") < order.index("dca") < order.index("yarn")  # the paper's order
    declared = Presentation()
    assert declared.baseline_method() == "rope" and declared.highlighted("lampe")
    assert not declared.highlighted("rope")
    mine = Presentation(baseline="selfextend", highlight=("rope",))
    variants = [Variant("rope"), Variant("selfextend", '{"group_size": 8}'), Variant("selfextend")]
    assert method_order(variants, mine)[0].method == "selfextend"
    assert baseline_variant(variants, mine) == Variant("selfextend")
    assert mine.highlighted("rope") and not mine.highlighted("lampe")
    # through the report: the baseline row and the comparisons follow --baseline
    report = build_report([store], tmp_path / "r", formats=["csv"], plots=False, baseline="lampe")
    fake = [t for t in report.tables if t.key.startswith("fake-")]
    assert fake and all(t.baseline == "lampe" and t.rows[0][0] == "lampe" for t in fake)
    with open(tmp_path / "r" / "comparisons.csv") as handle:
        roles = {
            (r["variant"], r["versus"]) for r in csv.DictReader(handle) if r["versus_role"] == "baseline"
        }
    assert ("rope", "lampe") in roles and not any(versus == "rope" for _, versus in roles)
    result = CliRunner().invoke(
        app, ["report", str(store), "-o", str(tmp_path / "c"), "--baseline", "nope", "--highlight", "lampe"]
    )
    assert result.exit_code == 0 and "warning: --baseline nope: no records of method 'nope'" in result.output


def test_the_report_reads_records_without_the_runner():
    """The record type and its readers lie below both: nothing in report/ (or records.py) imports runner/."""
    import ast

    package = Path(__file__).resolve().parents[1] / "lampe_eval"
    found = []
    for path in [*sorted((package / "report").glob("*.py")), package / "records.py"]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and "runner" in (node.module or "").split("."):
                found.append(f"{path.name}:{node.lineno}")
    assert not found, found
