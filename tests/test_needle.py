"""Needle depths in RULER's and InfiniteBench's generated samples; the depth x length heat maps and the
effective length (RULER's headline) in reports, from a synthetic store with known answers."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from lampe_eval.benchmarks import get_benchmark
from lampe_eval.benchmarks.base import SampleContext
from lampe_eval.benchmarks.ruler import generate_samples
from lampe_eval.benchmarks.ruler.benchmark import TaskData
from lampe_eval.benchmarks.ruler.generator_base import needle_depths
from lampe_eval.cli import app
from lampe_eval.errors import MissingDataError
from lampe_eval.models import LoadedModel
from lampe_eval.records import SampleRecord
from lampe_eval.report import LEADERBOARD_COLUMNS, build_report
from lampe_eval.report.data import load_records, task_scores
from lampe_eval.report.depth import depth_grids, depths_of
from lampe_eval.report.effective import (
    effective_length,
    effective_lengths,
    relative_effective_lengths,
    relative_length,
)
from lampe_eval.report.leaderboard import leaderboard_rows
from tests.reportstore import NEEDLE_LENGTHS, write_needle_store, write_store

FIXTURES = str(Path(__file__).parent / "fixtures" / "ruler")
OPTIONS = {"essay": "offline", "cache": False}


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAMPE_EVAL_CACHE", str(tmp_path_factory.getbasetemp() / "needle-cache"))


def essay_or_skip() -> None:
    from lampe_eval.benchmarks.ruler.haystack import load_essay_haystack

    try:
        load_essay_haystack(None, {"essay": "offline"})
    except MissingDataError:
        pytest.skip("no offline essay corpus (apt-get install bible-kjv)")


# ------------------------------------------------------------------------------------ sample meta
def test_needle_depths_of_a_context_by_hand() -> None:
    needles = ["NEEDLE-A", "NEEDLE-B"]
    context = " ".join(
        ["x" * 9, "NEEDLE-B", "x" * 9, "NEEDLE-A"]
    )  # 10 + 9 haystack chars, one separator each
    placed = needle_depths(context, needles, [0, 1])
    assert [at for _, at in placed] == [context.index("NEEDLE-B"), context.index("NEEDLE-A")]
    assert placed[0][0] == pytest.approx(10 / 19, abs=1e-3) and placed[1][0] == 1.0
    assert needle_depths("NEEDLE-A " + "x" * 20, needles[:1], [0]) == [(0.0, 0)]


@pytest.mark.parametrize(("task", "needles"), [("niah_single_1", 1), ("niah_multikey_2", 1)])
def test_niah_samples_keep_the_answer_needle_depth(lm: LoadedModel, task: str, needles: int) -> None:
    samples = generate_samples(lm, task, 2048, 8, data_dir=FIXTURES, options=OPTIONS)
    depths = []
    for sample in samples:
        meta = sample.meta
        assert len(meta["needle_depths"]) == len(meta["needle_chars"]) == needles
        assert all(0.0 <= d <= 1.0 for d in meta["needle_depths"])
        for at in meta["needle_chars"]:  # the offset points at a needle that answers the question
            needle = sample.prompt[at : at + 200].split(".")[0]
            assert needle.startswith("One of the special magic") and any(
                r in needle for r in sample.references
            )
        depths += meta["needle_depths"]
    assert max(depths) - min(depths) > 0.4 and len(set(depths)) >= len(depths) - 2  # spread over the context


def test_essay_niah_depths_are_the_depths_the_generator_drew(lm: LoadedModel) -> None:
    essay_or_skip()
    ctx = SampleContext(lm=lm, length=4096, options=OPTIONS, data_dir=FIXTURES)
    data = TaskData(get_benchmark("ruler").task_config("niah_single_2"), ctx)  # type: ignore[attr-defined]
    samples = generate_samples(lm, "niah_single_2", 4096, 6, data_dir=FIXTURES, options=OPTIONS)
    for index, sample in enumerate(samples):
        state = data.generator.prepare(index)
        drawn = state.depths[state.targets[0]] / 100  # RULER's depth grid, in sentences
        assert sample.meta["needle_depths"][0] == pytest.approx(drawn, abs=0.08)
    many = generate_samples(lm, "niah_multivalue", 4096, 2, data_dir=FIXTURES, options=OPTIONS)
    for sample in many:  # four values of one key: four answer needles, in context order
        assert len(sample.meta["needle_depths"]) == 4 and sample.meta["needle_depths"] == sorted(
            sample.meta["needle_depths"]
        )


def test_variable_tracking_keeps_the_chain_depths(lm: LoadedModel) -> None:
    (sample,) = generate_samples(lm, "vt", 2048, 1, options=OPTIONS)
    depths = sample.meta["chain_depths"]
    assert len(depths) == 5 and depths == sorted(depths) and all(0 <= d <= 1 for d in depths)
    assert "needle_depths" not in sample.meta  # not in the NIAH heat map


def test_infinitebench_generated_tasks_declare_their_depth(lm: LoadedModel) -> None:
    bench = get_benchmark("infinitebench")
    assert bench.depth_key == "depth" and get_benchmark("ruler").depth_key == "needle_depths"
    ctx = SampleContext(lm=lm, length=1024, limit=6, options={"source": "generate", "cache": False})
    samples = list(bench.samples("passkey", ctx))
    depths = [s.meta["depth"] for s in samples]
    assert len(depths) == 6 and all(0 <= d <= 1 for d in depths) and max(depths) - min(depths) > 0.5


# ------------------------------------------------------------------------------------- heat maps
@pytest.fixture(scope="module")
def needle_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_needle_store(tmp_path_factory.mktemp("needle-store"))


def test_depth_grid_from_records(needle_store: Path) -> None:
    grids = {g.label: g for g in depth_grids(load_records([needle_store]))}
    assert list(grids) == ["rope", "selfextend", "lampe"]
    rope = grids["rope"]
    assert rope.lengths == list(NEEDLE_LENGTHS) and rope.buckets == 10 and rope.benchmark == "ruler"
    column = rope.lengths.index(2048)
    assert [row[column] for row in rope.values] == [100.0] * 5 + [0.0] * 5  # right when depth < 0.5
    assert [row[rope.lengths.index(4096)] for row in rope.values] == [100.0] * 9 + [0.0]
    assert all(n == 2 for row in rope.samples for n in row)  # one sample per task in each cell
    assert all(v == 100.0 for row in grids["lampe"].values for v in row)


def test_depth_grid_counts_a_sample_in_each_needles_bucket_and_skips_what_has_no_depth() -> None:
    base = {"model": "m", "method": "rope", "benchmark": "ruler", "task": "niah_multivalue", "length": 1024}
    base |= {"key": "k", "job_key": "j", "sample_id": "s", "index": 0}
    raw: list[dict[str, Any]] = [
        {**base, "scores": {"string_match_all": 50.0}, "meta": {"needle_depths": [0.05, 0.07, 1.0]}},
        {**base, "scores": {"string_match_all": 100.0}, "meta": {"needle_depths": 0.99}},
        {**base, "scores": {"string_match_all": 0.0}, "meta": {}},  # no depth: not in the grid
        {**base, "benchmark": "pg19", "scores": {"ppl": 3.0}, "meta": {"needle_depths": [0.5]}},  # no key
    ]
    records = [SampleRecord.from_json(r) for r in raw]
    (grid,) = depth_grids(records, buckets=4)
    assert [row[0] for row in grid.values] == [50.0, None, None, 75.0]
    assert [row[0] for row in grid.samples] == [1, 0, 0, 2]
    assert depths_of({"d": [0.2, "x", 1.5, True]}, "d") == [0.2]


def test_the_heat_map_png_is_written_and_listed_in_the_report(needle_store: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    report = build_report([needle_store], out, formats=["md", "html"], bootstrap=None)
    heat = out / "ruler-depth-smollm2-135m.png"
    assert heat in report.files and heat.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (out / "report.html").read_text()
    assert "mean score by needle depth" in page and page.count("data:image/png;base64,") >= 2


# ------------------------------------------------------------------------------- effective length
def test_effective_length_by_the_official_definition() -> None:
    ladder = {1024: 90.0, 2048: 80.0, 4096: 88.0, 8192: 10.0}
    found = effective_length(ladder, 85.6)
    assert found.length == 4096 and found.text() == "4k"  # the longest that passes, past a dip
    assert effective_length(ladder, 95.0).length is None and effective_length(ladder, 95.0).text() == "<1k"
    everywhere = effective_length(ladder, 5.0)
    assert everywhere.length == 8192 and everywhere.text() == "≥8k" and everywhere.csv_value() == 8192
    assert effective_length({1024: 85.6}, 85.6).length is None  # must exceed it
    assert effective_length({1024: 90.0, 2048: None}, 85.6).text() == "≥1k"  # 2k not tested
    assert effective_length({1024: 3.0, 2048: 9.0}, 5.0, higher_is_better=False).length == 1024


def test_effective_length_in_tables_leaderboard_and_html(needle_store: Path, tmp_path: Path) -> None:
    scores = task_scores(load_records([needle_store]))
    found = {variant.method: e for (_, variant, _), e in effective_lengths(scores).items()}
    assert {m: e.text() for m, e in found.items()} == {"rope": "4k", "selfextend": "<1k", "lampe": "≥8k"}
    out = tmp_path / "report"
    report = build_report([needle_store], out, formats=["md", "html"], plots=False)
    md = (out / "tables.md").read_text()
    assert "### ruler | smollm2-135m | effective length (threshold 85.6)" in md
    assert "| rope | 4k |" in md and "| selfextend | <1k |" in md and "| lampe | **≥8k** |" in md
    titles = [t.title for t in report.tables]
    effective = titles.index("ruler | smollm2-135m | effective length (threshold 85.6)")
    # after the section's score tables; the LongScore table (closed_book.py) comes after it
    assert "by length" in titles[effective - 1] and "LongScore" in titles[effective + 1]
    rows = list(csv.DictReader(io.StringIO((out / "leaderboard.csv").read_text())))
    at = LEADERBOARD_COLUMNS.index("effective_length")
    assert list(rows[0]) == LEADERBOARD_COLUMNS and LEADERBOARD_COLUMNS[at : at + 2] == [
        "effective_length",
        "effective_length_relative",
    ]
    assert LEADERBOARD_COLUMNS[:17] == LEADERBOARD_COLUMNS[: LEADERBOARD_COLUMNS.index("ci_high") + 1]
    by_method = {(r["method"], r["length"]): r["effective_length"] for r in rows}
    assert {by_method[("rope", str(n))] for n in NEEDLE_LENGTHS} == {"4096"}
    assert by_method[("selfextend", "1024")] == "<1024" and by_method[("lampe", "8192")] == "8192"
    page = (out / "report.html").read_text()
    assert "effective length (threshold 85.6)" in page and "&lt;1k" in page and "≥8k" in page


def test_the_threshold_option(needle_store: Path, tmp_path: Path) -> None:
    scores = task_scores(load_records([needle_store]))
    at_40 = {v.method: e.length for (_, v, _), e in effective_lengths(scores, 40.0).items()}
    assert at_40 == {"rope": 4096, "selfextend": 1024, "lampe": 8192}
    rows = leaderboard_rows(scores, threshold=95.0)
    assert {r["method"]: r["effective_length"] for r in rows} == {
        "rope": 1024,
        "selfextend": "<1024",
        "lampe": 8192,
    }
    out = tmp_path / "cli"
    result = CliRunner().invoke(
        app, ["report", str(needle_store), "--out", str(out), "--threshold", "40", "--resamples", "0"]
    )
    assert result.exit_code == 0, result.output
    assert "effective length (threshold 40)" in result.output and "| selfextend | 1k |" in result.output


def test_the_relative_rule_on_constructed_scores() -> None:
    """NoLiMa's rule: the longest length at or above fraction x base (ties pass, dips do not end it)."""
    ladder = {1024: 50.0, 2048: 45.0, 4096: 42.5, 8192: 30.0, 16384: 43.0}
    found = relative_length(ladder, 50.0, 0.85)
    assert found is not None and found.threshold == 42.5 and found.length == 16384  # past the dip at 8k
    assert relative_length(ladder, 55.0, 0.85).length == 1024  # 46.75 needed: 1k alone passes
    assert relative_length(ladder, 100.0, 0.85).text() == "<1k"
    assert relative_length(ladder, 0.0, 0.85) is None and relative_length(ladder, None, 0.85) is None
    lower = relative_length({1024: 10.0, 2048: 11.0, 4096: 12.0}, 10.0, 0.85, higher_is_better=False)
    assert lower is not None and lower.length == 2048  # at most 10 / 0.85
    assert relative_length({1024: 85.0, 2048: 84.9}, 100.0, 0.85).length == 1024  # at the level passes


def test_the_relative_effective_length_in_reports(needle_store: Path, tmp_path: Path) -> None:
    """The base is the baseline's (rope's) score at the shortest length: every method is held to it;
    relative:F sets the fraction; the table, leaderboard and page show it beside the absolute one."""
    scores = task_scores(load_records([needle_store]))
    found = relative_effective_lengths(scores)
    levels = {e.threshold for e in found.values()}
    assert len(levels) == 1  # one base: rope's at 1k
    (level,) = levels
    assert level == pytest.approx(0.85 * _mean_at(scores, "rope", 1024))
    for (_, variant, _), e in found.items():
        means = {n: _mean_at(scores, variant.method, n) for n in NEEDLE_LENGTHS}
        passing = [n for n, v in means.items() if v >= level]
        assert e.length == (max(passing) if passing else None), variant.method
    rows = leaderboard_rows(scores, relative=0.5)
    half = relative_effective_lengths(scores, 0.5)
    assert {r["method"]: r["effective_length_relative"] for r in rows} == {
        v.method: e.csv_value() for (_, v, _), e in half.items()
    }
    out = tmp_path / "cli"
    args = ["report", str(needle_store), "--out", str(out), "--threshold", "relative:0.5", "--resamples", "0"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "relative (0.5 x base)" in result.output and "NoLiMa" in result.output
    bad = CliRunner().invoke(app, [*args[:4], "--threshold", "relative:2"])
    assert bad.exit_code != 0 and "relative:F with 0 < F <= 1" in bad.output


def _mean_at(scores, method: str, length: int) -> float:
    mine = [s.score for s in scores if s.variant.method == method and s.length == length]
    return sum(mine) / len(mine)


def test_benchmarks_without_a_threshold_have_no_effective_length(tmp_path: Path) -> None:
    store = write_store(tmp_path / "store", samples=3)
    scores = task_scores(load_records([store]))
    assert effective_lengths(scores) == {}
    assert all(row["effective_length"] == "" for row in leaderboard_rows(scores))
    assert depth_grids(load_records([store])) == []
