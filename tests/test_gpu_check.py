"""``perf/gpu_check.py`` (``make gpu-check``; its parts in ``perf/gpu/``) on a machine without CUDA: (a)
and (b) on CPU, exit 0; a wrong attention kernel makes it exit 1; part (c) runs through the emulated
FlashAttention contract."""

import sys

import pytest
import torch

from lampe_eval.attention import kernels
from lampe_eval.methods import METHODS
from lampe_eval.testing import FAMILY_EXAMPLES
from perf import gpu_check  # the top-level perf/ folder, a package
from perf.gpu import correctness, model, speed
from perf.gpu.common import Shape

from .kernel_contracts import FlashAttnEmulator, fake_flash_attn

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only behaviour")


SMALL = ["--check-length", "64", "--model-length", "32", "--oracle-rows", "4", "--skip", "h"]


def test_cpu_run_checks_a_and_b_and_exits_0(capsys):
    assert gpu_check.main(SMALL) == 0
    out = capsys.readouterr().out
    assert "no CUDA device" in out and "(a) vs oracle" in out and "(b) logits" in out
    table = [line for line in out.splitlines() if line.startswith("| ")][1:]
    assert {line.split("|")[1].strip() for line in table} == {m for m in METHODS.names() if m != "rope"}
    assert all(line.rstrip(" |").endswith("ok") for line in table)


def test_a_wrong_kernel_fails_the_check(capsys, monkeypatch):
    original = kernels.run_piece

    def off_by_a_little(q, k, v, scale, kind, mask, kernel, window=0):
        out, lse = original(q, k, v, scale, kind, mask, kernel, window)
        return (out * 1.01, lse) if kernel == "cpu" else (out, lse)

    monkeypatch.setattr(kernels, "run_piece", off_by_a_little)
    monkeypatch.setattr(correctness, "position_methods", lambda: ["lampe"])
    monkeypatch.setattr(correctness, "IDENTITY_CONFIGS", correctness.IDENTITY_CONFIGS[:1])
    assert gpu_check.main(SMALL) == 1
    captured = capsys.readouterr()
    assert "FAIL" in captured.out and "(a) attention vs portable" in captured.err


def test_speed_part_runs_through_the_emulated_flash_kernel(monkeypatch):
    emulator = FlashAttnEmulator(half_only=False)
    monkeypatch.setitem(sys.modules, "flash_attn", fake_flash_attn(emulator))
    rows = {}
    speed.measure_speed(rows, 128, 1, device="cpu", shape=Shape(4, 2, 16, 64), kernel="flash_attn")
    assert rows["flash (plain)"].cells["prefill 128 ms (x flash)"].endswith("(1.00x)")
    for name in METHODS.names():
        if name != "rope":
            cells = rows[name].cells
            assert set(cells) == {"prefill 128 ms (x flash)", "decode 128 ms (x flash)", "kernels/syncs 128"}
            calls, syncs = (int(x) for x in cells["kernels/syncs 128"].split("/"))
            assert calls >= 0 and syncs >= 0, name
    assert any(call["causal"] and call["sq"] == 128 for call in emulator.calls)  # the plain causal call


def test_whole_model_part_runs_the_backend_and_the_estimate():
    rows = {}
    shape = model.ModelShapeArgs(1, 4, 2, 16, intermediate=128, vocab=256, window=64)
    warnings = model.measure_model(
        rows, 128, ["rope", "lampe"], shape=shape, new_tokens=3, repeats=1, device="cpu"
    )
    assert warnings == []  # the estimate is not more than 15% below the allocator's peak
    assert rows["rope"].cells["prefill 128 s (x rope)"].endswith("(1.00x)")
    for name in ("rope", "lampe"):
        cells = rows[name].cells
        for phase in ("generation", "loss pass"):
            sizes = cells[f"{phase} 128 GiB est/meas"].split(" ")[0]
            estimated, measured = (float(x) for x in sizes.split("/"))
            assert measured > 0 and estimated > 0, (name, phase)


def test_families_part_fails_a_wrong_kernel_in_one_family(monkeypatch):
    """(h) on CPU in bf16 against fp32: the families pass; an attention that mixes in its neighbouring row
    (a position error; a plain scale would vanish in Gemma's norm after attention) fails them."""
    rows = {}
    correctness.check_families(rows, "cpu", torch.bfloat16, length=160, window=64, methods="lampe")
    assert set(rows) == {"llama", *FAMILY_EXAMPLES} and not any(r.failed for r in rows.values())
    original, math = kernels.run_piece, kernels.attend_math

    def off(q, k, v, scale, kind, mask, kernel, window=0):
        out, lse = original(q, k, v, scale, kind, mask, kernel, window)
        return (out * 0.6 + 0.4 * out.roll(1, dims=2), lse) if q.dtype == torch.bfloat16 else (out, lse)

    def math_off(q, k, v, scale, kind, mask, softcap=None):  # Gemma 2's soft-capped path
        out, lse = math(q, k, v, scale, kind, mask, softcap)
        return (out * 0.6 + 0.4 * out.roll(1, dims=2), lse) if q.dtype == torch.bfloat16 else (out, lse)

    monkeypatch.setattr(kernels, "run_piece", off)
    monkeypatch.setattr(kernels, "attend_math", math_off)
    rows = {}
    correctness.check_families(rows, "cpu", torch.bfloat16, length=160, window=64, methods="lampe")
    assert all(row.failed for row in rows.values())


def test_decode_part_times_the_decode_steps_alone():
    rows = {}
    shape = model.ModelShapeArgs(1, 4, 2, 16, intermediate=128, vocab=256, window=64)
    model.decode_breakdown(rows, 128, ["rope", "lampe"], shape=shape, new_tokens=3, device="cpu")
    for name in ("rope", "lampe"):
        wall, busy = (float(x) for x in rows[name].cells["decode 128 ms/token: wall / GPU busy"].split(" / "))
        assert wall > 0 and busy == 0.0, name  # no GPU on this machine: nothing busy
        assert rows[name].cells["launches/token 128"] == "0"
