"""The outputs of ``lampe-eval report``, as peers in one registry: :data:`REPORT_FORMATS` (``--format``
names them; those marked ``always`` come with every report). Each is a :class:`ReportFormat`: the files it
writes and its writer, which reads everything the report computed (:class:`ReportInputs`).

A format of your own is one class in a module that ``lampe-eval report --import MODULE`` imports::

    @REPORT_FORMATS.register("scores-json")
    class ScoresJson(ReportFormat):
        files = ("scores.json",)

        def write(self, inputs: ReportInputs) -> list[Path]:
            path = inputs.out / "scores.json"
            path.write_text(json.dumps([[s.model, s.variant.method, s.task, s.score] for s in inputs.scores]))
            return [path]
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from ..fileio import atomic_write_text
from ..records import SampleRecord
from ..registry import Registry
from .data import Presentation, TaskScore
from .effective import RELATIVE
from .figure import Plot
from .leaderboard import comparison_rows, comparisons_csv, leaderboard_csv, leaderboard_rows
from .paper import Comparison, comparison_csv
from .tables import Table, to_csv, to_latex, to_markdown
from .uncertainty import Bootstrap


@dataclass
class Report:
    tables: list[Table]
    paper_tables: list[Table]
    files: list[Path] = field(default_factory=list)
    text: str = ""  # the tables in the first requested format (what the CLI prints)
    warnings: list[str] = field(default_factory=list)  # one line each (unreadable lines skipped, ...)


@dataclass
class ReportInputs:
    """Everything a report's writers read (built once by :func:`~lampe_eval.report.build_report`)."""

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
    relative: float = RELATIVE  # the relative effective length's fraction of the base score
    closed_book: list[TaskScore] = field(default_factory=list)  # closed-book results (--opt no_context=true)
    levels: dict[str, list[TaskScore]] = field(default_factory=dict)  # difficulty level -> its results
    windows: dict[str, int] = field(default_factory=dict)  # model -> pretraining window (short context)


class ReportFormat(ABC):
    """One output of ``lampe-eval report`` (``--format NAME``; registered with
    ``@REPORT_FORMATS.register(NAME)``): the files it writes and its writer."""

    name: ClassVar[str]  # set by the registry
    files: ClassVar[
        tuple[str, ...]
    ] = ()  # what it writes into the output directory (``<...>``: one per such)
    always: ClassVar[bool] = False  # written with every report, asked for or not

    @abstractmethod
    def write(self, inputs: ReportInputs) -> list[Path]:
        """Write the format's files into ``inputs.out``; the paths written."""

    def render(self, tables: Sequence[Table]) -> str | None:
        """The tables as text (what the command prints when this is the first format asked for), or None."""
        return None


def _check_format(cls: type[ReportFormat]) -> None:
    if inspect.isabstract(cls):
        raise TypeError(f"report format {cls.__name__} must implement write(inputs)")
    if not cls.files:
        raise TypeError(f"report format {cls.__name__} must declare the files it writes (files = (...))")


REPORT_FORMATS: Registry[ReportFormat] = Registry("report format", check=_check_format)


class TextFormat(ReportFormat):
    """Tables as text: ``tables.<extension>``, and ``paper-<name>.<extension>`` per paper table."""

    extension: ClassVar[str]

    @abstractmethod
    def render(self, tables: Sequence[Table]) -> str: ...

    def write(self, inputs: ReportInputs) -> list[Path]:
        files = [inputs.out / f"tables.{self.extension}"]
        atomic_write_text(files[0], self.render(inputs.report.tables))
        for paper, comparisons in inputs.papers:
            files.append(inputs.out / f"paper-{paper}.{self.extension}")
            atomic_write_text(files[-1], self.render([c.table for c in comparisons]))
        return files


@REPORT_FORMATS.register("md")
class Markdown(TextFormat):
    extension = "md"
    files = ("tables.md", "paper-<name>.md")

    def render(self, tables: Sequence[Table]) -> str:
        return "\n".join(to_markdown(t) for t in tables)


@REPORT_FORMATS.register("latex")
class Latex(TextFormat):
    extension = "tex"
    files = ("tables.tex", "paper-<name>.tex")

    def render(self, tables: Sequence[Table]) -> str:
        return "\n".join(to_latex(t) for t in tables)


@REPORT_FORMATS.register("csv")
class Csv(TextFormat):
    extension = "csv"
    files = ("tables.csv", "paper-<name>.csv")

    def render(self, tables: Sequence[Table]) -> str:
        return to_csv(tables)


@REPORT_FORMATS.register("leaderboard")
class Leaderboard(ReportFormat):
    files = ("leaderboard.csv", "comparisons.csv", "paper-<name>-cells.csv")
    always = True

    def write(self, inputs: ReportInputs) -> list[Path]:
        out, scores, resampler, presentation = (
            inputs.out,
            inputs.scores,
            inputs.resampler,
            inputs.presentation,
        )
        files = [out / "leaderboard.csv"]
        board = leaderboard_csv(
            scores,
            resampler,
            presentation,
            inputs.threshold,
            inputs.relative,
            inputs.closed_book,
            inputs.levels,
            inputs.windows,
        )
        atomic_write_text(files[0], board)
        if resampler is not None:
            files.append(out / "comparisons.csv")
            atomic_write_text(files[-1], comparisons_csv(scores, resampler, presentation))
        for paper, comparisons in inputs.papers:
            files.append(out / f"paper-{paper}-cells.csv")
            atomic_write_text(files[-1], comparison_csv(comparisons))
        return files


@REPORT_FORMATS.register("html")
class Html(ReportFormat):
    """``report.html`` (and, with pictures, the position maps it shows as ``positions-<model>.png``)."""

    files = ("report.html", "positions-<model>.png")

    def write(self, inputs: ReportInputs) -> list[Path]:
        from .html import HtmlInputs, write_html

        report, resampler = inputs.report, inputs.resampler
        files, positions = self.position_maps(inputs) if inputs.pictures else ([], [])
        page = HtmlInputs(
            title="lampe-eval report",
            sources=inputs.sources,
            settings=resampler.settings.describe() if resampler else "",
            tables=report.tables,
            paper_tables=report.paper_tables,
            leaderboard=leaderboard_rows(
                inputs.scores,
                resampler,
                inputs.presentation,
                inputs.threshold,
                inputs.relative,
                inputs.closed_book,
                inputs.levels,
                inputs.windows,
            ),
            comparisons=comparison_rows(inputs.scores, resampler, inputs.presentation) if resampler else [],
            plots=inputs.plots,
            positions=positions,
            records=inputs.records,
            warnings=report.warnings,
            sample_bytes=inputs.sample_bytes,
        )
        files.append(write_html(page, inputs.out / "report.html"))
        return files

    @staticmethod
    def position_maps(inputs: ReportInputs) -> tuple[list[Path], list[tuple[str, bytes]]]:
        """``positions-<model>.png`` of the methods in the results: the files, and (model, PNG) pairs."""
        from .positions import draw, maps_for_results
        from .tables import slug

        maps, notes = maps_for_results(inputs.records, presentation=inputs.presentation)
        inputs.report.warnings.extend(notes)
        files: list[Path] = []
        positions: list[tuple[str, bytes]] = []
        for model, model_maps in maps.items():
            path = inputs.out / f"positions-{slug(model)}.png"
            positions.append((model, draw(model_maps, path)))
            files.append(path)
        return files, positions
