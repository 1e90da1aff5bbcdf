"""Effective context length: per model, method and benchmark, the longest tested length whose benchmark
score (the mean of the task headlines at that length, as in the by-length table) passes a threshold.

Only benchmarks that declare ``effective_length_threshold`` get one (``report --threshold`` replaces the
declared number). The definition is the one of the paper that introduced the measure: "the maximum
length exceeding the threshold" (Hsieh et al., 2024, section 4; its Table 3: "The effective context
length is the maximum length passing this threshold"): a length that passes counts even when a shorter
one does not. Lengths where a task has no result are not tested. When no tested length passes, the
effective length is under the shortest one (``<1k``); when the longest passes, it is at least that
(``≥4k``, the paper's ``>128K``).

Beside it, the **relative** effective length (NoLiMa, Modarressi et al., ICML 2025, adobe-research/NoLiMa:
"the maximum length at which the model's score remains above 85% of its base score"): the longest tested
length whose score is at least ``fraction`` (0.85; ``report --threshold relative:0.9``) times a base
score. The base is the baseline method's score (the declared baseline unless ``report --baseline``) at
the shortest length tested for that benchmark and model, so every method is held to the unpatched
model's own short-context ability; where the baseline has no score there, each method's own score at
its shortest length. An absolute threshold such as 85.6 is never reached by small models (every method
``<1k``); the relative one still separates them. A base of 0 (or none) gives no relative length (``-``).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..benchmarks.base import Metric, benchmark_class
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
from .tables import Cell, Table, headline_metric, in_sections, slug, task_order

RELATIVE = 0.85  # NoLiMa's fraction of the base score


def declared_threshold(benchmark: str) -> float | None:
    """The benchmark's own threshold, or None when it declares no effective length."""
    cls = benchmark_class(benchmark)
    return cls.effective_length_threshold if cls is not None else None


@dataclass(frozen=True)
class EffectiveLength:
    length: int | None  # the longest tested length that passes; None: none does
    tested: tuple[int, ...]  # the lengths with a score, ascending
    threshold: float

    @property
    def at_longest(self) -> bool:
        return self.length is not None and self.length == self.tested[-1]

    def text(self) -> str:
        """``<1k`` (none passes), ``≥4k`` (the longest tested passes) or the length (``2k``)."""
        if self.length is None:
            return f"<{format_length(self.tested[0])}" if self.tested else "-"
        return ("≥" if self.at_longest else "") + format_length(self.length)

    def csv_value(self) -> object:
        """The leaderboard value: the length in tokens, or ``<N`` (N: the shortest tested) if none passes."""
        if self.length is None:
            return f"<{self.tested[0]}" if self.tested else ""
        return self.length


def effective_length(
    scores: Mapping[int, float | None], threshold: float, higher_is_better: bool = True
) -> EffectiveLength:
    """The longest length whose score exceeds ``threshold`` (is under it, for a lower-is-better score);
    lengths without a score (None, NaN) are not tested."""
    tested = tuple(sorted(n for n, v in scores.items() if v is not None and not math.isnan(v)))
    passing = [
        n
        for n in tested
        if (scores[n] > threshold if higher_is_better else scores[n] < threshold)  # type: ignore[operator]
    ]
    return EffectiveLength(max(passing) if passing else None, tested, threshold)


def length_scores(
    scores: Sequence[TaskScore],
) -> dict[tuple[str, str], dict[Variant, dict[int, float | None]]]:
    """(benchmark, model) -> variant -> length -> the mean of the task headlines (None unless every task
    of the benchmark and model has a result at that length)."""
    cells: dict[tuple[str, str], dict[tuple[Variant, int], dict[str, float]]] = defaultdict(
        lambda: defaultdict(dict)
    )
    for s in scores:
        cells[(s.benchmark, s.model)][(s.variant, s.length)][s.task] = s.score
    out: dict[tuple[str, str], dict[Variant, dict[int, float | None]]] = {}
    for key, per in cells.items():
        tasks = {t for results in per.values() for t in results}
        table: dict[Variant, dict[int, float | None]] = defaultdict(dict)
        for (variant, length), results in per.items():
            complete = all(t in results for t in tasks)
            table[variant][length] = mean([results[t] for t in tasks]) if complete else None
        out[key] = dict(table)
    return out


def relative_length(
    scores: Mapping[int, float | None], base: float | None, fraction: float, higher_is_better: bool = True
) -> EffectiveLength | None:
    """The longest length whose score is at least ``fraction`` x ``base`` (at most ``base`` / ``fraction``
    for a lower-is-better score); None without a positive base."""
    if base is None or math.isnan(base) or base <= 0:
        return None
    level = fraction * base if higher_is_better else base / fraction
    tested = tuple(sorted(n for n, v in scores.items() if v is not None and not math.isnan(v)))
    passing = [
        n
        for n in tested
        if (scores[n] >= level if higher_is_better else scores[n] <= level)  # type: ignore[operator]
    ]
    return EffectiveLength(max(passing) if passing else None, tested, level)


def relative_effective_lengths(
    scores: Sequence[TaskScore], fraction: float = RELATIVE, presentation: Presentation = DECLARED
) -> dict[tuple[str, Variant, str], EffectiveLength]:
    """(model, variant, benchmark) -> its relative effective length (module docstring), for the benchmarks
    that declare an effective length; the returned ``threshold`` is the level the scores were held to."""
    out: dict[tuple[str, Variant, str], EffectiveLength] = {}
    for (benchmark, model), per_variant in length_scores(scores).items():
        if declared_threshold(benchmark) is None:
            continue
        higher = _metric(scores, benchmark).higher_is_better
        shortest = min(
            (n for by in per_variant.values() for n, v in by.items() if v is not None), default=None
        )
        baseline = baseline_variant(per_variant, presentation)
        shared = (
            per_variant[baseline].get(shortest) if baseline is not None and shortest is not None else None
        )
        for variant, by_length in per_variant.items():
            own = by_length.get(min(by_length)) if by_length else None
            found = relative_length(by_length, shared if shared is not None else own, fraction, higher)
            if found is not None:
                out[(model, variant, benchmark)] = found
    return out


def effective_lengths(
    scores: Sequence[TaskScore], threshold: float | None = None
) -> dict[tuple[str, Variant, str], EffectiveLength]:
    """(model, variant, benchmark) -> its effective length, for the benchmarks that declare a threshold
    (``threshold`` replaces the declared one)."""
    out: dict[tuple[str, Variant, str], EffectiveLength] = {}
    for (benchmark, model), per_variant in length_scores(scores).items():
        declared = declared_threshold(benchmark)
        if declared is None:
            continue
        level = declared if threshold is None else threshold
        higher = _metric(scores, benchmark).higher_is_better
        for variant, by_length in per_variant.items():
            out[(model, variant, benchmark)] = effective_length(by_length, level, higher)
    return out


def _metric(scores: Sequence[TaskScore], benchmark: str) -> Metric:
    return headline_metric(s for s in scores if s.benchmark == benchmark)


def effective_length_tables(
    scores: Sequence[TaskScore],
    threshold: float | None = None,
    fraction: float = RELATIVE,
    presentation: Presentation = DECLARED,
) -> list[Table]:
    """One small table per benchmark (that declares a threshold) and model: methods x effective length by
    the absolute threshold and by the relative rule."""
    found = effective_lengths(scores, threshold)
    relative = relative_effective_lengths(scores, fraction, presentation)
    groups: dict[tuple[str, str], dict[Variant, EffectiveLength]] = defaultdict(dict)
    for (model, variant, benchmark), value in found.items():
        groups[(benchmark, model)][variant] = value
    tables = []
    for benchmark, model in sorted(groups):
        per = groups[(benchmark, model)]
        labels = variant_labels(per)
        level = next(iter(per.values())).threshold
        tasks = task_order(
            benchmark, {s.task for s in scores if s.benchmark == benchmark and s.model == model}
        )
        rows = []
        for v in method_order(per, presentation):
            mine = relative.get((model, v, benchmark))
            rows.append(
                (
                    labels[v],
                    [
                        Cell(per[v].length, text=per[v].text()),
                        Cell(mine.length if mine else None, text=mine.text() if mine else "-"),
                    ],
                )
            )
        what = "passes" if _metric(scores, benchmark).higher_is_better else "stays under"
        levels = sorted(
            {f"{r.threshold:.4g}" for (m, _, b), r in relative.items() if m == model and b == benchmark}
        )
        table = Table(
            key=slug(benchmark, model, "effective-length"),
            title=f"{benchmark} | {model} | effective length (threshold {level:g})",
            columns=["effective length", f"relative ({fraction:g} x base)"],
            rows=rows,
            metric=Metric("effective length"),
            section=f"{benchmark} | {model}",
        ).mark_best()
        table.notes.append(
            f"Effective length: the longest tested length whose mean over the {len(tasks)} tasks {what} "
            f"{level:g} (Hsieh et al., 2024: 'the maximum length exceeding the threshold'); "
            "<N: no tested length passes; ≥N: the longest tested length passes (--threshold sets it)."
        )
        table.notes.append(
            f"Relative: the longest tested length whose mean is at least {fraction:g} x the base score "
            "(NoLiMa, Modarressi et al., 2025), the base being the baseline method's score at the shortest "
            f"tested length (else each method's own); level{'s' if len(levels) > 1 else ''} "
            f"{', '.join(levels) or '-'} (--threshold relative:F sets the fraction; -: no positive base)."
        )
        tables.append(table)
    return tables


def with_effective_lengths(
    tables: Sequence[Table],
    scores: Sequence[TaskScore],
    threshold: float | None = None,
    fraction: float = RELATIVE,
    presentation: Presentation = DECLARED,
) -> list[Table]:
    """``tables`` with each effective-length table after the last table of its section."""
    return in_sections(tables, effective_length_tables(scores, threshold, fraction, presentation))


def parse_threshold(text: str | None) -> tuple[float | None, float]:
    """``report --threshold``: a score (``85.6``: the absolute threshold) or ``relative:F`` (the relative
    rule's fraction) -> (absolute threshold or None, fraction)."""
    if text is None:
        return None, RELATIVE
    kind, _, value = text.partition(":")
    try:
        if value and kind.strip().lower() == "relative":
            fraction = float(value)
            if not 0 < fraction <= 1:
                raise ValueError
            return None, fraction
        if not value:
            return float(text), RELATIVE
    except ValueError:
        pass
    raise LampeEvalError(
        f"--threshold {text!r}: give a score (e.g. 85.6) or relative:F with 0 < F <= 1 (e.g. relative:0.85)"
    )
