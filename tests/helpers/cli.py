"""The console entry point as the bad-input tests drive it (from ``tests/test_bad_input.py``): run
``main``, take its one stderr line, read a store's records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lampe_eval.cli import main
from lampe_eval.runner.store import ResultStore


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(list(args))
    out, err = capsys.readouterr()
    code = info.value.code
    return (code if isinstance(code, int) else 1), out, err


def one_line(err: str) -> str:
    """The single stderr line (never wrapped, no traceback)."""
    lines = err.strip("\n").splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def stored(out: Path) -> list[dict]:
    """The valid records of a store; no key twice among them."""
    records = [r.to_json() for r in ResultStore(out).unique_records()]
    keys = [
        json.loads(line)["key"] for line in (out / "records.jsonl").read_text().splitlines() if line.strip()
    ]
    assert len(keys) == len(set(keys)) or len(records) <= len(keys)
    return records
