"""InfiniteBench records: the official JSONL format, from the Hub, a local directory or the shipped fixture.

A record has the official fields ``id``, ``context``, ``input``, ``answer`` and ``options``. The raw
files give ``answer`` as a string, an integer, a list of strings or a list of integers depending on the
task (why ``load_dataset`` on the repository needs one cast schema: InfiniteBench issue #19);
:func:`normalize_record` brings every form to a list of strings. The hub repository holds one
``<task>.jsonl`` per task: lampe-eval reads that one file (:func:`hub_records`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ... import resources
from ...data import hub
from ...data.sources import HubFiles
from ...errors import LampeEvalError, MissingDataError
from ...resources import Resource
from ..datafiles import Field, Schema, check_records, read_jsonl_lines

OPTION_LETTERS = "ABCD"


@dataclass(frozen=True)
class Record:
    id: str
    context: str
    input: str
    answer: list[str]
    options: list[str] = field(default_factory=list)


def _as_strings(value: object) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        out: list[str] = []
        for item in value:  # math_calc's gold is a list of ints; some files nest it once more
            out.extend(_as_strings(item) if isinstance(item, (list, tuple)) else [str(item)])
        return out
    return [str(value)]


def normalize_record(row: dict[str, Any], index: int) -> Record:
    """One row of a JSONL file or of the Hub dataset as a :class:`Record` (``id`` defaults to the index)."""
    raw_id = row.get("id")
    context = row.get("context")
    if context is None and "content" in row:  # some early files call the field "content"
        context = row["content"]
    return Record(
        id=str(index if raw_id is None else raw_id),
        context=str(context or ""),
        input=str(row.get("input") or ""),
        answer=_as_strings(row.get("answer")),
        options=_as_strings(row.get("options")),
    )


CHOICE_TASKS = ("longbook_choice_eng", "code_debug")


def _four_options(record: Mapping[str, Any]) -> str | None:
    options = record.get("options")
    if not isinstance(options, list) or len(options) < 4:
        count = len(options) if isinstance(options, list) else 0
        return f"InfiniteBench field 'options' must list the 4 choices of this task, got {count}"
    return None


def schema(task: str | None = None) -> Schema:
    """The official record format; the choice tasks need their four ``options``."""
    choice = task in CHOICE_TASKS
    return Schema(
        "InfiniteBench",
        (
            Field("id", (int, str), required=False),
            Field("context", (str,), nonempty=True, aliases=("content",)),
            Field("input", (str,)),
            Field("answer", (list, str, int, float), nonempty=True),
            Field("options", (list,), items=str, required=choice),
        ),
        extra=_four_options if choice else None,
    )


def read_jsonl(path: Resource, task: str | None = None) -> list[Record]:
    """A task's JSONL file, each record checked against the official format (one-line errors naming the
    line and the field)."""
    rows, lines = read_jsonl_lines(path)
    check_records(rows, schema(task), str(path), lines)
    return [normalize_record(row, index) for index, row in enumerate(rows)]


def find_task_file(directory: str | Path, task: str) -> Path | None:
    """``DIR/<task>.jsonl`` or ``DIR/infinitebench/<task>.jsonl`` (the official file names)."""
    root = Path(directory)
    for candidate in (root / f"{task}.jsonl", root / "infinitebench" / f"{task}.jsonl"):
        if candidate.is_file():
            return candidate
    return None


def fixture_file(task: str) -> tuple[str, Resource | None]:
    """The tiny hand-written fixture of a task (package data, official format, a few records per task):
    (its relative name, the file or None)."""
    relative = f"fixtures/infinitebench/{task}.jsonl"
    return relative, resources.find(relative)


def hub_files(dataset: str, task: str) -> HubFiles:
    """The task's one file in the hub repository (not the 12 splits ``load_dataset`` would build, ~2.6 GB)."""
    return HubFiles(dataset, (f"{task}.jsonl",))


def hub_records(dataset: str, task: str, *, offline: bool = False) -> tuple[str, list[Record]] | None:
    """(source label, records) of the task's file from the hub (downloaded into its cache once), checked
    like a local file; ``offline``: from the cache only, None when it is not there."""
    files = hub_files(dataset, task)
    try:
        snapshot = hub.cached(files) if offline else hub.read(files)
    except MissingDataError as err:
        raise MissingDataError(f"infinitebench/{task}: {err}") from err
    if snapshot is None:
        return None
    return snapshot.label(), read_jsonl(snapshot.path(f"{task}.jsonl"), task)


# ----------------------------------------------------------------------------- gold and prompt fields
def gold(task: str, record: Record) -> list[str]:
    """The references the scorer compares with (the official ``get_answer``).

    En.MC and Code.Debug: ``[option text, letter]`` where the letter is the answer's position in ``options``
    (a stored ``[text, letter]`` pair is kept as it is); every other task: the answers as stored.
    """
    if task not in ("longbook_choice_eng", "code_debug"):
        return list(record.answer)
    answer = record.answer
    if len(answer) == 2 and answer[1] in OPTION_LETTERS:
        return list(answer)
    if len(answer) != 1:
        raise LampeEvalError(f"infinitebench/{task} record {record.id}: expected one answer, got {answer!r}")
    if answer[0] not in record.options[:4]:
        raise LampeEvalError(
            f"infinitebench/{task} record {record.id}: answer {answer[0]!r} is not one of the options"
        )
    return [answer[0], OPTION_LETTERS[record.options.index(answer[0])]]


_FUNC_CALL = re.compile(r"func_[0-9]+\(\-?[0-9]+\)")
_MATH_TARGET = re.compile(r"The .+ of")


def template_fields(task: str, record: Record) -> dict[str, str]:
    """The values the task's template is formatted with (the official ``create_prompt``)."""
    fields: dict[str, str] = {"context": record.context, "input": record.input}
    if task in ("longbook_choice_eng", "code_debug"):
        if len(record.options) < 4:
            raise LampeEvalError(f"infinitebench/{task} record {record.id}: needs 4 options")
        for letter, option in zip(OPTION_LETTERS, record.options[:4], strict=True):
            fields[f"OPTION_{letter}"] = option
    if task.startswith("longbook_"):
        fields["question"] = record.input
    if task == "code_run":
        found = _FUNC_CALL.search(record.input)
        if found is None:
            raise LampeEvalError(f"infinitebench/code_run record {record.id}: no func_N(x) call in the input")
        fields["func_call"] = found.group(0)
        fields["func"] = found.group(0).split("(")[0]
    if task == "math_find":
        found = _MATH_TARGET.search(record.input)
        if found is None:
            raise LampeEvalError(f"infinitebench/math_find record {record.id}: no 'The ... of' in the input")
        # e.g. "The largest number of the list is:" -> "the largest number"
        fields["prefix"] = f"What is {found.group(0).lower()[:-3]} in the following list?"
    return fields


def fill_template(template: str, task: str, record: Record) -> str:
    return template.format(**template_fields(task, record))
