"""Where the reported numbers' data came from: the report's first table, one row per benchmark and data
source (the ``data_source`` each sample records: a file, a hub repository at its commit, a package, the
offline corpus, generated), with how many samples of the report read it. Two sources for one benchmark in
one report (a dataset updated on the hub between runs, a fixture next to real data) show as two rows."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from ..records import SampleRecord
from .tables import Cell, Table

SOURCE_KEY = "data_source"  # the meta key every benchmark sets per sample


def data_sources_table(records: Sequence[SampleRecord]) -> Table | None:
    """Benchmark x source -> samples; None when no record names its source."""
    counts: Counter[tuple[str, str]] = Counter(
        (r.benchmark, str(r.meta[SOURCE_KEY])) for r in records if r.meta.get(SOURCE_KEY)
    )
    if not counts:
        return None
    rows = [
        (benchmark, [Cell(text=source), Cell(value=float(count), text=str(count))])
        for (benchmark, source), count in sorted(counts.items())
    ]
    table = Table(key="data-sources", title="Data sources", columns=["source", "samples"], rows=rows)
    table.corner = "benchmark"
    unnamed = sum(1 for r in records if not r.meta.get(SOURCE_KEY))
    if unnamed:
        note = f"{unnamed} sample(s) record no source (generated, or records of an older release)"
        table.notes.append(note)
    return table
