"""Reports from results stores: comparison tables (Markdown, LaTeX, CSV), the leaderboard CSV, plots,
and our numbers next to the paper's (``paper_tables/`` of :mod:`lampe_eval.resources`).

``build_report(["results/x"], out="results/x/report")`` writes::

    tables.md | tables.tex | tables.csv   the data sources, then generic tables, methods as rows (the
                                          requested formats)
    report.html                           everything in one self-contained page (format ``html``)
    leaderboard.csv                       one row per model x method x benchmark x length
    (in the tables) effective length      per method, for benchmarks that declare a threshold
    (in the tables) short context         per method: its score within the model's window against the
                                          baseline's on the same samples (:mod:`.short_context`)
    comparisons.csv                       paired comparisons with the baseline and the best other method
    paper-<name>.md|tex|csv               per requested paper table: ours / paper (difference)
    paper-<name>-cells.csv                the same comparison, one line per cell, raw numbers
    <benchmark>-by-length.png, <benchmarks>-by-bucket.png (those that declare bucket_plot)
    <benchmark>-depth-<model>.png         score by needle depth x length, a panel per method (those
                                          that declare depth_key)
    positions-<model>.png                 position maps of the methods in the results (with ``html``)

The outputs are peers in the registry :data:`REPORT_FORMATS` (:mod:`.formats`): ``--format`` names them,
``leaderboard`` comes with every report, and a module imported with ``--import`` may register its own.
Methods are ordered and marked as they declare (:class:`~.data.Presentation`).

Every number comes with its bootstrap interval over samples (:mod:`.uncertainty`; ``bootstrap=None``
turns intervals off).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..fileio import make_dirs
from ..records import SampleRecord
from .closed_book import split_closed_book, with_context_measures
from .data import Presentation, load_records, one_setting_per_cell, task_scores
from .difficulty import difficulty_scores, with_difficulty_tables
from .effective import RELATIVE, with_effective_lengths
from .figure import Plot
from .formats import REPORT_FORMATS, Report, ReportFormat, ReportInputs
from .leaderboard import LEADERBOARD_COLUMNS
from .paper import Comparison, compare, load_paper_table, paper_table_names
from .plots import make_plots
from .short_context import missing_windows, model_windows, with_short_context
from .sources import data_sources_table
from .tables import generic_tables
from .uncertainty import Bootstrap, BootstrapSettings

__all__ = [
    "LEADERBOARD_COLUMNS",
    "REPORT_FORMATS",
    "BootstrapSettings",
    "Plot",
    "Report",
    "ReportFormat",
    "ReportInputs",
    "build_report",
    "paper_table_names",
]


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
    relative: float = RELATIVE,
) -> Report:
    """Write the report of the results stores ``results`` into ``out`` (see the module docstring).
    ``formats``: of :data:`REPORT_FORMATS` (those marked ``always`` are written anyway); ``bootstrap``:
    interval settings (None: no intervals); ``baseline``, ``highlight``: methods to present so instead of
    the declared ones; ``sample_bytes``: report.html's budget for embedded samples (default
    :data:`~lampe_eval.report.html_samples.SAMPLE_BYTES`); ``threshold``: the effective length's (None: each
    benchmark's declared one); ``relative``: the relative effective length's fraction of the base score."""
    unknown = [f for f in formats if f not in REPORT_FORMATS]
    if unknown:
        raise ValueError(f"unknown report format(s) {unknown}: use {', '.join(REPORT_FORMATS.names())}")
    warnings: list[str] = []
    runs, closed_records = split_closed_book(load_records(results, warnings))
    records = one_setting_per_cell(runs, warnings)
    closed_records = one_setting_per_cell(closed_records, warnings)
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
    closed_book = task_scores(closed_records)
    levels = difficulty_scores(records)
    resampler = Bootstrap(bootstrap) if bootstrap is not None and bootstrap.resamples > 0 else None
    windows = model_windows(s.model for s in scores)
    warnings.extend(missing_windows(scores, windows, presentation))
    tables = with_effective_lengths(
        generic_tables(scores, resampler, presentation), scores, threshold, relative, presentation
    )
    sources = data_sources_table([*records, *closed_records])
    report = Report(
        tables=([sources] if sources is not None else [])
        + with_difficulty_tables(
            with_short_context(
                with_context_measures(tables, scores, closed_book, resampler, presentation),
                scores,
                windows,
                resampler,
                presentation,
            ),
            levels,
            resampler,
            presentation,
        ),
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
        relative=relative,
        closed_book=closed_book,
        levels=levels,
        windows=windows,
    )
    for name in REPORT_FORMATS.names():
        fmt = REPORT_FORMATS.get(name)()
        if fmt.always or name in formats:
            report.files.extend(fmt.write(inputs))
    report.files.extend(p.path for p in made)
    report.text = printed_text(report, [REPORT_FORMATS.get(f)() for f in formats], compared)
    return report


def printed_text(
    report: Report, formats: Sequence[ReportFormat], compared: Sequence[tuple[str, list[Comparison]]]
) -> str:
    """The tables (then each paper table) as the first requested format that renders text writes them."""
    for fmt in formats:
        text = fmt.render(report.tables)
        if text is not None:
            return text + "".join(
                f"\n{fmt.render([c.table for c in comparisons])}" for _, comparisons in compared
            )
    return ""
