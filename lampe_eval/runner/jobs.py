"""A job is one (model, method + params, benchmark, task, length); the grid is their cross product."""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Job:
    model: str
    method: str
    benchmark: str
    task: str
    length: int
    method_params: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    limit: int | None = None
    seed: int = 0

    def key(self) -> str:
        """Stable identity of the job: same inputs, same key (used to resume)."""
        ident = {k: v for k, v in asdict(self).items() if k != "limit"}
        blob = json.dumps(ident, sort_keys=True, default=str)
        return hashlib.sha1(blob.encode()).hexdigest()[:16]

    def sample_key(self, sample_id: str) -> str:
        return f"{self.key()}:{sample_id}"

    def describe(self) -> str:
        return f"{self.model} | {self.method} | {self.benchmark}/{self.task} | {self.length}"


def expand_grid(
    models: list[str],
    methods: list[tuple[str, dict[str, Any]]],
    benchmark_tasks: list[tuple[str, str]],
    lengths: list[int],
    limit: int | None = None,
    seed: int = 0,
) -> list[Job]:
    """Cross product, ordered so that one (model, method) stays loaded for all its jobs."""
    return [
        Job(model, method, bench, task, length, params, limit, seed)
        for model, (method, params), (bench, task), length in itertools.product(
            models, methods, benchmark_tasks, lengths
        )
    ]
