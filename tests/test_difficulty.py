"""Difficulty apart from length: the difficulty x length table and the leaderboard column, on a
constructed store with known answers (each level's score is set by hand)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from lampe_eval.report import build_report
from lampe_eval.report.difficulty import level_order
from tests.reportstore import record

# per (method, level): the score of every sample at that level, at 1K; 2K loses 10
LEVELS = {"basic": 90.0, "easy": 70.0, "medium": 40.0, "hard": 10.0}
LAMPE_GAIN = {"basic": 0.0, "easy": 0.0, "medium": 20.0, "hard": 30.0}


def _store(tmp_path: Path) -> Path:
    """Two tasks; task alpha holds basic and hard samples, beta easy, medium and hard ones: a level's
    score mixes the tasks that have samples of it, and a task's samples are split by level."""
    rows = []
    split = {"alpha": ("basic", "hard"), "beta": ("easy", "medium", "hard")}
    for method in ("rope", "lampe"):
        for task, levels in split.items():
            for length in (1024, 2048):
                for i in range(12):
                    level = levels[i % len(levels)]
                    score = LEVELS[level] - (10.0 if length == 2048 else 0.0)
                    score += LAMPE_GAIN[level] if method == "lampe" else 0.0
                    score += 5.0 if task == "beta" else 0.0  # beta's samples score 5 more at every level
                    rows.append(
                        record(method, "fake", task, length, i, {"acc": score}, meta={"difficulty": level})
                    )
    store = tmp_path / "store"
    store.mkdir()
    (store / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return store


def test_the_difficulty_table_scores_each_level_on_its_own_samples(tmp_path: Path) -> None:
    report = build_report([_store(tmp_path)], tmp_path / "r", formats=["md", "html"], plots=False)
    table = next(t for t in report.tables if "difficulty" in t.title)
    assert table.columns == ["1k", "2k"]
    rows = {label: [c.value for c in cells] for label, cells in table.rows}
    assert list(rows)[:4] == ["rope · basic", "rope · easy", "rope · medium", "rope · hard"]  # easiest first
    assert rows["rope · basic"] == pytest.approx([90.0, 80.0])  # alpha only
    assert rows["rope · easy"] == pytest.approx([75.0, 65.0])  # beta only: +5
    # hard: the mean over alpha (10) and beta (15), each on its hard samples only
    assert rows["rope · hard"] == pytest.approx([12.5, 2.5])
    assert rows["lampe · hard"] == pytest.approx([42.5, 32.5])
    assert rows["lampe · easy"] == rows["rope · easy"]  # lampe helps only on the hard items
    main = next(t for t in report.tables if t.key == "fake-smollm2-135m-by-length")
    assert report.tables.index(table) > report.tables.index(main)  # in the benchmark's section, after it
    assert "score by difficulty and length" in (tmp_path / "r" / "report.html").read_text()


def test_the_leaderboard_names_each_levels_score(tmp_path: Path) -> None:
    build_report([_store(tmp_path)], tmp_path / "r", formats=["md"], plots=False)
    with open(tmp_path / "r" / "leaderboard.csv") as f:
        board = {(r["method"], int(r["length"])): r for r in csv.DictReader(f)}
    assert board[("rope", 1024)]["scores_by_difficulty"] == "basic=90.0;easy=75.0;medium=45.0;hard=12.5"
    assert board[("lampe", 2048)]["scores_by_difficulty"] == "basic=80.0;easy=65.0;medium=55.0;hard=32.5"


def test_a_store_without_levels_has_no_difficulty_view(tmp_path: Path) -> None:
    rows = [record("rope", "fake", "alpha", 1024, i, {"acc": 50.0}) for i in range(4)]
    store = tmp_path / "store"
    store.mkdir()
    (store / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = build_report([store], tmp_path / "r", formats=["md"], plots=False)
    assert not any("difficulty" in t.title for t in report.tables)
    with open(tmp_path / "r" / "leaderboard.csv") as f:
        assert [r["scores_by_difficulty"] for r in csv.DictReader(f)] == [""]


def test_levels_are_ordered_easiest_first_and_unknown_names_after() -> None:
    assert level_order({"hard", "zeta", "basic", "alpha", "medium"}) == [
        "basic",
        "medium",
        "hard",
        "alpha",
        "zeta",
    ]
