"""`run` with experiment files and runner options, without loading a model (--dry-run, errors)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from lampe_eval.cli import app

ROOT = Path(__file__).resolve().parents[1] / "lampe_eval" / "resources"
runner = CliRunner()


def test_dry_run_of_an_experiment_lists_its_jobs(tmp_path):
    result = runner.invoke(
        app,
        [
            "run",
            "--experiment",
            str(ROOT / "experiments" / "table-ppl-smoke.yaml"),
            "--out",
            str(tmp_path),
            "--dry-run",
            "--limit",
            "3",
        ],
        terminal_width=200,
    )
    assert result.exit_code == 0, result.output
    assert "14 job(s)" in result.output  # 7 methods x 2 lengths
    assert "smollm2-135m | lampe" in result.output and "pg19/pg19 | 4k" in result.output


def test_grid_options_dry_run_and_errors(tmp_path):
    ok = runner.invoke(
        app,
        [
            "run",
            "--import",
            "tests.fakebench",
            "--bench",
            "fake",
            "--len",
            "64,128",
            "--method",
            "rope,selfextend",
            "--out",
            str(tmp_path),
            "--dry-run",
        ],  # fmt: skip
        terminal_width=200,
    )
    assert ok.exit_code == 0, ok.output
    assert "8 job(s)" in ok.output
    missing = runner.invoke(app, ["run", "--len", "4k"])
    assert missing.exit_code != 0 and "--bench is required" in missing.output
    both = runner.invoke(
        app, ["run", "--experiment", str(ROOT / "experiments" / "table-ppl-smoke.yaml"), "--bench", "pg19"]
    )
    assert both.exit_code != 0 and "drop --bench" in both.output
    absent = runner.invoke(app, ["run", "--experiment", str(tmp_path / "nope.yaml")])
    assert absent.exit_code != 0 and "does not exist" in absent.output


def test_help_of_report_has_an_example():
    result = runner.invoke(app, ["report", "--help"], terminal_width=200)
    assert result.exit_code == 0 and "Example:" in result.output
