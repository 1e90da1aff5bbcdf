"""Bad input, second round (malformed data files, experiment files, results-directory faults, reports,
remote-code models), through the real console entry point: every case asserts the exit code, that
stderr is one line without a traceback, that no file appeared outside the results directory, and that
no sample was lost."""

from __future__ import annotations

import errno
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lampe_eval import resources
from tests.helpers.cli import cli, one_line, stored
from tests.helpers.remote_code import refused, remote_code_model

FIXTURES = Path(str(resources.packaged("fixtures")))


@pytest.fixture
def tiny_model(monkeypatch: pytest.MonkeyPatch) -> None:
    import lampe_eval.models
    from tests.fakebench import load_tiny_chars

    monkeypatch.setattr(lampe_eval.models, "load_model", lambda name, **kw: load_tiny_chars(name))


def files_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


def outside(tmp_path: Path, before: set[Path], results: Path) -> set[Path]:
    """Files that appeared under tmp_path but outside the results directory."""
    return {p for p in files_under(tmp_path) - before if results not in p.parents}


def write_records(path: Path, records: list[Any], *, raw: bytes | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if raw is not None:
        path.write_bytes(raw)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def fixture_records(benchmark: str, task: str) -> list[dict[str, Any]]:
    text = (FIXTURES / benchmark / f"{task}.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def broken(benchmark: str, task: str, change: Callable[[dict[str, Any]], Any]) -> list[Any]:
    """The fixture's records with the second one changed (line 2 of the file)."""
    records = fixture_records(benchmark, task)
    records = records if len(records) > 1 else records * 2
    records[1] = change(dict(records[1]))
    return records


def updated(record: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {**record, **fields}


def dropped(record: dict[str, Any], name: str) -> dict[str, Any]:
    record.pop(name)
    return record


RUNS = {
    "longbench": ("longbench/qasper.jsonl", ["--bench", "longbench", "--task", "qasper", "--len", "4k"]),
    "leval": ("leval/coursera.jsonl", ["--bench", "leval", "--task", "coursera", "--len", "4k"]),
    "longbench_v2": (
        "longbench_v2/longbench_v2.jsonl",
        ["--bench", "longbench_v2", "--len", "4k"],
    ),
    "infinitebench": (
        "infinitebench/passkey.jsonl",
        ["--bench", "infinitebench", "--task", "passkey", "--len", "4k"],
    ),
}


def run_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bench: str, records: list[Any], dry: bool, **kw: Any
) -> tuple[int, str, str, Path]:
    relative, args = RUNS[bench]
    data = tmp_path / "data"
    write_records(data / relative, records, **kw)
    before = files_under(tmp_path)
    results = tmp_path / "R"
    code, out, err = cli(
        capsys,
        "run",
        *args,
        "--data-dir",
        str(data),
        "--out",
        str(results),
        "--limit",
        "2",
        "--no-progress",
        *(["--dry-run"] if dry else []),
    )
    assert not outside(tmp_path, before, results)
    return code, out, err, data / relative


# ------------------------------------------------------------------- 1. malformed data files
BAD_RECORDS = [
    (
        "longbench",
        lambda r: updated(r, answers={"text": "x"}),
        "LongBench field 'answers' must be a list of strings, got an object",
    ),
    (
        "longbench",
        lambda r: updated(r, length="many"),
        "LongBench field 'length' must be an integer, got a string",
    ),
    (
        "longbench",
        lambda r: dropped(r, "context"),
        "record lacks the LongBench field 'context' (a non-empty string)",
    ),
    (
        "longbench",
        lambda r: ["a", "list"],
        "expected a JSON object per line, got a list",
    ),
    (
        "leval",
        lambda r: updated(r, instructions="What is it?"),
        "L-Eval field 'instructions' must be a non-empty list of strings, got a string",
    ),
    (
        "leval",
        lambda r: updated(r, outputs="A"),
        "L-Eval field 'outputs' must be a list of strings, got a string",
    ),
    (
        "leval",
        lambda r: updated(r, outputs=r["outputs"][:-1]),
        "L-Eval fields 'instructions' and 'outputs' must pair up",
    ),
    (
        "longbench_v2",
        lambda r: updated(r, answer="E"),
        "LongBench v2 field 'answer' must be one of A, B, C, D, got 'E'",
    ),
    (
        "longbench_v2",
        lambda r: updated(r, difficulty="medium"),
        "LongBench v2 field 'difficulty' must be one of easy, hard, got 'medium'",
    ),
    (
        "longbench_v2",
        lambda r: updated(r, choice_C=3),
        "LongBench v2 field 'choice_C' must be a string, got an integer",
    ),
    (
        "infinitebench",
        lambda r: dropped(r, "context"),
        "record lacks the InfiniteBench field 'context' (a non-empty string)",
    ),
    (
        "infinitebench",
        lambda r: updated(r, context=""),
        "InfiniteBench field 'context' must be a non-empty string, got an empty string",
    ),
]


@pytest.mark.parametrize("dry", [True, False])
@pytest.mark.parametrize(("bench", "change", "message"), BAD_RECORDS)
@pytest.mark.usefixtures("no_model")
def test_a_malformed_record_is_one_line_naming_file_line_and_field(
    tmp_path, capsys, dry, bench, change, message
):
    records = broken(*Path(RUNS[bench][0]).with_suffix("").parts, change)
    code, out, err, path = run_on(tmp_path, capsys, bench, records, dry)
    line = one_line(err)
    assert code == 2 and line.startswith(f"error: {path}:2: ") and message in line, line
    assert not (tmp_path / "R" / "records.jsonl").exists()  # nothing ran, nothing was stored


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b'{"input": "q", "context": "c", "answers": ["a"]}\n{"input": \n', ":2: not valid JSON"),
        (b'{"input": "q", "context": "c\xff\xfe", "answers": ["a"]}\n', ":1: not valid UTF-8 (byte 0xff)"),
    ],
)
@pytest.mark.usefixtures("no_model")
def test_a_data_file_that_is_not_json_or_not_utf8_is_one_line(tmp_path, capsys, raw, message):
    code, out, err, path = run_on(tmp_path, capsys, "longbench", [], True, raw=raw)
    line = one_line(err)
    assert code == 2 and line.startswith(f"error: {path}{message}"), line


@pytest.mark.usefixtures("no_model")
def test_a_json_array_file_names_the_line_of_the_bad_record(tmp_path, capsys):
    records = broken("longbench_v2", "longbench_v2", lambda r: updated(r, answer="E"))
    data = tmp_path / "data" / "longbench_v2" / "data.json"
    data.parent.mkdir(parents=True)
    data.write_text(json.dumps(records, indent=1))
    line_of_second = data.read_text().splitlines().index(" {", 2) + 1
    code, out, err = cli(
        capsys, "run", "--bench", "longbench_v2", "--len", "4k", "--data-dir", str(tmp_path / "data"),
        "--out", str(tmp_path / "R"), "--dry-run",
    )  # fmt: skip
    line = one_line(err)
    assert code == 2 and line.startswith(f"error: {data}:{line_of_second}: LongBench v2 field 'answer'"), line


@pytest.mark.parametrize("bom", [b"", b"\xef\xbb\xbf"])
@pytest.mark.parametrize("newline", [b"\n", b"\r\n"])
@pytest.mark.usefixtures("no_model")
def test_a_byte_order_mark_and_crlf_are_accepted(tmp_path, capsys, bom, newline):
    from lampe_eval.benchmarks.datafiles import read_records

    records = fixture_records("longbench", "qasper")[:2]
    raw = bom + newline.join(json.dumps(r, ensure_ascii=False).encode() for r in records) + newline
    code, out, err, path = run_on(tmp_path, capsys, "longbench", [], True, raw=raw)
    assert code == 0 and not err, err
    assert "1 job(s)" in out
    assert read_records(path) == records


# ------------------------------------------------------------------------ 2. experiment files
GRID = """grid:
  - models: [smollm2-135m]
    methods: [rope]
    benchmarks: {pg19: [pg19]}
    lengths: [1k]
options: {pg19_source: offline}
"""


def run_experiment(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, *extra: str):
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    before = files_under(tmp_path)
    code, out, err = cli(capsys, "run", "-e", str(path), "--dry-run", *extra)
    assert not outside(tmp_path, before, tmp_path / "R")
    return code, out, err, path


@pytest.mark.usefixtures("no_model")
def test_an_experiment_key_given_twice_names_the_key_and_both_lines(tmp_path, capsys):
    text = "name: twice\nlengths: [1k]\nmodels: [smollm2-135m]\nmethods: [rope]\nbenchmarks: [pg19]\n"
    text += "lengths: [2k]\n"
    code, out, err, path = run_experiment(tmp_path, capsys, text, "--out", str(tmp_path / "R"))
    assert code == 2 and one_line(err) == f"error: {path}: key 'lengths' is given twice (lines 2 and 6)"


@pytest.mark.usefixtures("no_model")
def test_a_key_given_twice_in_a_sub_grid_is_an_error(tmp_path, capsys):
    text = GRID.replace("    lengths: [1k]\n", "    lengths: [1k]\n    methods: [lampe]\n")
    code, out, err, path = run_experiment(tmp_path, capsys, text, "--out", str(tmp_path / "R"))
    assert code == 2 and one_line(err) == f"error: {path}: key 'methods' is given twice (lines 3 and 6)"


@pytest.mark.usefixtures("no_model")
@pytest.mark.parametrize("name", ["../../escaped", "/tmp/abs", "a/../../b", "..", " "])
def test_an_experiment_name_that_leaves_results_is_refused(tmp_path, capsys, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    code, out, err, path = run_experiment(tmp_path, capsys, f"name: {json.dumps(name)}\n" + GRID)
    line = one_line(err)
    assert code == 2 and "would write outside results/" in line and "give out: DIR" in line, line
    assert files_under(tmp_path) == {path}  # not even results/ was made


@pytest.mark.usefixtures("no_model")
def test_a_plain_experiment_name_writes_under_results(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err, path = run_experiment(tmp_path, capsys, "name: plain\n" + GRID)
    assert code == 0 and not err and "results/plain" in out


@pytest.mark.usefixtures("no_model")
def test_a_yaml_alias_bomb_is_refused_without_printing_it(tmp_path, capsys):
    levels = ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, 9):
        levels.append(f"{chr(97 + i)}: &{chr(97 + i)} [" + ", ".join([f"*{chr(96 + i)}"] * 9) + "]")
    text = "\n".join(levels) + "\nlimit: *i\n" + GRID
    code, out, err, path = run_experiment(tmp_path, capsys, text, "--out", str(tmp_path / "R"))
    line = one_line(err)
    assert code == 2 and "refused: its aliases expand to more than 1,000,000 values" in line
    assert "lol" not in err and len(line) < 200


@pytest.mark.usefixtures("no_model")
@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("limit: [" + ", ".join(["1"] * 500) + "]", "'limit' must be a positive integer"),
        ("seed: " + "x" * 500, "'seed' must be an integer"),
        ("data_dir: {" + ", ".join(f"k{i}: v" for i in range(300)) + "}", "'data_dir' must be a directory"),
    ],
)
def test_an_echoed_value_is_cut_to_one_short_line(tmp_path, capsys, line, message):
    code, out, err, path = run_experiment(tmp_path, capsys, line + "\n" + GRID, "--out", str(tmp_path / "R"))
    text = one_line(err)
    assert code == 2 and message in text and text.endswith("...") and len(text) < len(str(path)) + 160, text


# ------------------------------------------------------------------- 3. results directory faults
TEXT_A = "In the beginning God created the heaven and the earth. " * 12
TEXT_B = "abab " * 150


def pg19_run(capsys: pytest.CaptureFixture[str], results: Path, books: Path) -> tuple[int, str, str]:
    return cli(
        capsys, "run", "--bench", "pg19", "--len", "256", "--limit", "1", "--out", str(results),
        "--no-progress", "--opt", f"pg19_dir={books}",
    )  # fmt: skip


@pytest.fixture
def first_run(tmp_path: Path, capsys: pytest.CaptureFixture[str], tiny_model: None) -> tuple[Path, str]:
    """A store with one record (book A) and the directory of another book (B) to compute next."""
    for name, text in (("A", TEXT_A), ("B", TEXT_B)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "book.txt").write_text(text)
    code, out, err = pg19_run(capsys, tmp_path / "R", tmp_path / "A")
    assert code == 0 and not err, err
    return tmp_path / "R", (tmp_path / "R" / "records.jsonl").read_text()


def intact(results: Path, before: str) -> None:
    """The store holds exactly the records it held before, whole."""
    assert (results / "records.jsonl").read_text() == before
    assert len(stored(results)) == 1


def test_claims_being_a_file_is_one_line_and_the_store_stays_intact(tmp_path, capsys, first_run):
    results, before = first_run
    shutil.rmtree(results / "claims")
    (results / "claims").write_text("not a folder")
    files = files_under(tmp_path)
    code, out, err = pg19_run(capsys, results, tmp_path / "B")
    assert code == 2 and one_line(err) == (
        f"error: {results / 'claims'} is a file, not a directory (it holds the run's job claims): "
        "move it out of the way and rerun"
    )
    assert files_under(tmp_path) == files
    intact(results, before)


def test_records_being_a_directory_is_one_line(tmp_path, capsys, tiny_model):
    (tmp_path / "A").mkdir()
    (tmp_path / "A" / "book.txt").write_text(TEXT_A)
    (tmp_path / "R" / "records.jsonl").mkdir(parents=True)
    files = files_under(tmp_path)
    code, out, err = pg19_run(capsys, tmp_path / "R", tmp_path / "A")
    assert code == 2 and one_line(err).startswith(
        f"error: {tmp_path / 'R' / 'records.jsonl'} is a directory, not a file: move it out of the way"
    )
    code, out, err = cli(capsys, "report", str(tmp_path / "R"))
    assert code == 2 and "is a directory, not a file" in one_line(err)
    assert files_under(tmp_path) == files


@pytest.mark.parametrize(
    ("number", "message"),
    [
        (errno.ENOSPC, "no space left on device; free some space, then rerun the same command to resume"),
        (errno.EIO, "Input/output error; fix it, then rerun the same command to resume"),
    ],
)
def test_a_failed_record_write_is_one_line_and_leaves_no_partial_record(
    tmp_path, capsys, monkeypatch, first_run, number, message
):
    import lampe_eval.runner.store as store_module

    results, before = first_run
    real_write = os.write
    calls = []

    def failing(fd: int, data: bytes) -> int:
        if not os.readlink(f"/proc/self/fd/{fd}").endswith("records.jsonl"):
            return real_write(fd, data)
        calls.append(len(data))
        if len(calls) == 1:  # half the record reaches the disk, then the write fails
            return real_write(fd, bytes(data)[: len(data) // 2])
        raise OSError(number, os.strerror(number))

    monkeypatch.setattr(store_module.os, "write", failing)
    files = files_under(tmp_path)
    code, out, err = pg19_run(capsys, results, tmp_path / "B")
    monkeypatch.undo()
    line = one_line(err)
    assert code == 2 and line == f"error: cannot write {results / 'records.jsonl'}: {message} " + (
        "(finished samples are kept)"
    ), line
    assert len(calls) == 2 and files_under(tmp_path) == files
    intact(results, before)
    assert not [p for p in (results / "claims").iterdir() if not p.name.startswith(".")]  # released


# ----------------------------------------------------------------------- 4. reports are atomic
@pytest.mark.parametrize("victim", ["leaderboard.csv", "report.html", ".png"])
def test_a_failed_report_leaves_the_previous_files_whole(tmp_path, capsys, monkeypatch, first_run, victim):
    import lampe_eval.fileio

    results, before = first_run
    code, out, err = cli(capsys, "report", str(results), "-q", "--format", "md,csv,html")
    assert code == 0, err
    report = results / "report"
    previous = {p: p.read_bytes() for p in files_under(report)}
    assert any(p.name.endswith(victim) for p in previous)
    real_write = lampe_eval.fileio.os.replace

    def failing(src, dst):
        if str(dst).endswith(victim):
            Path(src).write_bytes(b"half")  # a torn temporary file, never seen under its real name
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(src, dst)

    monkeypatch.setattr(lampe_eval.fileio.os, "replace", failing)
    code, out, err = cli(capsys, "report", str(results), "-q", "--format", "md,csv,html")
    line = one_line(err)
    assert code == 2 and line.startswith("error: cannot write ") and victim in line, line
    assert line.endswith(
        "no space left on device; free some space and run it again (any previous version is unchanged)"
    )  # noqa: E501
    assert {p: p.read_bytes() for p in files_under(report)} == previous  # no temp file left either
    intact(results, before)


# ------------------------------------------------- 5. models that ask for their own (remote) code
# (the model directory and the line that refuses it: tests/helpers/remote_code.py)
REMOTE_CODE_COMMANDS = {
    "run": ["run", "--bench", "longbench", "--task", "qasper", "--len", "4k", "--opt", "fixture=true"],
    "run --dry-run": ["run", "--bench", "longbench", "--task", "qasper", "--len", "4k", "--dry-run"],
    "show-prompt": ["show-prompt", "--bench", "longbench", "--task", "qasper", "--len", "4k"],
    "fit": ["fit", "--len", "4k", "--points", "2", "--passages", "1"],
    "show-positions": ["show-positions", "--method", "lampe", "--len", "8k"],
}


@pytest.mark.parametrize("command", list(REMOTE_CODE_COMMANDS))
@pytest.mark.parametrize("in_tokenizer_config", [False, True], ids=["config", "tokenizer_config"])
def test_a_model_that_asks_for_its_own_code_is_refused_by_every_command(
    tmp_path, capsys, command, in_tokenizer_config
):
    model, marker = remote_code_model(tmp_path / "m", in_tokenizer_config=in_tokenizer_config)
    out = tmp_path / "R"
    args = [*REMOTE_CODE_COMMANDS[command], "--model", str(model)]
    if command.startswith(("run", "fit")):
        args += ["--out", str(out), "--no-progress"]
    if command == "show-positions":
        args += ["-o", str(out / "positions.png")]
    code, stdout, err = cli(capsys, *args)
    assert code == 2, err
    refused(err, model, "tokenizer_config.json" if in_tokenizer_config else "config.json")
    assert not marker.exists() and not out.exists() and not stdout


def test_show_prompt_refuses_it_through_the_console_script(tmp_path):
    """The case that used to end in a transformers traceback, in a process of its own."""
    import subprocess
    import sys

    model, marker = remote_code_model(tmp_path)
    args = [*REMOTE_CODE_COMMANDS["show-prompt"], "--opt", "fixture=true", "--model", str(model)]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    done = subprocess.run(
        [sys.executable, "-m", "lampe_eval", *args], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 2 and not done.stdout, done.stderr
    refused(done.stderr, model)
    assert not marker.exists()


@pytest.mark.parametrize("loader", ["load_model", "load_tokenizer", "known_window", "resolve_source"])
def test_the_python_api_refuses_it(tmp_path, loader):
    import lampe_eval.models
    from lampe_eval.errors import UnsupportedModelError

    model, marker = remote_code_model(tmp_path)
    with pytest.raises(UnsupportedModelError, match=r"lampe-eval never executes a model's own code"):
        getattr(lampe_eval.models, loader)(str(model))
    assert not marker.exists()


def test_a_gguf_file_beside_a_tokenizer_config_that_asks_for_code_is_refused(tmp_path):
    from lampe_eval.errors import UnsupportedModelError
    from lampe_eval.models import load_tokenizer

    model, marker = remote_code_model(tmp_path, in_tokenizer_config=True)
    gguf = model / "model.gguf"
    gguf.write_bytes(b"GGUF")
    with pytest.raises(UnsupportedModelError, match=r"^the directory of model file .*auto_map in tokenizer"):
        load_tokenizer(str(gguf))
    assert not marker.exists()


def test_a_cached_hub_model_that_asks_for_code_is_refused(tmp_path, monkeypatch):
    """A hub id whose files are in the local Hugging Face cache is checked there (nothing is fetched)."""
    import huggingface_hub.constants

    from lampe_eval.errors import UnsupportedModelError
    from lampe_eval.models import load_tokenizer

    snapshot = tmp_path / "hub" / "models--evil--model" / "snapshots" / ("0" * 40)
    model, marker = remote_code_model(tmp_path / "src")
    shutil.copytree(model, snapshot)
    (tmp_path / "hub" / "models--evil--model" / "refs").mkdir()
    (tmp_path / "hub" / "models--evil--model" / "refs" / "main").write_text("0" * 40)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(
        UnsupportedModelError, match=r"^model 'evil/model' asks to run its own code \(auto_map"
    ):
        load_tokenizer("evil/model")
    assert not marker.exists()


@pytest.mark.parametrize("loader", ["load_model", "load_tokenizer"])
def test_transformers_is_never_asked_to_trust_the_code_even_past_the_check(tmp_path, monkeypatch, loader):
    """Defence in depth: with the check gone, transformers gets trust_remote_code=False (never its
    interactive prompt) and its refusal is the same one line."""
    import lampe_eval.models
    import lampe_eval.models.sources
    from lampe_eval.errors import UnsupportedModelError

    monkeypatch.setattr(lampe_eval.models.sources, "check_local_model", lambda *args, **kwargs: None)
    model, marker = remote_code_model(tmp_path, in_tokenizer_config=True)
    with pytest.raises(UnsupportedModelError, match=r"asks to run its own code \(custom code\)"):
        getattr(lampe_eval.models, loader)(str(model))
    assert not marker.exists()


def test_a_model_directory_without_auto_map_is_accepted(tmp_path):
    from lampe_eval.models import known_window, resolve_source
    from lampe_eval.testing import tiny_llama

    tiny_llama(window=512).save_pretrained(tmp_path / "plain")
    (tmp_path / "plain" / "tokenizer_config.json").write_text('{"auto_map": {}}')  # empty: asks for nothing
    assert resolve_source(str(tmp_path / "plain")) == (str(tmp_path / "plain"), None)
    assert known_window(str(tmp_path / "plain")) == 512
