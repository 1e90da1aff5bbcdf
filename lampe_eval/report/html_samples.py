"""The samples of ``report.html`` (the page: :mod:`.html`): each record as a row of the page's sample browser
(prompt head and tail, prediction and references cut at :data:`PREDICTION_CHARS`, the ``show-prompt``
command that rebuilds it), the budget of sample data the page holds and the choice of samples past it
(:func:`choose_samples`), the text saying what it left in ``records.jsonl``, and the JSON the page's script
reads (safe inside its ``<script>`` block)."""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Sequence
from typing import Any

from ..benchmarks.base import metric_of
from ..lengths import format_length
from ..records import SampleRecord
from .data import variant_labels, variant_of

PREDICTION_CHARS = 4000  # longer predictions (and references) are cut in the page, saying how much


# ----------------------------------------------------------------------------------------- samples
def show_prompt_command(record: SampleRecord) -> str:
    """The ``lampe-eval show-prompt`` line that rebuilds this record's sample."""
    parts = ["lampe-eval", "show-prompt", "--model", record.model, "--bench", record.benchmark]
    parts += ["--task", record.task, "--len", str(record.length), "--index", str(record.index)]
    if record.seed:
        parts += ["--seed", str(record.seed)]
    if record.limit:
        parts += ["--limit", str(record.limit)]
    for name, value in sorted(record.options.items()):
        parts += ["--opt", f"{name}={value}"]
    if record.data_dir:
        parts += ["--data-dir", record.data_dir]
    return " ".join(shlex.quote(p) for p in parts)


def _cut(text: Any) -> str:
    text = str(text)
    if len(text) <= PREDICTION_CHARS:
        return text
    return text[:PREDICTION_CHARS] + f" [... {len(text) - PREDICTION_CHARS} more characters]"


SAMPLE_FIELDS = [
    "model", "method", "benchmark", "task", "length", "length_label", "sample", "metric", "score",
    "score_text", "tokens", "hash", "head", "tail", "chars", "prediction", "references", "command", "key",
]  # fmt: skip
SAMPLE_FILTERS = ("model", "benchmark", "method", "task", "length")


def sample_rows(records: Sequence[SampleRecord]) -> list[list[Any]]:
    labels = variant_labels(variant_of(r) for r in records)
    rows = []
    ordered = sorted(records, key=lambda r: (r.benchmark, r.model, r.task, r.length, r.index, r.method))
    for r in ordered:
        metric = next(iter(r.scores), "")
        value = r.scores.get(metric)
        excerpt = r.prompt_excerpt or {}
        prediction = r.output.get("prediction", "")
        rows.append(
            [
                r.model,
                labels[variant_of(r)],
                r.benchmark,
                r.task,
                r.length,
                format_length(r.length),
                str(r.sample_id),
                metric,
                value if value is not None and math.isfinite(value) else None,
                metric_of(r.benchmark, metric).format(value) if value is not None else "-",
                r.prompt_tokens,
                r.prompt_hash or "",
                str(excerpt.get("head", "")),
                str(excerpt.get("tail", "")),
                excerpt.get("chars"),
                _cut(prediction if prediction is not None else ""),
                [_cut(x) for x in r.references],
                show_prompt_command(r),
                r.key,
            ]
        )
    return rows


# ------------------------------------------------------------------------------- the sample budget
# report.html holds every sample up to SAMPLE_BYTES of sample data; past it, the most informative ones of
# every cell. Why a budget and not a sidecar file of the rest: the page is one self-contained file (mail
# it, open it from anywhere) and its CSP loads nothing (default-src 'none'); Chromium refuses fetch/XHR
# of file:// URLs anyway, and a <script src> sidecar would need a script-src for a path next to the page.
# So the page holds a bounded, chosen part and says exactly what it leaves out and where that is
# (records.jsonl, by record key; the row's show-prompt command rebuilds any prompt).
#
# The choice: per cell (model, benchmark, task, length) samples are ranked by how much the methods
# disagree on them (the spread of their headline scores), then by the worst score (in the metric's
# direction: failures first), then by index; each chosen sample comes with the record of every method
# and variant (what a comparison needs). Cells take turns, one sample each per round, while the
# budget lasts: every cell gets the same number of samples, small stores are embedded whole.
SAMPLE_BYTES = 16_000_000
ROW_BYTES = 400  # a row's JSON besides its texts (fields, numbers, the command, the key)


def _text_bytes(text: Any) -> int:
    """About what ``text`` takes in the page's JSON (non-ASCII as \\uXXXX escapes)."""
    text = str(text)
    return len(text) if text.isascii() else 6 * len(text)


def row_bytes(r: SampleRecord) -> int:
    """The (estimated) size of a record's row in the page."""
    excerpt = r.prompt_excerpt or {}
    texts = [excerpt.get("head", ""), excerpt.get("tail", ""), r.output.get("prediction", ""), *r.references]
    return ROW_BYTES + sum(min(_text_bytes(t), 6 * PREDICTION_CHARS) for t in texts)


def _badness(r: SampleRecord) -> float:
    """The record's headline score, oriented so that larger is worse (not a number: the worst)."""
    if not r.scores:
        return math.inf
    metric, value = next(iter(r.scores.items()))
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return math.inf
    return -float(value) if metric_of(r.benchmark, metric).higher_is_better else float(value)


def _informative(group: list[SampleRecord]) -> tuple[float, float, int]:
    """The rank of a sample (its records, one per method): the methods' disagreement first (a method
    without a number disagrees with any that has one), then the worst score, then the sample's index."""
    bad = [_badness(r) for r in group]
    worst, best = max(bad), min(bad)
    spread = 0.0 if worst == best else worst - best
    return (-spread, -worst, min(r.index for r in group))


def holding_text(total: int, held: int, budget: int, sources: Sequence[str]) -> str:
    """What the page's sample browser holds, and where the rest is."""
    if held == total:
        return f"Every sample of the report ({total}) is in this page."
    where = ", ".join(f"{source}/**/records.jsonl" for source in sources)
    return (
        f"This page holds {held} of the {total} samples (a budget of {budget / 1e6:g} MB of sample data, "
        "lampe-eval report --sample-mb): in each model, benchmark, task and length the same number of "
        "samples, those the methods disagree on most first, then the worst scored, each with the record "
        f"of every method. The other {total - held} are in {where}: find one by its record key "
        "(<job key>:<sample id>, shown with each sample); its show-prompt command prints its whole prompt. "
        "The count below says how many samples of a selection are not in the page."
    )


def choose_samples(
    records: Sequence[SampleRecord], budget: int
) -> tuple[list[SampleRecord], list[list[Any]]]:
    """The records the page holds (see the comment above) and, for every (model, benchmark, method,
    task, length) of which it holds only some, ``[model, benchmark, method label, task, length, total,
    held]``."""
    cells: dict[tuple[str, str, str, int], dict[tuple[str, int], list[SampleRecord]]] = {}
    for r in records:
        cells.setdefault((r.model, r.benchmark, r.task, r.length), {}).setdefault(
            (str(r.sample_id), r.seed), []
        ).append(r)
    ranked = [sorted(samples.values(), key=_informative) for samples in cells.values()]
    held: list[SampleRecord] = []
    used = 0
    full: set[int] = set()  # cells whose next sample did not fit: they take no more
    for turn in range(max((len(groups) for groups in ranked), default=0)):
        for c, groups in enumerate(ranked):
            if c in full or turn >= len(groups):
                continue
            size = sum(row_bytes(r) for r in groups[turn])
            if used + size > budget:
                full.add(c)
                continue
            held.extend(groups[turn])
            used += size
    if len(held) == len(records):
        return list(records), []
    labels = variant_labels(variant_of(r) for r in records)
    total: dict[tuple[Any, ...], int] = {}
    for r in records:
        key = (r.model, r.benchmark, labels[variant_of(r)], r.task, r.length)
        total[key] = total.get(key, 0) + 1
    kept: dict[tuple[Any, ...], int] = {}
    for r in held:
        key = (r.model, r.benchmark, labels[variant_of(r)], r.task, r.length)
        kept[key] = kept.get(key, 0) + 1
    partial = [[*key, n, kept.get(key, 0)] for key, n in sorted(total.items()) if kept.get(key, 0) < n]
    return held, partial


def json_for_script(data: Any) -> str:
    """JSON that cannot end its ``<script>`` block or open markup: ``<``, ``>``, ``&`` escaped (ASCII)."""
    text = json.dumps(data, ensure_ascii=True, allow_nan=False, default=str)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def sample_json(records: Sequence[SampleRecord], partial: list[list[Any]], limit: int) -> str:
    rows = sample_rows(records)
    return json_for_script({"fields": SAMPLE_FIELDS, "rows": rows, "limit": limit, "partial": partial})
