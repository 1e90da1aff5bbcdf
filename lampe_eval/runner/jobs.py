"""A job is one (model, method + params, benchmark, task, length); the grid is their cross product.

A job runs its benchmark's samples for (task, length); each sample becomes one record in the store,
keyed ``<job key>:<sample id>``. A :class:`WorkUnit` is what a worker pulls from the queue: a job,
or one shard of its samples when there are fewer jobs than workers.

**Identity.** A job's key covers everything that can change its samples or their scores: model,
method and its resolved parameters, benchmark, task, length, seed, the benchmark options that change
results (those not at their default) and the data directory. The data actually read is checked per
sample on top of that: every record carries the fingerprint of the sample it was computed on
(:func:`sample_fingerprint`), and a rerun reuses a record only when its sample is still the same.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..lengths import format_length
from ..records import StoredSample


@dataclass(frozen=True)
class Job:
    model: str
    method: str
    benchmark: str
    task: str
    length: int
    # Explicit parameters: method_configs/ file values for this (model, length, benchmark) merged
    # with --param overrides. Method defaults derived from the window are not included.
    method_params: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    limit: int | None = None
    seed: int = 0
    # The parameters the user set (--param, an experiment's params:): what names the method's
    # variant in reports. Not part of the key (method_params already holds them).
    overrides: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    # The benchmark options set for this job (typed, only those the benchmark declares).
    options: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    data_dir: str | None = None

    def identity_options(self) -> dict[str, Any]:
        """The options that are part of the key: those that change results and differ from the default
        (all set options when the benchmark is not registered in this process)."""
        from ..benchmarks.base import benchmark_class

        cls = benchmark_class(self.benchmark)
        return cls.identity_options(self.options) if cls else dict(self.options)

    def key(self) -> str:
        """Stable identity of the job: same inputs, same key (used to resume). Jobs without options and
        data directory keep the key of earlier releases."""
        ident: dict[str, Any] = {
            "model": self.model,
            "method": self.method,
            "benchmark": self.benchmark,
            "task": self.task,
            "length": self.length,
            "method_params": self.method_params,
            "seed": self.seed,
        }
        options = self.identity_options()
        if options:
            ident["options"] = options
        if self.data_dir:
            ident["data_dir"] = self.data_dir
        blob = json.dumps(ident, sort_keys=True, default=str)
        return hashlib.sha1(blob.encode()).hexdigest()[:16]

    def sample_key(self, sample_id: str) -> str:
        return f"{self.key()}:{sample_id}"

    def group(self) -> tuple[str, str, str]:
        """What a worker keeps loaded: (model, method, params)."""
        return (self.model, self.method, json.dumps(self.method_params, sort_keys=True, default=str))

    def describe_method(self) -> str:
        """The method with its parameters: ``name(key=value,...)``."""
        params = ",".join(f"{k}={v}" for k, v in sorted(self.method_params.items()))
        return f"{self.method}({params})" if params else self.method

    def describe(self) -> str:
        method = self.describe_method()
        text = f"{self.model} | {method} | {self.benchmark}/{self.task} | {format_length(self.length)}"
        settings = [f"{k}={v}" for k, v in sorted(self.identity_options().items())]
        if self.data_dir:
            settings.append(f"data_dir={self.data_dir}")
        return f"{text} | {' '.join(settings)}" if settings else text


@dataclass(frozen=True)
class WorkUnit:
    """One job, or the samples ``index % shards == shard`` of it. ``done`` lists the sample ids with a
    stored record, ``fingerprints`` the fingerprint of the sample each was computed on: a sample is
    skipped only when it is built the same again."""

    job: Job
    shard: int = 0
    shards: int = 1
    done: frozenset[str] = frozenset()
    fingerprints: Mapping[str, StoredSample] = field(default_factory=dict, hash=False, compare=False)

    def finished(self, sample_id: str, fingerprint: str, engines: Collection[str]) -> bool:
        """Whether a stored record of this sample can be reused: the same sample, made by one of
        ``engines`` (the identities that give this run's numbers)."""
        stored = self.fingerprints.get(sample_id)
        return sample_id in self.done and stored is not None and stored.reusable(fingerprint, engines)

    def other_engine(self, sample_id: str, fingerprint: str, engines: Collection[str]) -> str | None:
        """The engine of a stored record of this very sample when another engine made it, else None."""
        stored = self.fingerprints.get(sample_id)
        if sample_id in self.done and stored is not None and stored.fingerprint == fingerprint:
            return stored.engine if stored.engine not in engines else None
        return None

    def describe(self) -> str:
        suffix = f" [{self.shard + 1}/{self.shards}]" if self.shards > 1 else ""
        return self.job.describe() + suffix

    def takes(self, index: int) -> bool:
        return index % self.shards == self.shard


def resolve_params(
    model: str, method: str, benchmark: str, length: int, overrides: dict[str, Any] | None = None
) -> dict[str, Any]:
    """method_configs/ values for the job, then the explicit overrides on top (the values a job records;
    the rest of the method's parameters derive from them: :func:`lampe_eval.methods.resolve_method`)."""
    from ..methods.resolve import explicit_params

    return explicit_params(method, model, length, benchmark, overrides)


def expand_grid(
    models: list[str],
    methods: list[tuple[str, dict[str, Any]]],
    benchmark_tasks: list[tuple[str, str]],
    lengths: list[int],
    limit: int | None = None,
    seed: int = 0,
    *,
    use_configs: bool = True,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    data_dir: str | None = None,
) -> list[Job]:
    """Cross product, ordered so that one (model, method) stays loaded for all its jobs.

    With ``use_configs`` each job's parameters include ``method_configs/<method>-<model>.yaml``
    resolved for its length and benchmark (so a changed config is a new job, not a resumed one).
    ``options`` maps a benchmark to its (checked, typed) options.
    """
    jobs: list[Job] = []
    for model, (method, params), (bench, task), length in itertools.product(
        models, methods, benchmark_tasks, lengths
    ):
        resolved = resolve_params(model, method, bench, length, params) if use_configs else dict(params)
        bench_options = dict((options or {}).get(bench, {}))
        jobs.append(
            Job(
                model,
                method,
                bench,
                task,
                length,
                resolved,
                limit,
                seed,
                dict(params),
                bench_options,
                data_dir,
            )
        )
    return dedupe(jobs)


def dedupe(jobs: list[Job]) -> list[Job]:
    """Drop repeated jobs (same key), keeping the first occurrence and the order."""
    seen: set[str] = set()
    out: list[Job] = []
    for job in jobs:
        if job.key() not in seen:
            seen.add(job.key())
            out.append(job)
    return out


def make_units(
    jobs: list[Job],
    workers: int = 1,
    done: Mapping[str, set[str]] | None = None,
    fingerprints: Mapping[str, Mapping[str, StoredSample]] | None = None,
) -> list[WorkUnit]:
    """Work units for ``workers`` workers: whole jobs, or shards when jobs are fewer than workers.

    ``done`` maps job key -> finished sample ids and ``fingerprints`` job key -> sample id -> the
    fingerprint of its sample (from the store); they travel with the unit so a worker never needs to
    read the store.
    """
    done = done or {}
    fingerprints = fingerprints or {}
    shards = max(1, workers // max(1, len(jobs))) if len(jobs) < workers else 1
    return [
        WorkUnit(
            job, shard, shards, frozenset(done.get(job.key(), ())), dict(fingerprints.get(job.key(), {}))
        )
        for job in jobs
        for shard in range(shards)
    ]
