"""What a grid reads, said before anything runs: each benchmark's sources resolved by the rules it loads by
(one entry per thing read), the split files a dataset card declares, JSON Lines written as ``.json``, and
the report's table of the sources its numbers came from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lampe_eval.benchmarks import get_benchmark
from lampe_eval.benchmarks.datafiles import read_records
from lampe_eval.data.hub import front_matter, split_patterns
from lampe_eval.errors import MissingDataError
from lampe_eval.report import build_report
from lampe_eval.runner.data_plan import data_needs
from lampe_eval.runner.jobs import expand_grid
from tests.reportstore import record


def test_one_entry_per_thing_read_whatever_the_methods_and_models() -> None:
    tasks = [("longbench", t) for t in ("qasper", "hotpotqa", "trec")] + [("ruler", "niah_single_1")]
    jobs = expand_grid(["m1", "m2"], [("rope", {}), ("lampe", {})], tasks, [4096, 8192], use_configs=False)
    needs = data_needs(jobs)
    (archive,) = needs  # RULER's noise task reads nothing; LongBench's tasks read one archive
    assert archive.source is not None and archive.source.describe() == "hub:zai-org/LongBench: data.zip"
    assert archive.tasks() == "qasper, hotpotqa, trec" and len(archive.jobs) == 6  # 3 tasks x 2 lengths


def test_a_missing_chosen_source_is_the_jobs_one_line(tmp_path: Path) -> None:
    jobs = expand_grid(
        ["m"], [("rope", {})], [("leval", "tpo")], [4096], use_configs=False,
        options={"leval": {"leval_dir": str(tmp_path)}},
    )  # fmt: skip
    (need,) = data_needs(jobs)
    assert need.source is None and need.error.startswith(f"leval_dir={tmp_path}: neither tpo.jsonl nor")


@pytest.mark.parametrize(
    ("bench", "task", "options", "kinds"),
    [
        ("longbench", "qasper", {"fixture": True}, ["fixture"]),
        ("longbench", "qasper", {}, ["hub"]),
        ("pg19", "pg19", {}, ["hub"]),
        ("pg19", "pg19", {"pg19_source": "offline"}, ["corpus"]),
        ("babilong", "qa1", {}, ["hub"]),  # 4k: the pre-built set
        ("babilong", "qa1", {"fixture": True}, ["fixture", "corpus"]),  # generated: the stories, the KJV
        ("infinitebench", "passkey", {}, []),  # generated
        ("infinitebench", "longbook_qa_eng", {}, ["hub"]),
        ("ruler", "niah_single_2", {}, ["package"]),
        ("ruler", "niah_single_2", {"essay": "offline"}, ["corpus"]),
        ("ruler2", "mk_niah_basic", {}, []),
    ],
)
def test_each_benchmark_names_its_sources(bench: str, task: str, options: dict, kinds: list[str]) -> None:
    sources = get_benchmark(bench).data_sources(task, 4096, options, None)
    assert [s.kind for s in sources] == kinds


def test_the_split_files_a_dataset_card_declares() -> None:
    card = front_matter(
        "---\nconfigs:\n- config_name: 4k\n  data_files:\n  - split: qa1\n    path: data/qa1/4k.json\n"
        "- config_name: default\n  data_files:\n  - split: test\n    path: [data/test-*]\n---\n# card\n"
    )
    assert split_patterns(card, "4k", "qa1") == ["data/qa1/4k.json"]
    assert split_patterns(card, "default", "test") == ["data/test-*"]
    assert split_patterns(card, "8k", "qa1") == [] and front_matter("# no front matter") == {}


def test_a_json_file_may_hold_json_lines(tmp_path: Path) -> None:
    lines = tmp_path / "4k.json"
    lines.write_text(
        '{"input": "a", "question": "q", "target": "t"}\n{"input": "b", "question": "r", "target": "u"}\n'
    )
    assert [r["input"] for r in read_records(lines)] == ["a", "b"]
    broken = tmp_path / "x.json"
    broken.write_text('{"input": "a"}\n{"input": \n')
    with pytest.raises(MissingDataError, match="expected a JSON array of objects|not valid JSON"):
        read_records(broken)


def test_the_report_says_which_data_its_numbers_came_from(tmp_path: Path) -> None:
    store = tmp_path / "R"
    store.mkdir()
    rows = [
        record(
            "rope", "fake", "t", 1024, i, {"acc": 1.0}, meta={"data_source": f"hub:org/data@{sha}:f.jsonl"}
        )
        for i, sha in enumerate(["aaaa", "aaaa", "bbbb"])
    ]
    (store / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = build_report([store], tmp_path / "out", formats=["md"], plots=False, bootstrap=None)
    sources = report.tables[0]
    assert sources.title == "Data sources" and sources.corner == "benchmark"
    assert [(label, [c.text for c in cells]) for label, cells in sources.rows] == [
        ("fake", ["hub:org/data@aaaa:f.jsonl", "2"]),
        ("fake", ["hub:org/data@bbbb:f.jsonl", "1"]),
    ]
    assert (tmp_path / "out" / "tables.md").read_text().startswith("### Data sources")
