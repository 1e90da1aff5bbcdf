"""The leaderboard CSV: one row per model x method variant x benchmark x length.

Columns (stable; new ones are only ever appended at the end):

==================  ==========================================================================
model               model preset / id as run
method              method name (``rope`` is the unmodified model)
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
==================  ==========================================================================
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections import defaultdict
from collections.abc import Sequence

from ..lengths import format_length
from .data import TaskScore, mean, method_order, variant_labels

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
]


def leaderboard_rows(scores: Sequence[TaskScore]) -> list[dict[str, object]]:
    groups: dict[tuple, list[TaskScore]] = defaultdict(list)
    for s in scores:
        groups[(s.model, s.variant, s.benchmark, s.length)].append(s)
    labels = variant_labels(s.variant for s in scores)
    order = {v: i for i, v in enumerate(method_order({s.variant for s in scores}))}
    rows = []
    for (model, variant, benchmark, length), items in sorted(
        groups.items(), key=lambda kv: (kv[0][0], kv[0][2], kv[0][3], order[kv[0][1]])
    ):
        metric = items[0].metric
        samples = sum(s.samples for s in items)
        values = [s.score for s in items if not math.isnan(s.score)]
        score = mean(values) if values else None
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
            }
        )
    return rows


def leaderboard_csv(scores: Sequence[TaskScore]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=LEADERBOARD_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(leaderboard_rows(scores))
    return buffer.getvalue()
