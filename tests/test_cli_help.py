"""The commands' help: option lists generated from the registries (filled in when shown), and
``lampe-eval --help`` without importing torch (the registries do)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from lampe_eval.backends import BACKEND_NAMES
from lampe_eval.benchmarks import BENCHMARKS
from lampe_eval.cli import app
from lampe_eval.methods import METHODS
from lampe_eval.models import PRESETS
from lampe_eval.report import REPORT_FORMATS

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()
COMMANDS = ("list", "run", "report", "show-prompt", "show-positions", "fit", "dpe-select")


def help_of(command: str) -> str:
    result = runner.invoke(app, [command, "--help"], terminal_width=400, env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def option_help(command: str) -> dict[str, str]:
    """Each option's help text as shown (its registry lists filled in)."""
    group = typer.main.get_command(app)
    cmd = group.commands[command]  # type: ignore[attr-defined]
    with cmd.make_context(command, ["--help"], resilient_parsing=True) as ctx:
        cmd.get_help(ctx)
    return {p.opts[0]: p.help or "" for p in cmd.params if hasattr(p, "help")}


@pytest.mark.parametrize("command", COMMANDS)
def test_every_help_is_filled_in(command):
    assert not [h for h in option_help(command).values() if "{" in h]
    assert help_of(command)


def test_run_lists_the_registries():
    helps = option_help("run")
    assert all(name in helps["--method"] for name in METHODS.names())
    assert all(name in helps["--bench"] for name in BENCHMARKS.names())
    assert all(name in helps["--model"] for name in PRESETS)
    assert all(name in helps["--backend"] for name in BACKEND_NAMES)


def test_report_lists_its_formats():
    shown = option_help("report")["--format"]
    assert all(name in shown for name in REPORT_FORMATS.names())


def test_top_level_help_imports_no_torch():
    code = (
        "import sys\nfrom lampe_eval.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH')"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("NO-TORCH")
    assert all(command in done.stdout for command in COMMANDS)
