"""Append-only per-sample results (JSON Lines), safe against a kill at any moment.

Each record is written as one line with a single ``write`` + ``flush`` + ``fsync``, under an
exclusive ``flock`` so that several worker processes can append to the same file. A process killed
mid-write can leave at most one torn line: readers skip it and the next writer starts on a fresh
line, so a crash loses at most the sample in flight and never corrupts finished ones. The lock is
released by the kernel when its holder dies.

Record fields (one JSON object per line; readers must ignore fields they do not know):

- ``key`` (``<job_key>:<sample_id>``), ``job_key``, ``sample_id``, ``index`` (position of the sample
  in the benchmark's order)
- ``model``, ``method``, ``method_params`` (the resolved parameters), ``method_label``,
  ``variant_params`` (the parameters set explicitly: they name the method's variant in reports)
- ``benchmark``, ``task``, ``length`` (target tokens), ``seed``, ``limit``
- ``prompt_tokens`` (tokens actually given to the model), ``references``, ``output`` (the
  benchmark's raw output: ``prediction``, token counts, timings, ...), ``prediction``
- ``scores`` (per-sample metrics, 0-100; the first key is the headline), ``seconds`` (wall time of
  the sample), ``time`` (unix time of the write)
- ``git`` (short revision of the code), ``versions`` (torch, transformers), ``worker``, ``device``,
  ``meta`` (benchmark extras)
"""

from __future__ import annotations

import contextlib
import json
import os
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: single writer only
    fcntl = None  # type: ignore[assignment]

RECORDS_FILE = "records.jsonl"


def iter_records(path: Path) -> Iterator[dict[str, Any]]:
    """Every parsable record of a JSONL file, in file order (torn lines skipped)."""
    if not path.exists():
        return
    with path.open("rb") as handle:
        for raw in handle:
            line = raw.strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue  # a torn line from a killed writer
            if isinstance(record, dict):
                yield record


class ResultStore:
    """``<directory>/records.jsonl``. ``load=False`` skips reading the file (append-only workers)."""

    def __init__(self, directory: str | Path, *, load: bool = True) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / RECORDS_FILE
        self._done: set[str] = {r["key"] for r in self.records() if "key" in r} if load else set()

    def records(self) -> Iterator[dict[str, Any]]:
        """All records in file order, duplicates included (see :meth:`unique_records`)."""
        return iter_records(self.path)

    def unique_records(self) -> list[dict[str, Any]]:
        """One record per key (the last one written wins)."""
        by_key: dict[str, dict[str, Any]] = {}
        for record in self.records():
            if "key" in record:
                by_key.pop(record["key"], None)
                by_key[record["key"]] = record
        return list(by_key.values())

    def done_by_job(self) -> dict[str, set[str]]:
        """job key -> finished sample ids."""
        out: dict[str, set[str]] = defaultdict(set)
        for record in self.records():
            if "job_key" in record and "sample_id" in record:
                out[record["job_key"]].add(str(record["sample_id"]))
        return out

    def is_done(self, key: str) -> bool:
        return key in self._done

    def __len__(self) -> int:
        return len(self._done)

    def append(self, record: dict[str, Any]) -> None:
        line = (json.dumps(record, ensure_ascii=False, sort_keys=True, default=str) + "\n").encode("utf-8")
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            with _locked(fd):
                size = os.fstat(fd).st_size
                if size > 0 and os.pread(fd, 1, size - 1) != b"\n":
                    line = b"\n" + line  # after a torn line, start clean
                view = memoryview(line)
                while view:
                    written = os.write(fd, view)
                    view = view[written:]
                os.fsync(fd)
        finally:
            os.close(fd)
        self._done.add(record["key"])


@contextlib.contextmanager
def _locked(fd: int) -> Iterator[None]:
    if fcntl is None:  # pragma: no cover
        yield
        return
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
