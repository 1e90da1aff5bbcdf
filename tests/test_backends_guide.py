"""docs/backends.md works as written: its backend module is written where a reader would put it (a
directory on the Python path, outside the package), and its run blocks run end to end through
``lampe_eval.evaluate`` with ``imports=``; its command line runs through the CLI."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest

from lampe_eval.backends import BACKENDS
from lampe_eval.cli import main

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "backends.md"


def guide() -> tuple[dict[str, str], list[str], list[str]]:
    """The guide's module files (by name), its run blocks and its command lines."""
    text = GUIDE.read_text()
    files = dict(re.findall(r"<!-- file: (\S+) -->\n```python\n(.*?)```", text, flags=re.S))
    runs = re.findall(r"<!-- run -->\n```python\n(.*?)```", text, flags=re.S)
    commands = re.findall(r"^PYTHONPATH=\. (lampe-eval .*)$", text, flags=re.M)
    return files, runs, commands


@pytest.fixture
def reader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The reader's directory: the module written there, on the Python path, the current directory."""
    files, _, _ = guide()
    assert set(files) == {"constant_backend.py"}
    for name, source in files.items():
        (tmp_path / name).write_text(source)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    try:
        yield tmp_path
    finally:
        BACKENDS.remove("constant")
        sys.modules.pop("constant_backend", None)


def test_the_guide_backend_runs_end_to_end(reader: Path) -> None:
    _, runs, _ = guide()
    assert len(runs) == 2
    scope: dict[str, object] = {}
    for block in runs:  # one reader's session: later blocks use what earlier ones defined
        exec(compile(block, str(GUIDE), "exec"), scope)
    assert (reader / "results" / "constant" / "records.jsonl").is_file()


def test_the_guide_command_line_runs(reader: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, _, commands = guide()
    assert len(commands) == 1
    args = shlex.split(commands[0])[1:]
    with pytest.raises(SystemExit) as exit_:
        main([*args, "--out", str(reader / "cli"), "--no-progress"])
    assert exit_.value.code == 0, capsys.readouterr().err
    records = (reader / "cli" / "records.jsonl").read_text().splitlines()
    assert len(records) == 2 and '"backend": "constant"' in records[0]
