"""What a model gets from its context: the closed-book control, the context gain and LongScore.

**Closed book.** A run with the benchmark's closed-book option (``--opt no_context=true``: the same
samples, the context removed from each prompt; :func:`~lampe_eval.benchmarks.base.is_closed_book`) is not
a method of its own: its records are set apart from the others and shown in a table of their own
(LV-Eval and 100-LongBench separate what a model answers from its parameters from what it reads).

**Context gain** (per model, method, benchmark and length): the score minus the closed-book score of the
same samples, so that a positive gain is what reading the context added (for a lower-is-better metric,
the closed-book score minus the score). The closed-book run paired with a method is its own (same method
and parameters) where it ran, else the baseline method's, else the first closed-book run in method order;
the table says which. Its 95% interval is the paired bootstrap of the difference on the samples both ran
(:meth:`~lampe_eval.report.uncertainty.Bootstrap.difference`: the two runs share their sample ids, so they
draw the same resamples).

**LongScore** (100-LongBench, Yang et al., Findings of ACL 2025, arXiv 2505.19293; uservan/100-LongBench
``analysis/utils.py``, ``rank``): ``LC_l = 100 (S_l - Base) / Base`` at each length ``l`` and LongScore the
mean of ``LC_l`` over the lengths past the base. The paper's Base is the mean score at its shortest
lengths (2K-6K; the code's first length bucket, 0-8K); here it is the method's own benchmark score at the
shortest length it was tested at, so a method is measured against its own short-context ability. Defined
for higher-is-better scores with a positive base and at least two lengths.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..benchmarks.base import Metric, is_closed_book
from ..lengths import format_length
from ..records import SampleRecord
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
from .effective import length_scores
from .tables import (
    Cell,
    Cells,
    Table,
    by_length_table,
    headline_metric,
    in_sections,
    index_by_section,
    slug,
    task_order,
)
from .uncertainty import Bootstrap, Interval

CLOSED_BOOK_LABEL = "closed-book"


def split_closed_book(records: Iterable[SampleRecord]) -> tuple[list[SampleRecord], list[SampleRecord]]:
    """(the records of the methods, the closed-book records), each in its original order."""
    runs: list[SampleRecord] = []
    closed: list[SampleRecord] = []
    for record in records:
        (closed if is_closed_book(record.benchmark, record.options) else runs).append(record)
    return runs, closed


@dataclass(frozen=True)
class Gain:
    """One cell of the context gain: (score - closed-book score), oriented so positive helps."""

    value: float
    interval: Interval | None
    partner: Variant  # the closed-book run it was set against
    closed_score: float


def partner(
    variant: Variant, closed: Iterable[Variant], presentation: Presentation = DECLARED
) -> Variant | None:
    """The closed-book run a method is set against (module docstring), or None when none ran."""
    ran = method_order(set(closed), presentation)
    if variant in ran:
        return variant
    return baseline_variant(ran, presentation) or (ran[0] if ran else None)


def _orientation(parts: Sequence[TaskScore]) -> int:
    return 1 if parts[0].metric_info().higher_is_better else -1


def gain(
    runs: Sequence[TaskScore],
    closed: Sequence[TaskScore],
    partner_variant: Variant,
    bootstrap: Bootstrap | None,
) -> Gain | None:
    """The context gain of ``runs`` (a cell's task results) against the same tasks and lengths of
    ``closed``; None when a stratum has no closed-book result."""
    by = {(s.task, s.length): s for s in closed}
    pairs = [(s, by.get((s.task, s.length))) for s in runs]
    if not pairs or any(c is None for _, c in pairs):
        return None
    matched = [c for _, c in pairs if c is not None]
    sign = _orientation(runs)
    score, closed_score = mean([s.score for s in runs]), mean([c.score for c in matched])
    interval = None
    if bootstrap is not None:
        difference = bootstrap.difference(runs, matched)
        if difference.tested:
            low, high = sorted((sign * difference.low, sign * difference.high))
            interval = Interval(low, high, None)
    return Gain(sign * (score - closed_score), interval, partner_variant, closed_score)


def context_gain_tables(
    scores: Sequence[TaskScore],
    closed: Sequence[TaskScore],
    bootstrap: Bootstrap | None = None,
    presentation: Presentation = DECLARED,
) -> list[Table]:
    """Per benchmark and model with closed-book results: the closed-book scores by length, and each
    method's context gain by length (with its paired interval) and averaged over the lengths."""
    runs_index, closed_index = index_by_section(scores), index_by_section(closed)
    tables: list[Table] = []
    for key in sorted(set(runs_index) & set(closed_index)):
        benchmark, model = key
        runs, shut = runs_index[key], closed_index[key]
        tasks = task_order(benchmark, {t for per in runs.values() for t in per})
        closed_variants = method_order({v for v, _ in shut}, presentation)
        metric = headline_metric(ts for per in runs.values() for ts in per.values())
        labels = {v: f"{label} ({CLOSED_BOOK_LABEL})" for v, label in variant_labels(closed_variants).items()}
        table = by_length_table(benchmark, model, shut, tasks, closed_variants, labels, metric, key="")
        table.key, table.section = slug(benchmark, model, "closed-book"), f"{benchmark} | {model}"
        table.title = f"{benchmark} | {model} | closed-book score by length (--opt no_context=true)"
        if bootstrap is not None:
            for _, cells in table.rows:
                for cell in cells:
                    cell.interval = bootstrap.interval_of(cell.parts) if cell.parts else None
        tables.append(table)
        tables.append(_gain_table(benchmark, model, runs, shut, bootstrap, presentation))
    return tables


@dataclass(frozen=True)
class _CellGain:
    gain: Gain
    runs: list[TaskScore]  # the task results it was computed on, and their closed-book partners
    closed: list[TaskScore]


def _cell_gains(
    runs: Cells, shut: Cells, bootstrap: Bootstrap | None, presentation: Presentation
) -> dict[tuple[Variant, int], _CellGain]:
    """(variant, length) -> its context gain over the tasks that ran there (each needs its closed-book
    result): the one computation behind the table and the leaderboard's columns."""
    out: dict[tuple[Variant, int], _CellGain] = {}
    closed_variants = {w for w, _ in shut}
    for (variant, length), per in runs.items():
        other = partner(variant, closed_variants, presentation)
        theirs = shut.get((other, length), {}) if other else {}
        ran = [per[t] for t in sorted(per) if not math.isnan(per[t].score)]
        if other is None or not ran or any(s.task not in theirs for s in ran):
            continue
        matched = [theirs[s.task] for s in ran]
        found = gain(ran, matched, other, bootstrap)
        if found is not None:
            out[(variant, length)] = _CellGain(found, ran, matched)
    return out


def _gain_table(
    benchmark: str,
    model: str,
    runs: Cells,
    shut: Cells,
    bootstrap: Bootstrap | None,
    presentation: Presentation,
) -> Table:
    variants = method_order({v for v, _ in runs}, presentation)
    labels = variant_labels(variants)
    closed_labels = variant_labels({v for v, _ in shut})
    lengths = sorted({n for _, n in runs} & {n for _, n in shut})
    cells = _cell_gains(runs, shut, bootstrap, presentation)
    rows, partners = [], set()
    for v in variants:
        found = [cells.get((v, n)) for n in lengths]
        row = [_cell(c.gain if c else None) for c in found]
        every = [c for c in found if c is not None]
        # the average over the lengths: the pooled samples of every length, only when all have a gain
        other = every[0].gain.partner if every else None
        whole = (
            gain([s for c in every for s in c.runs], [s for c in every for s in c.closed], other, bootstrap)
            if other is not None and len(every) == len(found)
            else None
        )
        row.append(_cell(whole))
        if other is not None:
            partners.add(f"{labels[v]}: {closed_labels[other]}'s")
        rows.append((labels[v], row))
    table = Table(
        key=slug(benchmark, model, "context-gain"),
        title=f"{benchmark} | {model} | context gain by length (score - closed-book score)",
        columns=[*(format_length(n) for n in lengths), "Avg."],
        rows=rows,
        metric=Metric("context gain"),
        section=f"{benchmark} | {model}",
        baseline=_baseline_label(variants, labels, presentation),
    ).mark_best()
    table.notes.append(
        "Context gain: the mean over the tasks of the score minus the closed-book score of the same samples "
        "(--opt no_context=true; positive: the context helped; for a lower-is-better metric the closed-book "
        "score minus the score); [low, high]: the paired bootstrap of the difference on the samples both "
        f"ran. Closed-book run set against each method: {'; '.join(sorted(partners)) or '-'}."
    )
    return table


def _baseline_label(
    variants: Iterable[Variant], labels: dict[Variant, str], presentation: Presentation
) -> str | None:
    base = baseline_variant(variants, presentation)
    return labels[base] if base is not None else None


def _cell(found: Gain | None) -> Cell:
    if found is None:
        return Cell()
    return Cell(found.value, interval=found.interval)


def gains_by_length(
    scores: Sequence[TaskScore],
    closed: Sequence[TaskScore],
    bootstrap: Bootstrap | None = None,
    presentation: Presentation = DECLARED,
) -> dict[tuple[str, Variant, str, int], Gain]:
    """(model, variant, benchmark, length) -> the context gain over the tasks that ran there (the
    leaderboard's columns; the same values as the context-gain table's cells)."""
    runs_index, closed_index = index_by_section(scores), index_by_section(closed)
    out: dict[tuple[str, Variant, str, int], Gain] = {}
    for benchmark, model in set(runs_index) & set(closed_index):
        found = _cell_gains(
            runs_index[(benchmark, model)], closed_index[(benchmark, model)], bootstrap, presentation
        )
        for (variant, length), cell in found.items():
            out[(model, variant, benchmark, length)] = cell.gain
    return out


# ------------------------------------------------------------------------------------------- LongScore
@dataclass(frozen=True)
class LongScore:
    base_length: int
    base: float
    by_length: dict[int, float]  # LC_l, in percent of the base, for each longer length

    @property
    def value(self) -> float:
        return mean(list(self.by_length.values()))


def long_score(by_length: dict[int, float | None], higher_is_better: bool = True) -> LongScore | None:
    """LongScore of one method's benchmark scores by length (module docstring), or None where it is not
    defined (a lower-is-better score, no positive base, a single length)."""
    tested = sorted(n for n, v in by_length.items() if v is not None and not math.isnan(v))
    if not higher_is_better or len(tested) < 2:
        return None
    base = float(by_length[tested[0]])  # type: ignore[arg-type]
    if base <= 0:
        return None
    lc = {n: 100.0 * (float(by_length[n]) - base) / base for n in tested[1:]}  # type: ignore[arg-type]
    return LongScore(tested[0], base, lc)


def long_scores(scores: Sequence[TaskScore]) -> dict[tuple[str, Variant, str], LongScore]:
    """(model, variant, benchmark) -> its LongScore, where defined."""
    out: dict[tuple[str, Variant, str], LongScore] = {}
    for (benchmark, model), per_variant in length_scores(scores).items():
        higher = next(s for s in scores if s.benchmark == benchmark).metric_info().higher_is_better
        for variant, by_length in per_variant.items():
            found = long_score(by_length, higher)
            if found is not None:
                out[(model, variant, benchmark)] = found
    return out


def long_score_tables(scores: Sequence[TaskScore], presentation: Presentation = DECLARED) -> list[Table]:
    """Per benchmark and model where it is defined: each method's base, LC_l per length and LongScore."""
    found = long_scores(scores)
    groups: dict[tuple[str, str], dict[Variant, LongScore]] = defaultdict(dict)
    for (model, variant, benchmark), value in found.items():
        groups[(benchmark, model)][variant] = value
    tables = []
    for benchmark, model in sorted(groups):
        per = groups[(benchmark, model)]
        labels = variant_labels(per)
        lengths = sorted({n for ls in per.values() for n in ls.by_length})
        rows = []
        for v in method_order(per, presentation):
            mine = per[v]
            cells = [Cell(mine.base, text=f"{mine.base:.2f} ({format_length(mine.base_length)})")]
            cells += [Cell(mine.by_length.get(n)) for n in lengths]
            rows.append((labels[v], [*cells, Cell(mine.value)]))
        table = Table(
            key=slug(benchmark, model, "longscore"),
            title=f"{benchmark} | {model} | LongScore (LC_l = 100 (S_l - base) / base)",
            columns=["base", *(f"LC {format_length(n)}" for n in lengths), "LongScore"],
            rows=rows,
            metric=Metric("LongScore"),
            section=f"{benchmark} | {model}",
            baseline=_baseline_label(per, labels, presentation),
        )
        table.notes.append(
            "LongScore (100-LongBench, Yang et al., 2025): the mean of LC_l over the lengths past the base; "
            "base: each method's own benchmark score at its shortest tested length (the paper: the mean "
            "at 2K-6K); no interval."
        )
        tables.append(table)
    return tables


def with_context_measures(
    tables: Sequence[Table],
    scores: Sequence[TaskScore],
    closed: Sequence[TaskScore],
    bootstrap: Bootstrap | None = None,
    presentation: Presentation = DECLARED,
) -> list[Table]:
    """``tables`` with each section's closed-book, context-gain and LongScore tables after its last table."""
    extra = context_gain_tables(scores, closed, bootstrap, presentation) + long_score_tables(
        scores, presentation
    )
    return in_sections(tables, extra)
