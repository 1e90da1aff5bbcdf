"""``lampe-eval import``: predictions made by another harness, read into a results store as ordinary
records, scored by lampe-eval's own scorers.

A file's format is recognised from the keys of its first JSON line among the prediction files the
benchmark declares (``prediction_files``: RULER's, LongBench's, LongBench v2's and InfiniteBench's
official outputs, :mod:`lampe_eval.benchmarks.predictions`), or given (and any recognised one amended)
with ``--field NAME=KEY``: ``prediction``, ``references``, ``id``, ``score`` (the file's own score),
``prompt`` (the input text), ``prompt_tokens``, and any other NAME: a sample meta key the scorer reads
(``--field question=input``). Each prediction is scored with
:meth:`~lampe_eval.benchmarks.base.Benchmark.score_prediction`.

**What marks a record as imported.** Its ``engine`` is ``{"backend": "import", "file": <path>, "sha256":
<the file's hash>, "format": <its format>}``, its job key is its own (``import`` + model, method,
benchmark, task, length: never a run's job, so a run never resumes from it), and its variant is
``{"source": "import"}``: in a report beside lampe-eval's own run of the same method it is a row of its
own (``rope(source=import)``), paired with it on the sample ids both have; alone it reads as the method.
The file's own score, where it has one, is kept in ``meta["file_score"]`` next to lampe-eval's.
Importing the same file again adds nothing (records of the same key, file and scores are skipped); an
updated file replaces the records of its sample ids (last written wins, as in any store).
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..benchmarks.base import BENCHMARKS, Benchmark, Sample
from ..benchmarks.predictions import MISSING, PredictionFile, as_prediction, as_references, lookup
from ..errors import LampeEvalError
from ..lengths import format_length
from ..records import RECORDS_FILE, SampleRecord, parse_line
from ..runner.store import ResultStore
from .rescore import same_scores

BACKEND = "import"  # the engine's backend of every imported record
VARIANT = {"source": "import"}  # its variant: a row of its own beside a run of the same method
FIELD_NAMES = ("prediction", "references", "id", "score", "prompt", "prompt_tokens")  # others: meta keys
FIELD_HELP = (
    "--field prediction=KEY --field references=KEY (and, if the file has them, --field id=KEY, "
    "--field score=KEY, --field prompt_tokens=KEY, --field NAME=KEY for a meta key the scorer reads)"
)


@dataclass(frozen=True)
class ImportRequest:
    files: tuple[Path, ...]
    benchmark: str
    task: str
    length: int
    model: str
    method: str
    out: Path
    fields: Mapping[str, str] = field(default_factory=dict)
    skip_bad_lines: bool = False


@dataclass
class FileRead:
    """What one file gave."""

    path: Path
    format: str
    sha256: str
    predictions: int = 0
    bad_lines: int = 0
    first_bad: str = ""
    score_key: str | None = None  # the file's own score


@dataclass(frozen=True)
class Prediction:
    """One line, converted and scored."""

    sample_id: str
    prediction: str
    references: list[str]
    meta: dict[str, Any]
    prompt_tokens: int | None
    prompt_excerpt: dict[str, Any] | None
    file_score: Any
    scores: dict[str, float]


@dataclass
class ImportOutcome:
    store: Path
    files: list[FileRead]
    written: int = 0
    already: int = 0  # the same records were in the store
    samples: int = 0
    score_key: str | None = None  # the file's own score, where it has one
    compared: int = 0  # samples whose own score could be compared with lampe-eval's
    differing: int = 0
    task_score: dict[str, float] = field(default_factory=dict)

    @property
    def bad_lines(self) -> int:
        return sum(f.bad_lines for f in self.files)


class LineError(Exception):
    """Why one line of a prediction file cannot be imported (a bad line: an error, or skipped)."""


def check_request(request: ImportRequest) -> Benchmark:
    """Everything that can be checked before a file is read: one line each."""
    bench = BENCHMARKS.get(request.benchmark)()  # an unknown name: one line with the closest one
    bench.check_task(request.task)
    if bench.loss_only or not bench.rescorable:
        raise LampeEvalError(f"{bench.name} scores no predictions made elsewhere: nothing to import")
    for what, value in (("--model", request.model), ("--method", request.method)):
        if not value.strip():
            raise LampeEvalError(f"{what} must name the model or method the predictions came from")
    if request.length <= 0:
        raise LampeEvalError(f"--len must be positive, got {request.length}")
    if not request.files:
        raise LampeEvalError("name at least one prediction file")
    for path in request.files:
        if not path.is_file():
            what = "is a directory, not a file" if path.is_dir() else "does not exist"
            raise LampeEvalError(f"prediction file {path} {what}")
    for name, key in request.fields.items():
        if not key:
            raise LampeEvalError(f"--field {name}= names no key of the file")
    return bench


def import_key(request: ImportRequest) -> str:
    """The job key of imported records: theirs alone (a run's job never has it)."""
    ident = {
        "import": True,
        "model": request.model,
        "method": request.method,
        "benchmark": request.benchmark,
        "task": request.task,
        "length": request.length,
    }
    return hashlib.sha1(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]


def import_predictions(request: ImportRequest, echo: Callable[[str], None] | None = None) -> ImportOutcome:
    """Read, convert and score every file (a bad line is an error, or skipped and counted), then append
    the records to ``request.out``; nothing is written when a file fails."""
    bench = check_request(request)
    reads: list[FileRead] = []
    predictions: list[tuple[FileRead, int, Prediction]] = []
    seen: dict[str, str] = {}
    for path in request.files:
        read, items = read_file(path, bench, request.task, request.fields, request.skip_bad_lines, seen)
        reads.append(read)
        predictions.extend((read, line, item) for line, item in items)
        if echo:
            skipped = f", {read.bad_lines} bad line(s) skipped ({read.first_bad})" if read.bad_lines else ""
            echo(f"read {path}: {read.format}, {read.predictions} prediction(s){skipped}")
    if not predictions:
        raise LampeEvalError(f"no predictions in {', '.join(str(p) for p in request.files)}")
    outcome = ImportOutcome(store=request.out / RECORDS_FILE, files=reads, samples=len(predictions))
    outcome.score_key = next((r.score_key for r in reads if r.score_key), None)
    store = ResultStore(request.out)
    job_key = import_key(request)
    stored = {r.key: r for r in store.unique_records() if r.job_key == job_key}
    from ..runner.worker import git_revision, library_versions

    revision, versions = git_revision(), library_versions()
    for index, (read, line, item) in enumerate(predictions):
        record = make_record(request, job_key, index, read, line, item, revision, versions)
        old = stored.get(record.key)
        if old is not None and _same_import(old, record):
            outcome.already += 1
        else:
            store.append(record)
            outcome.written += 1
        compare_own_score(outcome, item)
    outcome.task_score = bench.aggregate(request.task, [item.scores for _, _, item in predictions])
    return outcome


def _same_import(old: SampleRecord, new: SampleRecord) -> bool:
    def engine_file(record: SampleRecord) -> Any:
        return (record.engine or {}).get("sha256")

    same = engine_file(old) == engine_file(new) and old.output == new.output
    return same and same_scores(old.scores, new.scores) and old.references == new.references


def compare_own_score(outcome: ImportOutcome, item: Prediction) -> None:
    """Count the samples whose file score differs from lampe-eval's headline (a boolean is 0 or 100,
    a number is read on lampe-eval's 0-100 scale)."""
    own = item.file_score
    if own is MISSING or own is None or not item.scores:
        return
    if isinstance(own, bool):
        value = 100.0 * own
    elif isinstance(own, (int, float)):
        value = float(own)
    else:
        return
    outcome.compared += 1
    ours = next(iter(item.scores.values()))
    if not math.isclose(value, ours, rel_tol=1e-9, abs_tol=1e-6):
        outcome.differing += 1


def make_record(
    request: ImportRequest,
    job_key: str,
    index: int,
    read: FileRead,
    line: int,
    item: Prediction,
    revision: str,
    versions: dict[str, str],
) -> SampleRecord:
    engine = {"backend": BACKEND, "file": str(read.path), "sha256": read.sha256, "format": read.format}
    return SampleRecord(
        key=f"{job_key}:{item.sample_id}",
        job_key=job_key,
        sample_id=item.sample_id,
        index=index,
        model=request.model,
        method=request.method,
        benchmark=request.benchmark,
        task=request.task,
        length=request.length,
        scores=item.scores,
        method_label=request.method,
        variant_params=dict(VARIANT),
        prompt_tokens=item.prompt_tokens,
        prompt_excerpt=item.prompt_excerpt,
        references=item.references,
        output={"prediction": item.prediction},
        time=time.time(),
        git=revision,
        versions=versions,
        worker=BACKEND,
        engine=engine,
        meta={**item.meta, "import_line": line},
    )


# ---------------------------------------------------------------------------------------- reading files
def read_file(
    path: Path,
    bench: Benchmark,
    task: str,
    fields: Mapping[str, str],
    skip_bad_lines: bool,
    seen: dict[str, str],
) -> tuple[FileRead, list[tuple[int, Prediction]]]:
    """The predictions of one file, with their line numbers; ``seen`` (sample id -> where) across files."""
    digest = hashlib.sha256()
    read = FileRead(path=path, format="", sha256="")
    fmt: PredictionFile | None = None
    out: list[tuple[int, Prediction]] = []
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, 1):
            digest.update(raw)
            if not raw.strip():
                continue
            try:
                data = parse_line(raw.strip())
                if data is None:
                    raise LineError("not a JSON object")
                if fmt is None:
                    fmt = recognise(path, number, data, bench, fields)
                    read.format, read.score_key = fmt.name, fmt.score
                item = convert(fmt, data, number, bench, task)
                where = f"{path}:{number}"
                if item.sample_id in seen:
                    raise LineError(f"sample id {item.sample_id!r} again (first at {seen[item.sample_id]})")
                seen[item.sample_id] = where
            except LineError as err:
                reason = f"line {number}: {err}"
                if not skip_bad_lines:
                    raise LampeEvalError(f"{path}: {reason} (--skip-bad-lines skips such lines)") from None
                read.bad_lines += 1
                read.first_bad = read.first_bad or reason
                continue
            out.append((number, item))
    read.sha256 = digest.hexdigest()
    read.predictions = len(out)
    read.format = read.format or "no prediction"
    return read, out


def recognise(
    path: Path, line: int, data: Mapping[str, Any], bench: Benchmark, fields: Mapping[str, str]
) -> PredictionFile:
    """The file's format, from its first JSON line: one the benchmark declares whose keys it has, amended
    by ``fields``; or ``fields`` alone. An unknown shape without ``fields`` is one line naming its keys."""
    known = [f for f in bench.prediction_files if f.recognises(data)]
    base = max(known, key=lambda f: len(f.required)) if known else None
    keys = ", ".join(sorted(map(str, data))[:24])
    if base is None and not fields:
        declared = "; ".join(f.describe() for f in bench.prediction_files) or "none"
        elsewhere = [
            f"{f.name}: --bench {name}"
            for name in BENCHMARKS.names()
            if name != bench.name
            for f in BENCHMARKS.get(name).prediction_files
            if f.recognises(data)
        ]
        looks = f"; it looks like {elsewhere[0]}" if elsewhere else ""
        raise LampeEvalError(
            f"{path}: line {line} has keys {keys}: not a prediction file lampe-eval knows for {bench.name} "
            f"(known: {declared}){looks}; map its keys with {FIELD_HELP}"
        )
    for name, key in fields.items():
        if lookup(data, key) is MISSING:
            raise LampeEvalError(
                f"--field {name}={key}: {path} line {line} has no key {key!r} (its keys: {keys})"
            )
    return with_fields(base, fields, path)


def with_fields(base: PredictionFile | None, fields: Mapping[str, str], path: Path) -> PredictionFile:
    """``base`` (or nothing) with the ``--field`` mapping applied."""
    values = {name: key for name, key in fields.items() if name in FIELD_NAMES}
    meta = dict(base.meta if base else ())
    meta.update({name: key for name, key in fields.items() if name not in FIELD_NAMES})
    prediction = values.get("prediction") or (base.prediction if base else "")
    references = values.get("references") or (base.references if base else "")
    if not prediction or not references:
        missing = [n for n, v in (("prediction", prediction), ("references", references)) if not v]
        given = " ".join(f"--field {n}={k}" for n, k in fields.items())
        raise LampeEvalError(
            f"{path}: {given} maps no {' and no '.join(missing)}: pass "
            + " ".join(f"--field {n}=KEY" for n in missing)
        )
    if not fields:
        assert base is not None
        return base
    mapped = ", ".join(f"{n}={k}" for n, k in fields.items())
    return PredictionFile(
        name=f"{base.name} with --field {mapped}" if base else f"--field {mapped}",
        prediction=prediction,
        references=references,
        keys=base.keys if base else (),
        sample_id=(values["id"],) if "id" in values else (base.sample_id if base else ()),
        meta=tuple(meta.items()),
        prompt=values.get("prompt") or (base.prompt if base else None),
        prompt_tokens=values.get("prompt_tokens") or (base.prompt_tokens if base else None),
        score=values.get("score") or (base.score if base else None),
    )


def convert(
    fmt: PredictionFile, data: Mapping[str, Any], line: int, bench: Benchmark, task: str
) -> Prediction:
    """One line as a scored prediction; a line without what the format needs is a :class:`LineError`."""
    prediction = lookup(data, fmt.prediction)
    if prediction is MISSING:
        raise LineError(f"no {fmt.prediction!r} (the prediction)")
    references = lookup(data, fmt.references)
    if references is MISSING or references is None:
        raise LineError(f"no {fmt.references!r} (the references)")
    ids = [lookup(data, key) for key in fmt.sample_id]
    found = [v for v in ids if v is not MISSING and v is not None and not isinstance(v, (dict, list))]
    sample_id = str(found[0]) if found else str(line)
    meta = {key: value for key, source in fmt.meta if (value := lookup(data, source)) is not MISSING}
    tokens = lookup(data, fmt.prompt_tokens) if fmt.prompt_tokens else None
    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
        tokens = None
    prompt = lookup(data, fmt.prompt) if fmt.prompt else MISSING
    excerpt = Sample("", task, prompt).prompt_excerpt() if isinstance(prompt, str) else None
    own = lookup(data, fmt.score) if fmt.score else MISSING
    if own is not MISSING:
        meta["file_score"] = own
        meta["file_score_key"] = fmt.score
    text, golds = as_prediction(prediction), as_references(references)
    try:
        scores = bench.score_prediction(task, text, golds, meta)
    except (LampeEvalError, KeyError, TypeError, ValueError, IndexError, ArithmeticError) as err:
        raise LineError(f"cannot score it: {type(err).__name__}: {str(err)[:120]}") from None
    return Prediction(sample_id, text, golds, meta, tokens, excerpt, own, scores)


def describe_job(request: ImportRequest) -> str:
    """``ruler/niah_single_1 at 4k (model M, method NAME)``."""
    return (
        f"{request.benchmark}/{request.task} at {format_length(request.length)} "
        f"(model {request.model}, method {request.method})"
    )
