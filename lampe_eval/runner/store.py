"""Append-only per-sample results (JSON Lines), safe against a kill at any moment.

Each record is written as one line with a single ``write`` + ``flush`` + ``fsync``. A process killed
mid-write can leave at most one torn last line: readers skip it and the next writer starts on a
fresh line, so a crash loses at most the sample in flight and never corrupts finished ones.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

RECORDS_FILE = "records.jsonl"


class ResultStore:
    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / RECORDS_FILE
        self._done: set[str] = {r["key"] for r in self.records() if "key" in r}

    def records(self) -> Iterator[dict[str, Any]]:
        if not self.path.exists():
            return
        with self.path.open("r", encoding="utf-8") as handle:
            for line in handle:
                line = line.strip()
                if not line:
                    continue
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    continue  # a torn line from a killed writer

    def is_done(self, key: str) -> bool:
        return key in self._done

    def append(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n"
        with self.path.open("ab") as handle:
            if handle.tell() > 0 and not self._ends_with_newline():
                handle.write(b"\n")  # after a torn line, start clean
            handle.write(line.encode("utf-8"))
            handle.flush()
            os.fsync(handle.fileno())
        self._done.add(record["key"])

    def _ends_with_newline(self) -> bool:
        with self.path.open("rb") as handle:
            handle.seek(-1, os.SEEK_END)
            return handle.read(1) == b"\n"
