"""Records say how they were made: a typed record (round trip, schema-1 records read), and a resume that
reuses a record only when the engine that made it (backend, dtype, device, kernel) gives this run's
numbers: another dtype or kernel recomputes and says so in one line; the same settings resume."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest
import torch

from lampe_eval.models import LoadedModel
from lampe_eval.records import (
    SCHEMA_VERSION,
    SampleRecord,
    check_record,
    engine_identity,
    resolved_params,
)
from lampe_eval.runner.events import Computed, Stored, Warned
from lampe_eval.runner.experiment import Experiment
from lampe_eval.runner.jobs import Job
from lampe_eval.runner.local import run
from lampe_eval.runner.store import ResultStore
from lampe_eval.testing import tiny_llama
from tests.fakebench import CharTokenizer

MINIMAL = {
    "key": "j:s",
    "job_key": "j",
    "sample_id": "s",
    "index": 0,
    "model": "m",
    "method": "rope",
    "benchmark": "pg19",
    "task": "pg19",
    "length": 100,
    "scores": {"ppl": 3.5},
}


def test_a_record_round_trips_through_its_type() -> None:
    record = SampleRecord(**MINIMAL, resolved_params={"s1": 4}, engine={"backend": "hf", "dtype": "float32"})
    data = json.loads(json.dumps(record.to_json()))
    assert data["schema_version"] == SCHEMA_VERSION and check_record(data) is None
    assert SampleRecord.from_json(data) == record


def test_a_record_crosses_processes_and_is_stored_as_it_was_made(tmp_path: Path) -> None:
    """Events carry the typed record through process pipes and Ray (pickle); the stored line is the
    record's JSON form, the same bytes on either side, and it reads back as the same record."""
    record = SampleRecord(
        **MINIMAL,
        resolved_params={"s1": 4, "scale": 0.1 + 0.2},
        output={"prediction": "ünïcode </script>", "nll": [1.0000000000000002, 3e-310]},
        seconds=1 / 3,
        engine={"backend": "hf", "dtype": "float32"},
    )
    event = Computed("u", record)
    copy = pickle.loads(pickle.dumps(event))
    assert copy == event and copy.record == record and Stored.of(copy).record == record
    stores = [ResultStore(tmp_path / "a"), ResultStore(tmp_path / "b")]
    stores[0].append(record)
    stores[1].append(copy.record)
    lines = [s.path.read_bytes() for s in stores]
    want = json.dumps(record.to_json(), ensure_ascii=False, sort_keys=True, default=str) + "\n"
    assert lines[0] == lines[1] == want.encode("utf-8")
    assert ResultStore(tmp_path / "a").unique_records() == [record]


def test_schema_1_records_are_read() -> None:
    old = {**MINIMAL, "method_params": {"s1": 4}, "device": "cpu", "an_unknown_field": 1}
    assert check_record(old) is None
    record = SampleRecord.from_json(old)
    assert record.resolved_params == {"s1": 4} and record.schema_version == 1 and record.engine is None
    assert resolved_params(old) == {"s1": 4} == resolved_params(record.to_json())
    assert engine_identity(None, "cuda:1") == "legacy:cuda"


@pytest.mark.parametrize(
    "change,message",
    [
        ({"index": -1}, "'index' must be a non-negative integer, got -1"),
        ({"scores": {"ppl": "x"}}, "'scores' must map metric names to numbers"),
        ({"engine": "cpu"}, "'engine' must be an object (or null), got 'cpu'"),
        ({"model": None}, "'model' must be a string, got None"),
    ],
)
def test_check_record_is_derived_from_the_type(change: dict[str, Any], message: str) -> None:
    assert message in str(check_record({**MINIMAL, **change}))
    missing = dict(MINIMAL)
    del missing["task"]
    assert "'task' must be present" in str(check_record(missing))


def test_engine_identity_is_what_changes_numbers() -> None:
    cpu = {"backend": "hf", "dtype": "float32", "device": "cpu", "kernel": "cpu", "batch_size": 4}
    assert engine_identity(cpu) == engine_identity({**cpu, "batch_size": 1, "backend_version": "x"})
    cuda = {**cpu, "device": "cuda:0", "kernel": "flash_attn", "dtype": "bfloat16"}
    assert engine_identity(cuda) == engine_identity({**cuda, "device": "cuda:3"})
    assert engine_identity(cuda) != engine_identity({**cuda, "batch_size": 1})  # CUDA reduction order
    assert engine_identity(cpu) != engine_identity({**cpu, "kernel": "portable"})


def loader(dtype: torch.dtype) -> Any:
    model = tiny_llama(window=256, seed=3).to(dtype)
    return lambda name: LoadedModel(name, model, CharTokenizer(), 256, False)


def books(tmp_path: Path) -> Path:
    folder = tmp_path / "books"
    folder.mkdir()
    for i in range(3):
        (folder / f"{i}.txt").write_text("".join(chr(97 + (i * 7 + j * j) % 26) for j in range(400)))
    return folder


def test_resume_recomputes_another_dtype_or_kernel_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = Job("tiny", "lampe", "pg19", "pg19", 200, {}, options={"pg19_dir": str(books(tmp_path))})
    out = tmp_path / "R"

    def go(dtype: torch.dtype) -> tuple[Any, list[str]]:
        warnings: list[str] = []
        events = lambda e: isinstance(e, Warned) and warnings.append(e.message)  # noqa: E731
        result = run(Experiment.from_jobs([job], out, load=loader(dtype)), on_event=events)
        return result.raise_for_failures(), warnings

    first, _ = go(torch.float32)
    assert first.computed == 3
    same, warnings = go(torch.float32)
    assert (same.computed, same.skipped, warnings) == (0, 3, [])
    monkeypatch.setenv("LAMPE_EVAL_KERNEL", "portable")
    kernel, warnings = go(torch.float32)
    assert kernel.computed == 3 and len(warnings) == 1
    assert (
        "3 stored sample(s) made with hf, float32, cpu, kernel cpu are computed again with hf, "
        in warnings[0]
    )
    assert "kernel portable" in warnings[0] and "\n" not in warnings[0]
    again, warnings = go(torch.float32)
    assert (again.computed, warnings) == (0, [])  # the same settings resume
    monkeypatch.delenv("LAMPE_EVAL_KERNEL")
    bf16, warnings = go(torch.bfloat16)
    assert bf16.computed == 3 and "bfloat16" in warnings[0]
    engines = {r.engine["dtype"] for r in ResultStore(out).unique_records()}
    assert engines == {"bfloat16"}  # the latest record of each sample wins


def test_schema_1_records_resume_under_the_defaults_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = Job("tiny", "rope", "pg19", "pg19", 200, {}, options={"pg19_dir": str(books(tmp_path))})
    out = tmp_path / "R"
    run(Experiment.from_jobs([job], out, load=loader(torch.float32))).raise_for_failures()
    path = out / "records.jsonl"
    old = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        for name in ("engine", "schema_version"):
            record.pop(name)
        record["method_params"] = record.pop("resolved_params")
        old.append(json.dumps(record))
    path.write_text("\n".join(old) + "\n")
    resumed = run(Experiment.from_jobs([job], out, load=loader(torch.float32)))
    assert (resumed.computed, resumed.skipped) == (0, 3)
    monkeypatch.setenv("LAMPE_EVAL_KERNEL", "portable")
    recomputed = run(Experiment.from_jobs([job], out, load=loader(torch.float32)))
    assert recomputed.computed == 3
