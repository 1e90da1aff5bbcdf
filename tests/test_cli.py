import pytest
from typer.testing import CliRunner

from lampe_eval.cli import app

runner = CliRunner()


def test_list_prints_presets_methods_and_benchmarks(monkeypatch):
    from rich.console import Console

    import lampe_eval.cli

    monkeypatch.setattr(lampe_eval.cli, "console", Console(width=250))
    result = runner.invoke(app, ["list"], terminal_width=200)
    assert result.exit_code == 0, result.output
    for name in ("smollm2-135m", "llama3.1-8b-instruct", "qwen2-7b-instruct", "lampe", "selfextend", "dca"):
        assert name in result.output


def test_bad_length_is_a_one_line_error():
    result = runner.invoke(app, ["run", "--bench", "pg19", "--len", "64q"])
    assert result.exit_code != 0
    lines = [line for line in result.output.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "bad length" in lines[0]


def test_unknown_model_is_a_one_line_error():
    result = runner.invoke(app, ["run", "--model", "gpt-17", "--bench", "pg19", "--len", "4k"])
    assert result.exit_code != 0
    lines = [line for line in result.output.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "unknown model 'gpt-17'" in lines[0]


def test_unknown_method_is_an_error():
    result = runner.invoke(app, ["run", "--method", "magic", "--bench", "pg19", "--len", "4k"])
    assert result.exit_code != 0
    assert "unknown method 'magic'" in result.output


@pytest.mark.parametrize("command", ["list", "run"])
def test_help_has_an_example(command):
    result = runner.invoke(app, [command, "--help"], terminal_width=200)
    assert result.exit_code == 0
    assert "Example:" in result.output
