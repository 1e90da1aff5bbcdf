"""Benchmark data files: the official record formats (:class:`Schema`), their readers (JSON Lines, JSON
arrays, UTF-8 checked, one-line errors naming the file, line and field), the shipped fixtures and the local
files a ``--data-dir`` holds. Which source a job reads is decided elsewhere (``Benchmark.data_sources``;
:mod:`.table_driven` for the benchmarks that read official record files, :mod:`lampe_eval.data.hub` for the
hub's files).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from .. import resources
from ..errors import MissingDataError, clip
from ..options import Option

Record = dict[str, Any]  # one record of a benchmark's official data (a JSON object)

# --opt fixture=true: shared by the benchmarks that ship hand-written fixtures
FIXTURE_OPTION = Option("fixture", bool, False, "the tiny hand-written fixture (smoke tests, not numbers)")


# ----------------------------------------------------------------------------------------- schemas
JSON_NAMES = {dict: "an object", list: "a list", str: "a string", int: "an integer", float: "a number"}


def json_kind(value: object) -> str:
    """How JSON calls the type of ``value`` ("an object", "a list", "null", ...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    return next((name for kind, name in JSON_NAMES.items() if isinstance(value, kind)), type(value).__name__)


@dataclass(frozen=True)
class Field:
    """One field of a benchmark's official record format, and what its value must be."""

    name: str
    types: tuple[type, ...] = (str,)  # accepted JSON types (``type(None)`` for null)
    items: type | None = None  # a list's items must be of this type
    required: bool = True
    nonempty: bool = False  # a string or list that must not be empty
    choices: tuple[str, ...] = ()  # the allowed values
    aliases: tuple[str, ...] = ()  # other names the field goes by in some files

    def expected(self) -> str:
        if self.choices:
            return "one of " + ", ".join(self.choices)
        names = []
        for kind in self.types:
            if kind is list and self.items is not None:
                names.append(f"a list of {JSON_NAMES[self.items].split(' ', 1)[1]}s")
            else:
                names.append("null" if kind is type(None) else JSON_NAMES[kind])
        text = " or ".join(names)
        return f"a non-empty {text.split(' ', 1)[1]}" if self.nonempty else text

    def problem(self, value: object) -> str | None:
        """What is wrong with ``value`` (None: nothing)."""
        ok = any(isinstance(value, kind) and not isinstance(value, bool) for kind in self.types)
        if ok and float in self.types and isinstance(value, int) and not isinstance(value, bool):
            ok = True
        if not ok:
            return f"must be {self.expected()}, got {json_kind(value)}"
        if self.choices and value not in self.choices:
            return f"must be {self.expected()}, got {clip(value)}"
        if isinstance(value, list) and self.items is not None:
            for position, item in enumerate(value):
                if not isinstance(item, self.items) or isinstance(item, bool):
                    return f"must be {self.expected()}, got {json_kind(item)} at position {position}"
        if (
            self.nonempty
            and isinstance(value, (str, list))
            and not (value.strip() if isinstance(value, str) else value)
        ):
            return f"must be {self.expected()}, got an empty {'string' if isinstance(value, str) else 'list'}"
        return None


@dataclass(frozen=True)
class Schema:
    """A benchmark's official record format: its fields, and a check across fields (None: all is well)."""

    label: str  # "LongBench", "L-Eval", ...
    fields: tuple[Field, ...]
    extra: Callable[[Mapping[str, Any]], str | None] | None = None

    def problem(self, record: Mapping[str, Any]) -> str | None:
        """What is wrong with one record, naming the field and what was expected (None: nothing)."""
        for spec in self.fields:
            name = next((n for n in (spec.name, *spec.aliases) if n in record), None)
            if name is None:
                if spec.required:
                    return f"record lacks the {self.label} field {spec.name!r} ({spec.expected()})"
                continue
            problem = spec.problem(record[name])
            if problem:
                return f"{self.label} field {name!r} {problem}"
        return self.extra(record) if self.extra is not None else None


class DataFileError(MissingDataError):
    """A data file that cannot be read or that breaks its benchmark's record format."""


def check_records(
    records: Sequence[Mapping[str, Any]], schema: Schema, where: str, lines: Sequence[int] | None = None
) -> None:
    """Every record against the schema; the first bad one is a one-line error naming the file (or source),
    the line (or record number), the field and what was expected."""
    for index, record in enumerate(records):
        problem = schema.problem(record)
        if problem:
            at = f"{where}:{lines[index]}" if lines is not None else f"{where} record {index}"
            raise DataFileError(f"{at}: {problem}")


# ------------------------------------------------------------------------------------------- reading
def read_text(path: resources.Resource) -> str:
    """A data file's text: UTF-8, with or without a byte-order mark, any line ends; invalid UTF-8 is a
    one-line error naming the line."""
    try:
        data = path.read_bytes()
    except OSError as err:
        raise DataFileError(f"{path}: cannot read it ({err.strerror or err})") from err
    return decode_text(data, str(path))


def decode_text(data: bytes, where: str) -> str:
    """Bytes of a data file (or an archive member) as text: UTF-8, with or without a byte-order mark, any
    line ends; invalid UTF-8 is a one-line error naming the line."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise DataFileError(
            f"{where}:{line}: not valid UTF-8 (byte 0x{data[err.start]:02x}); save the file as UTF-8"
        ) from err
    return text.replace("\r\n", "\n")


def read_jsonl_lines(path: resources.Resource) -> tuple[list[dict[str, Any]], list[int]]:
    """The JSON objects of a JSON Lines file (blank lines skipped) and the line each is on."""
    return parse_jsonl(read_text(path), str(path))


def parse_jsonl(text: str, where: str) -> tuple[list[dict[str, Any]], list[int]]:
    """The JSON objects of JSON Lines text (blank lines skipped) and the line each is on."""
    records: list[dict[str, Any]] = []
    lines: list[int] = []
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise DataFileError(f"{where}:{number}: not valid JSON ({err.msg}, column {err.colno})") from err
        if not isinstance(record, dict):
            raise DataFileError(f"{where}:{number}: expected a JSON object per line, got {json_kind(record)}")
        records.append(record)
        lines.append(number)
    return records, lines


def read_jsonl(path: resources.Resource) -> list[dict[str, Any]]:
    """The JSON objects of a JSON Lines file (blank lines skipped)."""
    return read_jsonl_lines(path)[0]


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at] in " \t\n\r":
        at += 1
    return at


def _line_of(text: str, at: int) -> int:
    return text.count("\n", 0, at) + 1


def _reject_non_array(path: resources.Resource, text: str) -> NoReturn:
    """The one-line error for a ``.json`` file that does not start with an array."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise DataFileError(f"{path}:{err.lineno}: not valid JSON ({err.msg})") from err
    raise DataFileError(f"{path}: expected a JSON array of objects, got {json_kind(value)}")


def _array_object(
    path: resources.Resource, text: str, at: int, decoder: json.JSONDecoder
) -> tuple[dict[str, Any], int]:
    """The JSON object starting at ``at`` and where it ends; anything else is a one-line error."""
    try:
        value, end = decoder.raw_decode(text, at)
    except json.JSONDecodeError as err:
        raise DataFileError(f"{path}:{err.lineno}: not valid JSON ({err.msg})") from err
    if not isinstance(value, dict):
        raise DataFileError(
            f"{path}:{_line_of(text, at)}: expected a JSON array of objects, got {json_kind(value)}"
        )
    return value, end


def read_array_lines(path: resources.Resource) -> tuple[list[dict[str, Any]], list[int]]:
    """The objects of a ``.json`` file holding one JSON array (or JSON Lines), and the line each starts on."""
    text = read_text(path)
    records: list[dict[str, Any]] = []
    lines: list[int] = []
    at = _skip_space(text, 0)
    if text.startswith("{", at):  # a .json file written as JSON Lines (pandas' to_json(lines=True))
        try:
            return parse_jsonl(text, str(path))
        except DataFileError:
            _reject_non_array(path, text)
    if not text.startswith("[", at):
        _reject_non_array(path, text)
    at = _skip_space(text, at + 1)
    if text.startswith("]", at):
        return records, lines
    decoder = json.JSONDecoder()
    while True:
        value, end = _array_object(path, text, at, decoder)
        records.append(value)
        lines.append(_line_of(text, at))
        at = _skip_space(text, end)
        if text.startswith(",", at):
            at = _skip_space(text, at + 1)
            continue
        if text.startswith("]", at) and not text[_skip_space(text, at + 1) :]:
            return records, lines
        raise DataFileError(
            f"{path}:{_line_of(text, at)}: not valid JSON (expected ',' or ']' between records)"
        )


def read_records_lines(path: resources.Resource) -> tuple[list[dict[str, Any]], list[int]]:
    """Records of a data file and their lines: a ``.json`` file holding one JSON array of objects
    (LongBench v2's ``data.json``, BABILong's ``qaN/<length>.json``), anything else JSON Lines."""
    key = None
    if isinstance(path, Path):
        try:
            stat = path.stat()
            if stat.st_size <= CACHED_BYTES:
                key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
        except OSError:
            key = None
    if key is not None and key in _READ:
        records, lines = _READ[key]
        return list(records), lines
    read = read_array_lines(path) if path.name.endswith(".json") else read_jsonl_lines(path)
    if key is not None:  # the checks before loading a model and the job itself read a file once
        _READ.clear()
        _READ[key] = read
    return list(read[0]), read[1]


CACHED_BYTES = 64 << 20  # files up to this size are kept parsed (the last one read)
_READ: dict[tuple[str, int, int], tuple[list[dict[str, Any]], list[int]]] = {}


def read_records(path: resources.Resource, schema: Schema | None = None) -> list[dict[str, Any]]:
    """Records of a data file (see :func:`read_records_lines`), checked against ``schema`` when given."""
    records, lines = read_records_lines(path)
    if schema is not None:
        check_records(records, schema, str(path), lines)
    return records


def fixture_path(benchmark: str, task: str) -> tuple[str, resources.Resource | None]:
    """(relative name, file or None) of a task's hand-written fixture."""
    relative = f"fixtures/{benchmark}/{task}.jsonl"
    return relative, resources.find(relative)


def require_fixture(benchmark: str, task: str) -> resources.Resource:
    """The task's fixture, or a one-line error (checked before any model loads)."""
    relative, path = fixture_path(benchmark, task)
    if path is None:
        raise MissingDataError(f"no {benchmark} fixture for task {task!r} ({relative}, package data)")
    return path


def require_directories(benchmark: str, values: Mapping[str, Any], names: Sequence[str]) -> None:
    """A directory option that is set must name an existing directory (checked before any model loads)."""
    for name in names:
        if values.get(name) is not None and not Path(values[name]).expanduser().is_dir():
            raise MissingDataError(f"{benchmark}: {name}={values[name]} is not a directory")


def find_local_file(
    benchmark: str,
    directory: str | None,
    data_dir: str | None,
    file_names: Sequence[str],
    subdirs: Sequence[str] = (),
) -> Path | None:
    """The first of ``file_names`` in ``directory`` (the benchmark's directory option) or else ``data_dir``,
    looked for in ``<benchmark>/``, the folder itself, then ``subdirs``; None when there is none, a
    one-line error when the directory option names a folder without it."""
    folder = directory or data_dir
    if not folder:
        return None
    root = Path(str(folder)).expanduser()
    for sub in (benchmark, "", *subdirs):
        for name in file_names:
            candidate = root / sub / name if sub else root / name
            if candidate.is_file():
                return candidate
    if directory:
        raise MissingDataError(
            f"{benchmark}_dir={directory}: none of {', '.join(file_names)} found there "
            f"(also looked in {', '.join([benchmark, *subdirs])}/)"
        )
    return None


def read_rows(paths: Sequence[Path], columns: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """The rows of a split's data files, in order: Parquet (``columns``: only those), JSON Lines or JSON
    arrays (the files a hub repository's README declares for a split)."""
    rows: list[dict[str, Any]] = []
    for path in paths:
        if path.suffix == ".parquet":
            rows.extend(_parquet_rows(path, columns))
        else:
            rows.extend(read_records(path))
    return rows


def _parquet_rows(path: Path, columns: Sequence[str] | None) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path, columns=list(columns) if columns else None)
    except Exception as err:  # noqa: BLE001 - a broken or foreign file is one line
        raise DataFileError(f"{path}: cannot read it as Parquet ({type(err).__name__}: {err})") from err
    return list(table.to_pylist())
