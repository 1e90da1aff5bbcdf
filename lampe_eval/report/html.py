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
data and past it a chosen part, saying what it left in ``records.jsonl``
(:func:`.html_samples.choose_samples`).

Everything taken from results is untrusted text: it is escaped (``html.escape``, the template's
autoescape) where it is written into the page, and the samples travel as JSON inside a ``<script
type="application/json">`` block (with ``<``, ``>`` and ``&`` escaped) that the page's script reads and
writes with ``textContent`` only. Should escaping ever fail, the page's Content-Security-Policy still runs
no script but its own: ``script-src`` allows the SHA-256 hash of the page's one inline script (report.js
as the page holds it) and nothing else (no ``'unsafe-inline'``, so no injected ``<script>``, ``on...=``
handler or ``javascript:`` link runs; the page has no inline handlers, its script attaches its listeners),
and ``default-src 'none'`` loads nothing from anywhere.

This module assembles the page; the markup of the tables and figures is :mod:`.html_tables`'s, the
sample browser's rows, budget and JSON :mod:`.html_samples`'s.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.resources
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from ..fileio import atomic_write_text
from ..records import SampleRecord
from .figure import Plot
from .html_samples import SAMPLE_BYTES, SAMPLE_FILTERS, choose_samples, holding_text, sample_json
from .html_tables import esc, figure_html, plain_table_html, table_html
from .tables import SAME_AS_BASELINE, SAME_AS_BEST, Table, slug


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
            figure_html(p.path.read_bytes(), p.caption) for p in inputs.plots if p.benchmarks == (benchmark,)
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
        sections.append(
            _section("Plots", "plots", [figure_html(p.path.read_bytes(), p.caption) for p in shared])
        )
    if inputs.positions:
        body = [
            '<p class="note">The relative position RoPE gives each (query i, key j) pair under each method, '
            "from the plan the attention engine runs at this length, with the parameters the results ran "
            "with (heat map: rows and columns sampled evenly beyond 384 tokens; blank: not attended), and "
            "the positions of the last query, exact. The same picture for any setting: "
            "<code>lampe-eval show-positions --method M --len L</code>.</p>"
        ]
        body += [figure_html(png, f"position maps: {model}") for model, png in inputs.positions]
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
            plain_table_html(columns, inputs.comparisons, "comparisons"),
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
            _section(
                "Leaderboard", "leaderboard", [plain_table_html(columns, inputs.leaderboard, "leaderboard")]
            )
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
            sample_json=Markup(sample_json(held, partial, sample_limit)),
        )
    )
    return str(page)


def write_html(inputs: HtmlInputs, path: Path) -> Path:
    atomic_write_text(path, render_html(inputs))
    return path
