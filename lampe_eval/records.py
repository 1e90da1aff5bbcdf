"""The record of one evaluated sample: its type, its JSON form, what a stored record must hold, and the
readers of a records file. Below both the runner (which writes records: :mod:`lampe_eval.runner.store`)
and the reports (which read them), so neither imports the other.

One line of ``records.jsonl`` is ``SampleRecord.to_json()``; :func:`check_record` (derived from the type)
says why a line cannot be used, so readers skip a damaged record with a warning, never a traceback.
Readers ignore fields they do not know. Schema 1 (records without ``schema_version``) called the resolved
method parameters ``method_params`` and had no ``engine``: :meth:`SampleRecord.from_json` reads both.

**What made a number** (``engine``): the backend and its version, dtype, device, attention kernel and the
batch-size setting. :func:`engine_identity` is the part that changes results; a run reuses a stored
record only when its sample fingerprint *and* its engine identity are those of the run (a mismatch is
recomputed, and the run says so in one line).

**Reading** (:func:`read_records`): readers skip lines that are not JSON objects (a line torn by a killed
writer) and records whose fields have the wrong type, and count what they skipped (:class:`Problems`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import types
import typing
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import LampeEvalError
from .settings import DEFAULT_BACKEND

SCHEMA_VERSION = 2
RENAMED = {"method_params": "resolved_params"}  # schema 1 name -> schema 2 name


@dataclass(frozen=True)
class SampleRecord:
    """One evaluated sample (see the module docstring; field order is the JSON order)."""

    key: str  # <job_key>:<sample_id>
    job_key: str
    sample_id: str | int
    index: int  # position of the sample in the benchmark's order
    model: str
    method: str
    benchmark: str
    task: str
    length: int  # target context length in tokens
    scores: dict[str, float]  # per-sample metrics; the first key is the headline
    resolved_params: dict[str, Any] = field(default_factory=dict)  # every parameter as the method ran
    method_label: str = ""
    variant_params: dict[str, Any] = field(default_factory=dict)  # those set explicitly: the variant's name
    seed: int = 0
    limit: int | None = None
    options: dict[str, Any] = field(default_factory=dict)  # the benchmark options of the job
    data_dir: str | None = None
    sample_fingerprint: str | None = None  # the sample as built (prompt or ids, references, meta, tokenizer)
    prompt_tokens: int | None = None  # tokens actually given to the model
    prompt_hash: str | None = None  # what the model received (``show-prompt`` prints the same hash)
    prompt_excerpt: dict[str, Any] | None = None  # {"head", "tail", "chars"}
    references: list[Any] = field(default_factory=list)
    output: dict[str, Any] = field(default_factory=dict)  # the benchmark's raw output
    seconds: float = 0.0  # the sample's share of the time of its batches
    batch_size: int = 1  # the largest batch its requests ran in
    time: float = 0.0  # unix time of the write
    git: str = "unknown"
    versions: dict[str, str] = field(default_factory=dict)
    worker: str = ""
    device: str = ""
    engine: dict[str, Any] | None = None  # what made the number (see engine_identity)
    meta: dict[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SampleRecord:
        """A record of any schema (unknown fields dropped, schema 1 names renamed); check it first."""
        values = {RENAMED.get(k, k): v for k, v in data.items()}
        values.setdefault("schema_version", 1)
        return cls(**{k: v for k, v in values.items() if k in _FIELDS})


_FIELDS = frozenset(f.name for f in dataclasses.fields(SampleRecord))


def resolved_params(record: Mapping[str, Any]) -> dict[str, Any]:
    """The method parameters a stored record ran with, of either schema."""
    return dict(record.get("resolved_params") or record.get("method_params") or {})


@functools.cache
def _hints() -> dict[str, Any]:
    """The record's field types (evaluated once: every stored record is checked against them)."""
    return typing.get_type_hints(SampleRecord)


def _matches(value: Any, annotation: Any) -> bool:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, a) for a in args)
    if annotation is type(None):
        return value is None
    if annotation is Any:
        return True
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin is dict:
        if not isinstance(value, dict):
            return False
        return args[1] is Any or all(_matches(v, args[1]) for v in value.values())
    if origin is list:
        return isinstance(value, list)
    return isinstance(value, annotation)


WHAT = {  # how a message names the expected type
    "scores": "map metric names to numbers",
    "index": "be a non-negative integer",
    "length": "be a non-negative integer",
    "sample_id": "be a string",
}


def check_record(record: Mapping[str, Any]) -> str | None:
    """Why a stored record cannot be used (a required field missing, a field of the wrong type), or None.
    Every field the runner and the reports read is checked."""
    values = {RENAMED.get(k, k): v for k, v in record.items()}
    hints = _hints()
    for spec in dataclasses.fields(SampleRecord):
        required = spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING
        if spec.name not in values:
            if required:
                return f"{spec.name!r} must {WHAT.get(spec.name, 'be present')}, got None"
            continue
        value = values[spec.name]
        negative = spec.name in ("index", "length") and isinstance(value, int) and value < 0
        if negative or not _matches(value, hints[spec.name]):
            expected = WHAT.get(spec.name) or f"be {_describe(hints[spec.name])}"
            return f"{spec.name!r} must {expected}, got {value!r}"[:200]
    return None


def _describe(annotation: Any) -> str:
    names = {str: "a string", int: "an integer", float: "a number", dict: "an object", list: "a list"}
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in args if a is not type(None)) + " (or null)"
    return names.get(origin or annotation, str(annotation))


# ------------------------------------------------------------------------------------ engine identity
def engine_identity(engine: Mapping[str, Any] | None, device: str | None = None) -> str:
    """The part of what made a number that changes it: backend, dtype, device type, attention kernel and,
    on CUDA (where the kernels' reduction order depends on it), the batch-size setting; for an engine
    other than transformers (vLLM), its release and settings. Records written
    before engines were recorded (schema 1) are ``legacy:<device type>``: the engine the defaults gave."""
    if not engine:
        return f"legacy:{(device or 'cpu').split(':')[0]}"
    device_type = str(engine.get("device", device or "cpu")).split(":")[0]
    parts = [str(engine.get("backend")), str(engine.get("dtype")), device_type, str(engine.get("kernel"))]
    if device_type == "cuda":
        parts.append(f"batch={engine.get('batch_size', 1)}")
    if engine.get("backend") not in (
        None,
        DEFAULT_BACKEND,
    ):  # an engine of its own: its release and settings too
        parts += [str(engine.get("backend_version")), str(engine.get("settings"))]
    return "/".join(parts)


# what an engine of its own (vLLM, a server) recorded as its kernel before the engine's kernel choice was
# spelled out in records (kernels.KernelChoice.label): the automatic choice then too
EARLIER_ENGINE_KERNEL = "vllm-lampe"


def earlier_identity(engine: Mapping[str, Any]) -> str | None:
    """The identity records of ``engine`` carried before its kernels were spelled out, or None."""
    kernel = engine.get("kernel")
    if engine.get("backend") in (None, DEFAULT_BACKEND) or kernel in (None, "-", EARLIER_ENGINE_KERNEL):
        return None
    return engine_identity({**engine, "kernel": EARLIER_ENGINE_KERNEL})


def describe_identity(identity: str) -> str:
    """One short phrase for messages: ``hf/float32/cpu/cpu`` -> ``hf, float32, cpu, kernel cpu``."""
    if identity.startswith("legacy:"):
        return f"an earlier lampe-eval's defaults on {identity.split(':', 1)[1]}"
    backend, dtype, device, kernel, *rest = identity.split("/")
    return ", ".join([backend, dtype, device, f"kernel {kernel}", *rest])


@dataclass(frozen=True)
class StoredSample:
    """What a resume compares of a stored record: the sample it was computed on and the engine."""

    fingerprint: str | None
    engine: str

    @classmethod
    def of(cls, record: SampleRecord) -> StoredSample:
        return cls(record.sample_fingerprint, engine_identity(record.engine, record.device))

    def reusable(self, fingerprint: str, engines: Collection[str]) -> bool:
        """The same sample, made by one of ``engines`` (the identities that give this run's numbers)."""
        return self.fingerprint == fingerprint and self.engine in engines


# ------------------------------------------------------------------------------------ the records file
RECORDS_FILE = "records.jsonl"


class StoreError(LampeEvalError):
    """The results directory cannot be written or read (a file where a directory belongs, no space, I/O)."""


@dataclass
class Problems:
    """What a reader skipped: unreadable lines (torn by a kill, or garbage) and records with a field of
    the wrong type (the first reason is kept, with its line number)."""

    lines: int = 0  # lines read
    unreadable: int = 0
    invalid: int = 0
    first_invalid: str = ""

    def note_invalid(self, line: int, reason: str) -> None:
        self.invalid += 1
        if not self.first_invalid:
            self.first_invalid = f"line {line}: {reason}"

    def summary(self) -> str | None:
        """One line, or None when nothing was skipped."""
        parts = []
        if self.unreadable:
            parts.append(f"{self.unreadable} unreadable line(s)")
        if self.invalid:
            parts.append(f"{self.invalid} record(s) with a field of the wrong type ({self.first_invalid})")
        return "skipped " + " and ".join(parts) if parts else None


def parse_line(line: bytes) -> dict[str, object] | None:
    """The JSON object of one line, or None (a torn line from a killed writer, or garbage)."""
    try:
        record = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return record if isinstance(record, dict) else None


def iter_records(path: Path, problems: Problems | None = None) -> Iterator[dict[str, object]]:
    """Every parsable line of a JSONL file as it is written (unchecked), in file order (torn lines skipped,
    and counted in ``problems`` when given)."""
    if not path.exists():
        return
    if not path.is_file():
        raise StoreError(f"{path} is a directory, not a file: move it out of the way")
    with path.open("rb") as handle:
        for raw in handle:
            line = raw.strip()
            if not line:
                continue
            if problems is not None:
                problems.lines += 1
            record = parse_line(line)
            if record is None:
                if problems is not None:
                    problems.unreadable += 1
                continue
            yield record


def valid_records(path: Path, problems: Problems | None = None) -> Iterator[dict[str, object]]:
    """The lines of a JSONL file that pass :func:`check_record` (the others counted in ``problems``)."""
    problems = problems if problems is not None else Problems()
    for record in iter_records(path, problems):
        reason = check_record(record)
        if reason is None:
            yield record
        else:
            problems.note_invalid(problems.lines, reason)


def read_records(path: Path, problems: Problems | None = None) -> Iterator[SampleRecord]:
    """The valid records of a records file, typed (of either schema), in file order."""
    for data in valid_records(path, problems):
        yield SampleRecord.from_json(data)


def last_per_key(records: Iterable[SampleRecord]) -> dict[str, SampleRecord]:
    """One record per key, the last one written winning, in the order the winners were written."""
    by_key: dict[str, SampleRecord] = {}
    for record in records:
        by_key.pop(record.key, None)
        by_key[record.key] = record
    return by_key
