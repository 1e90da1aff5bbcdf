"""The leaderboard CSV: one row per model x method variant x benchmark x length.

Columns (stable; new ones are only ever appended at the end):

==================  ==========================================================================
model               model preset / id as run
method              method name
variant             display name: the method, plus its explicit parameters when several variants ran
variant_params      JSON of the explicitly set parameters (``{}``: the method's configured defaults)
benchmark           benchmark name
length              target context length in tokens
length_label        the same as written on the command line (``16k``)
metric              headline metric of the benchmark's tasks (as the benchmark names it)
higher_is_better    ``true`` / ``false`` (as the benchmark declares the metric)
score               mean of the task-level headline over the tasks that ran (empty if none)
tasks               number of tasks with results
samples             number of samples behind the score
seconds_per_sample  mean wall time of a sample
git                 code revision(s) that produced the samples, ``;``-separated
stderr              bootstrap standard error of ``score`` (empty: intervals off, or under 2 samples)
ci_low              lower end of its 95% bootstrap interval (samples resampled per task)
ci_high             upper end of it
effective_length    the longest tested length whose benchmark score passes the benchmark's threshold
                    (``report --threshold``; :mod:`.effective`), the same on every length row of the
                    method; ``<N`` when no tested length passes (N the shortest); empty where the
                    benchmark declares no effective length
effective_length_relative  the longest tested length whose score is at least 0.85 x the base score (the
                    baseline method's at the shortest tested length; NoLiMa's rule; ``report --threshold
                    relative:F``); ``<N`` as above; empty without a positive base or a declared effective
                    length
closed_book_score   the closed-book score the context gain is taken against (``--opt no_context=true``
                    runs; :mod:`.closed_book`); empty without one
context_gain        score - closed_book_score (closed-book - score for a lower-is-better metric):
                    what reading the context added
context_gain_ci_low   its 95% paired bootstrap interval (the samples both ran)
context_gain_ci_high  (empty: intervals off, or under 2 common samples)
longscore           LongScore (100-LongBench): the mean over the longer lengths of 100 (S_l - base) /
                    base, base the method's score at its shortest tested length; the same on every
                    length row of the method; empty where undefined
scores_by_difficulty  ``level=score`` pairs, ``;``-separated, easiest first: the score on each difficulty
                    level's samples (:mod:`.difficulty`); empty where the samples carry no level
window              the model's pretraining window in tokens, where known without loading it
                    (:mod:`.short_context`); empty otherwise
short_context_score  the method's score at the tested lengths <= window, on the samples the baseline
                    also ran (mean over task x length strata; the baseline's own rows: its in-window
                    score); the same on every length row of the method; empty without a baseline or
                    an in-window length both ran
short_context_baseline_score  the baseline's score on the same samples
short_context_diff  short_context_score - short_context_baseline_score (metric units; for a
                    lower-is-better metric a positive value is a cost)
short_context_diff_ci_low   its 95% paired bootstrap interval (the same resamples for both runs)
short_context_diff_ci_high  (empty: intervals off, or under 2 common samples in a stratum)
==================  ==========================================================================

``comparisons.csv`` (:func:`comparison_rows`) holds, per row, the paired comparisons with the baseline
(the method declared ``is_baseline``, or ``--baseline``) and with the best other method of the same
model, benchmark and length, with the resample count and seed.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence

from ..lengths import format_length
from .closed_book import Gain, gains_by_length, long_scores
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
from .difficulty import scores_by_difficulty
from .effective import RELATIVE, effective_lengths, relative_effective_lengths
from .short_context import SHORT_CONTEXT_COLUMNS, short_context, short_context_fields
from .uncertainty import Bootstrap, Difference

LEADERBOARD_COLUMNS = [
    "model",
    "method",
    "variant",
    "variant_params",
    "benchmark",
    "length",
    "length_label",
    "metric",
    "higher_is_better",
    "score",
    "tasks",
    "samples",
    "seconds_per_sample",
    "git",
    "stderr",
    "ci_low",
    "ci_high",
    "effective_length",
    "effective_length_relative",
    "closed_book_score",
    "context_gain",
    "context_gain_ci_low",
    "context_gain_ci_high",
    "longscore",
    "scores_by_difficulty",
    *SHORT_CONTEXT_COLUMNS,
]

COMPARISON_COLUMNS = [
    "model", "benchmark", "length", "length_label", "metric", "higher_is_better", "variant", "score",
    "versus_role", "versus", "versus_score", "diff", "diff_ci_low", "diff_ci_high", "p_value", "significant",
    "pairs", "resamples", "seed",
]  # fmt: skip


def _groups(
    scores: Sequence[TaskScore], presentation: Presentation
) -> list[tuple[tuple[str, Variant, str, int], list[TaskScore]]]:
    """(model, variant, benchmark, length) -> its task results, in the leaderboard's order."""
    groups: dict[tuple, list[TaskScore]] = defaultdict(list)
    for s in scores:
        groups[(s.model, s.variant, s.benchmark, s.length)].append(s)
    order = {v: i for i, v in enumerate(method_order({s.variant for s in scores}, presentation))}
    return sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][2], kv[0][3], order[kv[0][1]]))


def _score(items: Sequence[TaskScore]) -> float | None:
    values = [s.score for s in items if not math.isnan(s.score)]
    return mean(values) if values else None


def _parts(items: Sequence[TaskScore]) -> list[TaskScore]:
    return [s for s in items if not math.isnan(s.score)]


def _rounded(value: float | None) -> object:
    return "" if value is None or not math.isfinite(value) else round(value, 6)


def leaderboard_rows(
    scores: Sequence[TaskScore],
    bootstrap: Bootstrap | None = None,
    presentation: Presentation = DECLARED,
    threshold: float | None = None,
    relative: float = RELATIVE,
    closed: Sequence[TaskScore] = (),
    levels: dict[str, list[TaskScore]] | None = None,
    windows: Mapping[str, int] | None = None,
) -> list[dict[str, object]]:
    """``threshold``: the effective length's, replacing the benchmarks' declared ones; ``relative``: the
    relative effective length's fraction of the base score; ``closed``: the closed-book results;
    ``levels``: the results per difficulty level (:func:`~.difficulty.difficulty_scores`); ``windows``:
    model -> pretraining window (:func:`~.short_context.model_windows`; the short-context columns)."""
    labels = variant_labels(s.variant for s in scores)
    effective = effective_lengths(scores, threshold)
    by_base = relative_effective_lengths(scores, relative, presentation)
    gains = gains_by_length(scores, closed, bootstrap, presentation)
    longs = long_scores(scores)
    graded = scores_by_difficulty(levels or {})
    windows = windows or {}
    shorts = short_context(scores, windows, bootstrap, presentation)
    rows = []
    for (model, variant, benchmark, length), items in _groups(scores, presentation):
        metric = items[0].metric
        samples = sum(s.samples for s in items)
        score = _score(items)
        interval = bootstrap.interval_of(_parts(items)) if bootstrap and score is not None else None
        rows.append(
            {
                "model": model,
                "method": variant.method,
                "variant": labels[variant],
                "variant_params": json.dumps(variant.params_dict(), sort_keys=True),
                "benchmark": benchmark,
                "length": length,
                "length_label": format_length(length),
                "metric": metric,
                "higher_is_better": str(items[0].metric_info().higher_is_better).lower(),
                "score": "" if score is None else round(score, 6),
                "tasks": len(items),
                "samples": samples,
                "seconds_per_sample": round(sum(s.seconds for s in items) / samples, 6) if samples else "",
                "git": ";".join(sorted(set().union(*(s.revisions for s in items)))),
                "stderr": _rounded(interval.stderr) if interval else "",
                "ci_low": _rounded(interval.low) if interval else "",
                "ci_high": _rounded(interval.high) if interval else "",
                "effective_length": (
                    found.csv_value() if (found := effective.get((model, variant, benchmark))) else ""
                ),
                "effective_length_relative": (
                    mine.csv_value() if (mine := by_base.get((model, variant, benchmark))) else ""
                ),
                **_gain_fields(gains.get((model, variant, benchmark, length))),
                "longscore": _rounded(found_long.value)
                if (found_long := longs.get((model, variant, benchmark)))
                else "",
                "scores_by_difficulty": graded.get((model, variant, benchmark, length), ""),
                **short_context_fields(shorts.get((model, variant, benchmark)), windows.get(model)),
            }
        )
    return rows


def _gain_fields(found: Gain | None) -> dict[str, object]:
    if found is None:
        return {
            "closed_book_score": "",
            "context_gain": "",
            "context_gain_ci_low": "",
            "context_gain_ci_high": "",
        }
    interval = found.interval
    return {
        "closed_book_score": _rounded(found.closed_score),
        "context_gain": _rounded(found.value),
        "context_gain_ci_low": _rounded(interval.low) if interval else "",
        "context_gain_ci_high": _rounded(interval.high) if interval else "",
    }


def leaderboard_csv(
    scores: Sequence[TaskScore],
    bootstrap: Bootstrap | None = None,
    presentation: Presentation = DECLARED,
    threshold: float | None = None,
    relative: float = RELATIVE,
    closed: Sequence[TaskScore] = (),
    levels: dict[str, list[TaskScore]] | None = None,
    windows: Mapping[str, int] | None = None,
) -> str:
    rows = leaderboard_rows(scores, bootstrap, presentation, threshold, relative, closed, levels, windows)
    return _csv(LEADERBOARD_COLUMNS, rows)


def comparison_rows(
    scores: Sequence[TaskScore], bootstrap: Bootstrap, presentation: Presentation = DECLARED
) -> list[dict[str, object]]:
    """Per leaderboard row: the paired comparison with the baseline and with the best other variant of
    the same model, benchmark and length (``diff`` = this variant - the other)."""
    labels = variant_labels(s.variant for s in scores)
    cells: dict[tuple[str, str, int], list[tuple[Variant, list[TaskScore], float]]] = defaultdict(list)
    for (model, variant, benchmark, length), items in _groups(scores, presentation):
        score = _score(items)
        if score is not None and not items[0].metric_info().saturated(score):
            cells[(model, benchmark, length)].append((variant, _parts(items), score))
    rows = []
    settings = bootstrap.settings
    for (model, benchmark, length), entries in cells.items():
        info = entries[0][1][0].metric_info()
        base = baseline_variant((v for v, _, _ in entries), presentation)
        for variant, parts, score in entries:
            others = [e for e in entries if e[0] != variant]
            versus = [("baseline", e) for e in entries if e[0] == base and variant != base]
            if others:
                pick = max if info.higher_is_better else min
                versus.append(("best other", pick(others, key=lambda e: e[2])))
            for role, (other, other_parts, other_score) in versus:
                difference = bootstrap.difference(parts, other_parts)
                rows.append(
                    {
                        "model": model,
                        "benchmark": benchmark,
                        "length": length,
                        "length_label": format_length(length),
                        "metric": parts[0].metric,
                        "higher_is_better": str(info.higher_is_better).lower(),
                        "variant": labels[variant],
                        "score": round(score, 6),
                        "versus_role": role,
                        "versus": labels[other],
                        "versus_score": round(other_score, 6),
                        **_difference_fields(difference),
                        "resamples": settings.resamples,
                        "seed": settings.seed,
                    }
                )
    return rows


def _difference_fields(difference: Difference) -> dict[str, object]:
    if not difference.tested:
        return {"diff": "", "diff_ci_low": "", "diff_ci_high": "", "p_value": "", "significant": "untested"}
    return {
        "diff": _rounded(difference.diff),
        "diff_ci_low": _rounded(difference.low),
        "diff_ci_high": _rounded(difference.high),
        "p_value": round(difference.p, 6),
        "significant": str(difference.significant).lower(),
        "pairs": difference.pairs,
    }


def comparisons_csv(
    scores: Sequence[TaskScore], bootstrap: Bootstrap, presentation: Presentation = DECLARED
) -> str:
    return _csv(COMPARISON_COLUMNS, comparison_rows(scores, bootstrap, presentation))


def _csv(columns: list[str], rows: list[dict[str, object]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()
