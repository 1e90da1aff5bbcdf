"""The documentation says what the code does: every ``docs/*.md`` path named in the package, README.md,
CONTRIBUTING.md and docs/ exists, links between the pages resolve, and every ``lampe-eval`` command line
shown in a code block of README.md or docs/*.md parses (its subcommand's ``--help`` works, its options are
the subcommand's) and, for ``lampe-eval run``, passes ``--dry-run`` (every check before a model loads)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer

from lampe_eval.cli import app, main

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# `lampe-eval run` lines (as `command_lines` gives them) that cannot pass --dry-run here, each with why.
# Empty today: a dry run loads no model and reads no data, so even the lines for GPUs, hub models and the
# reader's own data directories (`--data-dir ~/babi`) pass it.
DRY_RUN_SKIPS: dict[str, str] = {}


def command_lines() -> list[tuple[str, str]]:
    """(page, command) for each ``lampe-eval ...`` line in a shell code block (``\\`` continuations joined,
    comments dropped); output blocks (```text) are not commands."""
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for lang, body in re.findall(r"^```(\w*)\n(.*?)^```", text, flags=re.S | re.M):
            if lang not in ("", "bash", "sh", "shell", "console"):
                continue
            for line in body.replace("\\\n", " ").splitlines():
                line = line.strip().removeprefix("$ ")
                if line.startswith("lampe-eval "):
                    words = shlex.split(line, comments=True)
                    found.append((page.name, shlex.join(words[1:])))
    return found


COMMANDS = command_lines()
RUNS = [cmd for _, cmd in COMMANDS if cmd.startswith("run ")]


def test_the_docs_show_commands():
    subcommands = {cmd.split()[0] for _, cmd in COMMANDS}
    assert {"list", "run", "report", "show-prompt", "show-positions", "fit", "dpe-select"} <= subcommands
    assert len(RUNS) >= 10


def doc_paths() -> set[str]:
    texts = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *(ROOT / "docs").glob("*.md")]
    texts += [p for p in (ROOT / "lampe_eval").rglob("*") if p.suffix in (".py", ".md", ".yaml", ".txt")]
    return {m for p in texts for m in re.findall(r"docs/[\w.-]+\.md", p.read_text(encoding="utf-8"))}


def test_every_docs_path_named_exists():
    named = doc_paths()
    assert "docs/gpu.md" in named
    missing = sorted(path for path in named if not (ROOT / path).is_file())
    assert not missing, missing


def test_links_between_pages_resolve():
    broken = []
    for page in [*PAGES, ROOT / "CONTRIBUTING.md"]:
        for target in re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if "://" not in target and not (page.parent / target).exists():
                broken.append(f"{page.name}: {target}")
    assert not broken, broken


def test_every_page_is_in_the_site_nav():
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert not [p.name for p in (ROOT / "docs").glob("*.md") if f" {p.name}" not in nav]


@pytest.mark.parametrize("subcommand", sorted({cmd.split()[0] for _, cmd in COMMANDS}))
def test_help_of_each_subcommand_used(subcommand, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([subcommand, "--help"])
    assert exit_.value.code == 0, capsys.readouterr()


def test_every_command_line_parses():
    """Each line's options and arguments are its subcommand's (click parses it, nothing runs)."""
    group = typer.main.get_command(app)  # a click group (typer may ship its own click)
    bad = []
    for page, cmd in COMMANDS:
        name, *args = shlex.split(cmd)
        command = group.commands.get(name)  # type: ignore[attr-defined]
        if command is None:
            bad.append(f"{page}: unknown subcommand in {cmd!r}")
            continue
        try:
            command.make_context(name, list(args))
        except Exception as err:  # click's usage errors (typer's own click's too)
            if not hasattr(err, "format_message"):
                raise
            bad.append(f"{page}: {cmd!r}: {err.format_message()}")
    assert not bad, bad


def hub_models(commands: list[str]) -> set[str]:
    """The hub ids of the models the command lines name (their own ids and the presets')."""
    from lampe_eval.models import PRESETS

    ids = {p.source for p in PRESETS.values() if not p.source.startswith("embedded:")}
    for cmd in commands:
        args = shlex.split(cmd)
        for i, arg in enumerate(args[:-1]):
            if arg in ("--model", "-m"):
                ids.update(
                    m for m in args[i + 1].split(",") if "/" in m and not m.startswith((".", "/", "~"))
                )
    return ids


@pytest.mark.parametrize("cmd", sorted(set(RUNS)))
def test_run_lines_pass_a_dry_run(cmd, tmp_path, capsys, monkeypatch, hub_env):
    """Against the local hub (the benchmarks' repositories as the real hub holds them, and a config for every
    hub model the lines name): the dry run's data check finds every source on the hub."""
    if cmd in DRY_RUN_SKIPS:
        pytest.skip(DRY_RUN_SKIPS[cmd])
    for repo in hub_models(RUNS):
        if not hub_env.has_repo(repo, "model"):
            hub_env.add_repo(repo, {"config.json": b'{"model_type": "llama"}'}, repo_type="model")
    # a reader's environment: vLLM's CPU cache at lampe-eval's default (tests/test_vllm.py sets a smaller one)
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    args = shlex.split(cmd)
    if "--out" in args:  # the line's own results directory: under tmp_path instead
        i = args.index("--out")
        del args[i : i + 2]
    with pytest.raises(SystemExit) as exit_:
        main([*args, "--out", str(tmp_path / "out"), "--dry-run", "--no-progress"])
    out = capsys.readouterr()
    assert exit_.value.code == 0, out.err
    assert "job(s) ->" in out.out
