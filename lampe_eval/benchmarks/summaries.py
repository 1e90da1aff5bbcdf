"""Benchmark-level rows after a run: each benchmark's ``summarize_aggregates`` (by default its
``summarize_tasks`` of the task headlines: LongBench's six categories and averages, L-Eval's average;
LongBench v2's difficulty and length splits; {} for those without one) gives one row per
(model, method, length)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .base import BENCHMARKS, get_benchmark


def benchmark_summaries(
    jobs: Sequence[Any], summaries: Mapping[str, Mapping[str, float]]
) -> dict[str, list[tuple[tuple[str, str, int], dict[str, float]]]]:
    """benchmark -> [((model, method, length), summary row)] for the benchmarks that summarise.

    ``jobs`` are runner jobs (``model``, ``method``, ``method_params``, ``benchmark``, ``task``,
    ``length``, ``key()``); ``summaries`` the task aggregates by job key (headline = first metric)."""
    groups: dict[tuple[str, str, str, str, int], dict[str, Mapping[str, float]]] = {}
    for job in jobs:
        scores = summaries.get(job.key())
        if not scores or job.benchmark not in BENCHMARKS:
            continue
        params = json.dumps(getattr(job, "method_params", {}), sort_keys=True, default=str)
        group = (job.benchmark, job.model, job.method, params, job.length)
        groups.setdefault(group, {})[job.task] = scores
    out: dict[str, list[tuple[tuple[str, str, int], dict[str, float]]]] = {}
    for (bench_name, model, method, _, length), task_aggregates in groups.items():
        row = get_benchmark(bench_name).summarize_aggregates(task_aggregates)
        if row:
            out.setdefault(bench_name, []).append(((model, method, length), dict(row)))
    return out


def summary_tables(jobs: Sequence[Any], summaries: Mapping[str, Mapping[str, float]]) -> list[Any]:
    """The rows of :func:`benchmark_summaries` as rich tables, one per benchmark."""
    from rich.table import Table

    from ..lengths import format_length

    tables = []
    for bench_name, rows in benchmark_summaries(jobs, summaries).items():
        columns: list[str] = []
        for _, row in rows:
            columns.extend(c for c in row if c not in columns)
        table = Table(title=f"{bench_name} summary", title_justify="left")
        for column in ("model", "method", "length", *columns):
            table.add_column(column)
        for (model, method, length), row in rows:
            cells = [f"{row[c]:.2f}" if c in row else "-" for c in columns]
            table.add_row(model, method, format_length(length), *cells)
        tables.append(table)
    return tables
