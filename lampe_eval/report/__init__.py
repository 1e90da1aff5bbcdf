"""Reports from results stores: comparison tables (Markdown, LaTeX, CSV), the leaderboard CSV, plots,
and our numbers next to the paper's (``paper_tables/`` of :mod:`lampe_eval.resources`).

``build_report(["results/x"], out="results/x/report")`` writes::

    tables.md | tables.tex | tables.csv   generic tables, methods as rows (the requested formats)
    report.html                           everything in one self-contained page (format ``html``)
    leaderboard.csv                       one row per model x method x benchmark x length
    (in the tables) effective length      per method, for benchmarks that declare a threshold
    comparisons.csv                       paired comparisons with the baseline and the best other method
    paper-<name>.md|tex|csv               per requested paper table: ours / paper (difference)
    paper-<name>-cells.csv                the same comparison, one line per cell, raw numbers
    <benchmark>-by-length.png, <benchmarks>-by-bucket.png (those that declare bucket_plot)
    <benchmark>-depth-<model>.png         score by needle depth x length, a panel per method (those
                                          that declare depth_key)
    positions-<model>.png                 position maps of the methods in the results (with ``html``)

The outputs are peers in :data:`REPORT_FORMATS` (``--format`` names them; ``leaderboard`` comes with
every report). Methods are ordered and marked as they declare (:class:`~.data.Presentation`).

Every number comes with its bootstrap interval over samples (:mod:`.uncertainty`; ``bootstrap=None``
turns intervals off).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..fileio import atomic_write_text, make_dirs
from ..records import SampleRecord
from .data import Presentation, TaskScore, load_records, one_setting_per_cell, task_scores
from .effective import with_effective_lengths
from .figure import Plot
from .leaderboard import (
    LEADERBOARD_COLUMNS,
    comparison_rows,
    comparisons_csv,
    leaderboard_csv,
    leaderboard_rows,
)
from .paper import Comparison, compare, comparison_csv, load_paper_table, paper_table_names
from .plots import make_plots
from .tables import Table, generic_tables, to_csv, to_latex, to_markdown
from .uncertainty import Bootstrap, BootstrapSettings

__all__ = [
    "FORMATS",
    "LEADERBOARD_COLUMNS",
    "REPORT_FORMATS",
    "BootstrapSettings",
    "Report",
    "ReportFormat",
    "build_report",
    "paper_table_names",
]


@dataclass
class Report:
    tables: list[Table]
    paper_tables: list[Table]
    files: list[Path] = field(default_factory=list)
    text: str = ""  # the tables in the first requested format (what the CLI prints)
    warnings: list[str] = field(default_factory=list)  # one line each (unreadable lines skipped, ...)


@dataclass
class ReportInputs:
    """Everything a report's writers read (built once by :func:`build_report`)."""

    out: Path
    report: Report
    scores: list[TaskScore]
    records: list[SampleRecord]
    resampler: Bootstrap | None
    presentation: Presentation
    papers: list[tuple[str, list[Comparison]]]  # (paper table name, its comparisons)
    plots: list[Plot]
    sources: list[str]
    pictures: bool  # plots (and position maps) wanted
    sample_bytes: int | None  # the page's budget for embedded samples (None: every sample)
    threshold: float | None = None  # the effective length's (None: each benchmark's declared one)


@dataclass(frozen=True)
class ReportFormat:
    """One output of ``lampe-eval report``: its name (``--format``), the files it writes and its writer."""

    name: str
    files: tuple[str, ...]  # what it writes into the output directory (``<...>``: one per such thing)
    write: Callable[[ReportInputs], list[Path]]
    render: Callable[[Sequence[Table]], str] | None = None  # tables as text (what the command prints)
    always: bool = False  # written with every report, asked for or not


def _render_with(one: Callable[[Table], str]) -> Callable[[Sequence[Table]], str]:
    return lambda tables: "\n".join(one(t) for t in tables)


def _text_format(name: str, extension: str, render: Callable[[Sequence[Table]], str]) -> ReportFormat:
    def write(inputs: ReportInputs) -> list[Path]:
        files = [inputs.out / f"tables.{extension}"]
        atomic_write_text(files[0], render(inputs.report.tables))
        for paper, comparisons in inputs.papers:
            files.append(inputs.out / f"paper-{paper}.{extension}")
            atomic_write_text(files[-1], render([c.table for c in comparisons]))
        return files

    return ReportFormat(name, (f"tables.{extension}", f"paper-<name>.{extension}"), write, render)


def _write_leaderboard(inputs: ReportInputs) -> list[Path]:
    out, scores, resampler, presentation = inputs.out, inputs.scores, inputs.resampler, inputs.presentation
    files = [out / "leaderboard.csv"]
    atomic_write_text(files[0], leaderboard_csv(scores, resampler, presentation, inputs.threshold))
    if resampler is not None:
        files.append(out / "comparisons.csv")
        atomic_write_text(files[-1], comparisons_csv(scores, resampler, presentation))
    for paper, comparisons in inputs.papers:
        files.append(out / f"paper-{paper}-cells.csv")
        atomic_write_text(files[-1], comparison_csv(comparisons))
    return files


def _write_html(inputs: ReportInputs) -> list[Path]:
    """``report.html`` (and, with pictures, the position maps it shows as ``positions-<model>.png``)."""
    from .html import HtmlInputs, write_html
    from .positions import draw, maps_for_results
    from .tables import slug

    report, out = inputs.report, inputs.out
    files: list[Path] = []
    positions: list[tuple[str, bytes]] = []
    if inputs.pictures:
        maps, notes = maps_for_results(inputs.records, presentation=inputs.presentation)
        report.warnings.extend(notes)
        for model, model_maps in maps.items():
            path = out / f"positions-{slug(model)}.png"
            positions.append((model, draw(model_maps, path)))
            files.append(path)
    resampler = inputs.resampler
    page = HtmlInputs(
        title="lampe-eval report",
        sources=inputs.sources,
        settings=resampler.settings.describe() if resampler else "",
        tables=report.tables,
        paper_tables=report.paper_tables,
        leaderboard=leaderboard_rows(inputs.scores, resampler, inputs.presentation, inputs.threshold),
        comparisons=comparison_rows(inputs.scores, resampler, inputs.presentation) if resampler else [],
        plots=inputs.plots,
        positions=positions,
        records=inputs.records,
        warnings=report.warnings,
        sample_bytes=inputs.sample_bytes,
    )
    files.append(write_html(page, out / "report.html"))
    return files


# Every output, as peers: ``--format`` names them; ``always`` ones come with every report.
REPORT_FORMATS: dict[str, ReportFormat] = {
    f.name: f
    for f in (
        _text_format("md", "md", _render_with(to_markdown)),
        _text_format("latex", "tex", _render_with(to_latex)),
        _text_format("csv", "csv", to_csv),
        ReportFormat(
            "leaderboard",
            ("leaderboard.csv", "comparisons.csv", "paper-<name>-cells.csv"),
            _write_leaderboard,
            always=True,
        ),
        ReportFormat("html", ("report.html", "positions-<model>.png"), _write_html),
    )
}
FORMATS = tuple(REPORT_FORMATS)


def unknown_names(records: Sequence[SampleRecord]) -> list[str]:
    """One warning per benchmark and per method the records name that this process does not know."""
    from ..benchmarks.base import benchmark_class
    from ..methods import METHODS

    notes = []
    for name in sorted({r.benchmark for r in records}):
        if benchmark_class(name) is None:
            notes.append(
                f"records of benchmark {name!r}, which this process does not know: its tables average each "
                "metric and rank it higher-is-better (--import the module that registers it)"
            )
    for name in sorted({r.method for r in records}):
        if name not in METHODS:
            notes.append(
                f"records of method {name!r}, which this process does not know: listed last, no declared "
                "baseline or highlight (--import the module that registers it)"
            )
    return notes


def build_report(
    results: Sequence[str | Path],
    out: str | Path,
    *,
    formats: Sequence[str] = ("md",),
    papers: Sequence[str] = (),
    as_model: str | None = None,
    as_length: int | None = None,
    plots: bool = True,
    bucket_edges: Sequence[int] | None = None,
    bootstrap: BootstrapSettings | None = BootstrapSettings(),
    baseline: str | None = None,
    highlight: Sequence[str] | None = None,
    sample_bytes: int | None = None,
    threshold: float | None = None,
) -> Report:
    """Write the report of the results stores ``results`` into ``out`` (see the module docstring).
    ``formats``: of :data:`REPORT_FORMATS` (those marked ``always`` are written anyway); ``bootstrap``:
    interval settings (None: no intervals); ``baseline``, ``highlight``: methods to present so instead of
    the declared ones; ``sample_bytes``: report.html's budget for embedded samples (default
    :data:`~lampe_eval.report.html.SAMPLE_BYTES`); ``threshold``: the effective length's (None: each
    benchmark's declared one)."""
    unknown = [f for f in formats if f not in REPORT_FORMATS]
    if unknown:
        raise ValueError(f"unknown report format(s) {unknown}: use {', '.join(REPORT_FORMATS)}")
    warnings: list[str] = []
    records = one_setting_per_cell(load_records(results, warnings), warnings)
    warnings.extend(unknown_names(records))
    methods = {r.method for r in records}
    for option, names in (("--baseline", [baseline] if baseline else []), ("--highlight", highlight or [])):
        warnings.extend(
            f"{option} {name}: no records of method {name!r}" for name in names if name not in methods
        )
    presentation = Presentation(baseline, tuple(highlight) if highlight is not None else None)
    out = Path(out)
    make_dirs(out)
    scores = task_scores(records)
    resampler = Bootstrap(bootstrap) if bootstrap is not None and bootstrap.resamples > 0 else None
    report = Report(
        tables=with_effective_lengths(generic_tables(scores, resampler, presentation), scores, threshold),
        paper_tables=[],
        warnings=warnings,
    )
    compared: list[tuple[str, list[Comparison]]] = []
    for name in papers:
        spec = load_paper_table(name)
        comparisons = compare(spec, scores, as_model=as_model, as_length=as_length, bootstrap=resampler)
        compared.append((spec["name"], comparisons))
        report.paper_tables.extend(c.table for c in comparisons)
    made = make_plots(scores, records, out, edges=bucket_edges, presentation=presentation) if plots else []
    inputs = ReportInputs(
        out=out,
        report=report,
        scores=scores,
        records=records,
        resampler=resampler,
        presentation=presentation,
        papers=compared,
        plots=made,
        sources=[str(r) for r in results],
        pictures=plots,
        sample_bytes=sample_bytes,
        threshold=threshold,
    )
    for fmt in REPORT_FORMATS.values():
        if fmt.always or fmt.name in formats:
            report.files.extend(fmt.write(inputs))
    report.files.extend(p.path for p in made)
    texts = [REPORT_FORMATS[f] for f in formats if REPORT_FORMATS[f].render is not None]
    if texts:
        render: Any = texts[0].render
        report.text = render(report.tables) + "".join(
            f"\n{render([c.table for c in comparisons])}" for _, comparisons in compared
        )
    return report
