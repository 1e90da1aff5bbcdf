"""``lampe-eval list``: methods (with their parameters), benchmarks (tasks, options) and model presets, as
plain text blocks, rich tables or one JSON document."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Sequence
from typing import Any

import typer
from rich.table import Table

from ..lengths import format_length
from .common import console, fail

LIST_SECTIONS = ("methods", "benchmarks", "models")
# Method parameters are shown for this window and target length (the defaults depend on both).
LIST_WINDOW, LIST_LENGTH = 8192, 16384
# A terminal at least this wide gets rich tables; narrower ones and pipes get plain blocks.
LIST_TABLE_WIDTH = 160

Entry = dict[str, Any]  # one JSON-able entry of the document (values of mixed types)
Document = dict[str, list[Entry]]


def _plain(value: object) -> bool | int | float | str | None:
    """A JSON-able value: numbers, strings, booleans and None as they are; anything else as text."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return float(f"{value:.6g}")
    return str(value)


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()  # as -p/--opt take it
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _params_text(entry: Entry) -> str:
    return ", ".join(f"{k}={_shown(v)}" for k, v in entry["parameters"].items())


def _default_text(option: Entry) -> str:
    return "-" if option["default"] is None else _shown(option["default"])


# ------------------------------------------------------------------------------------ the document
def _method_entries() -> list[Entry]:
    from ..methods import METHODS

    entries = []
    for name in METHODS.names():
        cls = METHODS.get(name)
        params = cls.build(LIST_WINDOW, LIST_LENGTH).params()
        entries.append(
            {
                "name": name,
                "kind": cls.kind,
                "summary": cls.summary,
                "parameters": {k: _plain(v) for k, v in params.items()},
            }
        )
    return entries


def _benchmark_entries() -> list[Entry]:
    from ..benchmarks import BENCHMARKS, get_benchmark

    entries = []
    for name in BENCHMARKS.names():
        bench = get_benchmark(name)
        options = [
            {
                "name": option.name,
                "type": option.type_name(),
                "default": _plain(option.default),
                "changes_results": option.affects_results,
                "help": option.help,
            }
            for option in BENCHMARKS.get(name).options
        ]
        entries.append(
            {"name": name, "summary": bench.summary, "tasks": list(bench.tasks()), "options": options}
        )
    return entries


def _model_entries() -> list[Entry]:
    from ..models import PRESETS

    return [
        {
            "name": preset.name,
            "source": preset.source,
            "pretraining_window": preset.pretraining_window,
            "chat_template": preset.chat_template,
        }
        for preset in PRESETS.values()
    ]


SECTION_ENTRIES = {"methods": _method_entries, "benchmarks": _benchmark_entries, "models": _model_entries}


def list_document(sections: tuple[str, ...] = LIST_SECTIONS) -> Document:
    """What ``lampe-eval list`` shows, as one JSON-able document (``--json``): per section a list of entries
    in registry order. Methods: name, kind, summary, parameters (defaults for an 8K window at 16K).
    Benchmarks: name, summary, tasks, options (name, type, default, changes_results, help). Models:
    name, source, pretraining_window, chat_template."""
    return {section: SECTION_ENTRIES[section]() for section in LIST_SECTIONS if section in sections}


# ---------------------------------------------------------------------------------------- as text
class _Wrapper:
    """Lines of at most ``width`` characters: ``indent`` in front, ``hang`` more on continuation lines."""

    def __init__(self, width: int) -> None:
        self.width = width

    def __call__(self, text: str, indent: str, hang: str = "") -> list[str]:
        return textwrap.wrap(
            text,
            width=self.width,
            initial_indent=indent,
            subsequent_indent=indent + hang,
            break_on_hyphens=False,
        ) or [indent.rstrip()]


def _method_text(entry: Entry, wrap: _Wrapper) -> list[str]:
    return [
        *wrap(f"{entry['name']} ({entry['kind']})", ""),
        *wrap(entry["summary"], "  "),
        *wrap(f"parameters: {_params_text(entry) or '-'}", "  ", "  "),
    ]


def _benchmark_text(entry: Entry, wrap: _Wrapper) -> list[str]:
    lines = [
        *wrap(entry["name"], ""),
        *wrap(entry["summary"], "  "),
        *wrap(f"tasks: {', '.join(entry['tasks'])}", "  ", "  "),
    ]
    if entry["options"]:
        lines.append("  options:")
    for option in entry["options"]:
        changes = "" if option["changes_results"] else "; does not change results"
        head = f"{option['name']}={option['type']} (default {_default_text(option)}{changes})"
        lines += wrap(f"{head}: {option['help']}", "    ", "  ")
    return lines


def _model_text(entry: Entry, wrap: _Wrapper) -> list[str]:
    chat = "chat template" if entry["chat_template"] else "no chat template"
    window = format_length(entry["pretraining_window"])
    return [*wrap(entry["name"], ""), *wrap(f"{entry['source']}; window {window}; {chat}", "  ", "  ")]


SECTION_TEXT = {"methods": _method_text, "benchmarks": _benchmark_text, "models": _model_text}


def list_text(doc: Document, width: int) -> str:
    """Plain text, one block per entry (name, one-line summary, then its details indented), every line
    at most ``width`` characters: readable at 80 columns and through a pipe."""
    wrap = _Wrapper(width)
    window, length = format_length(LIST_WINDOW), format_length(LIST_LENGTH)
    titles = {
        "methods": (
            "METHODS  --method NAME -p key=value",
            f"parameters: the defaults for window {window}, target length {length}",
        ),
        "benchmarks": ("BENCHMARKS  --bench NAME --task T --opt key=value", ""),
        "models": ("MODEL PRESETS  --model NAME", "or a Hugging Face id, a local directory, a .gguf file"),
    }
    lines: list[str] = []
    for section, entries in doc.items():
        if lines:
            lines.append("")
        title, note = titles[section]
        lines += wrap(title, "")
        lines += wrap(note, "") if note else []
        for entry in entries:
            lines.append("")
            lines += SECTION_TEXT[section](entry, wrap)
    return "\n".join(lines) + "\n"


# -------------------------------------------------------------------------------------- as tables
def _table(
    title: str, columns: tuple[str, ...], rows: Sequence[tuple[str, ...]], no_wrap: tuple[str, ...] = ()
) -> Table:
    table = Table(title=title, title_justify="left")
    for column in columns:
        if no_wrap:
            table.add_column(column, no_wrap=column in no_wrap, overflow="fold")
        else:
            table.add_column(column)
    for row in rows:
        table.add_row(*row)
    return table


def _method_tables(entries: list[Entry]) -> list[Table]:
    columns = ("name", "kind", "parameters (defaults for an 8K window at 16K)", "what it does")
    rows = [(e["name"], e["kind"], _params_text(e) or "-", e["summary"]) for e in entries]
    return [_table("Methods", columns, rows)]


def _benchmark_tables(entries: list[Entry]) -> list[Table]:
    rows = [(e["name"], ", ".join(e["tasks"]), e["summary"]) for e in entries]
    options = [
        (
            e["name"],
            o["name"],
            o["type"],
            _default_text(o),
            "yes" if o["changes_results"] else "no",
            o["help"],
        )
        for e in entries
        for o in e["options"]
    ]
    return [
        _table("Benchmarks", ("name", "tasks", "what it measures"), rows),
        _table(
            "Benchmark options (--opt name=value)",
            ("benchmark", "option", "type", "default", "changes results", "what it does"),
            options,
            no_wrap=("benchmark", "option"),
        ),
    ]


def _model_tables(entries: list[Entry]) -> list[Table]:
    columns = ("name", "source", "pretraining window", "chat template")
    rows = [
        (
            e["name"],
            e["source"],
            format_length(e["pretraining_window"]),
            "yes" if e["chat_template"] else "no",
        )
        for e in entries
    ]
    return [_table("Model presets", columns, rows)]


SECTION_TABLES = {"methods": _method_tables, "benchmarks": _benchmark_tables, "models": _model_tables}


def list_tables(doc: Document) -> None:
    """The same document as rich tables (a wide terminal)."""
    for section, entries in doc.items():
        for table in SECTION_TABLES[section](entries):
            console.print(table)


# ------------------------------------------------------------------------------------- the command
def list_command(
    section: str | None = typer.Argument(
        None, help=f"One section only: {', '.join(LIST_SECTIONS[:-1])} or {LIST_SECTIONS[-1]}."
    ),
    as_json: bool = typer.Option(False, "--json", help="One JSON document (for scripts) instead of text."),
) -> None:
    """List methods (with their parameters), benchmarks (with tasks and options) and model presets.

    Plain text, one block per entry, when the output is a pipe or a narrow terminal; tables on a wide
    terminal; --json for scripts.

    Example: lampe-eval list benchmarks
    """
    import json
    import shutil

    if section is not None and section not in LIST_SECTIONS:
        from ..errors import suggestion

        hint = suggestion(section, LIST_SECTIONS)
        fail(f"unknown section {section!r}: choose one of {', '.join(LIST_SECTIONS)}{hint}")
    doc = list_document(LIST_SECTIONS if section is None else (section,))
    if as_json:
        typer.echo(json.dumps(doc, indent=2, ensure_ascii=False))
        return
    width = shutil.get_terminal_size((80, 24)).columns
    if sys.stdout.isatty() and width >= LIST_TABLE_WIDTH:
        list_tables(doc)
        return
    typer.echo(list_text(doc, max(40, min(width, 100))), nl=False)
