"""The short-context comparison (lampe_eval/report/short_context.py): each method within the model's window
against ``rope`` on the same samples, with a paired interval; and ``window`` as an experiment length.

The store is built by hand so that every number is known: SmolLM2's window is 8192, so 4k and 8k are inside
it and 16k is not. At 4k yarn scores every sample 10 below rope, at 8k 20 below (the same samples), so the
paired difference is -10 at 4k, -20 at 8k and -15 over both, and every bootstrap resample of it is exactly
that (its interval is a point); at 16k yarn is far better, which must not count. yarn also ran one sample
rope did not (it is left out of the comparison); selfextend equals rope inside the window.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

import tests.fakebench  # noqa: F401  (registers "fake")
from lampe_eval.errors import LampeEvalError
from lampe_eval.report import build_report
from lampe_eval.report.data import Variant, load_records, task_scores
from lampe_eval.report.short_context import model_windows, short_context
from lampe_eval.report.uncertainty import Bootstrap
from lampe_eval.runner.experiment import ExperimentSpec, grid_from_mapping
from lampe_eval.runner.store import RECORDS_FILE

MODEL = "smollm2-135m"  # a preset: window 8192
ROPE = {  # (task, length) -> rope's per-sample scores
    ("alpha", 4096): [100.0, 50.0, 75.0, 25.0],  # mean 62.5
    ("beta", 4096): [90.0, 10.0, 50.0, 30.0],  # mean 45
    ("alpha", 8192): [80.0, 40.0, 60.0, 20.0],  # mean 50
    ("beta", 8192): [70.0, 30.0, 50.0, 10.0],  # mean 40
    ("alpha", 16384): [0.0, 0.0, 0.0, 0.0],
    ("beta", 16384): [0.0, 0.0, 0.0, 0.0],
}
SHIFT = {4096: -10.0, 8192: -20.0}  # yarn - rope, per sample, inside the window


def record(model: str, method: str, task: str, length: int, i: int, score: float, params: dict | None = None):
    params = params or {}
    return {
        "key": f"{model}-{method}{json.dumps(params)}-{task}-{length}:{i}",
        "job_key": f"{model}-{method}-{task}-{length}",
        "sample_id": f"{task}-{i}",
        "index": i,
        "model": model,
        "method": method,
        "variant_params": params,
        "benchmark": "fake",
        "task": task,
        "length": length,
        "scores": {"acc": score},
        "seconds": 1.0,
        "git": "abc1234",
    }


def write_store(out: Path) -> Path:
    out.mkdir(parents=True)
    lines = []
    for (task, length), values in ROPE.items():
        for i, value in enumerate(values):
            lines.append(record(MODEL, "rope", task, length, i, value))
            yarn = value + SHIFT[length] if length in SHIFT else 100.0
            lines.append(record(MODEL, "yarn", task, length, i, yarn, {"factor": 4.0}))
            selfextend = value if length in SHIFT else 100.0
            lines.append(record(MODEL, "selfextend", task, length, i, selfextend))
    lines.append(record(MODEL, "yarn", "alpha", 4096, 4, 0.0, {"factor": 4.0}))  # rope never ran it
    # a second model with two samples, whose interval is read off by hand: the per-sample differences are 0
    # and -20, so a resample's difference is 0, -10 or -20 (each end drawn with probability 1/4)
    for i, (rope, yarn) in enumerate([(60.0, 60.0), (40.0, 20.0)]):
        lines.append(record("llama3-8b-instruct", "rope", "alpha", 4096, i, rope))
        lines.append(record("llama3-8b-instruct", "yarn", "alpha", 4096, i, yarn))
    # a model whose window this machine cannot know: no comparison, one warning
    for method, value in (("rope", 50.0), ("yarn", 40.0)):
        for i in range(2):
            lines.append(record("not-a-known-model", method, "alpha", 4096, i, value))
    (out / RECORDS_FILE).write_text("".join(json.dumps(line) + "\n" for line in lines))
    return out


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return write_store(tmp_path / "results")


YARN = Variant("yarn", json.dumps({"factor": 4.0}))


def test_windows_come_from_the_models_not_the_records():
    assert model_windows(["smollm2-135m", "llama3-8b-instruct", "qwen3-8b", "not-a-known-model"]) == {
        "smollm2-135m": 8192,
        "llama3-8b-instruct": 8192,
        "qwen3-8b": 32768,
    }


def test_paired_difference_within_the_window_is_exact(store):
    scores = task_scores(load_records([store]))
    found = short_context(scores, model_windows([MODEL, "llama3-8b-instruct"]), Bootstrap())
    mine = found[(MODEL, YARN, "fake")]
    assert mine.window == 8192 and mine.lengths == (4096, 8192)  # 16k is past the window
    assert mine.baseline == Variant("rope")
    pooled = mine.pooled
    # rope on the same samples: mean(62.5, 45, 50, 40); yarn's extra sample left out: mean(52.5, 35, 30, 20)
    assert pooled.baseline_score == pytest.approx(49.375)
    assert pooled.score == pytest.approx(34.375)
    assert pooled.difference == pytest.approx(-15.0)
    assert (pooled.interval.low, pooled.interval.high) == pytest.approx((-15.0, -15.0))
    assert pooled.pairs == 4 and pooled.strata == 4
    by = mine.by_length
    assert by[4096].difference == pytest.approx(-10.0) and by[8192].difference == pytest.approx(-20.0)
    assert (by[4096].interval.low, by[4096].interval.high) == pytest.approx((-10.0, -10.0))
    same = found[(MODEL, Variant("selfextend"), "fake")].pooled
    assert same.difference == pytest.approx(0.0)
    assert (same.interval.low, same.interval.high) == pytest.approx((0.0, 0.0))
    # rope's own row: its in-window score over all it ran
    assert found[(MODEL, Variant("rope"), "fake")].pooled.score == pytest.approx(49.375)
    # two samples, differences 0 and -20: the 95% interval spans both ends
    two = found[("llama3-8b-instruct", Variant("yarn"), "fake")].pooled
    assert two.difference == pytest.approx(-10.0)
    assert (two.interval.low, two.interval.high) == pytest.approx((-20.0, 0.0))
    # without intervals the point estimates are the same
    plain = short_context(scores, model_windows([MODEL]), None)[(MODEL, YARN, "fake")]
    assert plain.pooled.difference == pytest.approx(-15.0) and plain.pooled.interval is None


def test_report_and_leaderboard_carry_it(store, tmp_path):
    out = tmp_path / "report"
    report = build_report([store], out, formats=["md", "csv"], plots=False)
    table = next(t for t in report.tables if t.key == f"fake-{MODEL}-short-context")
    assert "within the window (8k), against rope on the same samples" in table.title
    assert table.columns == ["score", "rope (same samples)", "difference", "diff 4k", "diff 8k"]
    rows = dict(table.rows)
    assert [c.value for c in rows["rope"][:2]] == [pytest.approx(49.375), None]
    yarn = rows["yarn"]
    assert [c.value for c in yarn] == pytest.approx([34.375, 49.375, -15.0, -10.0, -20.0])
    assert (yarn[2].interval.low, yarn[2].interval.high) == pytest.approx((-15.0, -15.0))
    markdown = (out / "tables.md").read_text()
    assert "| yarn | 34.38 | 49.38 | -15.00 [-15.00, -15.00] | -10.00 [-10.00, -10.00] |" in markdown
    assert any("not-a-known-model" in w and "window" in w for w in report.warnings)
    assert not any(t.key.startswith("fake-not-a-known-model-short") for t in report.tables)
    with open(out / "leaderboard.csv") as handle:
        board = list(csv.DictReader(handle))
    mine = [r for r in board if r["model"] == MODEL and r["method"] == "yarn"]
    assert {r["length"] for r in mine} == {"4096", "8192", "16384"}
    for row in mine:  # the same on every length row of the method
        assert row["window"] == "8192"
        assert float(row["short_context_score"]) == pytest.approx(34.375)
        assert float(row["short_context_baseline_score"]) == pytest.approx(49.375)
        assert float(row["short_context_diff"]) == pytest.approx(-15.0)
        assert float(row["short_context_diff_ci_low"]) == pytest.approx(-15.0)
        assert float(row["short_context_diff_ci_high"]) == pytest.approx(-15.0)
    rope = next(r for r in board if r["model"] == MODEL and r["method"] == "rope")
    assert float(rope["short_context_score"]) == pytest.approx(49.375) and rope["short_context_diff"] == ""
    unknown = next(r for r in board if r["model"] == "not-a-known-model" and r["method"] == "yarn")
    assert unknown["window"] == "" and unknown["short_context_diff"] == ""


def test_window_is_an_experiment_length():
    grid = grid_from_mapping(
        {"models": ["smollm2-135m", "qwen3-8b"], "methods": ["rope"], "benchmarks": ["fake"],
         "lengths": ["1k", "window"]},
        "test",
    )  # fmt: skip
    assert grid.lengths == [1024] and grid.window_length
    jobs = ExperimentSpec("w", [grid]).expand()
    assert sorted({(j.model, j.length) for j in jobs}) == [
        ("qwen3-8b", 1024),
        ("qwen3-8b", 32768),
        ("smollm2-135m", 1024),
        ("smollm2-135m", 8192),
    ]
    alone = grid_from_mapping(
        {"models": ["smollm2-135m"], "methods": ["rope"], "benchmarks": ["fake"], "lengths": "in-window"}, "t"
    )
    assert alone.lengths == [] and {j.length for j in ExperimentSpec("w", [alone]).expand()} == {8192}
    unknown = grid_from_mapping(
        {
            "models": ["someone/uncached-model"],
            "methods": ["rope"],
            "benchmarks": ["fake"],
            "lengths": ["window"],
        },
        "t",
    )
    with pytest.raises(LampeEvalError, match="length 'window': the window of model 'someone/uncached-model'"):
        ExperimentSpec("w", [unknown]).expand()
