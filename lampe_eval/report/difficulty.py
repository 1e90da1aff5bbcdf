"""Difficulty apart from length: scores by difficulty level and length.

A benchmark that grades its samples (ladders of basic, easy, medium and hard items; four difficulty
levels crossed with the lengths) writes the level into each sample's ``meta["difficulty"]``, and it
reaches the record's ``meta``.
For every benchmark and model whose records carry one, the report adds a table of methods x levels
(rows) by lengths (columns): a level's score is the mean of the headline over the tasks at that level,
each task's score taken on its samples of that level only (the benchmark's own aggregate), so a method
that helps only on easy items shows it. The leaderboard's ``scores_by_difficulty`` column holds the same
numbers per row.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence

from ..lengths import format_length
from ..records import SampleRecord
from .data import DECLARED, Presentation, TaskScore, Variant, mean, method_order, task_scores, variant_labels
from .tables import (
    Cell,
    Table,
    benchmark_score,
    headline_metric,
    in_sections,
    index_by_section,
    slug,
    task_order,
)
from .uncertainty import Bootstrap

DIFFICULTY_KEY = "difficulty"  # the meta key a benchmark sets per sample
# the usual ladders, easiest first; other level names follow in sorted order
LEVEL_ORDER = ("basic", "easy", "medium", "hard", "extreme")


def difficulty_of(record: SampleRecord) -> str | None:
    level = record.meta.get(DIFFICULTY_KEY)
    return str(level) if level not in (None, "") else None


def level_order(levels: Iterable[str]) -> list[str]:
    seen = set(levels)
    known = [level for level in LEVEL_ORDER if level in seen]
    return known + sorted(seen - set(known))


def difficulty_scores(records: Iterable[SampleRecord]) -> dict[str, list[TaskScore]]:
    """level -> the task results computed on that level's samples only (records without a level are
    left out)."""
    by_level: dict[str, list[SampleRecord]] = defaultdict(list)
    for r in records:
        level = difficulty_of(r)
        if level is not None:
            by_level[level].append(r)
    return {level: task_scores(items) for level, items in by_level.items()}


def level_score(items: Sequence[TaskScore]) -> float | None:
    """A level's score in one (model, variant, benchmark, length): the mean over the tasks that ran."""
    values = [s.score for s in items if not math.isnan(s.score)]
    return mean(values) if values else None


def difficulty_tables(
    levels: dict[str, list[TaskScore]],
    bootstrap: Bootstrap | None = None,
    presentation: Presentation = DECLARED,
) -> list[Table]:
    """Per benchmark and model with graded samples: methods x levels by length."""
    indexes = {level: index_by_section(scores) for level, scores in levels.items()}
    sections = sorted({key for index in indexes.values() for key in index})
    tables = []
    for benchmark, model in sections:
        mine = {
            level: index[(benchmark, model)]
            for level, index in indexes.items()
            if (benchmark, model) in index
        }
        tables.append(_table(benchmark, model, mine, bootstrap, presentation))
    return tables


def _table(
    benchmark: str,
    model: str,
    mine: dict[str, dict[tuple[Variant, int], dict[str, TaskScore]]],
    bootstrap: Bootstrap | None,
    presentation: Presentation,
) -> Table:
    ordered = level_order(mine)
    variants = method_order({v for cells in mine.values() for v, _ in cells}, presentation)
    labels = variant_labels(variants)
    lengths = sorted({n for cells in mine.values() for _, n in cells})
    every = [ts for cells in mine.values() for per in cells.values() for ts in per.values()]
    rows = []
    for v in variants:
        for level in ordered:
            cells = mine[level]
            if not any(variant == v for variant, _ in cells):
                continue
            tasks = task_order(benchmark, {t for (w, _), per in cells.items() if w == v for t in per})
            row = [_cell(cells.get((v, n), {}), tasks, bootstrap) for n in lengths]
            rows.append((f"{labels[v]} · {level}", row))
    table = Table(
        key=slug(benchmark, model, "difficulty"),
        title=f"{benchmark} | {model} | score by difficulty and length",
        columns=[format_length(n) for n in lengths],
        rows=rows,
        metric=headline_metric(every),
        section=f"{benchmark} | {model}",
        corner="method · difficulty",
    )
    table.notes.append(
        "Difficulty (each sample's meta['difficulty']): a level's score is the mean over its tasks of the "
        "score on that level's samples; levels easiest first."
    )
    return table


def _cell(per: dict[str, TaskScore], tasks: Sequence[str], bootstrap: Bootstrap | None) -> Cell:
    value = benchmark_score(per, tasks)
    if value is None:
        return Cell()
    parts = tuple(per[t] for t in tasks)
    return Cell(value, parts=parts, interval=bootstrap.interval_of(parts) if bootstrap else None)


def scores_by_difficulty(levels: dict[str, list[TaskScore]]) -> dict[tuple[str, Variant, str, int], str]:
    """(model, variant, benchmark, length) -> ``basic=81.25;easy=40`` (the leaderboard column)."""
    groups: dict[tuple[str, Variant, str, int], dict[str, list[TaskScore]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for level, scores in levels.items():
        for s in scores:
            groups[(s.model, s.variant, s.benchmark, s.length)][level].append(s)
    out = {}
    for key, per in groups.items():
        found = [(level, level_score(per[level])) for level in level_order(per)]
        out[key] = ";".join(f"{level}={round(value, 6)}" for level, value in found if value is not None)
    return out


def with_difficulty_tables(
    tables: Sequence[Table],
    levels: dict[str, list[TaskScore]],
    bootstrap: Bootstrap | None = None,
    presentation: Presentation = DECLARED,
) -> list[Table]:
    """``tables`` with each section's difficulty table after its last table."""
    return in_sections(tables, difficulty_tables(levels, bootstrap, presentation))
