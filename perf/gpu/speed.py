"""(c) and (d): one 8B-shaped layer's prefill and decode time and peak memory per method against plain
FlashAttention; (f) the causal kernels this GPU offers the unpatched model; ``--profile``."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from lampe_eval.attention import kernels, segmented_attention
from lampe_eval.attention.counts import count
from lampe_eval.attention.engine import attend_rotated
from lampe_eval.attention.kernels.flash import FLASH_CALLS
from lampe_eval.attention.rope import apply_rope
from lampe_eval.methods import RopeBase
from perf.gpu.common import (
    DIM,
    HKV,
    HQ,
    WINDOW,
    Row,
    Shape,
    best_time,
    inputs,
    method_for,
    position_methods,
    rope_base,
)

# ------------------------------------------------------------------------------------------ (c), (d)


def plain_flash(q, k, v, scale: float, causal: bool, kernel: str | None = None):
    """One FlashAttention call over the whole sequence (the unpatched model's attention) on ``kernel``
    (None: this process's choice)."""
    kernel = kernel or kernels.layer_choice(q, None).prefill
    if kernel not in FLASH_CALLS:
        raise RuntimeError(f"no FlashAttention kernel for {q.dtype} on {q.device} (got {kernel})")
    call = FLASH_CALLS[kernel]()
    return call(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale, causal, (-1, -1))


def unpatched_sdpa(q, k, v, pos, base: RopeBase, scale: float):
    """The unpatched model's prefill attention: what transformers' ``sdpa`` integration calls."""
    q, k = apply_rope(q, pos, base.inv_freq), apply_rope(k, pos, base.inv_freq)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=True)


def measure_speed(
    rows: dict[str, Row],
    length: int,
    repeats: int,
    device: str = "cuda",
    shape: Shape = Shape(),
    kernel: str | None = None,
) -> None:
    """(c) and (d) at one length (``device``/``shape``/``kernel``: the tests run this on CPU, tiny, through
    the emulated FlashAttention contract; None: this process's choice)."""
    label = f"{length // 1024}K" if length >= 1024 else str(length)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    base = rope_base(shape.window, shape.heads, shape.kv_heads, shape.dim, device)
    q, k, v = inputs(length, shape.heads, shape.kv_heads, shape.dim, device, dtype)
    scale = shape.dim**-0.5
    kernel = kernel or kernels.layer_choice(q, None).prefill
    pos = torch.arange(length, device=device)
    prefill, decode, peak, calls = (
        f"prefill {label} ms (x flash)",
        f"decode {label} ms (x flash)",
        f"(d) peak {label} MiB",
        f"kernels/syncs {label}",
    )

    def flash_prefill() -> object:
        return plain_flash(
            apply_rope(q, pos, base.inv_freq), apply_rope(k, pos, base.inv_freq), v, scale, True, kernel
        )

    k_rot = apply_rope(k, pos, base.inv_freq)
    q_last = apply_rope(q[:, :, -1:], pos[-1:], base.inv_freq)
    flash_prefill_s = best_time(flash_prefill, repeats, device)
    flash_decode_s = best_time(lambda: plain_flash(q_last, k_rot, v, scale, False, kernel), repeats, device)
    if device == "cuda":  # the kernel the unpatched model gets: PyTorch's choice for causal GQA attention
        sdpa_s = best_time(lambda: unpatched_sdpa(q, k, v, pos, base, scale), repeats, device)
        sdpa = rows.setdefault("sdpa (unpatched)", Row("sdpa (unpatched)"))
        sdpa.cells[prefill] = f"{sdpa_s * 1e3:.1f} ({sdpa_s / flash_prefill_s:.2f}x)"
    flash = rows.setdefault("flash (plain)", Row("flash (plain)"))
    flash.cells[prefill] = f"{flash_prefill_s * 1e3:.1f} (1.00x)"
    flash.cells[decode] = f"{flash_decode_s * 1e3:.2f} (1.00x)"
    _, counts = count(flash_prefill)
    flash.cells[calls] = f"{counts.attention}/{counts.syncs}"
    for name in position_methods():
        row = rows.setdefault(name, Row(name))
        plan = method_for(name, shape.window, length).plan(base, length, length)
        if device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
        prefill_call = functools.partial(segmented_attention, q, k, v, plan, 0, scale, kernel=kernel)
        prefill_s = best_time(prefill_call, repeats, device)
        if device == "cuda":
            row.cells[peak] = f"{(torch.cuda.max_memory_allocated() - before) / 2**20:.0f}"
        plan = method_for(name, shape.window, length).plan(base, length - 1, length)  # prompt + one token
        copies = [(c, 0) for c in plan.rotate_keys(k, 0)]  # the rotated key cache a generation keeps

        def decode_step(plan: Any = plan, copies: list = copies) -> torch.Tensor:
            return attend_rotated(q[:, :, -1:], copies, v, plan, length - 1, scale, kernel=kernel)

        decode_s = best_time(decode_step, repeats, device)
        _, counts = count(segmented_attention, q, k, v, plan, 0, scale, kernel=kernel)  # a warm layer
        row.cells[calls] = f"{counts.attention}/{counts.syncs}"
        row.cells[prefill] = f"{prefill_s * 1e3:.1f} ({prefill_s / flash_prefill_s:.2f}x)"
        row.cells[decode] = f"{decode_s * 1e3:.2f} ({decode_s / flash_decode_s:.2f}x)"


def window_support(device: str) -> str:
    """Whether the FlashAttention kernel in use takes a sliding window (``window_size``) on this build:
    one banded call against the portable path."""
    q, k, v = inputs(512, 4, 2, 64, device, torch.bfloat16)
    try:
        out, _ = plain_window(q, k, v, 0.125, 100)
    except Exception as error:  # noqa: BLE001 - reported, the engine falls back
        return f"no ({type(error).__name__}: {str(error).splitlines()[0][:80]})"
    keys = torch.arange(512, device=device)
    band = (keys[None, :] <= keys[:, None]) & (keys[None, :] > keys[:, None] - 100)
    ref, _ = kernels.attend_math(q, k, v, 0.125, "mask", band)
    err = (out.transpose(1, 2).float() - ref).abs().max().item()
    return f"yes (max error {err:.1e})" if err < 3e-2 else f"WRONG (max error {err:.1e})"


def plain_window(q, k, v, scale: float, width: int):
    call = FLASH_CALLS[kernels.layer_choice(q, None).prefill]()
    return call(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale, True, (width - 1, 0))


def profile_prefill(name: str, length: int, rows: int = 12) -> None:
    """Where one prefill's GPU time goes (``--profile NAME``): the CUDA kernels of one warm prefill of
    ``name`` at ``length``, 8B-shaped layer, heaviest first."""
    base = rope_base(WINDOW, HQ, HKV, DIM, "cuda")
    q, k, v = inputs(length, HQ, HKV, DIM, "cuda", torch.bfloat16)
    plan = method_for(name, WINDOW, length).plan(base, length, length)
    segmented_attention(q, k, v, plan, 0, DIM**-0.5)  # warm: tables, compiled tiles
    torch.cuda.synchronize()
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        segmented_attention(q, k, v, plan, 0, DIM**-0.5)
        torch.cuda.synchronize()
    print(f"profile: {name} prefill at {length // 1024}K")
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=rows))


# ------------------------------------------------------------------------------------------------ (f)
def kernel_survey(length: int, repeats: int) -> None:
    """(f) The causal kernels this GPU offers for one 8B-shaped layer at ``length`` (RoPE left out): which one
    ``scaled_dot_product_attention`` picks (the unpatched model's), their times, and whether cuDNN's fused
    attention takes fewer KV heads and returns FlashAttention's log-sum-exp."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = inputs(length, HQ, HKV, DIM, "cuda", torch.bfloat16)
    scale = DIM**-0.5
    flash = FLASH_CALLS["torch"]()
    _, flash_lse = flash(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale, True, (-1, -1))
    wide_k, wide_v = k.repeat_interleave(HQ // HKV, 1), v.repeat_interleave(HQ // HKV, 1)

    def sdpa() -> object:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=True)

    def cudnn_only() -> object:
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return sdpa()

    def cudnn_op(keys, values):
        return torch.ops.aten._scaled_dot_product_cudnn_attention(
            q, keys, values, None, True, 0.0, True, False, scale=scale
        )

    activities = [torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        sdpa()
        torch.cuda.synchronize()
    kernels_used = sorted(prof.key_averages(), key=lambda e: -e.device_time_total)[:2]
    print(f"(f) {length // 1024}K: sdpa runs " + ", ".join(e.key[:70] for e in kernels_used))
    candidates: list[tuple[str, Callable[[], object]]] = [
        ("flash (aten._flash_attention_forward)", lambda: plain_flash(q, k, v, scale, True)),
        ("sdpa (its own choice)", sdpa),
        ("sdpa, cuDNN only", cudnn_only),
        ("cuDNN op, 8 KV heads", lambda: cudnn_op(k, v)),
        ("cuDNN op, KV heads repeated", lambda: cudnn_op(wide_k, wide_v)),
    ]
    for label, fn in candidates:
        try:
            seconds = best_time(fn, repeats, "cuda")
        except Exception as error:  # noqa: BLE001 - reported: this build lacks it
            print(f"(f)   {label}: fails ({type(error).__name__}: {str(error).splitlines()[0][:100]})")
            continue
        note = ""
        if label.startswith("cuDNN op"):
            result: Any = fn()
            lse = result[1]
            gap = (lse.squeeze(-1) - flash_lse).abs().max().item()
            note = f", lse {tuple(lse.shape)}, max |lse - flash's| {gap:.1e}"
        print(f"(f)   {label}: {seconds * 1e3:.1f} ms{note}")
