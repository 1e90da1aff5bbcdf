"""``lampe-eval report``: comparison tables, the leaderboard, plots and report.html from results."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..errors import LampeEvalError
from ..lengths import parse_lengths
from ..options import split_list
from .common import console, fail, say_error
from .params import import_option, out_option


def _check(formats: list[str], fmt: str, resamples: int, sample_mb: float | None) -> None:
    """The option values no report can take (before anything is read)."""
    from ..report import REPORT_FORMATS

    bad = [f for f in formats if f not in REPORT_FORMATS]
    if bad or not formats:
        raise LampeEvalError(f"bad --format {fmt!r}: use {', '.join(REPORT_FORMATS.names())}")
    if resamples < 0:
        raise LampeEvalError(f"--resamples must be 0 (no intervals) or more, got {resamples}")
    if sample_mb is not None and sample_mb < 0:
        raise LampeEvalError(f"--sample-mb must be 0 or more, got {sample_mb}")


def report_command(
    results: list[Path] = typer.Argument(..., help="Results directories (searched for records.jsonl)."),
    fmt: str = typer.Option(
        "md", "--format", "-f", help="{report_formats}; or one an --import module registers."
    ),
    out: Annotated[Path | None, out_option("Output directory (default RESULTS/report).")] = None,
    paper: list[str] = typer.Option(
        None, "--paper", help="Paper table(s) to compare with: table1, table2, ruler, ppl."
    ),
    as_model: str | None = typer.Option(
        None, "--as-model", help="Compare this model's results with every paper block (smoke runs)."
    ),
    as_length: str | None = typer.Option(
        None, "--as-length", help="Compare our results at this length with every paper length (smoke runs)."
    ),
    plots: bool = typer.Option(True, "--plots/--no-plots", help="Write the PNG plots."),
    buckets: str | None = typer.Option(
        None, "--buckets", help="Input-length bucket edges for the bucket plot, e.g. 4k (default: window)."
    ),
    resamples: int = typer.Option(
        1000, "--resamples", help="Bootstrap resamples for the 95% intervals and paired tests (0: none)."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the bootstrap."),
    threshold: str | None = typer.Option(
        None,
        "--threshold",
        help="Score a length must pass to count in the effective length (default: the benchmark's own, "
        "85.6 for RULER: Llama-2-7B at 4K), or relative:F, the fraction of the base score for the relative "
        "effective length (default relative:0.85, NoLiMa's).",
    ),
    baseline: str | None = typer.Option(
        None, "--baseline", help="Method every other is compared with (default: the one declared, rope)."
    ),
    highlight: list[str] = typer.Option(
        None, "--highlight", help="Method(s) drawn emphasised in the plots (default: those declared)."
    ),
    sample_mb: float | None = typer.Option(
        None,
        "--sample-mb",
        help="report.html's budget for embedded samples, in MB (default 16); the rest stay in records.jsonl.",
    ),
    imports: Annotated[
        list[str] | None,
        import_option("Module(s) to import first, e.g. one registering your own benchmark or method."),
    ] = None,
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only list the files written."),
) -> None:
    """Comparison tables (methods as rows, best in bold, 95% intervals, paired tests), the leaderboard
    CSV, plots, and with --format html one self-contained report.html.

    Example: lampe-eval report results/table-ppl --paper ppl --format md,latex,html
    """
    from ..report import BootstrapSettings, build_report
    from ..report.effective import parse_threshold
    from ..runner.checks import import_plugins

    formats = split_list([fmt])
    try:
        import_plugins(split_list(imports))  # first: a module may register a format
        _check(formats, fmt, resamples, sample_mb)
        absolute, relative = parse_threshold(threshold)
        report = build_report(
            results,
            out or results[0] / "report",
            formats=formats,
            papers=split_list(paper),
            as_model=as_model,
            as_length=parse_lengths(as_length)[0] if as_length else None,
            plots=plots,
            bucket_edges=parse_lengths(buckets) if buckets else None,
            bootstrap=BootstrapSettings(resamples=resamples, seed=seed) if resamples else None,
            threshold=absolute,
            relative=relative,
            baseline=baseline,
            highlight=split_list(highlight) or None,
            sample_bytes=int(sample_mb * 1_000_000) if sample_mb is not None else None,
        )
    except LampeEvalError as err:
        fail(str(err))
    for warning in report.warnings:
        say_error("warning:", warning)
    if not quiet and formats[0] in ("md", "latex"):  # tables to read (CSV is for programs)
        typer.echo(report.text)
    for path in report.files:
        console.print(f"wrote {path}", highlight=False)
