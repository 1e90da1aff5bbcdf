"""``lampe-eval rescore``: every record's scores recomputed from its stored output with the current
scorers, without loading a model (a scorer fixed or changed since the records were made; imported
predictions scored again).

Each record is scored by its benchmark's :meth:`~lampe_eval.benchmarks.base.Benchmark.score_stored` on
its references, meta and output; a record whose scores change is rewritten in place, the whole file
replaced at once under the store's lock (:func:`~lampe_eval.runner.store.rewrite_records`), so a run
appending meanwhile loses nothing. Records that cannot be rescored (their benchmark is not registered in
this process, or its scorer cannot read what the record kept) are kept as they are and counted, one line
per benchmark.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..benchmarks.base import BENCHMARKS, Benchmark
from ..errors import LampeEvalError
from ..records import RECORDS_FILE, Problems, SampleRecord
from ..runner.store import rewrite_records


@dataclass
class Unscorable:
    """Records of one benchmark kept as they are, and the first reason."""

    count: int = 0
    reason: str = ""


@dataclass
class RescoreOutcome:
    path: Path
    records: int = 0  # records rescored
    changed: int = 0  # of them, those whose scores changed (rewritten)
    unable: dict[str, Unscorable] = field(default_factory=dict)  # benchmark -> records kept as they are
    problems: Problems = field(default_factory=Problems)  # lines that are no record (kept as they are)

    def note(self, benchmark: str, reason: str) -> None:
        entry = self.unable.setdefault(benchmark, Unscorable())
        entry.count += 1
        entry.reason = entry.reason or reason


def records_path(store: Path) -> Path:
    """``store/records.jsonl`` (or the file itself); one line when there is none."""
    path = store / RECORDS_FILE if store.is_dir() else store
    if not path.is_file():
        where = (
            f"no {RECORDS_FILE} in {store}"
            if store.is_dir()
            else f"results path {str(store)!r} does not exist"
        )
        raise LampeEvalError(where)
    return path


def rescore_store(store: Path) -> RescoreOutcome:
    """Rescore every record of ``store`` (a results directory or its records file)."""
    path = records_path(store)
    outcome = RescoreOutcome(path)
    benches: dict[str, Benchmark | None] = {}

    def update(data: dict[str, Any]) -> dict[str, Any] | None:
        record = SampleRecord.from_json(data)
        name = record.benchmark
        if name not in benches:
            benches[name] = BENCHMARKS.get(name)() if name in BENCHMARKS else None
        bench = benches[name]
        if bench is None:
            outcome.note(
                name,
                "the benchmark is not registered in this process (--import the module that registers it)",
            )
            return None
        if not bench.rescorable:
            outcome.note(name, "its scorer needs more than a record keeps")
            return None
        try:
            scores = bench.score_stored(record.task, record.references, record.meta, record.output)
        except (LampeEvalError, KeyError, TypeError, ValueError, IndexError, ArithmeticError) as err:
            outcome.note(name, f"{type(err).__name__}: {str(err)[:160]}")
            return None
        outcome.records += 1
        if same_scores(record.scores, scores):
            return None
        outcome.changed += 1
        return {**data, "scores": scores}

    rewrite_records(path, update, outcome.problems)
    return outcome


def same_scores(a: Mapping[str, float], b: Mapping[str, float]) -> bool:
    """The same metrics in the same order with the same values (NaN equal to NaN)."""
    if list(a) != list(b):
        return False
    for key, x in a.items():
        y = b[key]
        both_nan = isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y)
        if not both_nan and x != y:
            return False
    return True
