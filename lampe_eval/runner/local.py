"""Run an experiment: pick the workers (inline, one process per GPU, or Ray), feed them, summarise.

Resuming: finished samples (with the fingerprint of the sample each was computed on) are read from
the store here and travel with each work unit, so a rerun of the same command only computes what is
missing or what was computed on other data. Ctrl-C stops at once; every finished sample is already on
disk (each record is fsynced when it is written).
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import LampeEvalError
from ..records import StoredSample
from .checks import check_settings, prepare_output
from .claims import Claims
from .events import Event, Failed, Skipped, Stored
from .experiment import Experiment, RunSettings
from .jobs import Job, WorkUnit, make_units
from .pool import Handle, InlineHandle, ProcessHandle, drive
from .store import ResultStore
from .worker import WorkerConfig, git_revision, unit_id

__all__ = ["JobsFailedError", "RunResult", "git_revision", "run", "summarize", "visible_gpus"]


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
    confirmed: set[str] = field(default_factory=set)  # sample keys computed or found valid in this run

    def raise_for_failures(self) -> RunResult:
        """Raise :class:`JobsFailedError` when some jobs failed (the others ran and are stored)."""
        if self.failures:
            raise JobsFailedError(self.failures)
        return self


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


def summarize(
    jobs: Sequence[Job], store: ResultStore, confirmed: set[str] | None = None
) -> dict[str, dict[str, float]]:
    """Each job's task-level aggregate from the stored samples (its first ``limit`` samples); with
    ``confirmed``, only those sample keys (the samples the jobs consist of in this run, so records of
    samples the data no longer has are left out)."""
    from ..benchmarks.base import aggregate

    wanted = {job.key(): job for job in jobs}
    scores: dict[str, list[tuple[int, dict[str, float]]]] = defaultdict(list)
    for record in store.unique_records():
        job = wanted.get(record.job_key)
        if job is None or (confirmed is not None and record.key not in confirmed):
            continue
        if job.limit is None or record.index < job.limit:
            scores[job.key()].append((record.index, record.scores))
    out: dict[str, dict[str, float]] = {}
    for key, items in scores.items():
        job = wanted[key]
        ordered = [s for _, s in sorted(items, key=lambda item: item[0])]
        out[key] = aggregate(job.benchmark, job.task, ordered)
    return out


class StoreGate:
    """The job claims of a results directory, with the store's finished samples at claim time."""

    def __init__(self, store: ResultStore, claims: Claims) -> None:
        self.store = store
        self.claims = claims

    def claim(self, job: Job) -> tuple[frozenset[str], dict[str, StoredSample]] | str:
        holder = self.claims.acquire(job.key())
        if holder is not None:
            return f"{job.describe()}: run by another lampe-eval process ({holder.describe()}), waiting"
        self.store.refresh()  # what other runs stored until now
        fingerprints = self.store.fingerprints(job.key())
        return frozenset(fingerprints), fingerprints

    def release(self, job: Job) -> None:
        self.claims.release(job.key())


def gpu_groups(gpus: list[str], per_worker: int, workers: int | None) -> list[list[str]]:
    """The GPUs of each worker: consecutive groups of ``per_worker`` (e.g. 8 GPUs, 4 each: 2 workers)."""
    if len(gpus) < per_worker or len(gpus) % per_worker:
        raise LampeEvalError(
            f"--gpus-per-worker {per_worker} with {len(gpus)} GPU(s) ({','.join(gpus) or 'none visible'}): "
            f"give --gpus a multiple of {per_worker}"
        )
    groups = [gpus[i : i + per_worker] for i in range(0, len(gpus), per_worker)]
    if workers and workers != len(groups):
        raise LampeEvalError(f"--workers {workers} with {len(groups)} group(s) of {per_worker} GPUs")
    return groups


def make_handles(config: WorkerConfig, store: ResultStore, settings: RunSettings) -> list[Handle]:
    """The workers: Ray actors, one process per GPU (or per group of ``gpus_per_worker`` GPUs), N CPU
    processes, or one inline worker; one inline worker for a backend that calls endpoints (its
    placement). A group of GPUs holds a model spread by ``device_map``, or by the engine itself (a
    self-placed backend, which may also spread itself over ``gpus_per_worker`` ranks on a CPU)."""
    from ..backends import BACKENDS, Placement

    check_settings(settings)
    per_worker = settings.gpus_per_worker
    placement = BACKENDS.get(settings.backend).placement
    by_device_map = placement is Placement.PER_DEVICE
    config = dataclasses.replace(
        config,
        settings=settings,
        device=config.device or settings.device,
        device_map=settings.device_map or ("auto" if per_worker > 1 and by_device_map else None),
    )
    if placement is Placement.REMOTE:
        return [InlineHandle(config, store)]
    if settings.ray or settings.ray_address:
        from .ray_backend import ray_handles

        init = dict(settings.ray_init or {})
        gpus_each = per_worker if per_worker > 1 else None
        return list(
            ray_handles(
                config,
                store,
                address=settings.ray_address,
                workers=settings.workers,
                gpus_per_worker=gpus_each,
                init_kwargs=init,
            )
        )
    device, workers = config.device, settings.workers
    gpus = list(settings.gpus) if settings.gpus is not None else None
    if settings.load is not None and workers is None and gpus is None:
        return [InlineHandle(config, store)]  # a custom loader (tests, notebooks) runs here unless asked
    if gpus is None:
        gpus = visible_gpus() if device in (None, "cuda") else []
    if per_worker > 1 and (gpus or by_device_map):  # each worker sees its group of GPUs, spreads the model
        lock = threading.Lock()
        gpu_config = dataclasses.replace(config, device="cuda")
        return [
            ProcessHandle(
                gpu_config,
                str(store.directory),
                f"gpu-{'-'.join(group)}",
                {"CUDA_VISIBLE_DEVICES": ",".join(group)},
                lock,
            )
            for group in gpu_groups(gpus, per_worker, workers)
        ]
    if len(gpus) > 1:
        if workers and workers != len(gpus):
            raise LampeEvalError(f"--workers {workers} with {len(gpus)} GPUs: one worker per GPU")
        lock = threading.Lock()
        gpu_config = dataclasses.replace(config, device="cuda")
        return [
            ProcessHandle(gpu_config, str(store.directory), f"gpu-{gpu}", {"CUDA_VISIBLE_DEVICES": gpu}, lock)
            for gpu in gpus
        ]
    if workers and workers > 1:  # several CPU processes (or several workers sharing one GPU)
        lock = threading.Lock()
        env = {"CUDA_VISIBLE_DEVICES": gpus[0]} if gpus else None
        return [ProcessHandle(config, str(store.directory), f"worker-{i}", env, lock) for i in range(workers)]
    return [InlineHandle(config, store)]  # one worker in this process: CPU, or the one GPU


def run(
    experiment: Experiment,
    *,
    on_event: Callable[[Event], None] | None = None,
    store: ResultStore | None = None,
) -> RunResult:
    """Run a checked experiment (:meth:`ExperimentSpec.build`), skipping samples already in its store.

    Workers: one inline worker by default (CPU, or one GPU); one spawned process per GPU when several
    are visible (or listed in ``settings.gpus``); ``settings.workers`` CPU processes when asked; Ray
    actors with ``settings.ray``/``ray_address``.
    """
    settings = experiment.settings
    store = store or ResultStore(prepare_output(experiment.out))
    jobs = experiment.jobs
    config = WorkerConfig(
        settings=settings,
        device=settings.device,
        imports=tuple(experiment.imports),
        revision=git_revision(),
        warned=frozenset(experiment.warnings),
    )
    handles = make_handles(config, store, settings)
    keys = {job.key() for job in jobs}
    units = make_units(
        jobs, len(handles), store.done_by_job(), {key: store.fingerprints(key) for key in keys}
    )
    by_uid = {unit_id(u): u for u in units}
    result = RunResult(jobs=list(jobs), summaries={})

    def handle_event(event: Event) -> None:
        if isinstance(event, Stored):
            result.computed += 1
            result.confirmed.add(event.key)
        elif isinstance(event, Skipped):
            result.skipped += 1
            result.confirmed.add(event.key)
        elif isinstance(event, Failed):
            unit = by_uid.get(event.unit or "")
            describe = unit.describe() if unit else "(worker)"
            result.failures.append({"describe": describe, "error": event.error, "traceback": event.traceback})
        if on_event:
            on_event(event)

    claims = Claims(store.directory)
    try:
        result.not_started = drive(units, handles, handle_event, StoreGate(store, claims))
    finally:
        for handle in handles:
            handle.close()
        claims.release_all()
    for unit in result.not_started:
        result.failures.append({"describe": unit.describe(), "error": "not started: no worker left"})
    result.summaries = summarize(jobs, store, result.confirmed)
    return result
