"""The shared job queue: hands work units to idle workers, preferring what they have loaded.

A worker asking for work gets, in order of preference: a unit of the (model, method, params) group
it just ran, then one of the same model (no reload), then a unit of the group with the fewest
workers on it (so idle workers spread over groups instead of all piling onto the first one).
Ties keep the grid order. Thread-safe: driver threads of several workers share one scheduler.
"""

from __future__ import annotations

import threading
from collections import Counter

from .jobs import WorkUnit

Group = tuple[str, str, str]


class Scheduler:
    def __init__(self, units: list[WorkUnit]) -> None:
        self._pending: list[WorkUnit] = list(units)
        self._active: Counter[Group] = Counter()
        self._lock = threading.Lock()
        self.closed = False

    def __len__(self) -> int:
        with self._lock:
            return len(self._pending)

    def take(self, loaded: Group | None = None) -> WorkUnit | None:
        """The next unit for a worker whose last group was ``loaded`` (None: nothing loaded)."""
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

            index, unit = min(enumerate(self._pending), key=rank)
            del self._pending[index]
            self._active[unit.job.group()] += 1
            return unit

    def release(self, unit: WorkUnit) -> None:
        with self._lock:
            self._active[unit.job.group()] -= 1

    def close(self) -> list[WorkUnit]:
        """Stop handing out work; returns the units never started."""
        with self._lock:
            self.closed = True
            left, self._pending = self._pending, []
            return left
