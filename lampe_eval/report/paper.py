"""Our results next to a paper's numbers, cell by cell, with the difference.

A paper's tables are transcribed in ``paper_tables/<name>.yaml`` (package data, :mod:`lampe_eval.resources`;
a file of your own in ``$LAMPE_EVAL_HOME/paper_tables/`` adds a table)::

    name: mytable
    title: ...
    source: where in the paper
    metric: <metric>                 # the headline metric compared (as the benchmark declares it)
    higher_is_better: false
    groups: [[Bench A, 7], [Bench B, 6]]     # optional spanning header
    columns:                         # a column is the mean of the task headlines of its tasks ...
      - {label: 4K, benchmark: <bench>, tasks: [<task>], length: 4k}   # length: else the row's length
      - {label: Avg., average: [4K, 8K]}       # ... or the mean of other columns of the row
    blocks:
      - model: llama2-7b-chat        # a preset name (what the runner records as "model")
        label: "32K"                 # optional, for the title
        rows:
          - {label: "+ Method B (16K)", method: <method b>, length: 16k, values: [27.30, ...]}
          - {label: "Llama2-7B", method: <base>, length: {<bench a>: 3500, <bench b>: 4000}, values: [...]}

A row's ``length`` may name one length per benchmark (the official budgets differ between benchmarks).
Paper values are numbers, ``">1e2"``-style strings (saturated, past the metric's cap: no difference
computed) or ``null`` (not reported). A row may pin ``params`` (the variant's explicit parameters);
otherwise the variant run without explicit parameters is used.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import resources
from ..benchmarks.base import Metric, metric_of
from ..errors import LampeEvalError, unknown
from ..lengths import format_length, parse_length
from .data import TaskScore, Variant, mean
from .tables import Cell, Table, slug
from .uncertainty import Bootstrap, Interval, Resampled

IN_INTERVAL, OUTSIDE_INTERVAL = "∈", "∉"  # the paper's number is inside / outside our interval


def paper_table_names() -> list[str]:
    return list(resources.listing("paper_tables", ".yaml"))


def load_paper_table(name: str) -> dict[str, Any]:
    path: resources.Resource | None = Path(name) if name.endswith(".yaml") else None
    if path is None or not path.is_file():
        path = resources.listing("paper_tables", ".yaml").get(name)
    if path is None:
        raise unknown("paper table", name, paper_table_names())
    spec = resources.read_yaml(path)
    validate_spec(spec, resources.display(path))
    return spec


def spec_metric(spec: dict[str, Any]) -> Metric:
    """The compared metric as the benchmark of the table's columns declares it (cap, format), with the
    table's own direction."""
    benchmark = next((c["benchmark"] for c in spec.get("columns") or [] if c.get("benchmark")), "")
    metric = metric_of(benchmark, str(spec.get("metric", "score")))
    return dataclasses.replace(metric, higher_is_better=bool(spec.get("higher_is_better", True)))


def validate_spec(spec: dict[str, Any], where: str) -> None:
    columns = spec.get("columns") or []
    labels = [c["label"] for c in columns]
    for column in columns:
        if "average" in column:
            missing = set(column["average"]) - set(labels)
            if missing:
                raise LampeEvalError(
                    f"{where}: column {column['label']!r} averages unknown {sorted(missing)}"
                )
        elif not column.get("benchmark") or not column.get("tasks"):
            raise LampeEvalError(
                f"{where}: column {column['label']!r} needs benchmark and tasks (or average)"
            )
    for block in spec.get("blocks") or []:
        for row in block["rows"]:
            if len(row["values"]) != len(columns):
                raise LampeEvalError(
                    f"{where}: row {row['label']!r} of {block['model']} has {len(row['values'])} values "
                    f"for {len(columns)} columns"
                )
            for column in columns:
                if "tasks" in column and cell_length_text(row, column) is None:
                    raise LampeEvalError(
                        f"{where}: row {row['label']!r} needs a length for {column['benchmark']}"
                    )


def cell_length_text(row: dict[str, Any], column: dict[str, Any]) -> Any:
    """The length of a (row, column) cell as written: the column's, else the row's (per benchmark)."""
    raw = column.get("length") or row.get("length")
    return raw.get(column["benchmark"]) if isinstance(raw, dict) else raw


def paper_value(raw: Any) -> float | None:
    """A number; ``">1e2"``-style saturated values become +inf; None when not reported."""
    if raw is None:
        return None
    if isinstance(raw, str):
        text = raw.strip()
        if text.startswith(">"):
            return math.inf
        return float(text)
    return float(raw)


@dataclass
class Comparison:
    table: Table
    rows: list[dict[str, Any]]  # long format for the CSV


def _pick_variant(
    variants: set[Variant], method: str, params: dict[str, Any] | None
) -> tuple[Variant | None, str]:
    """The variant of ``method`` a paper row means; a note when the choice was ambiguous."""
    candidates = sorted((v for v in variants if v.method == method), key=lambda v: v.params)
    if params is not None:
        wanted = json.dumps(params, sort_keys=True, default=str)
        return next((v for v in candidates if v.params == wanted), None), ""
    plain = [v for v in candidates if v.params == "{}"]
    if plain:
        return plain[0], ""
    if len(candidates) == 1:
        return candidates[0], ""
    if candidates:
        return candidates[0], f"{method}: several variants, used {candidates[0].params}"
    return None, ""


_ScoreIndex = dict[tuple[str, Variant, str, str, int], TaskScore]  # (model, variant, benchmark, task, length)


@dataclass(frozen=True)
class _Results:
    """Our task results, found by cell, and the variants each model ran."""

    by_cell: _ScoreIndex
    variants_of: dict[str, set[Variant]]

    @classmethod
    def of(cls, scores: list[TaskScore]) -> _Results:
        variants_of: dict[str, set[Variant]] = {}
        for s in scores:
            variants_of.setdefault(s.model, set()).add(s.variant)
        return cls({(s.model, s.variant, s.benchmark, s.task, s.length): s for s in scores}, variants_of)


@dataclass(frozen=True)
class _Setting:
    """What every cell of one paper table is compared with, and how."""

    spec: dict[str, Any]
    metric: Metric
    results: _Results
    as_model: str | None
    as_length: int | None
    bootstrap: Bootstrap | None


@dataclass(frozen=True)
class _Ours:
    """Our side of one cell: the value, its resamples (with a bootstrap), the task results behind it and
    the length they were read at (none for an average of columns)."""

    value: float | None
    resampled: Resampled | None = None
    parts: tuple[TaskScore, ...] = ()
    length: int | None = None


def compare(
    spec: dict[str, Any],
    scores: list[TaskScore],
    as_model: str | None = None,
    as_length: int | None = None,
    bootstrap: Bootstrap | None = None,
) -> list[Comparison]:
    """One comparison table per block of the paper table.

    ``as_model`` / ``as_length``: read every block's results from this model / at this length instead
    (smoke runs of the pipeline on a small model at a short length). ``bootstrap``: each cell also shows
    our interval and whether the paper's number falls inside it.
    """
    setting = _Setting(spec, spec_metric(spec), _Results.of(scores), as_model, as_length, bootstrap)
    return [_compare_block(setting, block) for block in spec["blocks"]]


def _compare_block(setting: _Setting, block: dict[str, Any]) -> Comparison:
    """One block's table (a row per paper row, the notes on ambiguous variants) and its CSV rows."""
    spec = setting.spec
    model = setting.as_model or block["model"]
    notes: list[str] = []
    table_rows: list[tuple[str, list[Cell]]] = []
    long_rows: list[dict[str, Any]] = []
    for row in block["rows"]:
        variant, note = _pick_variant(
            setting.results.variants_of.get(model, set()), row["method"], row.get("params")
        )
        if note:
            notes.append(note)
        cells, row_long = _compare_row(setting, block, model, row, variant)
        table_rows.append((row["label"], cells))
        long_rows.extend(row_long)
    table = Table(
        key=slug("paper", spec["name"], block["model"], str(block.get("label", ""))),
        title=_block_title(setting, block),
        columns=[c["label"] for c in spec["columns"]],
        rows=table_rows,
        metric=setting.metric,
        groups=[tuple(g) for g in spec.get("groups") or []],
        notes=[_legend(spec, setting.bootstrap)] + sorted(set(notes)),
        corner="paper row",
    ).mark_best()
    return Comparison(table, long_rows)


def _block_title(setting: _Setting, block: dict[str, Any]) -> str:
    """The table's title: the paper's, the block's model and label, and what we read instead if told."""
    spec, as_model, as_length = setting.spec, setting.as_model, setting.as_length
    title = f"{spec.get('title', spec['name'])} | {block['model']}"
    if block.get("label"):
        title += f" | {block['label']}"
    if as_model or as_length:
        ours_at = " at ".join(x for x in (as_model, as_length and format_length(as_length)) if x)
        title += f" (ours: {ours_at})"
    return title


def _compare_row(
    setting: _Setting, block: dict[str, Any], model: str, row: dict[str, Any], variant: Variant | None
) -> tuple[list[Cell], list[dict[str, Any]]]:
    """One paper row's cells, left to right (an average reads the columns before it), and CSV rows."""
    where = {
        "table": setting.spec["name"],
        "block": block.get("label", ""),
        "paper_model": block["model"],
        "model": model,
        "row": row["label"],
        "method": row["method"],
        "variant": variant.params if variant else "",
    }
    ours_by_label: dict[str, _Ours] = {}
    cells: list[Cell] = []
    long_rows: list[dict[str, Any]] = []
    for column, raw in zip(setting.spec["columns"], row["values"], strict=True):
        if "average" in column:
            ours = _ours_averaged(column, ours_by_label, setting.metric)
        else:
            ours = _ours_measured(setting, model, variant, row, column)
        ours_by_label[column["label"]] = ours
        cell, fields = _compare_cell(setting, ours, raw)
        cells.append(cell)
        long_rows.append({**where, "length": ours.length or "", "column": column["label"], **fields})
    return cells, long_rows


def _compare_cell(setting: _Setting, ours: _Ours, raw: Any) -> tuple[Cell, dict[str, Any]]:
    """One cell, ours next to the paper's ``raw`` value (and our interval, with a bootstrap), and its
    CSV fields."""
    metric = setting.metric
    interval = setting.bootstrap.interval(ours.resampled) if setting.bootstrap else None
    paper = paper_value(raw)
    diff = _difference(ours.value, paper, metric)
    inside = interval.contains(paper) if interval and paper is not None else None
    text = _cell_text(ours.value, paper, diff, metric, interval, inside)
    cell = Cell(ours.value, text, parts=ours.parts, interval=interval, reference=paper)
    return cell, {
        "ours": "" if ours.value is None else ours.value,
        "paper": "" if paper is None else (raw if isinstance(raw, str) else paper),
        "diff": "" if diff is None else round(diff, 4),
        "ours_ci_low": "" if interval is None else interval.low,
        "ours_ci_high": "" if interval is None else interval.high,
        "paper_in_ci": "" if inside is None else str(inside).lower(),
    }


def _ours_measured(
    setting: _Setting, model: str, variant: Variant | None, row: dict[str, Any], column: dict[str, Any]
) -> _Ours:
    """A column of tasks: the mean of our task results at the cell's length (none unless all ran)."""
    length = setting.as_length or parse_length(cell_length_text(row, column))
    parts = _column_parts(setting.results.by_cell, model, variant, column, length)
    if not parts:
        return _Ours(None, length=length)
    metric, bootstrap = setting.metric, setting.bootstrap
    value = mean([p.metrics.get(metric.name, p.score) for p in parts])
    resampled = bootstrap.cell(parts, metric.name) if bootstrap else None
    return _Ours(value, resampled, tuple(parts), length)


def _ours_averaged(column: dict[str, Any], ours_by_label: dict[str, _Ours], metric: Metric) -> _Ours:
    """A column averaging other columns of the row (those not yet read count as missing); resampled
    when every one of them was."""
    averaged = [ours_by_label.get(label, _Ours(None)) for label in column["average"]]
    value = _average([ours.value for ours in averaged], metric)
    resamples = [ours.resampled for ours in averaged if ours.resampled is not None]
    if value is None or len(resamples) < len(averaged):
        return _Ours(value)
    return _Ours(value, Resampled.mean_of(resamples))


def _comparable(value: float | None, metric: Metric) -> bool:
    return value is not None and math.isfinite(value) and not metric.saturated(value)


def _difference(ours: float | None, paper: float | None, metric: Metric) -> float | None:
    """ours - paper, when both are numbers within the metric's cap."""
    if ours is None or paper is None or not (_comparable(ours, metric) and _comparable(paper, metric)):
        return None
    return ours - paper


def _average(parts: list[float | None], metric: Metric) -> float | None:
    if not parts or any(p is None for p in parts):
        return None
    values = [float(p) for p in parts if p is not None]
    if any(metric.saturated(v) for v in values):
        return None
    return mean(values)


def _column_parts(
    index: _ScoreIndex,
    model: str,
    variant: Variant | None,
    column: dict[str, Any],
    length: int,
) -> list[TaskScore]:
    """Our task results behind a column ([] unless every task of it has one)."""
    if variant is None:
        return []
    parts = [index.get((model, variant, column["benchmark"], task, length)) for task in column["tasks"]]
    return [p for p in parts if p is not None] if all(p is not None for p in parts) else []


def _cell_text(
    ours: float | None,
    paper: float | None,
    diff: float | None,
    metric: Metric,
    interval: Interval | None = None,
    inside: bool | None = None,
) -> str:
    paper_text = "-" if paper is None else metric.format(paper)
    ours_text = metric.format(ours)
    if interval is not None:
        ours_text += f" [{metric.format(interval.low)}, {metric.format(interval.high)}]"
    text = f"{ours_text} / {paper_text}"
    if diff is not None:
        text += f" ({diff:+.2f})"
    if inside is not None:
        text += f" {IN_INTERVAL if inside else OUTSIDE_INTERVAL}"
    return text


def _legend(spec: dict[str, Any], bootstrap: Bootstrap | None) -> str:
    text = "Cells: ours / paper (ours - paper). Bold: our best per column."
    if bootstrap is not None:
        text = (
            f"Cells: ours [our interval] / paper (ours - paper); {IN_INTERVAL} / {OUTSIDE_INTERVAL}: the "
            f"paper's number is inside / outside our interval ({bootstrap.settings.describe()}; none "
            "under 2 samples). Bold: our best per column."
        )
    return f"{text} Source: {spec.get('source')}"


COMPARISON_CSV_COLUMNS = [
    "table", "block", "paper_model", "model", "row", "method", "variant", "length", "column",
    "ours", "paper", "diff", "ours_ci_low", "ours_ci_high", "paper_in_ci",
]  # fmt: skip


def comparison_csv(comparisons: list[Comparison]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COMPARISON_CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for comparison in comparisons:
        for row in comparison.rows:
            writer.writerow({**row, "length": format_length(row["length"]) if row["length"] else ""})
    return buffer.getvalue()


def required_jobs(spec: dict[str, Any]) -> list[tuple[str, str, str, str, int]]:
    """(model, method, benchmark, task, length) for every cell of the paper table (to check experiments)."""
    out = []
    for block in spec["blocks"]:
        for row in block["rows"]:
            for column in spec["columns"]:
                if "average" in column:
                    continue
                length = parse_length(cell_length_text(row, column))
                for task in column["tasks"]:
                    out.append((block["model"], row["method"], column["benchmark"], task, length))
    return sorted(set(out))
