"""Append-only per-sample results (JSON Lines), safe against a kill at any moment.

Each record is written as one line with a single ``write`` + ``flush`` + ``fsync``, under an
exclusive ``flock`` so that several worker processes can append to the same file. A process killed
mid-write can leave at most one torn line: readers skip it and the next writer starts on a fresh
line, so a crash loses at most the sample in flight and never corrupts finished ones. The lock is
released by the kernel when its holder dies.

One line is one :class:`~lampe_eval.records.SampleRecord` (its type is the schema; readers ignore
fields they do not know; :mod:`lampe_eval.records` reads the file for the reports too). What a resume
compares of a stored record is its sample fingerprint and its engine identity
(:class:`~lampe_eval.records.StoredSample`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from ..records import (
    RECORDS_FILE,
    Problems,
    SampleRecord,
    StoredSample,
    StoreError,
    check_record,
    iter_records,
    last_per_key,
    parse_line,
    read_records,
    valid_records,
)

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: single writer only
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "RECORDS_FILE",
    "Problems",
    "ResultStore",
    "StoreError",
    "iter_records",
    "store_error",
    "valid_records",
]


class ResultStore:
    """``<directory>/records.jsonl``. ``load=False`` skips reading the file (append-only workers).

    The finished samples (job key -> sample id -> sample fingerprint) are read once and then
    incrementally (:meth:`refresh`): other processes may append to the same file."""

    def __init__(self, directory: str | Path, *, load: bool = True) -> None:
        self.directory = Path(directory)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise store_error(self.directory / RECORDS_FILE, err) from err
        self.path = self.directory / RECORDS_FILE
        self.problems = Problems()
        self._offset = 0
        self._inode: int | None = None
        self._keys: set[str] = set()
        self._done: dict[str, dict[str, StoredSample]] = defaultdict(dict)
        if load:
            self.refresh()

    def refresh(self) -> None:
        """Read the complete lines appended since the last read."""
        if not self.path.exists():
            return
        if not self.path.is_file():
            raise StoreError(
                f"{self.path} is a directory, not a file: move it out of the way "
                "(the results of a run are appended to that file)"
            )
        with self.path.open("rb") as handle:
            inode = os.fstat(handle.fileno()).st_ino
            if inode != self._inode:  # the file was rewritten in place (rescore): read it again
                self._inode, self._offset, self.problems = inode, 0, Problems()
            handle.seek(self._offset)
            for raw in handle:
                if not raw.endswith(b"\n"):
                    break  # a line still being written (or torn at the end): read it next time
                self._offset += len(raw)
                self._read_line(raw.strip())

    def _read_line(self, line: bytes) -> None:
        if not line:
            return
        self.problems.lines += 1
        data = parse_line(line)
        if data is None:
            self.problems.unreadable += 1
            return
        reason = check_record(data)
        if reason is not None:
            self.problems.note_invalid(self.problems.lines, reason)
            return
        record = SampleRecord.from_json(data)
        self._keys.add(record.key)
        self._done[record.job_key][str(record.sample_id)] = StoredSample.of(record)

    def records(self) -> Iterator[dict[str, object]]:
        """Every parsable line in file order as written (unchecked; duplicates included): the file's
        raw content. The typed records are :meth:`unique_records`."""
        return iter_records(self.path)

    def unique_records(self) -> list[SampleRecord]:
        """One valid record per key (the last one written wins)."""
        return list(last_per_key(read_records(self.path)).values())

    def done_by_job(self) -> dict[str, set[str]]:
        """job key -> finished sample ids."""
        return {job: set(samples) for job, samples in self._done.items()}

    def fingerprints(self, job_key: str) -> dict[str, StoredSample]:
        """sample id -> the sample its stored record was computed on (fingerprint; None: a record written
        before fingerprints existed) and the engine that computed it."""
        return dict(self._done.get(job_key, {}))

    def is_done(self, key: str) -> bool:
        return key in self._keys

    def __len__(self) -> int:
        return len(self._keys)

    def append(self, record: SampleRecord) -> None:
        """Append one record (one locked write + fsync). A failed write (no space left, an I/O error) is cut
        back off the file, so the store keeps only whole records, and is one line naming the file."""
        self.append_json(record.to_json())

    def append_json(self, record: Mapping[str, Any]) -> None:
        """Append one line as it is given (:meth:`append` of a record's JSON form; tests write damaged or
        old-schema lines with it)."""
        line = record_line(record)
        with _locked_file(self.path) as fd:
            size = os.fstat(fd).st_size
            try:
                if size > 0 and os.pread(fd, 1, size - 1) != b"\n":
                    line = b"\n" + line  # after a torn line, start clean
                view = memoryview(line)
                while view:
                    written = os.write(fd, view)
                    view = view[written:]
                os.fsync(fd)
            except OSError as err:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, size)  # no partial record left behind
                raise store_error(self.path, err) from err
        self._keys.add(record["key"])


def record_line(record: Mapping[str, Any]) -> bytes:
    """One record as the store writes it: one JSON line."""
    return (json.dumps(record, ensure_ascii=False, sort_keys=True, default=str) + "\n").encode("utf-8")


def rewrite_records(
    path: Path, update: Callable[[dict[str, Any]], Mapping[str, Any] | None], problems: Problems | None = None
) -> int:
    """Rewrite a records file in place, atomically: each line that is a valid record (:func:`check_record`)
    is given to ``update``, whose answer (None: unchanged) replaces it; every other line (unreadable,
    invalid, superseded or not) is kept byte for byte, in its place. The whole file is read and the new one
    written beside it (fsynced) and put in place with ``os.replace`` while the store's lock is held, so
    no append is lost: an appender waiting for the lock finds the file replaced and appends to the new one,
    and a reader sees the old file or the new one, never a mix. Returns the number of lines replaced."""
    replaced = 0
    with _locked_file(path) as fd:
        chunks: list[bytes] = []
        with os.fdopen(os.dup(fd), "rb") as handle:  # the locked file itself, from its start
            handle.seek(0)
            for raw in handle:
                line = raw.strip()
                if not line:
                    chunks.append(raw)
                    continue
                if problems is not None:
                    problems.lines += 1
                data = parse_line(line)
                reason = check_record(data) if data is not None else "not a JSON object"
                new = update(data) if data is not None and reason is None else None
                if new is not None:
                    chunks.append(record_line(new))
                    replaced += 1
                    continue
                if problems is not None and data is None:
                    problems.unreadable += 1
                elif problems is not None and reason is not None:
                    problems.note_invalid(problems.lines, reason)
                chunks.append(raw)
        if replaced:
            _replace(path, b"".join(chunks))
    return replaced


def _replace(path: Path, content: bytes) -> None:
    """``path`` replaced by ``content`` at once: a temporary file beside it, fsynced, renamed over it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("wb") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        with contextlib.suppress(OSError):
            os.chmod(tmp, os.stat(path).st_mode & 0o777)
        os.replace(tmp, path)
        with contextlib.suppress(OSError):  # the rename itself made durable
            directory = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
    except OSError as err:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise store_error(path, err) from err


@contextlib.contextmanager
def _locked_file(path: Path) -> Iterator[int]:
    """``path`` opened for appending under the store's lock (an exclusive ``flock``), released when the
    block ends. A file that a rewrite (:func:`rewrite_records`) replaced while this waited for the lock is
    let go, and the file now in place opened and locked instead."""
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as err:
            raise store_error(path, err) from err
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                current = os.fstat(fd).st_ino == os.stat(path).st_ino
            except FileNotFoundError:
                current = False
        except BaseException:
            os.close(fd)
            raise
        if current:
            break
        os.close(fd)  # closing lets its lock go
    try:
        yield fd
    finally:
        os.close(fd)


def store_error(path: Path, err: OSError) -> StoreError:
    """One line naming the path, what went wrong and the fix (finished samples are kept)."""
    resume = "then rerun the same command to resume (finished samples are kept)"
    if err.errno == errno.ENOSPC:
        return StoreError(f"cannot write {path}: no space left on device; free some space, {resume}")
    if err.errno == errno.EDQUOT:
        return StoreError(f"cannot write {path}: disk quota exceeded; free some space, {resume}")
    if isinstance(err, IsADirectoryError) or path.is_dir():
        return StoreError(f"{path} is a directory, not a file: move it out of the way, {resume}")
    if isinstance(err, NotADirectoryError) or (path.parent.exists() and not path.parent.is_dir()):
        return StoreError(f"{path.parent} is a file, not a directory: move it out of the way, {resume}")
    if isinstance(err, PermissionError):
        return StoreError(f"cannot write {path}: permission denied; make it writable, {resume}")
    reason = err.strerror or type(err).__name__
    return StoreError(f"cannot write {path}: {reason}; fix it, {resume}")
