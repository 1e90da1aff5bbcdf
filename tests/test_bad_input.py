"""Results integrity and bad input, through the real console entry point (``main``): every case
asserts the exit code, that stderr is exactly one line without a traceback, and that no sample is
lost or duplicated. Runs that need a model get a tiny random one (``load_model`` is replaced); cases
that must fail before any model loads replace it with a trap."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

import lampe_eval.models
from lampe_eval.cli import main
from tests.fakebench import load_tiny_chars
from tests.helpers.cli import cli, one_line, stored

TEXT_A = "In the beginning God created the heaven and the earth. " * 12
TEXT_B = "abab " * 150


@pytest.fixture
def tiny_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lampe_eval.models, "load_model", lambda name, **kw: load_tiny_chars(name))


def books(root: Path, text: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "book.txt").write_text(text)
    return root


def pg19(out: Path, *extra: str) -> list[str]:
    return [
        "run",
        "--bench",
        "pg19",
        "--len",
        "256",
        "--limit",
        "1",
        "--out",
        str(out),
        "--no-progress",
        *extra,
    ]


# ------------------------------------------------------------------ 1. a job's identity covers its data
def test_another_data_directory_is_computed_afresh(tmp_path, capsys, tiny_model):
    """The issue's reproduction: pg19_dir=A then pg19_dir=B into one --out must not resume A's sample."""
    a, b = books(tmp_path / "A", TEXT_A), books(tmp_path / "B", TEXT_B)
    code, out, err = cli(capsys, *pg19(tmp_path / "R", "--opt", f"pg19_dir={a}"))
    assert code == 0 and not err, err
    code, out, err = cli(capsys, *pg19(tmp_path / "R", "--opt", f"pg19_dir={b}"))
    assert code == 0 and not err and "1 new sample(s), 0 resumed" in out, out
    code, _, err = cli(capsys, *pg19(tmp_path / "R2", "--opt", f"pg19_dir={b}"))
    assert code == 0 and not err
    ppl = {r["options"]["pg19_dir"]: r["scores"]["ppl"] for r in stored(tmp_path / "R")}
    (fresh,) = stored(tmp_path / "R2")
    assert ppl[str(b)] == pytest.approx(fresh["scores"]["ppl"]) and ppl[str(a)] != ppl[str(b)]
    assert len(stored(tmp_path / "R")) == 2


def test_data_changed_in_place_is_computed_again(tmp_path, capsys, tiny_model):
    a = books(tmp_path / "A", TEXT_A)
    assert cli(capsys, *pg19(tmp_path / "R", "--opt", f"pg19_dir={a}"))[0] == 0
    books(a, TEXT_B)  # same directory, same file name, other text
    code, out, err = cli(capsys, *pg19(tmp_path / "R", "--opt", f"pg19_dir={a}"))
    assert code == 0 and not err and "1 new sample(s), 0 resumed" in out, out
    (record,) = stored(tmp_path / "R")  # the new record replaced the old one (same key)
    assert code == 0 and cli(capsys, *pg19(tmp_path / "R2", "--opt", f"pg19_dir={a}"))[0] == 0
    assert record["scores"]["ppl"] == pytest.approx(stored(tmp_path / "R2")[0]["scores"]["ppl"])


def test_data_dir_is_part_of_the_identity_and_settings_that_change_nothing_are_not(
    tmp_path, capsys, tiny_model
):
    books(tmp_path / "D1" / "pg19", TEXT_A)
    books(tmp_path / "D2" / "pg19", TEXT_B)
    assert cli(capsys, *pg19(tmp_path / "R", "--data-dir", str(tmp_path / "D1")))[0] == 0
    code, out, err = cli(capsys, *pg19(tmp_path / "R", "--data-dir", str(tmp_path / "D2")))
    assert code == 0 and not err and "1 new sample(s), 0 resumed" in out
    code, out, err = cli(
        capsys, *pg19(tmp_path / "R", "--data-dir", str(tmp_path / "D2"), "--opt", "pg19_chunk=64")
    )
    assert code == 0 and not err and "0 new sample(s), 1 resumed" in out, out  # memory only: same job
    assert len(stored(tmp_path / "R")) == 2


def test_records_of_the_old_format_are_reported_and_computed_again(tmp_path, capsys, tiny_model):
    a = books(tmp_path / "A", TEXT_A)
    assert cli(capsys, *pg19(tmp_path / "R", "--opt", f"pg19_dir={a}"))[0] == 0
    path = tmp_path / "R" / "records.jsonl"
    (old,) = [json.loads(line) for line in path.read_text().splitlines()]
    for name in ("sample_fingerprint", "options", "data_dir"):  # what records lacked before
        old.pop(name)
    path.write_text(json.dumps(old) + "\n")
    code, out, err = cli(capsys, "report", str(tmp_path / "R"), "--no-plots", "-q")
    assert code == 0 and not err
    code, out, err = cli(capsys, *pg19(tmp_path / "R", "--opt", f"pg19_dir={a}"))
    assert code == 0 and not err and "1 new sample(s), 0 resumed" in out, out
    (record,) = stored(tmp_path / "R")  # one sample: the new record supersedes the old one
    assert record["sample_fingerprint"] and record["key"] == old["key"]


# ------------------------------------------------------------ 2. options and parameters are declared
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--bench", "pg19", "--opt", "pg19_per_dco=2"],
            "unknown option pg19_per_dco for pg19; did you mean pg19_per_doc?",
        ),
        (
            ["--bench", "pg19", "--opt", "pg19_per_doc=1.5"],
            "pg19: option pg19_per_doc must be an integer, got '1.5'",
        ),
        (
            ["--bench", "longbench", "--opt", "fixture=maybe"],
            "longbench: option fixture must be true or false, got 'maybe'",
        ),
        (
            ["--bench", "longbench", "--opt", "code_sim=diflib"],
            "choose one of difflib, levenshtein; did you mean difflib?",
        ),
        (
            ["--bench", "pg19", "--method", "lampe", "-p", "s1=1.5"],
            "method 'lampe': parameter s1 must be an integer, got '1.5'",
        ),
        (
            ["--bench", "pg19", "--method", "lampe", "-p", "s11=4"],
            "method 'lampe' has no parameter s11; did you mean s1?",
        ),
        (
            ["--bench", "pg19", "--method", "selfextend", "-p", "group_size=four"],
            "parameter group_size must be an integer",
        ),
        (["--bench", "pg19", "--method", "lampee"], "unknown method 'lampee'; did you mean lampe?"),
        (["--bench", "ruller"], "unknown benchmark 'ruller'; did you mean ruler?"),
        (
            ["--bench", "ruler", "--task", "niah_single1"],
            "unknown ruler task 'niah_single1'; did you mean niah_single_1?",
        ),
    ],
)
def test_unknown_or_mistyped_options_and_parameters(tmp_path, capsys, no_model, args, message):
    code, out, err = cli(capsys, "run", "--len", "4k", "--out", str(tmp_path / "R"), "--dry-run", *args)
    assert code == 2 and message in one_line(err), err
    assert not (tmp_path / "R" / "records.jsonl").exists()


def test_list_shows_every_benchmark_option(capsys):
    from lampe_eval.benchmarks import BENCHMARKS

    with pytest.raises(SystemExit) as info:
        main(["list"])
    out, err = capsys.readouterr()
    assert info.value.code == 0 and not err
    for name in BENCHMARKS.names():
        for option in BENCHMARKS.get(name).options:
            assert option.name in out


# -------------------------------------------------------- 3. everything is checked before a model loads
@pytest.mark.parametrize("dry", [True, False])
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--bench", "pg19", "--len", "16k", "--method", "lampe", "-p", "s1=20000"], "must exceed s1 + s2"),
        (
            ["--bench", "pg19", "--len", "16k", "--method", "selfextend", "-p", "group_size=0"],
            "group_size and window",
        ),
        (["--bench", "leval", "--len", "300", "--opt", "fixture=true"], "leaves no room for the document"),
        (
            ["--bench", "infinitebench", "--task", "code_debug", "--len", "4k", "--opt", "source=generate"],
            "is not synthetic",
        ),
        (
            ["--bench", "infinitebench", "--task", "passkey", "--len", "4k", "--opt", "template=gpt5"],
            "template family",
        ),
        (["--bench", "pg19", "--len", "4k", "--import", "nosuchmod"], "cannot import nosuchmod"),
        (["--bench", "pg19", "--len", "4k", "--limit", "0"], "--limit must be at least 1"),
        (["--bench", "pg19", "--len", "4q"], "bad length '4q'"),
        (["--bench", "pg19", "--lenn", "4k"], "No such option: --lenn"),
    ],
)
def test_bad_runs_fail_before_any_model_loads(tmp_path, capsys, no_model, dry, args, message):
    code, out, err = cli(capsys, "run", "--out", str(tmp_path / "R"), *args, *(["--dry-run"] if dry else []))
    assert code == 2 and message in one_line(err), err
    assert not (tmp_path / "R" / "records.jsonl").exists()


OFFLINE_LIMIT = "limit: 2\noptions: {pg19_source: offline}"
EXPERIMENT = """
name: typed
{key}
grid:
  - models: [smollm2-135m]
    methods: [rope]
    benchmarks: {{pg19: [pg19]}}
    lengths: [1k]
"""


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("limit: one", "'limit' must be a positive integer (or null for all samples), got 'one'"),
        ("seed: [1]", "'seed' must be an integer, got [1]"),
        ("options: [fixture]", "'options' must be a mapping of option: value, got ['fixture']"),
        ("imports: nosuchmod", "'imports' must be a list of module names, got 'nosuchmod'"),
        ("imports: [nosuchmod]", "cannot import nosuchmod: No module named 'nosuchmod'"),
        ("options: {pg19_per_doc: two}", "option pg19_per_doc must be an integer, got 'two'"),
        ("limt: 1", "unknown experiment key(s): limt"),
        ("data_dir: [x]", "'data_dir' must be a directory name, got ['x']"),
    ],
)
def test_experiment_files_are_typed(tmp_path, capsys, no_model, line, message):
    path = tmp_path / "exp.yaml"
    path.write_text(EXPERIMENT.format(key=line))
    code, out, err = cli(capsys, "run", "--experiment", str(path), "--out", str(tmp_path / "R"), "--dry-run")
    assert code == 2 and message in one_line(err), err


def test_an_output_path_under_a_file_fails_before_any_work(tmp_path, capsys, no_model):
    (tmp_path / "file").write_text("x")
    code, out, err = cli(
        capsys, "run", "--bench", "pg19", "--len", "1k", "--out", str(tmp_path / "file" / "R")
    )
    assert code == 2 and "is a file, not a directory" in one_line(err) and not out


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_a_read_only_output_directory_fails_before_any_work(tmp_path, capsys, no_model):
    locked = tmp_path / "ro"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        code, out, err = cli(
            capsys, "run", "--bench", "pg19", "--len", "1k", "--out", str(locked), "--dry-run"
        )
    finally:
        locked.chmod(0o755)
    assert code == 2 and "is not writable" in one_line(err)


# ------------------------------------------------------------------------- 4. reports and damaged stores
def test_report_on_an_empty_store_is_an_error(tmp_path, capsys):
    (tmp_path / "R").mkdir()
    (tmp_path / "R" / "records.jsonl").write_text("")
    code, out, err = cli(capsys, "report", str(tmp_path / "R"))
    assert code == 2 and "no results to report" in one_line(err) and "is empty" in err


def test_report_on_a_store_of_garbage_is_an_error(tmp_path, capsys):
    (tmp_path / "R").mkdir()
    (tmp_path / "R" / "records.jsonl").write_text(
        'garbage\n{"key": "torn\n[1, 2]\n{"key": "k", "index": "x"}\n'
    )
    code, out, err = cli(capsys, "report", str(tmp_path / "R"))
    assert code == 2 and "has no readable record: skipped 3 unreadable line(s)" in one_line(err)


def test_report_counts_the_lines_it_skipped(tmp_path, capsys, tiny_model):
    a = books(tmp_path / "A", TEXT_A)
    assert cli(capsys, *pg19(tmp_path / "R", "--opt", f"pg19_dir={a}"))[0] == 0
    with open(tmp_path / "R" / "records.jsonl", "a") as handle:
        handle.write('{"key": "torn\nnot json\n')
    code, out, err = cli(capsys, "report", str(tmp_path / "R"), "--no-plots", "-q")
    assert (
        code == 0 and "skipped 2 unreadable line(s)" in one_line(err) and one_line(err).startswith("warning:")
    )


def test_a_record_with_a_wrong_typed_field_is_skipped_with_a_warning_on_resume(tmp_path, capsys, tiny_model):
    a = books(tmp_path / "A", TEXT_A)
    assert cli(capsys, *pg19(tmp_path / "R", "--opt", f"pg19_dir={a}"))[0] == 0
    path = tmp_path / "R" / "records.jsonl"
    (record,) = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text(json.dumps({**record, "index": "x"}) + "\n")
    code, out, err = cli(capsys, *pg19(tmp_path / "R", "--opt", f"pg19_dir={a}"))
    line = one_line(err)
    assert (
        code == 0
        and "'index' must be a non-negative integer, got 'x'" in line
        and line.startswith("warning:")
    )
    assert "1 new sample(s), 0 resumed" in out
    (fresh,) = stored(tmp_path / "R")  # the sample again, once
    assert fresh["index"] == 0 and fresh["key"] == record["key"]


# --------------------------------------------------------------------------- 6. error lines stay one line
def test_a_failed_job_is_one_unwrapped_line(tmp_path, capsys, monkeypatch):
    def broken(name, **kw):
        raise RuntimeError("the weights are damaged beyond repair: " + "x" * 120)

    monkeypatch.setattr(lampe_eval.models, "load_model", broken)
    code, out, err = cli(capsys, *pg19(tmp_path / "R"))
    line = one_line(err)
    assert code == 1 and line.startswith("failed: smollm2-135m | rope | pg19/pg19") and len(line) > 80


def test_ctrl_c_is_one_unwrapped_line(tmp_path, capsys, monkeypatch):
    import lampe_eval.runner.local

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(lampe_eval.runner.local, "run", interrupted)
    code, out, err = cli(capsys, *pg19(tmp_path / "a-rather-long-directory-name-for-the-results" / "R"))
    line = one_line(err)
    assert code == 130 and line.startswith("interrupted: 0 new sample(s)") and len(line) > 80


def test_a_long_error_is_one_unwrapped_line(tmp_path, capsys, no_model):
    long_dir = tmp_path / ("d" * 90)
    (long_dir).write_text("a file")
    code, out, err = cli(capsys, "run", "--bench", "pg19", "--len", "1k", "--out", str(long_dir / "R"))
    line = one_line(err)
    assert code == 2 and len(line) > 160 and line.startswith("error: results directory")


def test_experiment_files_may_be_named(tmp_path, capsys, no_model):
    home = tmp_path / "home"
    (home / "experiments").mkdir(parents=True)
    (home / "experiments" / "mine.yaml").write_text(textwrap.dedent(EXPERIMENT.format(key=OFFLINE_LIMIT)))
    os.environ["LAMPE_EVAL_HOME"] = str(home)
    try:
        code, out, err = cli(capsys, "run", "-e", "mine", "--out", str(tmp_path / "R"), "--dry-run")
    finally:
        del os.environ["LAMPE_EVAL_HOME"]
    assert code == 0 and not err and "1 job(s)" in out


def test_a_report_never_averages_samples_of_different_data(tmp_path, capsys, tiny_model):
    a, b = books(tmp_path / "A", TEXT_A), books(tmp_path / "B", TEXT_B)
    assert cli(capsys, *pg19(tmp_path / "R", "--opt", f"pg19_dir={a}"))[0] == 0
    assert cli(capsys, *pg19(tmp_path / "R", "--opt", f"pg19_dir={b}"))[0] == 0
    code, out, err = cli(capsys, "report", str(tmp_path / "R"), "--no-plots", "--format", "csv", "-q")
    line = one_line(err)
    assert (
        code == 0 and "records of 2 benchmark settings; the report uses the latest" in line and str(b) in line
    )
    board = (tmp_path / "R" / "report" / "leaderboard.csv").read_text().splitlines()
    assert len(board) == 2 and board[1].split(",")[board[0].split(",").index("samples")] == "1"


def test_an_option_applies_to_every_sub_grid_whose_benchmark_declares_it(tmp_path, capsys, no_model):
    path = tmp_path / "exp.yaml"
    grid = (
        "  - {{models: [smollm2-135m], methods: [rope], benchmarks: {{{bench}: default}}, lengths: [1k]}}\n"
    )
    path.write_text(
        "options: {pg19_per_doc: 2, pg19_source: offline}\ngrid:\n"
        + grid.format(bench="pg19")
        + grid.format(bench="ruler")
    )
    code, out, err = cli(capsys, "run", "-e", str(path), "--out", str(tmp_path / "R"), "--dry-run")
    assert code == 0 and not err, err
    assert "pg19/pg19 | 1k | pg19_per_doc=2 pg19_source=offline" in out and "ruler/vt | 1k  [" in out
