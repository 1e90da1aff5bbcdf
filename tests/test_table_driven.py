"""The shared record loading of the table-driven benchmarks: a benchmark that declares only its record
format, file names and hub files finds, reads and checks its records like LongBench and L-Eval do."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lampe_eval.benchmarks.base import Metric, Sample, SampleContext
from lampe_eval.benchmarks.datafiles import FIXTURE_OPTION, DataFileError, Field, Record, Schema
from lampe_eval.benchmarks.table_driven import TableDrivenBenchmark
from lampe_eval.data import hub
from lampe_eval.data.sources import HubFiles
from lampe_eval.errors import MissingDataError
from lampe_eval.options import Option


class Toy(TableDrivenBenchmark):
    name = "toy"
    metrics = (Metric("match"),)
    options = (
        FIXTURE_OPTION,
        Option("toy_dir", Path, None, "directory with <task>.jsonl"),
        Option("toy_dataset", str, None, "datasets id"),
    )
    schema = Schema("Toy", (Field("question", (str,), nonempty=True), Field("answer", (str,))))
    subdirs = ("data",)

    def tasks(self) -> list[str]:
        return ["t"]

    def samples(self, task: str, ctx: SampleContext) -> Iterator[Sample]:
        return iter(())

    def score(self, sample: Sample, output: dict[str, Any]) -> dict[str, float]:
        return {}

    def hub_files(self, task: str, dataset: str | None) -> HubFiles:
        return HubFiles(dataset or "someone/toy", (f"data/{task}.jsonl",))

    def keep(self, records: list[Record]) -> list[Record]:
        return [r for r in records if r["answer"] != "skip"]


def write(path: Path, records: list[dict[str, str]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_a_local_file_in_a_usual_subfolder_is_read_checked_and_kept(tmp_path: Path) -> None:
    path = write(
        tmp_path / "data" / "t.jsonl", [{"question": "Q", "answer": "A"}, {"question": "R", "answer": "skip"}]
    )
    records, source = Toy().read_records("t", Toy().typed_options({}), str(tmp_path))
    assert records == [{"question": "Q", "answer": "A"}] and source == f"file:{path}"


def test_check_job_names_the_file_line_and_field_before_any_model_loads(tmp_path: Path) -> None:
    path = write(tmp_path / "t.jsonl", [{"question": "Q", "answer": "A"}, {"question": "Q"}])
    with pytest.raises(
        DataFileError, match=f"^{path}:2: record lacks the Toy field 'answer' \\(a string\\)$"
    ):
        Toy().check_job("t", 1024, {}, str(tmp_path))
    missing = "toy_dir=.*neither t.jsonl nor the repository.s someone/toy: data/t.jsonl found there"
    with pytest.raises(MissingDataError, match=missing):
        Toy().check_job("t", 1024, {"toy_dir": str(tmp_path / "data")}, None)


def test_the_hub_is_read_only_when_no_local_file_has_the_records(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls: list[HubFiles] = []
    copy = write(tmp_path / "t.jsonl", [{"question": "Q?", "answer": "A"}, {"question": "", "answer": "B"}])

    def read(files: HubFiles, **kwargs: Any) -> hub.Snapshot:
        calls.append(files)
        return hub.Snapshot(files, "c0ffee" * 6 + "c0ff", {files.paths[0]: copy})

    monkeypatch.setattr(hub, "read", read)
    monkeypatch.setattr(hub, "cached", lambda files: None)
    Toy().check_job("t", 1024, {}, None)  # offline checks never reach the hub
    assert calls == []
    with pytest.raises(
        DataFileError, match="^hub:mine/toy@c0ffeec0ffee:data/t.jsonl record 1: Toy field 'question' must"
    ):
        Toy().read_records("t", Toy().typed_options({"toy_dataset": "mine/toy"}), None)
    assert calls == [HubFiles("mine/toy", ("data/t.jsonl",))]


def test_a_copy_of_the_repository_in_the_data_dir_is_read_like_the_hub(tmp_path: Path) -> None:
    path = write(tmp_path / "toy" / "data" / "t.jsonl", [{"question": "Q", "answer": "A"}])
    (source,) = Toy().data_sources("t", 1024, {}, str(tmp_path))
    assert source.kind == "file" and source.hub == HubFiles("someone/toy", ("data/t.jsonl",))
    records, label = Toy().read_records("t", Toy().typed_options({}), str(tmp_path))
    assert records == [{"question": "Q", "answer": "A"}] and label == f"file:{path}"
