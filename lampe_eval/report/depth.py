"""Needle depth x context length heat maps, for the benchmarks that declare ``depth_key`` (the sample meta
key of the needle's depth: a fraction of the context in [0, 1], or a list of them when several needles
answer).

:func:`depth_grids` is the data (a pure function of the records): per benchmark, model and method, the
headline score by depth bucket (``buckets`` equal slices of [0, 1]; depth 1 falls in the last) and length,
the task-macro average (each task's mean over its samples in the cell, then the mean over tasks). A sample
with several needles counts once in each bucket one of them falls in. :func:`depth_plots` draws one PNG per
benchmark and model, ``<benchmark>-depth-<model>.png``: a panel per method, one color scale for all.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..benchmarks.base import benchmark_class, metric_of
from ..lengths import format_length
from ..records import SampleRecord
from .data import Variant, mean, method_order, variant_labels, variant_of
from .figure import Plot, panels, plt, save_figure
from .tables import slug

BUCKETS = 10


def depth_key(benchmark: str) -> str | None:
    cls = benchmark_class(benchmark)
    return cls.depth_key if cls is not None else None


def depths_of(meta: Mapping[str, Any], key: str) -> list[float]:
    """A record's needle depths in [0, 1] (a number or a list under ``meta[key]``; others dropped)."""
    value = meta.get(key)
    values = value if isinstance(value, list) else [value]
    return [
        float(v)
        for v in values
        if isinstance(v, (int, float)) and not isinstance(v, bool) and 0.0 <= float(v) <= 1.0
    ]


def depth_bucket(depth: float, buckets: int = BUCKETS) -> int:
    return min(int(depth * buckets), buckets - 1)


def bucket_label(bucket: int, buckets: int = BUCKETS) -> str:
    return f"{100 * bucket / buckets:.0f}-{100 * (bucket + 1) / buckets:.0f}%"


@dataclass
class DepthGrid:
    """One method's scores: ``values[b][i]`` at depth bucket b and ``lengths[i]`` (None: no sample)."""

    benchmark: str
    model: str
    variant: Variant
    label: str
    lengths: list[int]
    buckets: int
    values: list[list[float | None]]
    samples: list[list[int]] = field(default_factory=list)  # the samples behind each value
    metric: str = ""  # the headline metric (of the first record)


def depth_grids(records: Sequence[SampleRecord], buckets: int = BUCKETS) -> list[DepthGrid]:
    """Every (benchmark that declares a depth key, model, method) with depth-tagged records: its grid of
    headline scores by depth bucket and length (lengths shared by the benchmark's and model's methods)."""
    # (benchmark, model) -> variant -> (bucket, length) -> task -> scores
    cells: dict[tuple[str, str], dict[Variant, dict[tuple[int, int], dict[str, list[float]]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    )
    metrics: dict[tuple[str, str], str] = {}
    for r in records:
        key = depth_key(r.benchmark)
        if key is None or not r.scores:
            continue
        depths = depths_of(r.meta, key)
        score = float(next(iter(r.scores.values())))
        metrics.setdefault((r.benchmark, r.model), next(iter(r.scores)))
        for bucket in sorted({depth_bucket(d, buckets) for d in depths}):
            cells[(r.benchmark, r.model)][variant_of(r)][(bucket, r.length)][r.task].append(score)
    grids = []
    for benchmark, model in sorted(cells):
        per_variant = cells[(benchmark, model)]
        labels = variant_labels(per_variant)
        lengths = sorted({n for per in per_variant.values() for _, n in per})
        for variant in method_order(per_variant):
            per = per_variant[variant]
            values: list[list[float | None]] = []
            counts: list[list[int]] = []
            for b in range(buckets):
                tasks = [per.get((b, n), {}) for n in lengths]
                values.append([mean([mean(v) for v in t.values()]) if t else None for t in tasks])
                counts.append([sum(len(v) for v in t.values()) for t in tasks])
            grids.append(
                DepthGrid(
                    benchmark, model, variant, labels[variant], lengths, buckets, values, counts,
                    metrics[(benchmark, model)],
                )
            )  # fmt: skip
    return grids


def draw_depth_grids(grids: Sequence[DepthGrid], path: Path) -> Path:
    """One panel per method (rows: depth buckets, 0% at the top; columns: lengths), one color scale."""
    first = grids[0]
    numbers = [v for g in grids for row in g.values for v in row if v is not None and math.isfinite(v)]
    if numbers and min(numbers) >= 0 and max(numbers) <= 100:  # a 0-100 score: the whole scale
        low, high = 0.0, 100.0
    else:
        low, high = min(numbers, default=0.0), max(numbers, default=1.0)
    higher = metric_of(first.benchmark, first.metric).higher_is_better
    cols = min(len(grids), 3)
    fig, axes = panels(len(grids), 4.4, 3.9, pad=1.2, layout="constrained")
    cmap = plt.get_cmap("RdYlGn" if higher else "RdYlGn_r").with_extremes(bad="#dddddd")
    image = None
    for ax, grid in zip(axes, grids, strict=True):
        data = np.array([[math.nan if v is None else v for v in row] for row in grid.values], dtype=float)
        image = ax.imshow(np.ma.masked_invalid(data), cmap=cmap, vmin=low, vmax=high, aspect="auto")
        if data.size <= 200:
            for (b, i), value in np.ndenumerate(data):
                if math.isfinite(value):
                    ax.text(i, b, f"{value:.0f}", ha="center", va="center", fontsize=7)
        ax.set_xticks(range(len(grid.lengths)), [format_length(n) for n in grid.lengths])
        first_column = axes.index(ax) % cols == 0
        labels = [bucket_label(b, grid.buckets) for b in range(grid.buckets)] if first_column else []
        ax.set_yticks(range(grid.buckets), labels)
        ax.set_title(f"{grid.benchmark} | {grid.label} | {grid.model}", fontsize=10)
        ax.set_xlabel("context length (tokens)")
        if first_column:
            ax.set_ylabel("needle depth (0% = start of the context)")
    arrow = "higher" if higher else "lower"
    assert image is not None  # (grids is never empty)
    fig.colorbar(image, ax=axes, shrink=0.8, label=f"mean {first.metric or 'score'} ({arrow} is better)")
    return save_figure(fig, path)


def depth_plots(records: Sequence[SampleRecord], out: Path, buckets: int = BUCKETS) -> list[Plot]:
    """``<benchmark>-depth-<model>.png`` for each benchmark (that declares a depth key) and model."""
    by_figure: dict[tuple[str, str], list[DepthGrid]] = defaultdict(list)
    for grid in depth_grids(records, buckets):
        by_figure[(grid.benchmark, grid.model)].append(grid)
    plots = []
    for (benchmark, model), grids in sorted(by_figure.items()):
        path = draw_depth_grids(grids, out / f"{slug(benchmark, 'depth', model)}.png")
        caption = (
            f"{benchmark} | {model}: mean score by needle depth ({buckets} buckets, 0% = start of the "
            "context) and context length, one panel per method, one color scale (grey: no sample)"
        )
        plots.append(Plot(path, (benchmark,), caption))
    return plots
