"""Closed-book runs in reports: set apart from the methods, the context gain with its paired interval,
LongScore (constructed stores with known answers)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from lampe_eval.report import build_report
from lampe_eval.report.closed_book import long_score
from tests.reportstore import record

CLOSED = {"no_context": True}


def _write(path: Path, rows: list[dict]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _store(tmp_path: Path, closed_methods: tuple[str, ...] = ("rope",), samples: int = 10) -> Path:
    """rope and lampe on two tasks at 1K and 2K; each sample's closed-book score is its score minus 20
    for rope (minus 30 for lampe), whatever the sample: the paired interval of the gain has no width."""
    rows = []
    for method, level in (("rope", 50.0), ("lampe", 70.0)):
        for task in ("alpha", "beta"):
            for length in (1024, 2048):
                for i in range(samples):
                    score = level + (i % 5) * 10.0 - (10.0 if length == 2048 else 0.0)
                    rows.append(record(method, "fake", task, length, i, {"acc": score}))
                    if method in closed_methods:
                        drop = 20.0 if method == "rope" else 30.0
                        rows.append(
                            record(
                                method, "fake", task, length, i, {"acc": score - drop},
                                options=CLOSED, key=f"closed-{method}-{task}-{length}:{i}",
                                job_key=f"closed-{method}-{task}-{length}",
                            )
                        )  # fmt: skip
    return _write(tmp_path / "store", rows)


def _board(out: Path) -> dict[tuple[str, int], dict[str, str]]:
    with open(out / "leaderboard.csv") as f:
        return {(r["method"], int(r["length"])): r for r in csv.DictReader(f)}


def test_context_gain_is_paired_and_set_against_the_right_closed_book_run(tmp_path: Path) -> None:
    report = build_report([_store(tmp_path)], tmp_path / "r", formats=["md", "html"], plots=False)
    board = _board(tmp_path / "r")
    assert set(board) == {("rope", 1024), ("rope", 2048), ("lampe", 1024), ("lampe", 2048)}  # no closed row
    rope = board[("rope", 1024)]
    assert float(rope["score"]) == pytest.approx(70.0) and float(rope["closed_book_score"]) == pytest.approx(
        50.0
    )
    assert float(rope["context_gain"]) == pytest.approx(20.0)
    # every sample gains exactly 20: a paired interval has no width (an unpaired one would span +-12)
    assert float(rope["context_gain_ci_low"]) == pytest.approx(20.0) == float(rope["context_gain_ci_high"])
    # lampe ran no closed-book run: it is set against the baseline's (rope's): 90 - 50 at 1K
    lampe = board[("lampe", 1024)]
    assert float(lampe["context_gain"]) == pytest.approx(40.0)
    assert float(lampe["context_gain_ci_low"]) == pytest.approx(40.0)  # paired by sample: 40 on every one
    assert not any("benchmark settings" in w for w in report.warnings)  # the closed book is no other setting
    titles = [t.title for t in report.tables]
    assert any("closed-book score by length" in t for t in titles)
    gain = next(t for t in report.tables if "context gain" in t.title)
    assert gain.columns == ["1k", "2k", "Avg."] and [label for label, _ in gain.rows] == ["rope", "lampe"]
    assert gain.rows[0][1][2].value == pytest.approx(20.0)
    assert "rope: rope's" in gain.notes[0] and "lampe: rope's" in gain.notes[0]
    main = next(t for t in report.tables if t.key == "fake-smollm2-135m-by-length")
    assert [label for label, _ in main.rows] == ["rope", "lampe"]  # closed-book runs are not a method
    assert "context gain" in (tmp_path / "r" / "report.html").read_text()


def test_each_method_is_set_against_its_own_closed_book_run_where_it_ran(tmp_path: Path) -> None:
    build_report([_store(tmp_path, ("rope", "lampe"))], tmp_path / "r", formats=["md"], plots=False)
    board = _board(tmp_path / "r")
    assert float(board[("lampe", 2048)]["context_gain"]) == pytest.approx(30.0)
    assert float(board[("lampe", 2048)]["context_gain_ci_high"]) == pytest.approx(30.0)


def test_no_closed_book_run_leaves_the_columns_empty(tmp_path: Path) -> None:
    report = build_report([_store(tmp_path, ())], tmp_path / "r", formats=["md"], plots=False)
    board = _board(tmp_path / "r")
    assert all(r["context_gain"] == "" and r["closed_book_score"] == "" for r in board.values())
    assert not any("context gain" in t.title for t in report.tables)


def test_longscore_from_the_store_and_by_its_definition(tmp_path: Path) -> None:
    build_report([_store(tmp_path, ())], tmp_path / "r", formats=["md"], plots=False)
    board = _board(tmp_path / "r")
    # rope: 70 at 1K (the base), 60 at 2K: LC = 100 (60 - 70) / 70
    assert float(board[("rope", 2048)]["longscore"]) == pytest.approx(-100 * 10 / 70, abs=1e-4)
    assert board[("rope", 1024)]["longscore"] == board[("rope", 2048)]["longscore"]
    found = long_score({2048: 40.0, 1024: 50.0, 4096: 55.0})
    assert found is not None and found.base_length == 1024
    assert found.by_length == pytest.approx({2048: -20.0, 4096: 10.0}) and found.value == pytest.approx(-5.0)
    assert long_score({1024: 0.0, 2048: 10.0}) is None  # no positive base
    assert long_score({1024: 50.0}) is None  # one length
    assert long_score({1024: 5.0, 2048: 4.0}, higher_is_better=False) is None  # perplexity: undefined
    assert long_score({1024: 50.0, 2048: None, 4096: 25.0}).by_length == {4096: -50.0}  # untested skipped


def test_a_lower_is_better_gain_is_closed_book_minus_score() -> None:
    from lampe_eval.report.closed_book import gain
    from lampe_eval.report.data import TaskScore, Variant
    from lampe_eval.report.uncertainty import Bootstrap

    def cell(values: list[float]) -> TaskScore:
        scores = [{"answer_nll": v} for v in values]
        return TaskScore(
            "m", Variant("rope"), "ruler", "vt", 1024, {"answer_nll": sum(values) / len(values)},
            len(values), 0.0, sample_ids=[str(i) for i in range(len(values))], sample_scores=scores,
        )  # fmt: skip

    found = gain([cell([1.0, 2.0, 3.0])], [cell([2.5, 3.5, 4.5])], Variant("rope"), Bootstrap())
    assert found is not None and found.value == pytest.approx(1.5)  # reading lowered the NLL by 1.5
    assert found.interval is not None and found.interval.low == pytest.approx(1.5) == found.interval.high
