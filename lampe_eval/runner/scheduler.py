"""The shared job queue: hands work units to idle workers, preferring what they have loaded.

A worker asking for work gets, in order of preference: a unit of the (model, method, params) group
it just ran, then one of the same model (no reload), then a unit of the group with the fewest
workers on it (so idle workers spread over groups instead of all piling onto the first one).
Ties keep the grid order. Thread-safe: driver threads of several workers share one scheduler.

With a :class:`Gate` (the job claims of the results directory), a job is handed out only once this run
holds its claim; the gate then gives the job's finished samples as they are in the store at that
moment. When every pending job is claimed by another process, ``take`` returns a :class:`Wait`.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from ..records import StoredSample
from .jobs import Job, WorkUnit

Group = tuple[str, str, str]
DoneState = tuple[frozenset[str], Mapping[str, StoredSample]]  # sample ids, what made their records


class Gate(Protocol):
    def claim(self, job: Job) -> DoneState | str:
        """The job's finished samples once this run holds the job, else who holds it (one line)."""
        ...

    def release(self, job: Job) -> None: ...


@dataclass(frozen=True)
class Wait:
    """Every pending job is held by another process: try again later."""

    reasons: tuple[str, ...]


class Scheduler:
    def __init__(self, units: list[WorkUnit], gate: Gate | None = None) -> None:
        self._pending: list[WorkUnit] = list(units)
        self._active: Counter[Group] = Counter()
        self._lock = threading.Lock()
        self.closed = False
        self._gate = gate
        self._left: Counter[str] = Counter(u.job.key() for u in units)  # units of a job not released
        self._held: dict[str, DoneState] = {}  # jobs this run holds -> their finished samples

    def __len__(self) -> int:
        with self._lock:
            return len(self._pending)

    def take(self, loaded: Group | None = None) -> WorkUnit | Wait | None:
        """The next unit for a worker whose last group was ``loaded`` (None: nothing loaded); None when
        there is no work left, a :class:`Wait` when all of it is held by other processes."""
        with self._lock:
            if self.closed or not self._pending:
                return None

            def rank(item: tuple[int, WorkUnit]) -> tuple[int, int, int]:
                index, unit = item
                group = unit.job.group()
                if loaded is not None and group == loaded:
                    affinity = 0
                elif loaded is not None and group[0] == loaded[0]:
                    affinity = 1
                else:
                    affinity = 2
                return (affinity, self._active[group] if affinity == 2 else 0, index)

            reasons: list[str] = []
            for index, unit in sorted(enumerate(self._pending), key=rank):
                ready = self._hold(unit, reasons)
                if ready is not None:
                    del self._pending[index]
                    self._active[unit.job.group()] += 1
                    return ready
            return Wait(tuple(reasons))

    def _hold(self, unit: WorkUnit, reasons: list[str]) -> WorkUnit | None:
        """The unit with its job's current finished samples, once this run holds the job."""
        if self._gate is None:
            return unit
        key = unit.job.key()
        if key not in self._held:
            state = self._gate.claim(unit.job)
            if isinstance(state, str):
                reasons.append(state)
                return None
            self._held[key] = state
        done, fingerprints = self._held[key]
        return dataclasses.replace(unit, done=done, fingerprints=fingerprints)

    def release(self, unit: WorkUnit) -> None:
        with self._lock:
            self._active[unit.job.group()] -= 1
            key = unit.job.key()
            self._left[key] -= 1
            if self._left[key] <= 0 and key in self._held and self._gate is not None:
                self._gate.release(unit.job)

    def close(self) -> list[WorkUnit]:
        """Stop handing out work; returns the units never started."""
        with self._lock:
            self.closed = True
            left, self._pending = self._pending, []
            return left
