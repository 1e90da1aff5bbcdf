"""The markup of ``report.html``'s tables and figures (the page: :mod:`.html`): a result table with each
cell's value, interval (drawn as an inline SVG whisker, the paper's number as a red tick), significance
marks and sort keys; a plain sortable table of dict rows; a PNG figure inlined as base64. Every text from
results is escaped here (:func:`esc`)."""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Sequence
from typing import Any

from .tables import Cell, Table


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


# ------------------------------------------------------------------------------------------ tables
def _axis(table: Table, c: int) -> tuple[float, float] | None:
    """The whisker scale of a column: the span of its finite values, intervals and references."""
    numbers: list[float] = []
    for _, cells in table.rows:
        cell = cells[c]
        for v in (cell.value, cell.reference, *(
            (cell.interval.low, cell.interval.high) if cell.interval else ()
        )):  # fmt: skip
            if v is not None and math.isfinite(v) and not table.metric.saturated(v):
                numbers.append(float(v))
    if not numbers:
        return None
    low, high = min(numbers), max(numbers)
    if table.metric.log_scale and low > 0:
        low, high = math.log(low), math.log(high)
    if high - low < 1e-12:
        low, high = low - 1.0, high + 1.0
    return low, high


def whisker(table: Table, cell: Cell, axis: tuple[float, float] | None) -> str:
    """An inline SVG: the interval as a line with caps, the value as a dot, the reference as a red tick."""
    if axis is None or cell.value is None or cell.interval is None and cell.reference is None:
        return ""
    low, high = axis
    log = table.metric.log_scale and low > -math.inf

    def x(v: float) -> float:
        if table.metric.saturated(v) or not math.isfinite(v):
            v = math.exp(high) if log else high
        t = math.log(v) if log and v > 0 else v
        return round(3 + 74 * min(1.0, max(0.0, (t - low) / (high - low))), 2)

    parts = []
    if cell.interval is not None:
        a, b = x(cell.interval.low), x(cell.interval.high)
        parts.append(f'<line class="ci" x1="{a}" x2="{b}" y1="6" y2="6"/>')
        parts.append(f'<line class="ci" x1="{a}" x2="{a}" y1="3" y2="9"/>')
        parts.append(f'<line class="ci" x1="{b}" x2="{b}" y1="3" y2="9"/>')
    if math.isfinite(cell.value) and not math.isnan(cell.value):
        parts.append(f'<circle class="pt" cx="{x(cell.value)}" cy="6" r="2.4"/>')
    if cell.reference is not None and not math.isnan(cell.reference):
        r = x(cell.reference)
        parts.append(f'<line class="ref" x1="{r}" x2="{r}" y1="0" y2="12"/>')
    box = 'class="whisker" width="80" height="12" viewBox="0 0 80 12" aria-hidden="true"'
    return f"<svg {box}>{''.join(parts)}</svg>"


def _sort_key(value: float | None) -> str:
    if value is None or math.isnan(value):
        return ""
    return repr(float(value)) if math.isfinite(value) else ("1e308" if value > 0 else "-1e308")


def _cell_title(table: Table, cell: Cell) -> str:
    lines = []
    if cell.interval is not None:
        low, high = (table.metric.format(v) for v in (cell.interval.low, cell.interval.high))
        lines.append(f"95% interval [{low}, {high}]")
    for name, diff in ((table.baseline or "baseline", cell.vs_baseline), (cell.best_other, cell.vs_best)):
        if diff is None:
            continue
        if diff.tested:
            state = "significant" if diff.significant else "not significant"
            lines.append(
                f"vs {name}: {diff.diff:+.3g} [{diff.low:+.3g}, {diff.high:+.3g}], p={diff.p:.3g}, {state}"
            )
        else:
            lines.append(f"vs {name}: not tested (fewer than 2 common samples)")
    return "\n".join(lines)


def table_html(table: Table) -> str:
    axes = [_axis(table, c) for c in range(len(table.columns))]
    out = [f'<div class="table-wrap" id="{esc(table.key)}">', f"<h4>{esc(table.title)}</h4>"]
    out.append(f'<table class="sortable data" data-key="{esc(table.key)}"><thead>')
    if table.groups:
        spans = "".join(f'<th colspan="{n}">{esc(label)}</th>' for label, n in table.groups)
        out.append(f'<tr class="groups"><th></th>{spans}</tr>')
    out.append("<tr>" + "".join(f'<th scope="col">{esc(c)}</th>' for c in [table.corner, *table.columns]))
    out.append("</tr></thead><tbody>")
    for label, cells in table.rows:
        row = [f'<th scope="row" data-sort="{esc(label)}">{esc(label)}</th>']
        for c, cell in enumerate(cells):
            text = esc(table.text(cell))
            if cell.bold:
                text = f"<strong>{text}</strong>"
            if cell.marks:
                text += f' <span class="marks">{esc(cell.marks)}</span>'
            interval = ""
            if cell.interval is not None and cell.text is None:
                low, high = table.metric.format(cell.interval.low), table.metric.format(cell.interval.high)
                interval = f'<span class="ci-text">[{esc(low)}, {esc(high)}]</span>'
            title = _cell_title(table, cell)
            title_attr = f' title="{esc(title)}"' if title else ""
            row.append(
                f'<td data-sort="{_sort_key(cell.value)}"{title_attr}><span class="v">{text}</span>'
                f"{whisker(table, cell, axes[c])}{interval}</td>"
            )
        out.append("<tr>" + "".join(row) + "</tr>")
    out.append("</tbody></table>")
    out += [f'<p class="note">{esc(note)}</p>' for note in table.notes]
    out.append("</div>")
    return "\n".join(out)


def plain_table_html(columns: Sequence[tuple[str, str]], rows: Sequence[dict[str, Any]], key: str) -> str:
    """A sortable table of dict rows (``columns``: (field, header))."""
    out = [f'<div class="table-wrap"><table class="sortable data" data-key="{esc(key)}"><thead><tr>']
    out += [f'<th scope="col">{esc(header)}</th>' for _, header in columns]
    out.append("</tr></thead><tbody>")
    for row in rows:
        cells = []
        for name, _ in columns:
            value = row.get(name, "")
            sort = value if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)
            cells.append(f'<td data-sort="{esc(sort)}">{esc(value)}</td>')
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table></div>")
    return "\n".join(out)


def _png(data: bytes, alt: str) -> str:
    encoded = base64.b64encode(data).decode("ascii")
    return f'<img alt="{esc(alt)}" src="data:image/png;base64,{encoded}">'


def figure_html(data: bytes, caption: str) -> str:
    return f"<figure>{_png(data, caption)}<figcaption>{esc(caption)}</figcaption></figure>"
