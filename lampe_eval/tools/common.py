"""What the tools share: the request fields every tool takes (:class:`ToolRequest`), the model loaded once
as the runner's worker loads it, their probes built into an experiment
(:meth:`~lampe_eval.runner.experiment.ExperimentSpec.build`) that runs on that model, and their records read
back from the store."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..records import SampleRecord
from ..runner.experiment import RunSettings
from ..runner.store import ResultStore

if TYPE_CHECKING:
    from ..backends import Backend
    from ..models import LoadedModel
    from ..runner.jobs import Job

Point = TypeVar("Point")


@dataclass(kw_only=True)
class ToolRequest:
    """The fields every tool's request shares (``lampe-eval fit``, ``lampe-eval dpe-select``): keyword
    only, after the tool's own. A tool gives ``out`` its own default
    (``out: Path = field(default=..., kw_only=True)``)."""

    options: dict[str, Any] = field(default_factory=dict)  # the probed benchmark's options (--opt)
    out: Path  # the results store of the tool's jobs (resumable) and its side files
    config: Path | None = None  # the method config to write; default: :meth:`config_target`'s
    write: bool = True  # write the method config
    device: str | None = None
    dtype: str | None = None
    backend: str = "hf"  # the inference backend of the tool's jobs (lampe_eval.backends)
    command: str = ""  # the command line, recorded in the config

    def settings(self) -> RunSettings:
        return RunSettings(device=self.device, dtype=self.dtype, backend=self.backend)

    def config_target(self, method: str, model: str) -> Path:
        """Where the config goes: ``--config``, else ``method``'s config of ``model`` in the user's home."""
        from ..method_configs import config_path

        return self.config or config_path(method, model)


def load_backend(model: str, settings: RunSettings) -> Backend:
    """``model`` behind the backend of ``settings``, loaded as the runner's worker loads it."""
    from ..runner.worker import Worker, WorkerConfig

    return Worker(WorkerConfig(settings=settings, device=settings.device)).load(model)


def on_model(settings: RunSettings, lm: LoadedModel) -> RunSettings:
    """``settings`` whose runs reuse the loaded model (one load; the worker then runs in this process)."""
    return dataclasses.replace(settings, load=lambda name: lm)


def resolve_jobs(jobs: Iterable[Job], window: int) -> None:
    """Each job's method on the loaded model's window: a bad setting is one line before any job runs."""
    from ..methods import resolve_method

    for job in jobs:
        resolve_method(job.method, window, job.length, params=job.method_params, configs=False)


def short_hash(payload: object) -> str:
    """Eight hex digits naming a tool's file after the settings it was made with."""
    tag = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(tag.encode()).hexdigest()[:8]


def job_records(
    store: ResultStore, points: Mapping[str, Point], limit: int
) -> dict[Point, list[SampleRecord]]:
    """The stored records of the jobs in ``points`` (job key -> what the job measures), their first
    ``limit`` samples in sample order; a point lacking some of them (an interrupted run) is left out."""
    grouped: dict[Point, list[SampleRecord]] = {}
    for record in store.unique_records():
        point = points.get(record.job_key)
        if point is not None and record.index < limit:
            grouped.setdefault(point, []).append(record)
    return {
        point: sorted(items, key=lambda r: r.index) for point, items in grouped.items() if len(items) >= limit
    }
