"""Comparison tables (methods as rows) and their Markdown, LaTeX and CSV renderings.

Generic tables from any results, per benchmark and model:

- *by task*, one per length: columns are the benchmark's tasks and ``Avg.`` (the mean of the task
  headlines, like the paper's Tables 1, 2 and its appendix tables);
- *by length*: columns are the lengths and ``Avg.`` (the benchmark score per length, like the
  paper's appendix D table and the data behind Figure 4); also one per metric the benchmark marks
  ``own_table`` when every result has it.

The best value of each column is bold (highest, or lowest where the metric says lower is better);
values past a metric's cap print as its ``cap_text`` and are not ranked or averaged.

With a :class:`~lampe_eval.report.uncertainty.Bootstrap` (:func:`add_uncertainty`) every cell gets its
95% interval, printed ``value [low, high]``, and is compared, on the samples both ran, with the baseline
row (the method declared ``is_baseline``, or ``--baseline``: :class:`~lampe_eval.report.data.Presentation`)
and with the best other row of its column: ``≈`` marks a cell not significantly different from the best
other method, ``†`` one not significantly different from the baseline (a footnote says so).
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ..benchmarks.base import Metric, benchmark_class, metric_of
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
from .uncertainty import Bootstrap, Difference, Interval

SAME_AS_BEST = "≈"  # not significantly different from the best other method of the column
SAME_AS_BASELINE = "†"  # not significantly different from the baseline


@dataclass
class Cell:
    value: float | None = None
    text: str | None = None  # shown instead of the formatted value (e.g. "ours / paper (diff)")
    bold: bool = False
    parts: tuple[TaskScore, ...] = field(default=(), repr=False)  # the task results it averages
    interval: Interval | None = None
    vs_baseline: Difference | None = None
    vs_best: Difference | None = None
    best_other: str = ""  # the row vs_best compares with
    marks: str = ""  # SAME_AS_BEST / SAME_AS_BASELINE
    reference: float | None = None  # a number to show against the interval (the paper's)


@dataclass
class Table:
    key: str  # file-name slug
    title: str
    columns: list[str]
    rows: list[tuple[str, list[Cell]]]
    metric: Metric = field(default_factory=lambda: Metric("score"))
    groups: list[tuple[str, int]] = field(default_factory=list)  # spanning header: (label, columns)
    notes: list[str] = field(default_factory=list)
    corner: str = "method"
    value_key: str = ""  # the metric its cells average ("": each task's headline)
    baseline: str | None = None  # the baseline row's label (paired comparisons)
    section: str = ""  # what it belongs to in a report ("benchmark | model")

    @property
    def higher_is_better(self) -> bool:
        return self.metric.higher_is_better

    def text(self, cell: Cell) -> str:
        return cell.text if cell.text is not None else self.metric.format(cell.value)

    def suffix(self, cell: Cell) -> str:
        """What follows the value: `` [low, high]`` and the significance marks."""
        out = ""
        if cell.interval is not None and cell.text is None:
            out += f" [{self.metric.format(cell.interval.low)}, {self.metric.format(cell.interval.high)}]"
        return out + (f" {cell.marks}" if cell.marks else "")

    def mark_best(self, skip_rows: Sequence[str] = ()) -> Table:
        """Bold the best value of each column (ties: all of them); rows in ``skip_rows`` compete not."""
        for c in range(len(self.columns)):
            values = [
                value
                for label, cells in self.rows
                if label not in skip_rows
                and (value := cells[c].value) is not None
                and not math.isnan(value)
                and not self.metric.saturated(value)
            ]
            if not values:
                continue
            best = max(values) if self.higher_is_better else min(values)
            for label, cells in self.rows:
                if label not in skip_rows and cells[c].value == best:
                    cells[c].bold = True
        return self


# ---------------------------------------------------------------------------------------- renderers
def to_markdown(table: Table) -> str:
    out = [f"### {table.title}", ""]
    if table.groups:
        spans = " | ".join(f"{label} ({n} col.)" for label, n in table.groups)
        out += [f"Column groups: {spans}", ""]
    header = [table.corner, *table.columns]
    out.append("| " + " | ".join(header) + " |")
    out.append("|" + "|".join([":---"] + ["---:"] * len(table.columns)) + "|")
    for label, cells in table.rows:
        texts = [(f"**{table.text(c)}**" if c.bold else table.text(c)) + table.suffix(c) for c in cells]
        out.append("| " + " | ".join([label, *texts]) + " |")
    out += [f"\n{note}" for note in table.notes]
    return "\n".join(out) + "\n"


_LATEX_ESCAPES = {"&": r"\&", "%": r"\%", "_": r"\_", "#": r"\#", "$": r"\$", "{": r"\{", "}": r"\}"}


def latex_escape(text: str) -> str:
    return re.sub(r"[&%_#${}]", lambda m: _LATEX_ESCAPES[m.group()], text)


_POWER = re.compile(r"([<>]?\d+\^\d+)")  # a metric's cap text such as 10^k: math mode in LaTeX
_SYMBOLS = {"≈": r"$\approx$", "†": r"$^\dagger$", "∈": r"$\in$", "∉": r"$\notin$", "≥": r"$\geq$"}


def latex_text(text: str) -> str:
    """Escaped, with cap texts and the report's marks in math mode."""
    text = _POWER.sub(r"$\1$", latex_escape(text))
    return re.sub("|".join(_SYMBOLS), lambda m: _SYMBOLS[m.group()], text)


def _latex_cell(table: Table, cell: Cell) -> str:
    text = latex_text(table.text(cell))
    suffix = latex_text(table.suffix(cell))
    if cell.interval is not None and cell.text is None:  # the interval small, the marks as they are
        bracket, _, marks = suffix.partition("]")
        suffix = rf"\,{{\scriptsize{bracket}]}}{marks}"
    return (rf"\textbf{{{text}}}" if cell.bold else text) + suffix


def to_latex(table: Table) -> str:
    spec = "l" + "c" * len(table.columns)
    out = [
        r"\begin{table}[!htb]",
        r"  \centering",
        r"  \small",
        rf"  \begin{{tabular}}{{{spec}}}",
        r"    \toprule",
    ]
    if table.groups:
        cols, start, rules = [], 2, []
        for label, n in table.groups:
            cols.append(rf"\multicolumn{{{n}}}{{c}}{{\textbf{{{latex_escape(label)}}}}}")
            rules.append(rf"\cmidrule(lr){{{start}-{start + n - 1}}}")
            start += n
        out.append("    & " + " & ".join(cols) + r" \\")
        out.append("    " + " ".join(rules))
    header = [latex_escape(table.corner)] + [rf"\textbf{{{latex_escape(c)}}}" for c in table.columns]
    out.append("    " + " & ".join(header) + r" \\")
    out.append(r"    \midrule")
    for label, cells in table.rows:
        out.append(
            "    " + " & ".join([latex_escape(label)] + [_latex_cell(table, c) for c in cells]) + r" \\"
        )
    out += [r"    \bottomrule", r"  \end{tabular}", rf"  \caption{{{latex_escape(table.title)}}}"]
    out += [r"\end{table}"]
    return "\n".join(out) + "\n"


CSV_COLUMNS = [
    "table", "row", "column", "value", "text", "bold",
    # appended with the intervals: the cell's interval, its marks, and the paired differences (row - other)
    "ci_low", "ci_high", "stderr", "marks",
    "vs_baseline_diff", "vs_baseline_p", "best_other", "vs_best_diff", "vs_best_p",
]  # fmt: skip


def _number(value: float | None) -> str:
    return "" if value is None or math.isnan(value) else repr(float(value))


def _difference_columns(difference: Difference | None) -> list[str]:
    if difference is None or not difference.tested:
        return ["", ""]
    return [_number(difference.diff), f"{difference.p:.4g}"]


def to_csv(tables: Sequence[Table]) -> str:
    """Long format: one line per cell (``value`` is the raw number, ``text`` what the table shows)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for table in tables:
        for label, cells in table.rows:
            for column, cell in zip(table.columns, cells, strict=True):
                interval = cell.interval
                writer.writerow(
                    [table.key, label, column, _number(cell.value), table.text(cell), int(cell.bold)]
                    + ([_number(interval.low), _number(interval.high)] if interval else ["", ""])
                    + [_number(interval.stderr) if interval else "", cell.marks]
                    + _difference_columns(cell.vs_baseline)
                    + [cell.best_other if cell.vs_best else ""]
                    + _difference_columns(cell.vs_best)
                )
    return buffer.getvalue()


def render(tables: Sequence[Table], fmt: str) -> str:
    if fmt == "md":
        return "\n".join(to_markdown(t) for t in tables)
    if fmt == "latex":
        return "\n".join(to_latex(t) for t in tables)
    if fmt == "csv":
        return to_csv(tables)
    raise ValueError(f"unknown table format {fmt!r}")


# ----------------------------------------------------------------------------------- generic tables
def slug(*parts: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", "-".join(parts)).strip("-").lower()


def benchmark_score(cells: dict[str, TaskScore], tasks: Sequence[str], metric: str = "") -> float | None:
    """Mean of the task headlines (or of ``metric``); None unless every task has a result."""
    if not tasks or any(t not in cells for t in tasks):
        return None
    if metric:
        if any(metric not in cells[t].metrics for t in tasks):
            return None
        return mean([cells[t].metrics[metric] for t in tasks])
    return mean([cells[t].score for t in tasks])


def task_order(benchmark: str, seen: set[str]) -> list[str]:
    cls = benchmark_class(benchmark)
    if cls is not None:
        order = [t for t in cls().tasks() if t in seen]
        return order + sorted(seen - set(order))
    return sorted(seen)


def in_sections(tables: Sequence[Table], extra: Sequence[Table]) -> list[Table]:
    """``tables`` with each of ``extra`` after the last table of its section (at the end without one)."""
    out = list(tables)
    for table in extra:
        last = max((i for i, t in enumerate(out) if t.section == table.section), default=len(out) - 1)
        out.insert(last + 1, table)
    return out


def own_table_metrics(benchmark: str) -> list[str]:
    """The metrics the benchmark gives their own by-length table."""
    cls = benchmark_class(benchmark)
    return [m.name for m in cls.metrics if m.own_table] if cls else []


Cells = dict[tuple[Variant, int], dict[str, TaskScore]]  # (variant, length) -> task -> its result
SectionIndex = dict[tuple[str, str], Cells]  # (benchmark, model) -> its cells


def index_by_section(scores: Iterable[TaskScore]) -> SectionIndex:
    """(benchmark, model) -> (variant, length) -> task -> its result: how every table reads scores."""
    index: SectionIndex = defaultdict(lambda: defaultdict(dict))
    for s in scores:
        index[(s.benchmark, s.model)][(s.variant, s.length)][s.task] = s
    return index


def headline_metric(results: Iterable[TaskScore]) -> Metric:
    """The metric a set of one benchmark's results is shown in: their headline when they share one;
    tasks with different headlines (mixed scorers) share one 0-100 "score"."""
    listed = list(results)
    names = {ts.metric for ts in listed}
    return listed[0].metric_info() if len(names) == 1 else Metric("score")


def generic_tables(
    scores: Sequence[TaskScore], bootstrap: Bootstrap | None = None, presentation: Presentation = DECLARED
) -> list[Table]:
    """The tables of every benchmark and model, methods in the ``presentation``'s order; with ``bootstrap``
    each cell also gets its interval and paired comparisons with the baseline (:func:`add_uncertainty`)."""
    index = index_by_section(scores)
    tables: list[Table] = []
    for benchmark, model in sorted(index):
        cells = index[(benchmark, model)]
        tasks = task_order(benchmark, {t for per in cells.values() for t in per})
        lengths = sorted({length for _, length in cells})
        variants = method_order({v for v, _ in cells}, presentation)
        labels = variant_labels(variants)
        base = baseline_variant(variants, presentation)
        baseline = labels[base] if base else None
        metric = headline_metric(ts for per in cells.values() for ts in per.values())
        mine: list[Table] = []
        if len(tasks) > 1:
            for length in lengths:
                rows = by_task_rows(
                    [cells.get((v, length)) for v in variants], [labels[v] for v in variants], tasks
                )
                mine.append(
                    Table(
                        key=slug(benchmark, model, format_length(length)),
                        title=f"{benchmark} | {model} | {format_length(length)} ({metric.name}, by task)",
                        columns=[*tasks, "Avg."],
                        rows=rows,
                        metric=metric,
                        baseline=baseline,
                    ).mark_best()
                )
        mine.append(by_length_table(benchmark, model, cells, tasks, variants, labels, metric))
        results = [ts for per in cells.values() for ts in per.values()]
        for extra in own_table_metrics(benchmark):
            if all(extra in ts.metrics for ts in results):
                extra_metric = metric_of(benchmark, extra)
                mine.append(
                    by_length_table(benchmark, model, cells, tasks, variants, labels, extra_metric, key=extra)
                )
        for table in mine:
            table.baseline = baseline
            table.section = f"{benchmark} | {model}"
            if bootstrap is not None:
                add_uncertainty(table, bootstrap)
        tables.extend(mine)
    return tables


def by_task_rows(
    results: Sequence[dict[str, TaskScore] | None], labels: Sequence[str], tasks: Sequence[str]
) -> list[tuple[str, list[Cell]]]:
    """One length's rows: per method (that has results there) a cell per task, then their average."""
    rows = []
    for label, per in zip(labels, results, strict=True):
        if not per:
            continue
        row = [Cell(per[t].score, parts=(per[t],)) if t in per else Cell() for t in tasks]
        row.append(_average_cell(benchmark_score(per, tasks), per, tasks))
        rows.append((label, row))
    return rows


def _average_cell(value: float | None, per: dict[str, TaskScore], tasks: Sequence[str]) -> Cell:
    """A cell averaging the tasks' results (no parts when one is missing: then it has no value either)."""
    if value is None:
        return Cell()
    return Cell(value, parts=tuple(per[t] for t in tasks))


def by_length_table(
    benchmark: str,
    model: str,
    cells: dict[tuple[Variant, int], dict[str, TaskScore]],
    tasks: Sequence[str],
    variants: Sequence[Variant],
    labels: dict[Variant, str],
    metric: Metric,
    key: str = "",
) -> Table:
    """Methods x lengths of the benchmark score (the headline, or the named ``key`` metric)."""
    lengths = sorted({length for _, length in cells})
    rows = []
    for v in variants:
        row = []
        for n in lengths:
            per = cells.get((v, n), {})
            row.append(_average_cell(benchmark_score(per, tasks, key), per, tasks))
        average = lengths_average([c.value for c in row], metric)
        every = tuple(p for c in row for p in c.parts)
        row.append(Cell(average, parts=every) if average is not None else Cell())
        rows.append((labels[v], row))
    what = metric.name if len(tasks) == 1 else f"mean {metric.name} over {len(tasks)} tasks"
    return Table(
        key=slug(benchmark, model, "by-length", key),
        title=f"{benchmark} | {model} | by length ({what})",
        columns=[*(format_length(n) for n in lengths), "Avg."],
        rows=rows,
        metric=metric,
        value_key=key,
    ).mark_best()


# -------------------------------------------------------------------------------------- uncertainty
def _ranked(table: Table, cell: Cell) -> bool:
    """A cell that takes part in comparisons: a number within the metric's cap, with its results."""
    value = cell.value
    if not cell.parts or value is None or math.isnan(value):
        return False
    return not table.metric.saturated(value)


def _best(table: Table, cells: Sequence[tuple[str, Cell]]) -> tuple[str, Cell]:
    pick = max if table.higher_is_better else min
    return pick(cells, key=lambda item: float(item[1].value))  # type: ignore[arg-type]


def add_uncertainty(table: Table, bootstrap: Bootstrap) -> Table:
    """Every cell's interval; each ranked cell compared with the baseline row and with the best other
    row of its column (paired, on the samples both ran); marks and a footnote for what is not
    significant."""
    key = table.value_key
    marked: set[str] = set()
    for c in range(len(table.columns)):
        column = [(label, cells[c]) for label, cells in table.rows]
        for _, cell in column:
            if cell.parts and cell.value is not None:
                cell.interval = bootstrap.interval_of(cell.parts, key)
        ranked = [(label, cell) for label, cell in column if _ranked(table, cell)]
        base = next((cell for label, cell in ranked if label == table.baseline), None)
        for label, cell in ranked:
            if base is not None and label != table.baseline:
                cell.vs_baseline = bootstrap.difference(cell.parts, base.parts, key)
                if not cell.vs_baseline.significant:
                    cell.marks += SAME_AS_BASELINE
            others = [(other, c2) for other, c2 in ranked if other != label]
            if others:
                cell.best_other, best = _best(table, others)
                cell.vs_best = bootstrap.difference(cell.parts, best.parts, key)
                if not cell.vs_best.significant:
                    cell.marks = SAME_AS_BEST + cell.marks
            marked.update(cell.marks)
    table.notes.append(uncertainty_note(bootstrap, table.baseline, marked))
    return table


def uncertainty_note(bootstrap: Bootstrap, baseline: str | None, marks: set[str]) -> str:
    """The footnote: what the brackets and the marks mean, and how they were computed."""
    text = (
        f"[low, high]: {bootstrap.settings.describe()}; tasks and lengths are resampled separately; "
        "no interval under 2 samples."
    )
    said = []
    if SAME_AS_BEST in marks:
        said.append(f"{SAME_AS_BEST}: not significantly different from the best other method of its column")
    if SAME_AS_BASELINE in marks and baseline:
        said.append(f"{SAME_AS_BASELINE}: not significantly different from {baseline}")
    if said:
        text += (
            " " + "; ".join(said) + f" (paired bootstrap of the difference on the samples both ran, "
            f"{bootstrap.settings.level:.0%}; fewer than 2 common samples: not tested, marked)."
        )
    return text


def lengths_average(values: Sequence[float | None], metric: Metric) -> float | None:
    """Mean over lengths; None when one is missing or saturated (as the paper prints no average then)."""
    numbers = [v for v in values if v is not None and not math.isnan(v)]
    if not values or len(numbers) < len(values) or any(metric.saturated(v) for v in numbers):
        return None
    return mean(numbers)
