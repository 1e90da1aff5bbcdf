"""The job loop on one device: load each model once, patch it per job, stream samples to the store."""

from __future__ import annotations

import subprocess
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..benchmarks import SampleContext, get_benchmark
from ..method_configs import load_method_params
from ..methods import apply_method, create_method
from ..models import LoadedModel, load_model
from .jobs import Job
from .store import ResultStore


def git_revision() -> str:
    try:
        root = Path(__file__).resolve().parents[2]
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5
        )
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


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
) -> dict[str, dict[str, float]]:
    """Run every job, skipping samples already in ``store``. Returns task-level aggregates per job key."""
    revision = git_revision()
    loaded: dict[str, LoadedModel] = {}
    summaries: dict[str, dict[str, float]] = {}
    for job in jobs:
        if job.model not in loaded:
            loaded.clear()  # one model in memory at a time
            loaded[job.model] = load(job.model) if load else load_model(job.model, device=device, dtype=dtype)
        lm = loaded[job.model]
        summaries[job.key()] = run_job(job, lm, store, revision, data_dir, options or {}, on_sample)
    return summaries


def resolve_method(job: Job, lm: LoadedModel):
    params = {**load_method_params(job.method, job.model), **job.method_params}
    return create_method(job.method, lm.pretraining_window, job.length, **params)


def run_job(
    job: Job,
    lm: LoadedModel,
    store: ResultStore,
    revision: str,
    data_dir: str | None,
    options: dict[str, Any],
    on_sample: Callable[[Job, dict[str, Any]], None] | None,
) -> dict[str, float]:
    bench = get_benchmark(job.benchmark)
    bench.check_task(job.task)
    method = resolve_method(job, lm)
    ctx = SampleContext(lm=lm, length=job.length, limit=job.limit, seed=job.seed, data_dir=data_dir, options=options)
    scores: list[dict[str, float]] = []
    by_key = defaultdict(dict)
    for record in store.records():
        if record.get("job_key") == job.key():
            by_key[record["key"]] = record["scores"]
    with apply_method(lm.model, method, window=lm.pretraining_window):
        for sample in bench.samples(job.task, ctx):
            key = job.sample_key(sample.sample_id)
            if store.is_done(key):
                scores.append(by_key[key])
                continue
            start = time.perf_counter()
            output = bench.evaluate(lm, sample, ctx)
            sample_scores = bench.score(sample, output)
            record = {
                "key": key,
                "job_key": job.key(),
                "model": job.model,
                "method": job.method,
                "method_params": method.params(),
                "benchmark": job.benchmark,
                "task": job.task,
                "length": job.length,
                "seed": job.seed,
                "sample_id": sample.sample_id,
                "references": sample.references,
                "output": output,
                "scores": sample_scores,
                "seconds": time.perf_counter() - start,
                "git": revision,
                "time": time.time(),
                "meta": {k: v for k, v in sample.meta.items() if k != "stop"},
            }
            store.append(record)
            scores.append(sample_scores)
            if on_sample:
                on_sample(job, record)
    return bench.aggregate(job.task, scores)
