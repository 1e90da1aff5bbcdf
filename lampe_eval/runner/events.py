"""What workers tell the driver, as types (picklable: they cross process pipes and Ray).

A worker yields, per unit: ``Loading`` (before it loads a model), ``Started``, then per sample ``Computed``
(a record not yet stored) or ``Skipped`` (a stored record reused), ``Warned`` lines, and ``Finished`` or
``Failed``. Whoever stores a ``Computed`` record passes on a light ``Stored`` instead. ``Waiting`` says a
job is held by another run; ``Ready``/``Dead`` are a worker process's start-up handshake.
``kind`` names each type in one word (progress displays and tests).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from ..records import SampleRecord


@dataclass(frozen=True)
class Loading:
    kind: ClassVar[str] = "load"
    worker: str
    model: str


@dataclass(frozen=True)
class Started:
    kind: ClassVar[str] = "start"
    unit: str
    describe: str
    total: int | None
    worker: str


@dataclass(frozen=True)
class Computed:
    """A finished sample's record, not yet stored."""

    kind: ClassVar[str] = "record"
    unit: str
    record: SampleRecord


@dataclass(frozen=True)
class Stored:
    """A sample whose record is in the store (``record``: kept only where it costs nothing to pass)."""

    kind: ClassVar[str] = "sample"
    unit: str
    key: str
    scores: dict[str, float]
    seconds: float
    record: SampleRecord | None = field(default=None, compare=False)

    @classmethod
    def of(cls, event: Computed, keep_record: bool = True) -> Stored:
        record = event.record
        kept = record if keep_record else None
        return cls(event.unit, record.key, dict(record.scores), float(record.seconds), kept)


@dataclass(frozen=True)
class Skipped:
    kind: ClassVar[str] = "skip"
    unit: str
    key: str


@dataclass(frozen=True)
class Warned:
    kind: ClassVar[str] = "warn"
    unit: str | None
    message: str  # one line


@dataclass(frozen=True)
class Waiting:
    kind: ClassVar[str] = "wait"
    message: str


@dataclass(frozen=True)
class Finished:
    kind: ClassVar[str] = "finish"
    unit: str


@dataclass(frozen=True)
class Failed:
    kind: ClassVar[str] = "fail"
    unit: str | None
    error: str  # one line
    traceback: str = ""
    describe: str = ""  # the unit's label (a unit that fails before it starts has no Started to name it)


@dataclass(frozen=True)
class Ready:
    kind: ClassVar[str] = "ready"


@dataclass(frozen=True)
class Dead:
    kind: ClassVar[str] = "dead"
    error: str


Event = Loading | Started | Computed | Stored | Skipped | Warned | Waiting | Finished | Failed | Ready | Dead
