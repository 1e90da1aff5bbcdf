"""Run a list of jobs: pick the workers (inline, one process per GPU, or Ray), feed them, summarise.

Resuming: finished samples are read from the store once, here, and travel with each work unit, so a
rerun of the same command only computes what is missing. Ctrl-C stops at once; every finished
sample is already on disk (each record is fsynced when it is written).
"""

from __future__ import annotations

import os
import threading
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import LampeEvalError
from ..models import LoadedModel
from .jobs import Job, WorkUnit, make_units
from .pool import Handle, InlineHandle, ProcessHandle, drive
from .store import ResultStore
from .worker import Event, WorkerConfig, git_revision, unit_id

__all__ = ["JobsFailedError", "RunResult", "execute", "git_revision", "run_jobs", "summarize", "visible_gpus"]


class JobsFailedError(LampeEvalError):
    """Some jobs failed; the others ran and their samples are in the store."""

    def __init__(self, failures: list[dict[str, Any]]) -> None:
        self.failures = failures
        lines = [f"{f['describe']}: {f['error']}" for f in failures[:5]]
        more = f" (and {len(failures) - 5} more)" if len(failures) > 5 else ""
        super().__init__(f"{len(failures)} job(s) failed{more}: " + "; ".join(lines))


@dataclass
class RunResult:
    jobs: list[Job]
    summaries: dict[str, dict[str, float]]  # job key -> task-level aggregate
    failures: list[dict[str, Any]] = field(default_factory=list)  # describe, error, traceback
    computed: int = 0  # samples computed in this run
    skipped: int = 0  # samples found in the store
    not_started: list[WorkUnit] = field(default_factory=list)


def visible_gpus() -> list[str]:
    """CUDA device ids this process may use (entries of CUDA_VISIBLE_DEVICES, or 0..n-1)."""
    try:
        import torch

        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:  # pragma: no cover
        count = 0
    if count == 0:
        return []
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env:
        return [d.strip() for d in env.split(",") if d.strip()][:count]
    return [str(i) for i in range(count)]


def summarize(jobs: Sequence[Job], store: ResultStore) -> dict[str, dict[str, float]]:
    """Each job's task-level aggregate from the stored samples (its first ``limit`` samples)."""
    from ..benchmarks.base import aggregate

    wanted = {job.key(): job for job in jobs}
    scores: dict[str, list[tuple[int, dict[str, float]]]] = defaultdict(list)
    for record in store.unique_records():
        job = wanted.get(record.get("job_key", ""))
        if job is None:
            continue
        index = int(record.get("index", 0))
        if job.limit is None or index < job.limit:
            scores[job.key()].append((index, record["scores"]))
    out: dict[str, dict[str, float]] = {}
    for key, items in scores.items():
        job = wanted[key]
        ordered = [s for _, s in sorted(items, key=lambda item: item[0])]
        out[key] = aggregate(job.benchmark, job.task, ordered)
    return out


def make_handles(
    config: WorkerConfig,
    store: ResultStore,
    *,
    workers: int | None,
    gpus: list[str] | None,
    use_ray: bool,
    ray_address: str | None,
    ray_init: dict[str, Any] | None = None,
) -> list[Handle]:
    if use_ray or ray_address:
        from .ray_backend import ray_handles

        return list(ray_handles(config, store, address=ray_address, workers=workers, init_kwargs=ray_init))
    device = config.device
    if config.load is not None and workers is None and gpus is None:
        return [InlineHandle(config, store)]  # a custom loader (tests, notebooks) runs here unless asked
    if gpus is None:
        gpus = visible_gpus() if device in (None, "cuda") else []
    if len(gpus) > 1:
        if workers and workers != len(gpus):
            raise LampeEvalError(f"--workers {workers} with {len(gpus)} GPUs: one worker per GPU")
        lock = threading.Lock()
        gpu_config = WorkerConfig(**{**config.__dict__, "device": "cuda"})
        return [
            ProcessHandle(gpu_config, str(store.directory), f"gpu-{gpu}", {"CUDA_VISIBLE_DEVICES": gpu}, lock)
            for gpu in gpus
        ]
    if workers and workers > 1:  # several CPU processes (or several workers sharing one GPU)
        lock = threading.Lock()
        return [
            ProcessHandle(
                config, str(store.directory), f"worker-{i}", {"CUDA_VISIBLE_DEVICES": gpus[0]}, lock
            )
            if gpus
            else ProcessHandle(config, str(store.directory), f"worker-{i}", None, lock)
            for i in range(workers)
        ]
    return [InlineHandle(config, store)]  # one worker in this process: CPU, or the one GPU


def execute(
    jobs: list[Job],
    store: ResultStore,
    *,
    device: str | None = None,
    dtype: str | None = None,
    data_dir: str | None = None,
    options: dict[str, Any] | None = None,
    load: Callable[[str], LoadedModel] | None = None,
    imports: Sequence[str] = (),
    workers: int | None = None,
    gpus: list[str] | None = None,
    use_ray: bool = False,
    ray_address: str | None = None,
    ray_init: dict[str, Any] | None = None,
    on_event: Callable[[Event], None] | None = None,
) -> RunResult:
    """Run ``jobs``, skipping samples already in ``store``.

    Workers: one inline worker by default (CPU, or one GPU); one spawned process per GPU when
    several are visible (or listed in ``gpus``); ``workers`` CPU processes when asked; Ray actors
    with ``use_ray``/``ray_address``. ``load`` replaces :func:`~lampe_eval.models.load_model`
    (tests, notebooks): it runs inline unless ``workers``/``gpus`` ask for processes, and then must be
    a module-level function (it is pickled).
    """
    config = WorkerConfig(
        device=device,
        dtype=dtype,
        data_dir=data_dir,
        options=dict(options or {}),
        load=load,
        imports=tuple(imports),
        revision=git_revision(),
    )
    handles = make_handles(
        config, store, workers=workers, gpus=gpus, use_ray=use_ray, ray_address=ray_address, ray_init=ray_init
    )
    units = make_units(jobs, len(handles), store.done_by_job())
    by_uid = {unit_id(u): u for u in units}
    result = RunResult(jobs=list(jobs), summaries={})

    def handle_event(event: Event) -> None:
        kind = event["event"]
        if kind == "sample":
            result.computed += 1
        elif kind == "skip":
            result.skipped += 1
        elif kind == "fail":
            unit = by_uid.get(event.get("unit") or "")
            describe = unit.describe() if unit else "(worker)"
            result.failures.append(
                {"describe": describe, "error": event["error"], "traceback": event.get("traceback", "")}
            )
        if on_event:
            on_event(event)

    try:
        result.not_started = drive(units, handles, handle_event)
    finally:
        for handle in handles:
            handle.close()
    for unit in result.not_started:
        result.failures.append({"describe": unit.describe(), "error": "not started: no worker left"})
    result.summaries = summarize(jobs, store)
    return result


def run_jobs(
    jobs: list[Job],
    store: ResultStore,
    *,
    device: str | None = None,
    dtype: str | None = None,
    data_dir: str | None = None,
    options: dict[str, Any] | None = None,
    on_sample: Callable[[Job, dict[str, Any]], None] | None = None,
    load: Callable[[str], LoadedModel] | None = None,
    **kwargs: Any,
) -> dict[str, dict[str, float]]:
    """Run every job, skipping samples already in ``store``. Returns task-level aggregates per job key.

    Raises :class:`JobsFailedError` after the other jobs ran when some failed.
    """
    by_key = {job.key(): job for job in jobs}

    def on_event(event: Event) -> None:
        if on_sample and event["event"] == "sample":
            record = event.get("record") or {"key": event["key"], "scores": event["scores"]}
            on_sample(by_key[event["unit"].split("/")[0]], record)

    result = execute(
        jobs,
        store,
        device=device,
        dtype=dtype,
        data_dir=data_dir,
        options=options,
        load=load,
        on_event=on_event,
        **kwargs,
    )
    if result.failures:
        raise JobsFailedError(result.failures)
    return result.summaries
