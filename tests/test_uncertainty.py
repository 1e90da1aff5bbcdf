"""Bootstrap intervals and paired comparisons: the benchmarks' vectorised resampling against their own
aggregate, the intervals against textbook numbers, the pairing, and what tables, the leaderboard and
the paper comparison print."""

from __future__ import annotations

import csv
import io
import math
import random

import numpy as np
import pytest

from lampe_eval.benchmarks import BENCHMARKS
from lampe_eval.records import SampleRecord
from lampe_eval.report import LEADERBOARD_COLUMNS, BootstrapSettings, build_report
from lampe_eval.report.data import TaskScore, Variant, load_records, task_scores
from lampe_eval.report.leaderboard import comparison_rows, leaderboard_rows
from lampe_eval.report.paper import compare, load_paper_table
from lampe_eval.report.tables import CSV_COLUMNS, generic_tables, to_csv, to_latex, to_markdown
from lampe_eval.report.uncertainty import Bootstrap
from tests.reportstore import pg19_scores, write_store

# (benchmark, task) -> per-sample scores as the benchmark's `score` returns them
rng = random.Random(1)


def coin() -> float:
    return 100.0 * (rng.random() < 0.5)


SCORES = {
    ("pg19", "pg19"): lambda: pg19_scores(rng.uniform(1.5, 3.5), rng.randint(200, 4000)),
    ("ruler", "niah_single_1"): lambda: {"string_match_all": coin()},
    ("ruler", "qa_1"): lambda: {"string_match_part": coin()},
    ("longbench", "qasper"): lambda: {"qa_f1": rng.uniform(0, 100)},
    ("longbench", "qasper_e"): lambda: {
        "qa_f1": rng.uniform(0, 100),
        "length": float(rng.randint(100, 9000)),
    },
    ("leval", "coursera"): lambda: {"exact_match": rng.choice([0.0, 25.0, 50.0, 100.0])},
    ("leval", "sci_fi"): lambda: (lambda a, b: {"exact_match": (a + b) / 2, "loyalty": a, "fact": b})(
        coin(), coin()
    ),
    ("infinitebench", "passkey"): lambda: {"accuracy": coin()},
    ("infinitebench", "longbook_sum_eng"): lambda: {"rougeLsum": rng.uniform(0, 60)},
}


def cases() -> list[tuple[str, str]]:
    """The cases above, and every other registered benchmark on its first task with its first metric (a
    benchmark added later gets this check for free while its aggregate is a mean)."""
    out = list(SCORES)
    for name in BENCHMARKS.names():
        if not any(bench == name for bench, _ in out):
            out.append((name, BENCHMARKS.get(name)().tasks()[0]))
    return out


@pytest.mark.parametrize(("benchmark", "task"), cases())
def test_resample_is_the_benchmarks_aggregate_of_each_resample(benchmark, task):
    bench = BENCHMARKS.get(benchmark)()
    first = bench.metrics[0].name
    make = SCORES.get((benchmark, task), lambda: {first: rng.uniform(0, 100)})
    scores = [make() for _ in range(9)]
    counts = np.random.default_rng(0).multinomial(len(scores), [1 / len(scores)] * len(scores), size=40)
    headline = next(iter(bench.aggregate(task, scores)))
    metrics = [headline] + (["ppl_last_quarter", "nll"] if benchmark == "pg19" else [])
    for metric in metrics:
        vectorised = bench.resample(task, scores, counts, metric)
        for b, row in enumerate(counts):
            drawn = [s for s, k in zip(scores, row, strict=True) for _ in range(k)]
            expected = bench.aggregate(task, drawn)[metric]
            # the benchmarks' aggregates round (RULER, LongBench to 2 decimals, LongBench v2 to 1, as their
            # official scripts); the resample does not
            assert vectorised[b] == pytest.approx(expected, abs=0.051, rel=1e-9), (metric, b)


def test_pg19_resamples_are_token_weighted():
    bench = BENCHMARKS.get("pg19")()
    scores = [pg19_scores(1.0, 100), pg19_scores(3.0, 300)]
    counts = np.array([[1, 1], [2, 0], [0, 2], [1, 3]])
    got = bench.resample("pg19", scores, counts, "ppl")
    weighted = [(1 * 100 + 3 * 300) / 400, 1.0, 3.0, (1 * 100 + 3 * 900) / 1000]
    assert got == pytest.approx(np.exp(weighted))
    assert got[0] != pytest.approx(math.exp(2.0))  # not the plain mean of the passages' NLL


def task_score(values: list[float], ids: list[str] | None = None, method: str = "a") -> TaskScore:
    ids = ids or [str(i) for i in range(len(values))]
    return TaskScore(
        model="m",
        variant=Variant(method),
        benchmark="fake",
        task="alpha",
        length=1024,
        metrics={"acc": float(np.mean(values))},
        samples=len(values),
        seconds=0.0,
        sample_ids=ids,
        sample_scores=[{"acc": v} for v in values],
    )


def test_interval_matches_the_textbook_for_a_mean():
    values = list(np.random.default_rng(3).normal(50.0, 10.0, size=400))
    bootstrap = Bootstrap(BootstrapSettings(resamples=4000, seed=0))
    interval = bootstrap.interval_of([task_score(values)])
    sem = np.std(values, ddof=1) / math.sqrt(len(values))
    assert interval.stderr == pytest.approx(sem, rel=0.06)
    center = float(np.mean(values))
    assert interval.low == pytest.approx(center - 1.96 * sem, abs=0.15 * sem)
    assert interval.high == pytest.approx(center + 1.96 * sem, abs=0.15 * sem)
    # seeded: the same numbers again, other numbers with another seed
    again = Bootstrap(BootstrapSettings(resamples=4000, seed=0)).interval_of([task_score(values)])
    other = Bootstrap(BootstrapSettings(resamples=4000, seed=1)).interval_of([task_score(values)])
    assert again == interval and other != interval
    assert bootstrap.interval_of([task_score([70.0])]) is None  # one sample: no interval


def test_paired_difference_sees_a_small_shift_that_unpaired_intervals_hide():
    base = list(np.random.default_rng(5).uniform(0, 100, size=60))
    shifted = [v + 0.5 for v in base]  # same samples, every one 0.5 better
    noisy = [v + n for v, n in zip(base, np.random.default_rng(6).normal(0, 0.5, size=60), strict=True)]
    a, b, c = task_score(shifted, method="b"), task_score(base, method="a"), task_score(noisy, method="c")
    bootstrap = Bootstrap()
    ia, ib = bootstrap.interval_of([a]), bootstrap.interval_of([b])
    assert ia.low < ib.high  # the unpaired intervals overlap widely ...
    diff = bootstrap.difference([a], [b])
    assert diff.significant and diff.diff == pytest.approx(0.5) and diff.low == pytest.approx(0.5)
    assert diff.p < 0.01 and diff.pairs == 60
    null = bootstrap.difference([c], [b])  # noise around the same scores: not significant
    assert null.tested and not null.significant and null.low < 0 < null.high and null.p > 0.05


def test_paired_difference_uses_the_common_samples_only():
    bootstrap = Bootstrap()
    a = task_score([10.0, 20.0, 30.0, 99.0], ids=["0", "1", "2", "3"])
    b = task_score([9.0, 19.0, 29.0], ids=["0", "1", "2"], method="b")
    diff = bootstrap.difference([a], [b])
    assert diff.pairs == 3 and diff.diff == pytest.approx(1.0)  # sample "3" has no partner: left out
    assert diff.low == pytest.approx(1.0) and diff.high == pytest.approx(1.0)
    lonely = task_score([5.0, 6.0], ids=["0", "9"], method="c")
    assert not bootstrap.difference([a], [lonely]).tested  # one common sample: nothing to say
    assert not bootstrap.difference([a], [lonely]).significant


def test_runs_of_several_seeds_keep_every_sample():
    records = [
        {
            "key": f"j{seed}:0",
            "sample_id": "0",
            "index": 0,
            "seed": seed,
            "job_key": f"j{seed}",
            "scores": {"acc": float(seed)},
        }
        for seed in (0, 1)
    ]
    for r in records:
        r.update(model="m", method="rope", benchmark="fake", task="alpha", length=1024)
    (score,) = task_scores(SampleRecord.from_json(r) for r in records)
    assert score.sample_ids == ["0|seed=0", "0|seed=1"] and score.samples == 2


@pytest.fixture(scope="module")
def noisy_store(tmp_path_factory):
    return write_store(tmp_path_factory.mktemp("uncertainty") / "results")


def test_tables_mark_what_is_not_significant(noisy_store):
    scores = task_scores(load_records([noisy_store]))
    tables = {t.key: t for t in generic_tables(scores, Bootstrap())}
    ppl = tables["pg19-smollm2-135m-by-length"]
    rows = dict(ppl.rows)
    # 8K: dca and lampe have the same shift (a tie: both marked, the bold one too); selfextend is clearly
    # worse than them and rope far worse (no marks); every method differs from rope
    lampe, dca, selfextend = rows["lampe"][1], rows["dca"][1], rows["selfextend"][1]
    assert (lampe.bold or dca.bold) and lampe.marks == dca.marks == "≈"
    assert (lampe.best_other, dca.best_other) == ("dca", "lampe")
    assert not lampe.vs_best.significant and lampe.vs_best.p > 0.05
    assert (
        selfextend.marks == ""
        and selfextend.vs_best.significant
        and selfextend.best_other in ("dca", "lampe")
    )
    assert selfextend.vs_best.diff > 0.25  # about 0.3 NLL: perplexity e^0.3 times higher
    assert all(cells[1].vs_baseline.significant for label, cells in ppl.rows if label != "rope")
    # 4K: every method runs plain positions within the window: all tied, all marked
    assert all("≈" in cells[0].marks for _, cells in ppl.rows)
    assert all("†" in cells[0].marks for label, cells in ppl.rows if label != "rope")
    for _, cells in ppl.rows:  # every cell's interval holds its value
        for cell in cells:
            if cell.interval:
                assert cell.interval.low <= cell.value * 1.0001 and cell.value <= cell.interval.high * 1.0001
    md = to_markdown(ppl)
    assert "[low, high]: 95% percentile bootstrap over samples (1000 resamples, seed 0)" in md
    assert "≈: not significantly different from the best other method" in md and "†: not" in md
    line = next(line for line in md.splitlines() if line.startswith("| lampe |"))
    assert line.count("[") == 3 and "**" in line  # value [low, high] per column, the best bold
    tex = to_latex(ppl)
    assert r"$\approx$" in tex and r"\scriptsize" in tex
    fake = tables["fake-smollm2-135m-2k"]
    frame = dict(fake.rows)
    # rope and selfextend have about the same accuracy: selfextend is not significantly different from rope
    assert "†" in frame["selfextend"][2].marks and "†" not in frame["lampe"][2].marks
    long = list(csv.DictReader(io.StringIO(to_csv([fake]))))
    assert list(long[0]) == CSV_COLUMNS and CSV_COLUMNS[:6] == [
        "table",
        "row",
        "column",
        "value",
        "text",
        "bold",
    ]
    lampe_avg = next(r for r in long if r["row"] == "lampe" and r["column"] == "Avg.")
    assert float(lampe_avg["ci_low"]) < float(lampe_avg["value"]) < float(lampe_avg["ci_high"])
    assert float(lampe_avg["vs_baseline_p"]) < 0.05 and lampe_avg["best_other"] in ("rope", "selfextend")


def test_leaderboard_appends_intervals_and_comparisons_name_seed_and_resamples(noisy_store):
    scores = task_scores(load_records([noisy_store]))
    bootstrap = Bootstrap(BootstrapSettings(resamples=500, seed=7))
    rows = leaderboard_rows(scores, bootstrap)
    intervals = LEADERBOARD_COLUMNS.index("stderr")
    assert list(rows[0]) == LEADERBOARD_COLUMNS and LEADERBOARD_COLUMNS[intervals : intervals + 4] == [
        "stderr",
        "ci_low",
        "ci_high",
        "effective_length",
    ]
    for row in rows:
        assert row["ci_low"] <= row["score"] <= row["ci_high"] and row["stderr"] > 0
    plain = leaderboard_rows(scores)  # no bootstrap: the columns are there, empty
    assert all(r["stderr"] == r["ci_low"] == r["ci_high"] == "" for r in plain)
    compared = comparison_rows(scores, bootstrap)
    assert {r["resamples"] for r in compared} == {500} and {r["seed"] for r in compared} == {7}
    lampe = [
        r for r in compared if r["variant"] == "lampe" and r["benchmark"] == "pg19" and r["length"] == 8192
    ]
    assert {r["versus_role"] for r in lampe} == {"baseline", "best other"}
    by_role = {r["versus_role"]: r for r in lampe}
    assert by_role["baseline"]["significant"] == "true" and by_role["baseline"]["diff"] < 0  # lower PPL
    assert by_role["best other"]["versus"] == "dca" and by_role["best other"]["significant"] == "false"
    worse = next(
        r
        for r in compared
        if r["variant"] == "selfextend" and r["length"] == 8192 and r["versus_role"] == "best other"
    )
    assert worse["significant"] == "true" and worse["diff"] > 0 and worse["diff_ci_low"] > 0
    assert not any(r["variant"] == "rope" and r["versus_role"] == "baseline" for r in compared)


def test_paper_comparison_says_whether_the_paper_is_inside_our_interval(noisy_store):
    scores = task_scores(load_records([noisy_store]))
    spec = load_paper_table("ppl")
    bootstrap = Bootstrap()
    llama2 = compare(spec, scores, as_model="smollm2-135m", bootstrap=bootstrap)[0]
    rows = dict(llama2.table.rows)
    cell = rows["+ Ours"][0]  # our lampe at 4K against the paper's 7.29
    assert cell.interval is not None and cell.reference == pytest.approx(7.29)
    inside = cell.interval.low <= 7.29 <= cell.interval.high
    assert cell.text.endswith("∈" if inside else "∉") and f"[{cell.interval.low:.2f}, " in cell.text
    # move the paper's number into our interval: the mark follows
    moved = {**spec, "blocks": [dict(spec["blocks"][0])]}
    moved["blocks"][0]["rows"] = [dict(r) for r in spec["blocks"][0]["rows"]]
    ours = next(r for r in moved["blocks"][0]["rows"] if r["label"] == "+ Ours")
    ours["values"] = [round(cell.value, 2), *ours["values"][1:]]
    again = dict(compare(moved, scores, as_model="smollm2-135m", bootstrap=bootstrap)[0].table.rows)
    assert again["+ Ours"][0].text.endswith("∈")
    cells = next(c for c in compare(spec, scores, as_model="smollm2-135m", bootstrap=bootstrap))
    row = next(r for r in cells.rows if r["row"] == "+ Ours" and r["column"] == "4K")
    assert row["paper_in_ci"] == str(inside).lower() and row["ours_ci_low"] < row["ours_ci_high"]


def test_a_report_of_thousands_of_records_builds(tmp_path):
    """Everything vectorised: 3 methods x 2 tasks x 2 lengths x 200 samples + PG-19 rows (~3500 records)."""
    store = write_store(tmp_path / "big", samples=200)
    report = build_report([store], tmp_path / "out", formats=["csv"], plots=False)
    assert sum(len(t.rows) for t in report.tables) > 10
    assert (tmp_path / "out" / "comparisons.csv").read_text().count("\n") > 20
