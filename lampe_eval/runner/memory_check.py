"""Each job's memory at its peak, from the backend's estimate (``lampe_eval/memory.py``), held against the
device's memory before any model loads: a run whose batch cannot fit is one line, not an out-of-memory
error after the weights loaded. ``run --dry-run`` prints the same estimates."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import LampeEvalError
from ..lengths import format_length
from ..memory import MemoryEstimate
from ..settings import RunSettings
from .jobs import Job

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MemoryNeed:
    """The estimate of the jobs of one model, method (with its parameters) and length."""

    model: str
    method: str  # the method's label (its name and parameters)
    length: int
    estimate: MemoryEstimate
    loss_only: bool  # every job of it only scores a loss (no generation: no KV cache kept)

    def describe(self) -> str:
        return self.estimate.describe(self.loss_only)


def memory_needs(jobs: Sequence[Job], settings: RunSettings) -> list[MemoryNeed]:
    """The backend's estimate for each (model, method, length) of ``jobs``; those it cannot tell are left
    out (a model whose config only loading reads)."""
    from ..backends import BACKENDS
    from ..benchmarks.base import benchmark_class
    from ..methods.resolve import resolve_method
    from ..models import known_window

    backend = BACKENDS.get(settings.backend)
    groups: dict[tuple[str, str, int], list[Job]] = {}
    for job in jobs:
        groups.setdefault((job.model, job.describe_method(), job.length), []).append(job)
    needs = []
    for (model, label, length), members in groups.items():
        window = known_window(model)
        if window is None:
            continue
        job = members[0]
        method = resolve_method(job.method, window, length, params=job.method_params, configs=False).method
        try:
            found = backend.memory_estimate(model, method, length, settings)
        except Exception as error:  # noqa: BLE001 - e.g. a plug-in method that plans on the real model only
            log.debug("no memory estimate for %s %s at %s: %s", model, label, length, error)
            continue
        if found is None:
            continue
        loss_only = all(getattr(benchmark_class(j.benchmark), "loss_only", False) for j in members)
        needs.append(MemoryNeed(model, label, length, found, loss_only))
    return needs


def check_memory(needs: Sequence[MemoryNeed], settings: RunSettings) -> None:
    """One line for the first (model, method, length) the backend says cannot fit."""
    from ..backends import BACKENDS

    backend = BACKENDS.get(settings.backend)
    for need in needs:
        refusal = backend.memory_refusal(need.estimate, need.loss_only, settings)
        if refusal:
            batch = f", --batch-size {settings.batch_size}" if settings.batch_size > 1 else ""
            where = f"{need.model}, {need.method} at {format_length(need.length)}{batch}"
            raise LampeEvalError(f"{where}: {refusal}")
