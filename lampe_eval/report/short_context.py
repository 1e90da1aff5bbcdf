"""Short context: what a method costs inside the model's window.

A method that extends the context may change what the model does at lengths it already handled (a static
YaRN rescales every frequency, STRING and DCA move positions the model was trained on). For each model,
benchmark and method, the report compares the method with the baseline method (the unmodified model's, or
``report --baseline``: :class:`~lampe_eval.report.data.Presentation`) at the tested lengths
within the model's pretraining window (length <= window), **on the same samples**: per task and length
(a stratum), the samples both ran, scored with the benchmark's own aggregate; the scores are the mean over
the strata (a task at one length counts once), the difference is the method's minus the baseline's (in
the metric's own units: for a lower-is-better metric a positive difference is a cost),
and its 95% interval is the paired bootstrap of :meth:`~lampe_eval.report.uncertainty.Bootstrap.difference`
(both runs draw the same resamples of the samples they share; fewer than 2 common samples in a stratum:
no interval). The same is given per in-window length.

**The window** is the model's pretraining window as the runner knows it without loading the model
(:func:`lampe_eval.models.known_window`: a preset's, a local directory's config, a hub id's cached
config); records do not store it. A model whose window only loading would tell gets no comparison (one
warning line says so when there was something to compare). Experiment files can ask for the window as a
length (``lengths: [4k, window]``: :mod:`lampe_eval.runner.experiment`).

Shown as a table per benchmark and model (``short context``) and in the leaderboard's ``window`` and
``short_context_*`` columns (the same on every length row of a method).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..benchmarks.base import Metric, resample
from ..errors import LampeEvalError
from ..lengths import format_length
from .data import (
    DECLARED,
    Presentation,
    TaskScore,
    Variant,
    baseline_variant,
    mean,
    method_order,
    variant_labels,
)
from .tables import Cell, Cells, Table, headline_metric, in_sections, index_by_section, slug
from .uncertainty import Bootstrap, Interval

SECTION_TITLE = "short context"


def model_windows(models: Iterable[str]) -> dict[str, int]:
    """model -> its pretraining window, for the models whose window is known without loading them
    (:func:`lampe_eval.models.known_window`); the others are left out."""
    from ..models import known_window

    out: dict[str, int] = {}
    for model in sorted(set(models)):
        try:
            window = known_window(model)
        except (LampeEvalError, OSError):  # not a name the runner can resolve here
            window = None
        if window:
            out[model] = int(window)
    return out


@dataclass(frozen=True)
class Paired:
    """A method against the baseline on the samples both ran, over some strata (task x length)."""

    score: float  # the method's mean over the strata (each on the common samples)
    baseline_score: float  # the baseline's, on the same samples
    interval: Interval | None  # of the difference (paired bootstrap); None: intervals off or < 2 pairs
    pairs: int  # fewest common samples of a stratum
    strata: int

    @property
    def difference(self) -> float:
        return self.score - self.baseline_score


@dataclass(frozen=True)
class ShortContext:
    """One method's in-window comparison with the baseline (per model and benchmark)."""

    window: int
    baseline: Variant
    lengths: tuple[int, ...]  # the in-window lengths both ran (with at least one common task)
    pooled: Paired  # over every in-window length (the baseline's own row: its score alone)
    by_length: dict[int, Paired]

    def is_baseline(self, variant: Variant) -> bool:
        return variant == self.baseline


def _on(score: TaskScore, ids: tuple[str, ...]) -> float:
    """The benchmark's aggregate of the task's headline over the samples ``ids``."""
    by_id = score.scores_by_id()
    chosen = [by_id[i] for i in ids]
    return float(resample(score.benchmark, score.task, chosen, np.ones((1, len(ids))), score.metric)[0])


def paired(
    mine: Sequence[TaskScore], theirs: Sequence[TaskScore], bootstrap: Bootstrap | None = None
) -> Paired | None:
    """``mine`` against ``theirs`` on the strata (task, length) both have, each on the samples both ran;
    None when no stratum has a common sample."""
    by = {(s.task, s.length): s for s in theirs}
    matched: list[tuple[TaskScore, TaskScore, tuple[str, ...]]] = []
    for a in mine:
        b = by.get((a.task, a.length))
        if b is None or math.isnan(a.score) or math.isnan(b.score):
            continue
        common = tuple(sorted(set(a.sample_ids) & set(b.sample_ids)))
        if common:
            matched.append((a, b, common))
    if not matched:
        return None
    score = mean([_on(a, common) for a, _, common in matched])
    base = mean([_on(b, common) for _, b, common in matched])
    interval = None
    if bootstrap is not None:
        found = bootstrap.difference([a for a, _, _ in matched], [b for _, b, _ in matched])
        if found.tested:
            interval = Interval(found.low, found.high, None)
    return Paired(score, base, interval, min(len(c) for _, _, c in matched), len(matched))


def _section(
    cells: Cells, window: int, bootstrap: Bootstrap | None, presentation: Presentation
) -> dict[Variant, ShortContext]:
    """Each variant of one (benchmark, model) against the baseline at the lengths <= ``window``."""
    variants = {v for v, _ in cells}
    base = baseline_variant(variants, presentation)
    if base is None:
        return {}
    out: dict[Variant, ShortContext] = {}
    own = [s for (v, n), per in cells.items() if v == base and n <= window for s in per.values()]
    own = [s for s in own if not math.isnan(s.score)]
    if own:  # the baseline's own row: its in-window score (over every sample it ran)
        itself = Paired(mean([s.score for s in own]), math.nan, None, min(s.samples for s in own), len(own))
        out[base] = ShortContext(window, base, tuple(sorted({s.length for s in own})), itself, {})
    for variant in method_order(variants - {base}, presentation):
        by_length: dict[int, Paired] = {}
        for n in sorted(n for v, n in cells if v == variant and n <= window and (base, n) in cells):
            found = paired(list(cells[(variant, n)].values()), list(cells[(base, n)].values()), bootstrap)
            if found is not None:
                by_length[n] = found
        if not by_length:
            continue
        mine = [s for n in by_length for s in cells[(variant, n)].values()]
        theirs = [s for n in by_length for s in cells[(base, n)].values()]
        pooled = paired(mine, theirs, bootstrap)
        if pooled is not None:
            out[variant] = ShortContext(window, base, tuple(by_length), pooled, by_length)
    return out


def short_context(
    scores: Sequence[TaskScore],
    windows: Mapping[str, int],
    bootstrap: Bootstrap | None = None,
    presentation: Presentation = DECLARED,
) -> dict[tuple[str, Variant, str], ShortContext]:
    """(model, variant, benchmark) -> its in-window comparison with the baseline (module docstring), for
    the models in ``windows`` (:func:`model_windows`)."""
    out: dict[tuple[str, Variant, str], ShortContext] = {}
    for (benchmark, model), cells in index_by_section(scores).items():
        if model in windows:
            for variant, found in _section(cells, windows[model], bootstrap, presentation).items():
                out[(model, variant, benchmark)] = found
    return out


def missing_windows(
    scores: Sequence[TaskScore], windows: Mapping[str, int], presentation: Presentation
) -> list[str]:
    """One warning per model without a known window whose results had something to compare."""
    notes = []
    for model in sorted({s.model for s in scores} - set(windows)):
        variants = {s.variant for s in scores if s.model == model}
        if baseline_variant(variants, presentation) is not None and len(variants) > 1:
            notes.append(
                f"model {model!r}: its pretraining window is not known without loading it (a hub id not "
                "in the local cache, a GGUF file, a name this machine cannot resolve): no short-context "
                "comparison"
            )
    return notes


def short_context_tables(
    scores: Sequence[TaskScore],
    windows: Mapping[str, int],
    bootstrap: Bootstrap | None = None,
    presentation: Presentation = DECLARED,
) -> list[Table]:
    """Per benchmark and model with an in-window comparison: each method's score and the baseline's on
    the same samples within the window, their difference with its paired interval, and the difference
    at each in-window length."""
    found = short_context(scores, windows, bootstrap, presentation)
    groups: dict[tuple[str, str], dict[Variant, ShortContext]] = {}
    for (model, variant, benchmark), value in found.items():
        groups.setdefault((benchmark, model), {})[variant] = value
    # a section where only the baseline ran within the window compares nothing
    groups = {key: per for key, per in groups.items() if any(not v.is_baseline(k) for k, v in per.items())}
    tables = []
    for benchmark, model in sorted(groups):
        per = groups[(benchmark, model)]
        first = next(v for k, v in per.items() if not v.is_baseline(k))
        labels = variant_labels([*per, first.baseline])
        base = labels[first.baseline]
        lengths = sorted({n for item in per.values() for n in item.lengths})
        metric = headline_metric(s for s in scores if s.benchmark == benchmark and s.model == model)
        rows = []
        for variant in method_order(per, presentation):
            item = per[variant]
            pooled = item.pooled
            if item.is_baseline(variant):
                rows.append(
                    (labels[variant], [Cell(pooled.score), *(Cell() for _ in range(2 + len(lengths)))])
                )
                continue
            cells = [
                Cell(pooled.score),
                Cell(pooled.baseline_score),
                Cell(pooled.difference, interval=pooled.interval),
            ]
            for n in lengths:
                at = item.by_length.get(n)
                cells.append(Cell(at.difference, interval=at.interval) if at else Cell())
            rows.append((labels[variant], cells))
        table = Table(
            key=slug(benchmark, model, "short-context"),
            title=(
                f"{benchmark} | {model} | {SECTION_TITLE}: within the window "
                f"({format_length(first.window)}), against {base} on the same samples"
            ),
            columns=[
                "score",
                f"{base} (same samples)",
                "difference",
                *(f"diff {format_length(n)}" for n in lengths),
            ],
            rows=rows,
            metric=Metric("difference", higher_is_better=metric.higher_is_better),
            section=f"{benchmark} | {model}",
            baseline=base,
        ).mark_best()
        for _, cells in table.rows:
            cells[1].bold = False  # the baseline's own score is no ranking of the methods
        direction = "higher is better" if metric.higher_is_better else "lower is better: positive is a cost"
        tested = ", ".join(format_length(n) for n in lengths)
        table.notes.append(
            f"Short context: each method at the tested lengths within {model}'s pretraining window "
            f"({first.window} tokens; lengths {tested}) against {base} on the samples both ran (per task "
            f"and length; a task at one length counts once): score, {base}'s score on the same samples, "
            f"difference (method - {base}; {direction}), then the difference at each length."
            + (
                f" [low, high]: the paired bootstrap of the difference ({bootstrap.settings.describe()}); "
                "none under 2 common samples."
                if bootstrap
                else ""
            )
        )
        tables.append(table)
    return tables


def with_short_context(
    tables: Sequence[Table],
    scores: Sequence[TaskScore],
    windows: Mapping[str, int],
    bootstrap: Bootstrap | None = None,
    presentation: Presentation = DECLARED,
) -> list[Table]:
    """``tables`` with each section's short-context table after its last table."""
    return in_sections(tables, short_context_tables(scores, windows, bootstrap, presentation))


SHORT_CONTEXT_COLUMNS = [
    "window",
    "short_context_score",
    "short_context_baseline_score",
    "short_context_diff",
    "short_context_diff_ci_low",
    "short_context_diff_ci_high",
]


def short_context_fields(found: ShortContext | None, window: int | None) -> dict[str, object]:
    """The leaderboard's columns for one (model, variant, benchmark)."""
    out: dict[str, object] = dict.fromkeys(SHORT_CONTEXT_COLUMNS, "")
    if window is not None:
        out["window"] = window
    if found is None:
        return out
    pooled = found.pooled
    if math.isnan(pooled.baseline_score):  # the baseline's own row: its in-window score
        out["short_context_score"] = _rounded(pooled.score)
        return out
    interval = pooled.interval
    out.update(
        short_context_score=_rounded(pooled.score),
        short_context_baseline_score=_rounded(pooled.baseline_score),
        short_context_diff=_rounded(pooled.difference),
        short_context_diff_ci_low=_rounded(interval.low) if interval else "",
        short_context_diff_ci_high=_rounded(interval.high) if interval else "",
    )
    return out


def _rounded(value: float) -> object:
    return round(value, 6) if math.isfinite(value) else ""
