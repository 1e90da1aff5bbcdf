"""PNG plots (matplotlib, Agg backend):

- ``<benchmark>-by-length.png``: benchmark score vs context length, one line per method, one panel
  per model (the paper's Figure 4; a log axis and the cap line where the metric declares them);
- ``<benchmarks>-by-bucket.png``: mean score by input-length bucket, one bar per method (and length
  setting), one panel per model, over the benchmarks that declare ``bucket_plot`` (the paper's
  Figure 5, buckets [0, window] and window+);
- ``<benchmark>-depth-<model>.png``: score by needle depth x length, one panel per method, for the
  benchmarks that declare ``depth_key`` (:mod:`.depth`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib.ticker

from ..benchmarks.base import BENCHMARKS, benchmark_class, metric_of
from ..lengths import format_length
from ..records import SampleRecord
from .data import DECLARED, Presentation, TaskScore, mean, method_order, variant_labels, variant_of
from .depth import depth_plots
from .figure import Plot, panels, save_figure
from .tables import benchmark_score


def bucket_benchmarks() -> list[str]:
    """The registered benchmarks that take part in the bucket plot."""
    return [name for name in BENCHMARKS.names() if BENCHMARKS.get(name).bucket_plot]


def plot_by_length(
    scores: Sequence[TaskScore], benchmark: str, path: Path, presentation: Presentation = DECLARED
) -> Path | None:
    """Score vs length per method; None when the benchmark has fewer than one length per model."""
    mine = [s for s in scores if s.benchmark == benchmark]
    if not mine:
        return None
    models = sorted({s.model for s in mine})
    labels = variant_labels(s.variant for s in mine)
    metric = mine[0].metric_info()
    fig, axes = panels(len(models), 5.2, 3.8)
    for ax, model in zip(axes, models, strict=True):
        cells: dict[tuple[Any, int], dict[str, TaskScore]] = defaultdict(dict)
        for s in mine:
            if s.model == model:
                cells[(s.variant, s.length)][s.task] = s
        tasks = sorted({t for per in cells.values() for t in per})
        lengths = sorted({n for _, n in cells})
        top = 0.0
        for variant in method_order({v for v, _ in cells}, presentation):
            xs, ys = score_line([cells.get((variant, n), {}) for n in lengths], lengths, tasks)
            top = max([top, *ys])
            if xs:
                highlighted = presentation.highlighted(variant.method)
                style: dict[str, Any] = {"linewidth": 2.5, "color": "black"} if highlighted else {}
                ax.plot(xs, ys, marker="o", label=labels[variant], **style)
        ax.set_xscale("log", base=2)
        ax.set_xticks(lengths, [format_length(n) for n in lengths])
        ax.minorticks_off()
        if metric.log_scale:
            ax.set_yscale("log")
            plain = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
            ax.yaxis.set_major_formatter(plain)
            ax.yaxis.set_minor_formatter(plain)
        if metric.cap is not None and top > metric.cap / 2:  # the cap line, when the curves get near it
            ax.axhline(metric.cap, color="grey", linestyle=":", linewidth=1)
        ax.set_title(f"{benchmark} | {model}")
        ax.set_xlabel("context length (tokens)")
        what = metric.title if len(tasks) == 1 else f"mean {metric.title} ({len(tasks)} tasks)"
        ax.set_ylabel(f"{what}, {'higher' if metric.higher_is_better else 'lower'} is better")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path)


def score_line(
    cells: Sequence[dict[str, TaskScore]], lengths: Sequence[int], tasks: Sequence[str]
) -> tuple[list[int], list[float]]:
    """One method's points: the lengths whose benchmark score over ``tasks`` is a finite number."""
    xs, ys = [], []
    for n, cell in zip(lengths, cells, strict=True):
        value = benchmark_score(cell, tasks)
        if value is not None and math.isfinite(value):
            xs.append(n)
            ys.append(value)
    return xs, ys


def bucket_edges(model: str, edges: Sequence[int] | None) -> list[int]:
    if edges:
        return sorted(edges)
    from ..models import PRESETS

    preset = PRESETS.get(model)
    return [preset.pretraining_window] if preset else [8192]


def bucket_label(edges: list[int], i: int) -> str:
    low = 0 if i == 0 else edges[i - 1]
    if i == len(edges):
        return f"{format_length(low)}+"
    return f"{format_length(low)}-{format_length(edges[i])}"


def input_length_keys(benchmark: str | None) -> list[str]:
    """Meta keys that hold a sample's input length before truncation: the benchmark's own, or (a record
    of an unknown benchmark) those of every registered benchmark."""
    cls = benchmark_class(benchmark) if benchmark else None
    if cls is not None:
        return [cls.input_length_key] if cls.input_length_key else []
    keys = (BENCHMARKS.get(name).input_length_key for name in BENCHMARKS.names())
    return [k for k in keys if k]


def input_tokens(record: SampleRecord) -> int | None:
    """The sample's input length before truncation when the benchmark records it (its
    ``input_length_key``), else the tokens given to the model: every method's run of a sample then
    falls in the same bucket, as in the paper's Figure 5."""
    meta = record.meta
    for key in input_length_keys(record.benchmark):
        if isinstance(meta.get(key), (int, float)):
            return int(meta[key])
    return int(record.prompt_tokens) if record.prompt_tokens is not None else None


def plot_by_bucket(
    records: Sequence[SampleRecord],
    benchmarks: Sequence[str],
    path: Path,
    edges: Sequence[int] | None = None,
    title: str = "",
    presentation: Presentation = DECLARED,
) -> Path | None:
    """Mean headline score per input-length bucket (task-macro average), per method and length."""
    mine = [r for r in records if r.benchmark in benchmarks and input_tokens(r) is not None]
    if not mine:
        return None
    models = sorted({r.model for r in mine})
    labels = variant_labels(variant_of(r) for r in mine)
    fig, axes = panels(len(models), 5.2, 3.8)
    for ax, model in zip(axes, models, strict=True):
        cuts = bucket_edges(model, edges)
        # (variant, length) -> bucket -> task -> headline scores
        table: dict[tuple[Any, int], dict[int, dict[str, list[float]]]] = defaultdict(
            lambda: defaultdict(lambda: defaultdict(list))
        )
        metric = None
        for r in mine:
            if r.model != model or not r.scores:
                continue
            metric = metric or metric_of(r.benchmark, next(iter(r.scores)))
            bucket = sum(int(input_tokens(r) or 0) > c for c in cuts)
            table[(variant_of(r), r.length)][bucket][f"{r.benchmark}/{r.task}"].append(
                next(iter(r.scores.values()))
            )
        rank = {v: i for i, v in enumerate(method_order({v for v, _ in table}, presentation))}
        keys = sorted(table, key=lambda k: (rank[k[0]], k[1]))
        lengths_of: dict[Any, set[int]] = defaultdict(set)
        for variant, n in keys:
            lengths_of[variant].add(n)
        width = 0.8 / max(1, len(keys))
        for k, (variant, n) in enumerate(keys):
            xs, ys = [], []
            for b in range(len(cuts) + 1):
                per_task = table[(variant, n)].get(b)
                if per_task:
                    xs.append(b + (k - (len(keys) - 1) / 2) * width)
                    ys.append(mean([mean(v) for v in per_task.values()]))
            name = labels[variant] + (f" ({format_length(n)})" if len(lengths_of[variant]) > 1 else "")
            ax.bar(xs, ys, width=width, label=name)
        ax.set_xticks(range(len(cuts) + 1), [bucket_label(cuts, b) for b in range(len(cuts) + 1)])
        ax.set_title(f"{title or '/'.join(benchmarks)} | {model}")
        ax.set_xlabel("input length (tokens)")
        arrow = "higher is better" if metric is None or metric.higher_is_better else "lower is better"
        ax.set_ylabel(f"mean score ({arrow})")
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, path)


def make_plots(
    scores: Sequence[TaskScore],
    records: Sequence[SampleRecord],
    out: Path,
    *,
    edges: Sequence[int] | None = None,
    presentation: Presentation = DECLARED,
) -> list[Plot]:
    plots: list[Plot] = []
    for benchmark in sorted({s.benchmark for s in scores}):
        lengths = {s.length for s in scores if s.benchmark == benchmark}
        if len(lengths) >= 2:
            made = plot_by_length(scores, benchmark, out / f"{benchmark}-by-length.png", presentation)
            if made:
                plots.append(Plot(made, (benchmark,), f"{benchmark}: score by context length, per method"))
    seen = {r.benchmark for r in records}
    present = [b for b in bucket_benchmarks() if b in seen]
    if present:
        path = out / f"{'-'.join(present)}-by-bucket.png"
        made = plot_by_bucket(records, present, path, edges, presentation=presentation)
        if made:
            what = ", ".join(present)
            plots.append(Plot(made, tuple(present), f"{what}: mean score by input-length bucket, per method"))
    plots.extend(depth_plots(records, out))
    return plots
