"""A run killed at any moment (SIGKILL, Ctrl-C) loses at most the samples in flight; a rerun completes
the store with no lost and no duplicated samples. Real subprocesses, real signals."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.killable_run import SAMPLES, jobs

ROOT = Path(__file__).resolve().parents[1]


def start(out: Path, mode: str, delay: float | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.killable_run", str(out), mode, *([str(delay)] if delay else [])],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def lines(out: Path) -> list[str]:
    path = out / "records.jsonl"
    return path.read_text().splitlines() if path.exists() else []


def parsed_keys(out: Path) -> list[str]:
    keys = []
    for line in lines(out):
        try:
            keys.append(json.loads(line)["key"])
        except json.JSONDecodeError:
            continue
    return keys


def wait_for_records(out: Path, proc: subprocess.Popen, more_than: int, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while len(parsed_keys(out)) <= more_than:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no progress"
        time.sleep(0.02)


def worker_pids(parent: int) -> list[int]:
    """The driver's spawned worker processes (Linux /proc)."""
    pids = []
    for task in Path(f"/proc/{parent}/task").iterdir():
        for child in (task / "children").read_text().split():
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
            if b"spawn_main" in cmdline:
                pids.append(int(child))
    return pids


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def expected_keys() -> set[str]:
    return {job.sample_key(f"{job.task}-{i}") for job in jobs() for i in range(SAMPLES)}


def finish_and_check(out: Path, mode: str, kills: int) -> None:
    proc = start(out, mode)
    stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 0, stderr
    assert "DONE" in stdout and stdout.split()[-1] == "0", stdout  # no failed job
    keys = parsed_keys(out)
    counts = Counter(keys)
    assert not [k for k, n in counts.items() if n > 1], "duplicated samples"
    assert set(keys) == expected_keys(), "lost samples"
    torn = len(lines(out)) - len(keys)
    assert torn <= kills  # at most one torn line per kill, skipped by readers
    computed = int(stdout.split()[1])
    final = [json.loads(line) for line in lines(out)[-computed:]] if computed else []
    assert all(r["output"]["loads"] == 1 for r in final)  # each worker loaded its model once
    if mode == "gpus" and computed >= 4:
        assert {r["worker"] for r in final} == {"gpu-3", "gpu-5"}  # both pulled from the queue
        for r in final:  # each process saw only its own GPU
            assert r["worker"] == f"gpu-{r['output']['cuda_visible_devices']}"


def test_sigkill_and_ctrl_c_inline_worker_then_resume(tmp_path):
    rng = random.Random(1)
    out = tmp_path / "store"
    # 1) Ctrl-C: a clean stop with exit code 130, finished samples kept (slow samples, so that a loaded
    # machine cannot finish the run before the signal lands)
    proc = start(out, "1", delay=1.0)
    wait_for_records(out, proc, 0)
    proc.send_signal(signal.SIGINT)
    stdout, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "INTERRUPTED" in stdout
    kept = len(parsed_keys(out))
    assert kept >= 1
    # 2) SIGKILL at a random moment after some more progress.
    proc = start(out, "1")
    wait_for_records(out, proc, kept)
    time.sleep(rng.uniform(0, 0.3))
    proc.kill()
    proc.wait()
    assert len(parsed_keys(out)) < len(expected_keys())
    # 3) Rerun to the end.
    finish_and_check(out, "1", kills=2)


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
def test_sigkill_driver_with_per_gpu_worker_processes_then_resume(tmp_path):
    """One worker process per GPU (pretend GPUs 3 and 5 on CPU: CUDA_VISIBLE_DEVICES per process)."""
    out = tmp_path / "store"
    proc = start(out, "gpus")
    wait_for_records(out, proc, 2)
    workers = worker_pids(proc.pid)
    assert len(workers) == 2
    proc.kill()  # SIGKILL to the driver only: its workers must die with it
    proc.wait()
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in workers):
        assert time.monotonic() < deadline, "orphaned workers are still running"
        time.sleep(0.05)
    assert len(parsed_keys(out)) < len(expected_keys())
    finish_and_check(out, "gpus", kills=1)


def test_torn_last_line_is_skipped_and_the_next_record_starts_clean(tmp_path):
    from lampe_eval.runner.store import ResultStore

    store = ResultStore(tmp_path)
    store.append_json({"key": "a", "scores": {}})
    with open(store.path, "ab") as handle:
        handle.write(b'{"key": "b", "sco')  # a writer killed mid-line
    store = ResultStore(tmp_path)
    assert [r["key"] for r in store.records()] == ["a"]
    assert not store.is_done("b")
    store.append_json({"key": "b", "scores": {}})
    assert [r["key"] for r in ResultStore(tmp_path).records()] == ["a", "b"]
    assert len(store.path.read_text().splitlines()) == 3


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_concurrent_appenders_never_interleave(tmp_path):
    from lampe_eval.runner.store import ResultStore

    store = ResultStore(tmp_path)
    payload = "x" * 200_000  # larger than a pipe buffer: a single write() is not atomic by itself
    pids = []
    for writer in range(3):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            try:
                for i in range(5):
                    store.append_json({"key": f"{writer}-{i}", "blob": payload})
            finally:
                os._exit(0)
        pids.append(pid)
    for pid in pids:
        os.waitpid(pid, 0)
    records = list(ResultStore(tmp_path).records())
    assert len(records) == 15 and all(r["blob"] == payload for r in records)


# ----------------------------------------------------------------- two runs into one results directory
def test_two_runs_into_one_out_never_compute_a_sample_twice(tmp_path):
    """Both runs start at once: each job is claimed by one of them; the other works on other jobs, then
    waits and reads what was stored. Both finish with every sample, each computed once, no duplicate line."""
    out = tmp_path / "store"
    first, second = start(out, "1", delay=0.5), start(out, "1", delay=0.5)  # ~10 s of work: they overlap
    results = [proc.communicate(timeout=180) for proc in (first, second)]
    for proc, (stdout, stderr) in zip((first, second), results, strict=True):
        assert proc.returncode == 0 and not stderr.strip(), stderr
        assert stdout.split()[0] == "DONE" and stdout.split()[-1] == "0", stdout
    computed = [int(stdout.split()[1]) for stdout, _ in results]
    assert sum(computed) == len(expected_keys()) and all(computed), computed  # both worked, nothing twice
    keys = parsed_keys(out)
    assert len(keys) == len(set(keys)) == len(lines(out)), "duplicated samples"
    assert set(keys) == expected_keys(), "lost samples"
    assert not list((out / "claims").glob("[!.]*")), "claims left behind"


def test_a_claim_of_a_dead_run_is_taken_over_and_a_live_one_is_waited_for(tmp_path):
    import socket

    from lampe_eval.runner.claims import process_start

    out = tmp_path / "store"
    claims = out / "claims"
    claims.mkdir(parents=True)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    sleeper = subprocess.Popen(["sleep", "60"])
    first, second = [job.key() for job in jobs()[:2]]
    host = socket.gethostname()
    (claims / first).write_text(json.dumps({"pid": int(dead.stdout), "host": host, "start": "1"}))
    (claims / second).write_text(
        json.dumps({"pid": sleeper.pid, "host": host, "start": process_start(sleeper.pid)})
    )
    try:
        proc = start(out, "1")
        wait_for_records(out, proc, len(expected_keys()) - SAMPLES - 1)  # all jobs but the live one's
        time.sleep(1.0)
        assert proc.poll() is None, "the run did not wait for the live claim"
        assert not [k for k in parsed_keys(out) if k.startswith(second)], "computed a job held by another run"
    finally:
        sleeper.kill()
        sleeper.wait()
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0 and not stderr.strip(), stderr
    keys = parsed_keys(out)
    assert len(keys) == len(set(keys)) and set(keys) == expected_keys()
    assert not (claims / first).exists() and not (claims / second).exists()
