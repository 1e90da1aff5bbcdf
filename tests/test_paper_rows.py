"""Other papers' RULER rows (lampe_eval/resources/paper_tables/: qwen25-ruler, qwen3-ruler-*, string-ruler):
they load, their experiments run every cell they compare, ``report --paper`` compares a store with them,
their printed averages are the means of their cells to the paper's rounding, and docs/reports.md shows the
same numbers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from lampe_eval.report import build_report
from lampe_eval.report.data import load_records, task_scores
from lampe_eval.report.paper import compare, load_paper_table, paper_table_names, paper_value, required_jobs
from lampe_eval.runner.experiment import ExperimentSpec
from lampe_eval.runner.store import RECORDS_FILE

ROOT = Path(__file__).resolve().parents[1]
TABLES = {  # paper table -> the experiments that run it
    "qwen25-ruler": ["table-qwen25-ruler"],
    "qwen3-ruler-nonthinking": ["table-qwen3-ruler-nonthinking"],
    "qwen3-ruler-thinking": ["table-qwen3-ruler-thinking"],
    "string-ruler": ["table-string-ruler"],
}
RULER_TASKS = [
    "niah_single_1", "niah_single_2", "niah_single_3", "niah_multikey_1", "niah_multikey_2",
    "niah_multikey_3", "niah_multivalue", "niah_multiquery", "vt", "cwe", "fwe", "qa_1", "qa_2",
]  # fmt: skip


def test_the_blocks_load_with_their_source_and_target():
    assert set(TABLES) <= set(paper_table_names())
    makefile = (ROOT / "Makefile").read_text()
    for name in TABLES:
        spec = load_paper_table(name)
        assert spec["name"] == name and "read 2026-11-28" in spec["source"]
        assert f"\n{spec['make_target']}: setup\n" in makefile
        assert required_jobs(spec)
        for column in spec["columns"]:
            if "tasks" in column:
                assert column["benchmark"] == "ruler" and set(column["tasks"]) <= set(RULER_TASKS)


def test_printed_averages_are_the_means_to_the_papers_rounding():
    for name in TABLES:
        spec = load_paper_table(name)
        labels = [c["label"] for c in spec["columns"]]
        for block in spec["blocks"]:
            for row in block["rows"]:
                values = dict(zip(labels, map(paper_value, row["values"]), strict=True))
                parts = [v for label, v in values.items() if label != "Avg."]
                assert all(v is not None for v in parts)
                # one decimal printed: the mean is within half a unit of the last digit
                assert abs(sum(parts) / len(parts) - values["Avg."]) <= 0.05, (name, row["label"])


@pytest.mark.parametrize("name", sorted(TABLES))
def test_the_experiments_run_every_cell_with_the_rows_parameters_and_options(name):
    spec = load_paper_table(name)
    jobs = [job for experiment in TABLES[name] for job in ExperimentSpec.from_file(experiment).expand()]
    planned = {
        (j.model, j.method, j.benchmark, j.task, j.length, json.dumps(j.overrides, sort_keys=True))
        for j in jobs
    }
    for block in spec["blocks"]:
        for row in block["rows"]:
            params = json.dumps(row.get("params") or {}, sort_keys=True)
            for model, method, benchmark, task, length in required_jobs(
                {**spec, "blocks": [{**block, "rows": [row]}]}
            ):
                assert (model, method, benchmark, task, length, params) in planned, (
                    name,
                    row["label"],
                    task,
                    length,
                )
    options = {json.dumps(j.options, sort_keys=True) for j in jobs}
    if name.startswith("qwen3"):  # the mode is a benchmark option: one per store
        thinking = name.endswith("-thinking")
        expected = {"enable_thinking": thinking, **({"thinking_budget": 8192} if thinking else {})}
        assert options == {json.dumps(expected, sort_keys=True)}


def docs_rows() -> dict[tuple[str, str], list[float]]:
    """(paper table, row label) -> the numbers docs/reports.md shows for it."""
    out = {}
    for line in (ROOT / "docs" / "reports.md").read_text().splitlines():
        match = re.match(r"\| `([\w.-]+-ruler[\w-]*)` \| ([^|]+) \| [^|]+ \|(.*)\|$", line)
        if match:
            out[(match[1], match[2].strip())] = [float(x) for x in match[3].split("|")]
    return out


def test_the_files_hold_the_numbers_the_docs_show():
    shown = docs_rows()
    labels = {  # the docs' row -> the file's row
        ("qwen25-ruler", "w/o DCA + YaRN"): "w/o DCA + YaRN",
        ("qwen25-ruler", "Qwen2.5-7B-Instruct (YaRN + DCA)"): "Qwen2.5-7B-Instruct (YaRN + DCA)",
        ("qwen3-ruler-nonthinking", "Qwen3-8B, non-thinking"): "Qwen3-8B (YaRN x4, non-thinking mode)",
        ("qwen3-ruler-thinking", "Qwen3-8B, thinking (budget 8192)"): "Qwen3-8B (YaRN x4, thinking mode)",
        ("string-ruler", "Llama3.1-8b-string (128K)"): "Llama3.1-8b-string",
    }
    assert set(shown) == set(labels)
    for (name, docs_label), file_label in labels.items():
        spec = load_paper_table(name)
        row = next(r for b in spec["blocks"] for r in b["rows"] if r["label"] == file_label)
        assert [paper_value(v) for v in row["values"]] == shown[(name, docs_label)], (name, file_label)
    # and the numbers the sources print (Qwen2.5 Table 16, Qwen3 Table 23, the STRING README)
    string = next(r for b in load_paper_table("string-ruler")["blocks"] for r in b["rows"])
    assert string["values"] == [
        100,
        100,
        100,
        97.8,
        84.8,
        80.0,
        97.9,
        91.1,
        88.08,
        0.0,
        75.13,
        77.2,
        48.2,
        80.0,
    ]
    columns = load_paper_table("string-ruler")["columns"]
    by_task = {
        c["tasks"][0]: v for c, v in zip(columns, string["values"], strict=True) if len(c["tasks"]) == 1
    }
    assert by_task["niah_multiquery"] == 97.9 and by_task["niah_multivalue"] == 91.1  # the README's order
    assert by_task["vt"] == 88.08 and by_task["cwe"] == 0.0 and by_task["qa_2"] == 48.2


def ruler_store(out: Path, model: str, method: str, params: dict, lengths: list[int], score) -> Path:
    """Records of every RULER task at ``lengths``: 2 samples each, scored ``score(task, length, i)``."""
    out.mkdir(parents=True, exist_ok=True)
    lines = []
    for length in lengths:
        for task in RULER_TASKS:
            for i in range(2):
                lines.append(
                    {
                        "key": f"{method}-{task}-{length}:{i}",
                        "job_key": f"{method}-{task}-{length}",
                        "sample_id": str(i),
                        "index": i,
                        "model": model,
                        "method": method,
                        "variant_params": params,
                        "benchmark": "ruler",
                        "task": task,
                        "length": length,
                        "scores": {"string_match_all": score(task, length, i)},
                        "git": "abc1234",
                    }
                )
    with open(out / RECORDS_FILE, "a") as handle:
        handle.writelines(json.dumps(line) + "\n" for line in lines)
    return out


K = 1024


def test_report_paper_compares_a_store_with_them(tmp_path):
    # Qwen3-8B thinking mode: 90 at every task and length (two samples: 80 and 100) -> ours 90 everywhere
    store = ruler_store(
        tmp_path / "q3", "qwen3-8b", "yarn", {"factor": 4.0}, [n * K for n in (4, 8, 16, 32, 64, 128)],
        lambda task, length, i: 80.0 + 20.0 * i,
    )  # fmt: skip
    out = tmp_path / "q3-report"
    build_report([store], out, formats=["md"], papers=["qwen3-ruler-thinking"], plots=False)
    text = (out / "paper-qwen3-ruler-thinking.md").read_text()
    assert "Qwen3-8B RULER 4K-128K, thinking mode" in text
    row = next(line for line in text.splitlines() if line.startswith("| Qwen3-8B (YaRN x4, thinking mode)"))
    cells = [c.strip().strip("*") for c in row.split("|")[2:-1]]  # (our best is bold)
    assert cells[0].startswith("90.00 [") and cells[0].endswith("/ 94.70 (-4.70) ∉")
    assert cells[5].endswith("/ 72.00 (+18.00) ∉") and cells[6].endswith("/ 84.40 (+5.60) ∉")
    # a variant with other parameters is not the paper's row: nothing to compare
    other = ruler_store(tmp_path / "q3b", "qwen3-8b", "yarn", {"factor": 2.0}, [4 * K], lambda *_: 50.0)
    (found,) = compare(load_paper_table("qwen3-ruler-thinking"), task_scores(load_records([other])))
    assert all(cell.value is None for _, cells in found.table.rows for cell in cells)
    # Qwen2.5: rope and yarn x4; per-task cells of STRING at 128K
    q25 = ruler_store(tmp_path / "q25", "qwen2.5-7b-instruct", "rope", {}, [4 * K, 64 * K], lambda *_: 74.5)
    (table,) = compare(load_paper_table("qwen25-ruler"), task_scores(load_records([q25])))
    rope = dict(table.table.rows)["w/o DCA + YaRN"]
    assert [c.text for c in rope[:6:4]] == ["74.50 / 96.70 (-22.20)", "74.50 / 74.50 (+0.00)"]
    assert rope[5].value is None and rope[6].value is None  # no 128K result: no average either
    assert all(c.value is None for c in dict(table.table.rows)["Qwen2.5-7B-Instruct (YaRN + DCA)"])
    string = ruler_store(
        tmp_path / "s", "llama3.1-8b-instruct", "string", {}, [128 * K],
        lambda task, length, i: 0.0 if task == "cwe" else 100.0,
    )  # fmt: skip
    (table,) = compare(load_paper_table("string-ruler"), task_scores(load_records([string])))
    cells = dict(table.table.rows)["Llama3.1-8b-string"]
    assert cells[9].text == "0.00 / 0.00 (+0.00)"  # CWE
    assert cells[12].text == "100.00 / 48.20 (+51.80)"  # QA_2
    assert cells[13].value == pytest.approx(1200 / 13)  # Avg. over the 13 tasks
