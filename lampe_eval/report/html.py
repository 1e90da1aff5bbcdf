"""``report.html``: the whole report in one self-contained page (inline CSS and JavaScript, images as
base64 PNG, no network): the jinja2 template ``templates/report.html.j2`` (autoescaped) with
``templates/report.css`` and ``templates/report.js`` inlined, all package data.

Sections: per benchmark and model the tables (sortable columns: click a header; every cell with its
interval drawn as a whisker and its significance marks), that benchmark's plots; the plots over several
benchmarks; the position maps of the methods in the results; the paper comparisons (our interval and
the paper's number as a red tick); the paired comparisons and the leaderboard (sortable); and a
per-sample browser (filters by model, benchmark, method, task and length, and a text search) showing
each sample's prompt head and tail, its hash and the ``show-prompt`` command that prints it whole, the
prediction, the gold answers and the score. The browser holds every sample up to a budget of sample
data and past it a chosen part, saying what it left in ``records.jsonl`` (:func:`choose_samples`).

Everything taken from results is untrusted text: it is escaped (``html.escape``, the template's
autoescape) where it is written into the page, and the samples travel as JSON inside a ``<script
type="application/json">`` block (with ``<``, ``>`` and ``&`` escaped) that the page's script reads and
writes with ``textContent`` only. Should escaping ever fail, the page's Content-Security-Policy still runs
no script but its own: ``script-src`` allows the SHA-256 hash of the page's one inline script (report.js
as the page holds it) and nothing else (no ``'unsafe-inline'``, so no injected ``<script>``, ``on...=``
handler or ``javascript:`` link runs; the page has no inline handlers, its script attaches its listeners),
and ``default-src 'none'`` loads nothing from anywhere.
"""

from __future__ import annotations

import base64
import hashlib
import html
import importlib.resources
import json
import math
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from ..benchmarks.base import metric_of
from ..fileio import atomic_write_text
from ..lengths import format_length
from ..records import SampleRecord
from .data import variant_labels, variant_of
from .figure import Plot
from .tables import SAME_AS_BASELINE, SAME_AS_BEST, Cell, Table, slug

PREDICTION_CHARS = 4000  # longer predictions (and references) are cut in the page, saying how much


@dataclass
class HtmlInputs:
    title: str
    sources: list[str]
    settings: str  # how intervals were computed ("" when off)
    tables: list[Table]
    paper_tables: list[Table] = field(default_factory=list)
    leaderboard: list[dict[str, Any]] = field(default_factory=list)
    comparisons: list[dict[str, Any]] = field(default_factory=list)
    plots: list[Plot] = field(default_factory=list)
    positions: list[tuple[str, bytes]] = field(default_factory=list)  # (model, PNG)
    records: list[SampleRecord] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    sample_bytes: int | None = None  # budget of the embedded samples (None: SAMPLE_BYTES)


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


def _plain_table(columns: Sequence[tuple[str, str]], rows: Sequence[dict[str, Any]], key: str) -> str:
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


def _figure(data: bytes, caption: str) -> str:
    return f"<figure>{_png(data, caption)}<figcaption>{esc(caption)}</figcaption></figure>"


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


def csp_source_hash(source: str) -> str:
    """The CSP source expression that allows exactly this inline script: ``'sha256-<base64>'``."""
    digest = base64.b64encode(hashlib.sha256(source.encode("utf-8")).digest()).decode("ascii")
    return f"'sha256-{digest}'"


# -------------------------------------------------------------------------------------------- page
TEMPLATES = "templates"  # package data of lampe_eval.report: report.html.j2, report.css, report.js


def _asset(name: str) -> str:
    return (importlib.resources.files(__package__) / TEMPLATES / name).read_text(encoding="utf-8")


SCRIPT = _asset("report.js")  # the page's one script, as the page holds it
CSS = _asset("report.css")

# No network (everything is inline, and the page says so to the browser too) and no script but the page's
# own (the hash of report.js as rendered into the page): an injected <script>, on...= handler or
# javascript: URL does not run. Styles stay inline.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
    f"script-src {csp_source_hash(SCRIPT)}; base-uri 'none'; form-action 'none'"
)


def _environment() -> jinja2.Environment:
    loader = jinja2.PackageLoader(__package__ or "lampe_eval.report", TEMPLATES)
    return jinja2.Environment(loader=loader, autoescape=True, undefined=jinja2.StrictUndefined)


def _section(title: str, anchor: str, body: list[str]) -> dict[str, Any]:
    """A section of the page (its body: markup made here, every text from results escaped)."""
    return {"title": title, "anchor": anchor, "body": Markup("\n".join(body))}


def _benchmark_bodies(inputs: HtmlInputs) -> dict[str, list[str]]:
    """Per benchmark, in the tables' order: its tables under their section headings, then its own plots."""
    by_benchmark: dict[str, list[Table]] = {}
    for table in inputs.tables:
        by_benchmark.setdefault(table.section.split(" | ")[0] or table.title, []).append(table)
    bodies: dict[str, list[str]] = {}
    for benchmark, tables in by_benchmark.items():
        body = bodies[benchmark] = []
        current = None
        for table in tables:
            if table.section != current:
                current = table.section
                body.append(f"<h3>{esc(current)}</h3>")
            body.append(table_html(table))
        body += [
            _figure(p.path.read_bytes(), p.caption) for p in inputs.plots if p.benchmarks == (benchmark,)
        ]
    return bodies


def render_html(inputs: HtmlInputs, sample_limit: int = 500) -> str:
    nav: list[tuple[str, str]] = []
    sections: list[dict[str, Any]] = []
    by_benchmark = _benchmark_bodies(inputs)
    for benchmark, body in by_benchmark.items():
        anchor = "bench-" + slug(benchmark)
        nav.append((anchor, benchmark))
        sections.append(_section(benchmark, anchor, body))
    shared = [p for p in inputs.plots if len(p.benchmarks) != 1 or p.benchmarks[0] not in by_benchmark]
    if shared:
        nav.append(("plots", "plots"))
        sections.append(_section("Plots", "plots", [_figure(p.path.read_bytes(), p.caption) for p in shared]))
    if inputs.positions:
        body = [
            '<p class="note">The relative position RoPE gives each (query i, key j) pair under each method, '
            "from the plan the attention engine runs at this length, with the parameters the results ran "
            "with (heat map: rows and columns sampled evenly beyond 384 tokens; blank: not attended), and "
            "the positions of the last query, exact. The same picture for any setting: "
            "<code>lampe-eval show-positions --method M --len L</code>.</p>"
        ]
        body += [_figure(png, f"position maps: {model}") for model, png in inputs.positions]
        nav.append(("positions", "position maps"))
        sections.append(_section("Position maps", "positions", body))
    if inputs.paper_tables:
        nav.append(("paper", "paper"))
        sections.append(_section("Paper comparison", "paper", [table_html(t) for t in inputs.paper_tables]))
    if inputs.comparisons:
        columns = [
            ("model", "model"), ("benchmark", "benchmark"), ("length_label", "length"),
            ("variant", "method"), ("score", "score"), ("versus_role", "versus"), ("versus", "other"),
            ("versus_score", "other score"), ("diff", "difference"), ("diff_ci_low", "low"),
            ("diff_ci_high", "high"), ("p_value", "p"), ("significant", "significant"), ("pairs", "pairs"),
        ]  # fmt: skip
        body = [
            f'<p class="note">Each method against the baseline and against the best other method of the same '
            f"model, benchmark and length, on the samples both ran: {esc(inputs.settings)}; difference = "
            "method - other (comparisons.csv).</p>",
            _plain_table(columns, inputs.comparisons, "comparisons"),
        ]
        nav.append(("comparisons", "comparisons"))
        sections.append(_section("Paired comparisons", "comparisons", body))
    if inputs.leaderboard:
        columns = [
            ("model", "model"), ("variant", "method"), ("benchmark", "benchmark"), ("length_label", "length"),
            ("metric", "metric"), ("score", "score"), ("ci_low", "low"), ("ci_high", "high"),
            ("stderr", "stderr"), ("tasks", "tasks"), ("samples", "samples"),
            ("seconds_per_sample", "s/sample"), ("git", "git"), ("effective_length", "effective length"),
            ("effective_length_relative", "relative effective length"),
        ]  # fmt: skip
        nav.append(("leaderboard", "leaderboard"))
        sections.append(
            _section("Leaderboard", "leaderboard", [_plain_table(columns, inputs.leaderboard, "leaderboard")])
        )
    nav.append(("samples", "samples"))
    budget = SAMPLE_BYTES if inputs.sample_bytes is None else inputs.sample_bytes
    held, partial = choose_samples(inputs.records, budget)
    legend = (
        f"Intervals: {inputs.settings}. {SAME_AS_BEST}: not significantly different from the best other "
        f"method of the column; {SAME_AS_BASELINE}: not significantly different from the baseline. "
        "Click a column header to sort."
        if inputs.settings
        else "Intervals off (--resamples 0)."
    )
    page = (
        _environment()
        .get_template("report.html.j2")
        .render(
            csp=Markup(CONTENT_SECURITY_POLICY),
            css=Markup(CSS),
            script=Markup(SCRIPT),
            title=inputs.title,
            sources=inputs.sources,
            total=len(inputs.records),
            held=len(held),
            generated=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            legend=legend,
            nav=nav,
            warnings=inputs.warnings,
            sections=sections,
            holding=holding_text(len(inputs.records), len(held), budget, inputs.sources),
            limit=sample_limit,
            filters=SAMPLE_FILTERS,
            sample_json=Markup(_sample_json(held, partial, sample_limit)),
        )
    )
    return str(page)


def _sample_json(records: Sequence[SampleRecord], partial: list[list[Any]], limit: int) -> str:
    rows = sample_rows(records)
    return json_for_script({"fields": SAMPLE_FIELDS, "rows": rows, "limit": limit, "partial": partial})


def write_html(inputs: HtmlInputs, path: Path) -> Path:
    atomic_write_text(path, render_html(inputs))
    return path
