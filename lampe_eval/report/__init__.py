"""Reports from results stores: comparison tables (Markdown, LaTeX, CSV), the leaderboard CSV, plots,
and our numbers next to the paper's (``paper_tables/`` of :mod:`lampe_eval.resources`).

``build_report(["results/x"], out="results/x/report")`` writes::

    tables.md | tables.tex | tables.csv   generic tables, methods as rows (the requested formats)
    leaderboard.csv                       one row per model x method x benchmark x length
    paper-<name>.md|tex|csv               per requested paper table: ours / paper (difference)
    paper-<name>-cells.csv                the same comparison, one line per cell, raw numbers
    <benchmark>-by-length.png, <benchmarks>-by-bucket.png (those that declare bucket_plot)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .data import load_records, one_setting_per_cell, task_scores
from .leaderboard import LEADERBOARD_COLUMNS, leaderboard_csv
from .paper import compare, comparison_csv, load_paper_table, paper_table_names
from .plots import make_plots
from .tables import Table, generic_tables, render

__all__ = ["LEADERBOARD_COLUMNS", "Report", "build_report", "paper_table_names"]

EXTENSIONS = {"md": "md", "latex": "tex", "csv": "csv"}


@dataclass
class Report:
    tables: list[Table]
    paper_tables: list[Table]
    files: list[Path] = field(default_factory=list)
    text: str = ""  # the tables in the first requested format (what the CLI prints)
    warnings: list[str] = field(default_factory=list)  # one line each (unreadable lines skipped, ...)


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
) -> Report:
    warnings: list[str] = []
    records = one_setting_per_cell(load_records(results, warnings), warnings)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    scores = task_scores(records)
    tables = generic_tables(scores)
    report = Report(tables=tables, paper_tables=[], warnings=warnings)
    for fmt in formats:
        path = out / f"tables.{EXTENSIONS[fmt]}"
        path.write_text(render(tables, fmt))
        report.files.append(path)
    path = out / "leaderboard.csv"
    path.write_text(leaderboard_csv(scores))
    report.files.append(path)
    paper_text: list[str] = []
    for name in papers:
        spec = load_paper_table(name)
        comparisons = compare(spec, scores, as_model=as_model, as_length=as_length)
        ptables = [c.table for c in comparisons]
        report.paper_tables.extend(ptables)
        for fmt in formats:
            path = out / f"paper-{spec['name']}.{EXTENSIONS[fmt]}"
            path.write_text(render(ptables, fmt))
            report.files.append(path)
        path = out / f"paper-{spec['name']}-cells.csv"
        path.write_text(comparison_csv(comparisons))
        report.files.append(path)
        paper_text.append(render(ptables, formats[0]) if formats else "")
    if plots:
        report.files.extend(make_plots(scores, records, out, edges=bucket_edges))
    report.text = (render(tables, formats[0]) if formats else "") + "".join(f"\n{t}" for t in paper_text)
    return report
