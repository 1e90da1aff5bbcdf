"""One-command check of the GPU path (``make gpu-check``): correctness first, then speed and memory.

(a) every method's attention on random inputs (4K on CUDA, bf16): the engine on its kernel backend
    (``lampe_eval/attention/kernels.py``) against the portable fp32 path and against the dense oracle
    (rows at the start, middle and end of the sequence), and a prefill continued from the middle against
    the whole prefill's rows;
(b) a Llama-shaped random model, patched with every method whose mapping is the identity at this
    length, against the unpatched model (equal within bf16 rounding);
(c) prefill and one decode step of every method against plain FlashAttention (the same kernel, one
    causal call) at 32K and 128K with an 8B-shaped layer (32 query / 8 KV heads, head_dim 128);
(d) peak GPU memory of each prefill above its inputs;
(e) a whole random model (``--model-layers`` Llama-3-8B-shaped layers, the full vocabulary) through the
    Hugging Face backend's ``generate`` and its PG-19 loss pass, at the (c) lengths: prefill time and decode
    ms/token against plain RoPE, and the peak memory above the weights against ``lampe_eval/memory.py``'s
    estimate (what ``--dry-run`` prints and what refuses a run that cannot fit);
(f) the causal kernels this GPU offers the unpatched model; (g) the vLLM backend's paged attention code;
(h) every model family (``FAMILY_EXAMPLES``: Qwen3, OLMo 2, Phi-3, Gemma 3, StableLM and Phi-4-mini's
    partial rotary), small and random, patched with each position method on the GPU against the same
    patched model in fp32 on the CPU (itself checked against the dense oracle by the tests);
(i) where a whole-model decode step's time goes: wall time per token against the GPU's busy time per
    token and its kernel launches (a step far above its busy time is bound by the host's launches).

It prints one table and exits 1 when (a), (b), (g) or (h) fails, or a part crashes. Without CUDA it says
so, runs (a), (b) (smaller shapes, fp32) and (h) on CPU and exits 0 when they pass.

    python perf/gpu_check.py [--lengths 32k,128k] [--check-length 4096] [--repeats 3]
                             [--model-layers 4] [--model-methods rope,lampe,...]
"""

from __future__ import annotations

import argparse
import copy
import functools
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, TypeVar

import torch
import torch.nn.functional as F

from lampe_eval.attention import engine, kernels, segmented_attention
from lampe_eval.attention.counts import count, peak_memory
from lampe_eval.attention.engine import attend_rotated
from lampe_eval.attention.reference import oracle_attention
from lampe_eval.attention.rope import apply_rope
from lampe_eval.backends.hf import HFBackend, chunked_nll_rows
from lampe_eval.backends.hf.patch import apply_method
from lampe_eval.lengths import parse_length
from lampe_eval.memory import GIB
from lampe_eval.methods import METHODS, RopeBase, create_method
from lampe_eval.methods.resolve import resolve_method
from lampe_eval.models import LoadedModel
from lampe_eval.settings import RunSettings
from lampe_eval.testing import FAMILY_EXAMPLES, shaped_config, tiny_family, tiny_llama

T = TypeVar("T")

# the official 8B shape (Llama-3-8B): 32 query heads, 8 KV heads, head_dim 128, 8K window
HQ, HKV, DIM, WINDOW = 32, 8, 128, 8192
ORACLE_ROWS = 32  # oracle rows per probe (start, middle, end): the oracle costs O(rows * L * D)
# (b): methods configured so that their mapping is the identity inside the window
IDENTITY_CONFIGS: list[tuple[str, dict]] = [
    ("lampe", {"mscale": 1.0}),
    ("selfextend", {"window": 10**6, "group_size": 4}),
    ("dca", {"chunk_size": 10**6 - 1, "local_window": 10**6 - 1, "max_position": 2 * 10**6}),
    ("rerope", {"window": 10**6, "logn": False}),
    ("string", {"shift": 10**6, "mscale": 1.0}),
    ("linear", {"factor": 1.0}),
]


@dataclass
class Row:
    method: str
    cells: dict[str, str] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)


def rope_base(window: int, heads: int, kv_heads: int, dim: int, device: str) -> RopeBase:
    return RopeBase.plain(window, heads, kv_heads, dim, theta=500000.0, device=device)


ONLY: list[str] = []  # --methods: check and time only these


def position_methods() -> list[str]:
    return [
        name for name in METHODS.names() if METHODS.get(name).kind != "baseline" and name in (ONLY or [name])
    ]


def method_for(name: str, window: int, length: int):
    extra = {"identity_within_window": False} if name == "lampe" else {}
    return create_method(name, window, length, **extra)


def inputs(length: int, heads: int, kv_heads: int, dim: int, device: str, dtype: torch.dtype):
    generator = torch.Generator(device="cpu").manual_seed(0)
    shapes = [(1, heads, length, dim), (1, kv_heads, length, dim), (1, kv_heads, length, dim)]
    return [torch.randn(s, generator=generator).to(device=device, dtype=dtype) for s in shapes]


# ------------------------------------------------------------------------------------------------ (a)
def check_attention(
    rows: dict[str, Row],
    length: int,
    device: str,
    dtype: torch.dtype,
    tol: float,
    oracle_rows: int = ORACLE_ROWS,
) -> None:
    heads, kv_heads, dim = (HQ, HKV, DIM) if device == "cuda" else (4, 2, 64)
    window = length // 2  # 2x extrapolation: every segment of every method is non-empty
    base = rope_base(window, heads, kv_heads, dim, device)
    q, k, v = inputs(length, heads, kv_heads, dim, device, dtype)
    scale = dim**-0.5
    probes = [0, length // 2, length - oracle_rows]
    for name in position_methods():
        row = rows.setdefault(name, Row(name))
        plan = method_for(name, window, length).plan(base, length, length)
        fast = segmented_attention(q, k, v, plan, 0, scale).float()
        engine.FORCE_PORTABLE = True
        try:
            portable = segmented_attention(q, k, v, plan, 0, scale).float()
        finally:
            engine.FORCE_PORTABLE = False
        cpu_plan = method_for(name, window, length).plan(
            rope_base(window, heads, kv_heads, dim, "cpu"), length, length
        )
        oracle_err = 0.0
        for start in probes:
            sl = slice(start, start + oracle_rows)
            ref = oracle_attention(
                q[:, :, sl].float().cpu(), k.float().cpu(), v.float().cpu(), cpu_plan, start, scale
            )
            oracle_err = max(oracle_err, (fast[:, :, sl].cpu() - ref).abs().max().item())
        portable_err = (fast - portable).abs().max().item()
        middle = length // 2 + length // 8 + 1  # a continued prefill: fewer queries than keys
        continued = segmented_attention(q[:, :, middle:], k, v, plan, middle, scale).float()
        continued_err = (continued - fast[:, :, middle:]).abs().max().item()
        row.cells["(a) vs portable"] = f"{portable_err:.1e}"
        row.cells["(a) vs oracle"] = f"{oracle_err:.1e}"
        row.cells["(a) continued"] = f"{continued_err:.1e}"
        checks = (("vs portable", portable_err), ("vs oracle", oracle_err), ("continued", continued_err))
        for what, err in checks:
            if not err <= tol:
                row.failed.append(f"(a) attention {what}: max error {err:.2e} > {tol:.0e}")


# ------------------------------------------------------------------------------------------------ (b)
@torch.no_grad()
def check_model(rows: dict[str, Row], length: int, device: str, dtype: torch.dtype, rel_tol: float) -> None:
    if device == "cuda":  # Llama-8B's attention and MLP shapes, two layers
        model = tiny_llama(layers=2, heads=HQ, kv_heads=HKV, head_dim=DIM, window=length, vocab=1024)
    else:
        model = tiny_llama(layers=2, heads=4, kv_heads=2, head_dim=32, window=length, vocab=256)
    # weights in `dtype`, buffers (RoPE's frequencies) kept in fp32 as from_pretrained(dtype=...) leaves them:
    # a plain .to(dtype) rounds the frequencies to bf16 (0.56 relative logit error at 2K on the first GPU run)
    model = model.to(device=device)
    for parameter in model.parameters():
        parameter.data = parameter.data.to(dtype)
    ids = torch.randint(0, model.config.vocab_size, (1, length), generator=torch.Generator().manual_seed(1))
    ids = ids.to(device)
    reference = model(ids).logits.float()
    for name, params in IDENTITY_CONFIGS:
        row = rows.setdefault(name, Row(name))
        with apply_method(model, create_method(name, length, length, **params)):
            patched = model(ids).logits.float()
        err = ((patched - reference).abs().max() / reference.abs().max()).item()
        row.cells["(b) logits"] = f"{err:.1e}"
        if not err <= rel_tol:
            row.failed.append(f"(b) patched logits vs unpatched: relative error {err:.2e} > {rel_tol:.0e}")


# ------------------------------------------------------------------------------------------ (c), (d)
def best_time(fn: Callable[[], object], repeats: int, device: str) -> float:
    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    fn()  # warm-up (and plan caches)
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return min(times)


def plain_flash(q, k, v, scale: float, causal: bool):
    """One FlashAttention call over the whole sequence (the unpatched model's attention)."""
    backend = kernels.backend_for(q)
    if backend not in kernels.FLASH_CALLS:
        raise RuntimeError(f"no FlashAttention backend for {q.dtype} on {q.device} (got {backend})")
    call = kernels.FLASH_CALLS[backend]()
    return call(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale, causal, (-1, -1))


def unpatched_sdpa(q, k, v, pos, base: RopeBase, scale: float):
    """The unpatched model's prefill attention: what transformers' ``sdpa`` integration calls."""
    q, k = apply_rope(q, pos, base.inv_freq), apply_rope(k, pos, base.inv_freq)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=True)


@dataclass(frozen=True)
class Shape:
    heads: int = HQ
    kv_heads: int = HKV
    dim: int = DIM
    window: int = WINDOW


def measure_speed(
    rows: dict[str, Row], length: int, repeats: int, device: str = "cuda", shape: Shape = Shape()
) -> None:
    """(c) and (d) at one length (``device``/``shape``: the tests run this on CPU, tiny, through the
    emulated FlashAttention contract)."""
    label = f"{length // 1024}K" if length >= 1024 else str(length)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    base = rope_base(shape.window, shape.heads, shape.kv_heads, shape.dim, device)
    q, k, v = inputs(length, shape.heads, shape.kv_heads, shape.dim, device, dtype)
    scale = shape.dim**-0.5
    pos = torch.arange(length, device=device)
    prefill, decode, peak, calls = (
        f"prefill {label} ms (x flash)",
        f"decode {label} ms (x flash)",
        f"(d) peak {label} MiB",
        f"kernels/syncs {label}",
    )

    def flash_prefill() -> object:
        return plain_flash(
            apply_rope(q, pos, base.inv_freq), apply_rope(k, pos, base.inv_freq), v, scale, True
        )

    k_rot = apply_rope(k, pos, base.inv_freq)
    q_last = apply_rope(q[:, :, -1:], pos[-1:], base.inv_freq)
    flash_prefill_s = best_time(flash_prefill, repeats, device)
    flash_decode_s = best_time(lambda: plain_flash(q_last, k_rot, v, scale, False), repeats, device)
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
        prefill_call = functools.partial(segmented_attention, q, k, v, plan, 0, scale)
        prefill_s = best_time(prefill_call, repeats, device)
        if device == "cuda":
            row.cells[peak] = f"{(torch.cuda.max_memory_allocated() - before) / 2**20:.0f}"
        plan = method_for(name, shape.window, length).plan(base, length - 1, length)  # prompt + one token
        copies = [(c, 0) for c in plan.rotate_keys(k, 0)]  # the rotated key cache a generation keeps

        def decode_step(plan: Any = plan, copies: list = copies) -> torch.Tensor:
            return attend_rotated(q[:, :, -1:], copies, v, plan, length - 1, scale)

        decode_s = best_time(decode_step, repeats, device)
        _, counts = count(segmented_attention, q, k, v, plan, 0, scale)  # plan compiled: a warm layer
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
    call = kernels.FLASH_CALLS[kernels.backend_for(q)]()
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


class ProfileAfterPrefill:
    """A ``generate`` streamer that profiles the decode steps only: the profiler starts when the first new
    token reaches the host (after the prefill) and stops at the end."""

    def __init__(self) -> None:
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.profiler = torch.profiler.profile(activities=activities)
        self.puts = 0

    def put(self, value: torch.Tensor) -> None:
        self.puts += 1
        if self.puts == 2:
            self.profiler.start()

    def end(self) -> None:
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.profiler.stop()


@torch.no_grad()
def profile_decode(names: list[str], length: int, shape: ModelShapeArgs, rows: int = 15) -> None:
    """Where a whole-model decode step's GPU time goes (``--profile-decode NAME``): the kernels of 16 decode
    steps after a prompt of ``length`` - 17 tokens, heaviest first."""
    with random_backend(shape, "cuda", length) as (_, backend, ids):
        prompt = ids[:, : length - 17]
        for name in names:
            with backend.install(resolve_method(name, shape.window, length).method):
                backend.generate_ids(prompt, length, 17, 17, set())  # warm
                streamer = ProfileAfterPrefill()
                backend.generate_ids(prompt, length, 17, 17, set(), streamer=streamer)
            print(f"profile: {name}, 16 decode steps at {length // 1024}K, {shape.layers} layers")
            table = streamer.profiler.key_averages().table(sort_by="self_cuda_time_total", row_limit=rows)
            print(table)


# ------------------------------------------------------------------------------------------------ (f)
def kernel_survey(length: int, repeats: int) -> None:
    """(f) The causal kernels this GPU offers for one 8B-shaped layer at ``length`` (RoPE left out): which one
    ``scaled_dot_product_attention`` picks (the unpatched model's), their times, and whether cuDNN's fused
    attention takes fewer KV heads and returns FlashAttention's log-sum-exp."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = inputs(length, HQ, HKV, DIM, "cuda", torch.bfloat16)
    scale = DIM**-0.5
    flash = kernels.FLASH_CALLS["torch"]()
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


# ------------------------------------------------------------------------------------------------ (e)
MODEL_METHODS = "rope,lampe,selfextend,dca,rerope,string,yarn"
ESTIMATE_TOLERANCE = 0.15  # the estimate may sit this far below the measured peak before the check warns


@dataclass(frozen=True)
class ModelShapeArgs:
    """The random model of (e): Llama-3-8B's layer, vocabulary and RoPE, fewer layers."""

    layers: int = 4
    heads: int = HQ
    kv_heads: int = HKV
    dim: int = DIM
    intermediate: int = 14336
    vocab: int = 128256
    window: int = WINDOW


def random_model(shape: ModelShapeArgs, device: str, dtype: torch.dtype, where: str) -> LoadedModel:
    """A random Llama of ``shape`` on ``device``, its config saved in ``where`` (the directory is the model's
    name: the estimate reads its config there, as for any local model)."""
    from transformers import AutoModelForCausalLM

    config = shaped_config(
        layers=shape.layers,
        heads=shape.heads,
        kv_heads=shape.kv_heads,
        head_dim=shape.dim,
        window=shape.window,
        rope_theta=500000.0,
        vocab=shape.vocab,
        intermediate_size=shape.intermediate,
    )
    config.save_pretrained(where)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.config._attn_implementation = "sdpa"
    tokenizer = SimpleNamespace(pad_token_id=0, eos_token_id=0)  # ids only: nothing is decoded to text
    return LoadedModel(where, model.eval(), tokenizer, shape.window, chat_template=False)


@contextmanager
def random_backend(
    shape: ModelShapeArgs, device: str, length: int
) -> Iterator[tuple[LoadedModel, HFBackend, torch.Tensor]]:
    """The random model of (e), (i) and ``--profile-decode`` (bf16 on CUDA, else fp32) behind the Hugging
    Face backend, and ``length`` random token ids on ``device``."""
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    with tempfile.TemporaryDirectory() as where:
        lm = random_model(shape, device, dtype, where)
        ids = torch.randint(100, shape.vocab, (1, length), generator=torch.Generator().manual_seed(2))
        yield lm, HFBackend(lm), ids.to(device)


def held(fn: Callable[[], T], device: str) -> tuple[T, int]:
    """``fn()`` and the most bytes it held at once above what was allocated before it."""
    if device != "cuda":
        return peak_memory(fn)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    result = fn()
    torch.cuda.synchronize()
    return result, torch.cuda.max_memory_allocated() - before


class TokenClock:
    """A ``generate`` streamer: the time of each new token (the first ``put`` is the prompt; each later one
    comes after the token reached the host, so no extra synchronisation is needed)."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        if self.prompt_seen:
            self.times.append(time.perf_counter())
        self.prompt_seen = True

    def end(self) -> None:
        pass


@torch.no_grad()
def measure_model(
    rows: dict[str, Row],
    length: int,
    methods: list[str],
    *,
    shape: ModelShapeArgs = ModelShapeArgs(),
    new_tokens: int = 16,
    repeats: int = 2,
    device: str = "cuda",
) -> list[str]:
    """(e) at one length: generation (prompt of ``length - new_tokens``, greedy, best of ``repeats``) and a
    loss pass over ``length`` tokens per method. Returns warnings: an estimate more than
    ``ESTIMATE_TOLERANCE`` below the measured peak (a run the refusal lets through could run out)."""
    label = f"{length // 1024}K" if length >= 1024 else str(length)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    settings = RunSettings(device=device, dtype=str(dtype).removeprefix("torch."))
    warnings = []
    with random_backend(shape, device, length) as (lm, backend, ids):
        reference: dict[str, float] = {}
        for name in methods:
            method = resolve_method(name, shape.window, length).method
            guess = HFBackend.memory_estimate(lm.name, method, length, settings)
            assert guess is not None, "the random model's config is readable: an estimate exists"
            prefill_s, decode_s, generation = float("inf"), float("inf"), 0
            prompt = ids[:, : length - new_tokens]
            with backend.install(method):
                for _ in range(repeats):
                    clock = TokenClock()
                    start = time.perf_counter()
                    generate = functools.partial(
                        backend.generate_ids, prompt, length, new_tokens, new_tokens, set(), streamer=clock
                    )
                    _, used = held(generate, device)
                    prefill_s = min(prefill_s, clock.times[0] - start)
                    decode_s = min(decode_s, (clock.times[-1] - clock.times[0]) / (len(clock.times) - 1))
                    generation = max(generation, used)
                _, loss = held(lambda: chunked_nll_rows(lm.model, ids, chunk=1024), device)
            reference.setdefault("prefill", prefill_s)
            reference.setdefault("decode", decode_s)
            row = rows.setdefault(name, Row(name))
            row.cells[f"prefill {label} s (x rope)"] = (
                f"{prefill_s:.2f} ({prefill_s / reference['prefill']:.2f}x)"
            )
            row.cells[f"decode {label} ms (x rope)"] = (
                f"{decode_s * 1e3:.1f} ({decode_s / reference['decode']:.2f}x)"
            )
            for phase, estimated, measured in (
                ("generation", guess.generation - guess.weights, generation),
                ("loss pass", guess.scoring - guess.weights, loss),
            ):
                row.cells[f"{phase} {label} GiB est/meas"] = (
                    f"{estimated / GIB:.3g}/{measured / GIB:.3g} ({estimated / measured:.2f})"
                )
                if estimated < (1 - ESTIMATE_TOLERANCE) * measured:
                    warnings.append(
                        f"{name} {label} {phase}: estimate {estimated / GIB:.2f} GiB, measured "
                        f"{measured / GIB:.2f} GiB"
                    )
    return warnings


# ------------------------------------------------------------------------------------------------ (g)
PAGED_METHODS = "lampe,selfextend,dca,rerope,string,ms_poe"


@dataclass
class PagedInputs:
    """(g)'s shared inputs: one prompt (``q``, ``k``, ``v`` [length + 1, heads, dim], tokens first), each
    decode row's new query, the rows' block tables."""

    length: int
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    new_q: torch.Tensor
    tables: torch.Tensor
    base: RopeBase
    scale: float
    block: int
    chunk: int


def measure_paged(
    rows: dict[str, Row],
    length: int,
    repeats: int,
    *,
    batch: int = 4,
    chunk: int = 8192,
    block: int = 16,
    methods: str = PAGED_METHODS,
    device: str = "cuda",
    shape: Shape = Shape(),
    tol: float = 3e-2,
) -> None:
    """(g) The vLLM backend's attention on its paged cache (``lampe_eval/attention/paged.py``: the code
    vLLM's workers run, on a cache laid out as vLLM's, blocks scattered; no vLLM needed). One prompt of
    ``length`` prefilled in ``chunk``-token chunks (vLLM's chunked prefill) against its whole prefill; one
    decode step of ``batch`` rows at ``length`` (:class:`PagedDecode`, a decode batch) against each row
    alone, its time against one SDPA call over contiguous keys of the rows, its transient memory."""
    label = f"{length // 1024}K" if length >= 1024 else str(length)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    prompt = inputs(length + 1, shape.heads, shape.kv_heads, shape.dim, device, dtype)
    q, k, v = (t[0].transpose(0, 1) for t in prompt)
    per_row = -(-(length + 1) // block)
    order = torch.randperm(batch * per_row + 1, generator=torch.Generator().manual_seed(3))
    new_q = torch.randn(batch, shape.heads, shape.dim, generator=torch.Generator().manual_seed(4))
    x = PagedInputs(
        length,
        q,
        k,
        v,
        new_q.to(device=device, dtype=dtype),
        order[: batch * per_row].view(batch, per_row).to(device),
        rope_base(shape.window, shape.heads, shape.kv_heads, shape.dim, device),
        shape.dim**-0.5,
        block,
        chunk,
    )
    keys, values = (t[None, :length].transpose(1, 2).repeat(batch, 1, 1, 1) for t in (k, v))  # a copy per row
    sdpa_s = best_time(
        lambda: F.scaled_dot_product_attention(
            x.new_q[:, :, None], keys, values, scale=x.scale, enable_gqa=True
        ),
        repeats,
        device,
    )
    rows.setdefault("sdpa (contiguous)", Row("sdpa (contiguous)")).cells[f"decode x{batch} {label} ms"] = (
        f"{sdpa_s * 1e3:.2f} (1.00x)"
    )
    for name in filter(None, methods.split(",")):
        row = rows.setdefault(name, Row(name))
        paged_method(row, method_for(name, shape.window, length + 1), x, label, repeats, sdpa_s, tol)
        if device == "cuda":
            torch.cuda.empty_cache()


def paged_method(
    row: Row, method, x: PagedInputs, label: str, repeats: int, sdpa_s: float, tol: float
) -> None:
    """(g) for one method: its chunked prefill, then (methods with fixed key positions) a decode batch."""
    from lampe_eval.attention.paged import PagedCache, PagedDecode, attend_paged
    from lampe_eval.backends.plans import method_key_copies

    n, block, device = x.length, x.block, x.q.device
    copies = method_key_copies(method, x.base)
    heads, dim = x.k.shape[1], x.k.shape[2]
    planes = torch.zeros(
        x.tables.numel() + 1, heads, block, (copies + 1) * dim, device=device, dtype=x.q.dtype
    )
    cache = PagedCache.view(planes, copies, dim)
    positions = torch.arange(n, device=device)
    slots = x.tables[0, positions // block] * block + positions % block
    rotated = method.fixed_key_positions()

    plan = method.plan_with_budget(x.base, n, n, n + 1)  # a prompt's chunks share its plan (as in vLLM)

    def prefill(a: int, b: int) -> torch.Tensor:
        return attend_paged(
            cache, plan, x.scale, x.q[a:b], x.k[a:b], x.v[a:b], slots[a:b], x.tables[0], a, rotated
        )

    def chunked() -> torch.Tensor:
        return torch.cat([prefill(a, min(a + x.chunk, n)) for a in range(0, n, x.chunk)])

    whole_s = best_time(lambda: prefill(0, n), 1, device.type)
    whole = prefill(0, n)
    chunked_s = best_time(chunked, 1, device.type)
    error = (chunked().float() - whole.float()).abs().max().item()
    row.cells[f"prefill {label}, chunks of {x.chunk} ms (x whole)"] = (
        f"{chunked_s * 1e3:.0f} ({chunked_s / whole_s:.2f}x)"
    )
    row.cells[f"chunked {label} err"] = f"{error:.1e}"
    if not error <= tol:
        row.failed.append(f"(g) chunked paged prefill vs whole: max error {error:.2e} > {tol:.0e}")
    if not rotated:
        return  # positions that move every step: the per-sequence path, no batch
    for plane in [*cache.keys, cache.values]:  # every row holds the same prompt
        plane[x.tables[1:]] = plane[x.tables[0]]
    batch = x.tables.shape[0]
    plan = method.plan_with_budget(x.base, n, n + 1, n + 1)
    new_slots = x.tables[:, n // block] * block + n % block
    new_k, new_v = (t[n:].expand(batch, -1, -1) for t in (x.k, x.v))
    alone = torch.cat(
        [
            attend_paged(
                cache,
                plan,
                x.scale,
                x.new_q[r : r + 1],
                x.k[n:],
                x.v[n:],
                new_slots[r : r + 1],
                x.tables[r],
                n,
                rotated,
            )
            for r in range(batch)
        ]
    )
    decode = PagedDecode([plan.segment_step(n, x.q.dtype, device)] * batch, new_slots, x.tables)

    def step() -> torch.Tensor:
        return decode.attend(cache, x.scale, x.new_q, new_k, new_v)

    together, used = held(step, device.type)
    error = (together.float() - alone.float()).abs().max().item()
    decode_s = best_time(step, repeats, device.type)
    _, counts = count(step)
    row.cells[f"decode x{batch} {label} ms"] = f"{decode_s * 1e3:.2f} ({decode_s / sdpa_s:.2f}x)"
    row.cells[f"decode {label} MiB/syncs"] = f"{used / 2**20:.0f}/{counts.syncs}"
    row.cells[f"decode {label} err"] = f"{error:.1e}"
    if not error <= tol:
        row.failed.append(f"(g) batched paged decode vs each row alone: max error {error:.2e} > {tol:.0e}")


# ------------------------------------------------------------------------------------------------ (h)
FAMILY_METHODS = "lampe,selfextend,dca,rerope,string,yarn,ms_poe"


def relative_error(model: Any, reference_model: Any, ids: torch.Tensor) -> float:
    """max |logits - reference| / max |reference|: ``model`` on its device against ``reference_model``."""
    reference = reference_model(ids).logits.float()
    logits = model(ids.to(model.device)).logits.float().cpu()
    return ((logits - reference).abs().max() / reference.abs().max()).item()


@torch.no_grad()
def check_families(
    rows: dict[str, Row],
    device: str,
    dtype: torch.dtype,
    *,
    length: int = 1280,
    window: int = 512,
    methods: str = FAMILY_METHODS,
    rel_tol: float = 3e-2,
) -> None:
    """(h) Each family's small random model (8 query / 4 KV heads, head dim 64, 2.5x its window) patched
    with each method on ``device`` in ``dtype`` against the same patched model in fp32 on the CPU. The
    yardstick is the unpatched model's own error in ``dtype`` (Gemma 3's embedding scale makes a random
    model sensitive to rounding): a method fails when its error exceeds ``rel_tol`` and twice that."""
    ids = torch.randint(0, 1024, (1, length), generator=torch.Generator().manual_seed(5))
    for family in ["llama", *FAMILY_EXAMPLES]:
        shape = {"window": window, "heads": 8, "kv_heads": 4, "head_dim": 64, "vocab": 1024}
        net = tiny_family(family, vary_norms=False, **shape)
        there = copy.deepcopy(net).to(device)
        for parameter in there.parameters():  # weights in dtype, RoPE's buffers kept fp32 (see (b))
            parameter.data = parameter.data.to(dtype)
        row = rows.setdefault(family, Row(family))
        unpatched = relative_error(there, net, ids)
        tolerance = max(rel_tol, 2 * unpatched)
        worst = 0.0
        for name in filter(None, methods.split(",")):
            with (
                apply_method(net, method_for(name, window, length)),
                apply_method(there, method_for(name, window, length)),
            ):
                err = relative_error(there, net, ids)
            worst = max(worst, err)
            if not err <= tolerance:
                row.failed.append(f"(h) {name}: relative error {err:.2e} > {tolerance:.1e}")
        row.cells["(h) unpatched / worst method"] = f"{unpatched:.1e} / {worst:.1e}"


# ------------------------------------------------------------------------------------------------ (i)
def device_work(profiler: torch.profiler.profile) -> tuple[float, int]:
    """The GPU's busy time (s) and kernel launches a profile saw (from its device events)."""
    device_events = [e for e in profiler.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return sum(e.time_range.elapsed_us() for e in device_events) / 1e6, len(device_events)


@torch.no_grad()
def decode_breakdown(
    rows: dict[str, Row],
    length: int,
    methods: list[str],
    *,
    shape: ModelShapeArgs,
    new_tokens: int = 16,
    device: str = "cuda",
) -> None:
    """(i) at one length: per decoded token, the wall time (best of 2 generations) and the GPU's busy time
    and kernel launches (one more generation, its ``new_tokens`` decode steps profiled; ``device``: the
    tests run it on CPU, where the GPU columns read 0)."""
    label = f"{length // 1024}K" if length >= 1024 else str(length)
    with random_backend(shape, device, length) as (_, backend, ids):
        prompt = ids[:, : length - new_tokens - 1]
        tokens = new_tokens + 1
        for name in methods:
            method = resolve_method(name, shape.window, length).method
            wall = float("inf")
            with backend.install(method):
                for _ in range(2):
                    clock = TokenClock()
                    backend.generate_ids(prompt, length, tokens, tokens, set(), streamer=clock)
                    wall = min(wall, (clock.times[-1] - clock.times[0]) / (len(clock.times) - 1))
                profiled = ProfileAfterPrefill()
                backend.generate_ids(prompt, length, tokens, tokens, set(), streamer=profiled)
            busy, launches = device_work(profiled.profiler)
            row = rows.setdefault(name, Row(name))
            row.cells[f"decode {label} ms/token: wall / GPU busy"] = (
                f"{wall * 1e3:.1f} / {busy / new_tokens * 1e3:.1f}"
            )
            row.cells[f"launches/token {label}"] = f"{launches / new_tokens:.0f}"


# -------------------------------------------------------------------------------------------- report
def print_table(rows: dict[str, Row]) -> None:
    columns: list[str] = []
    for row in rows.values():
        columns += [c for c in row.cells if c not in columns]
    header = ["method", *columns, "result"]
    lines = [header]
    for row in rows.values():
        result = "FAIL" if row.failed else "ok"
        lines.append([row.method, *(row.cells.get(c, "-") for c in columns), result])
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for index, line in enumerate(lines):
        print("| " + " | ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)) + " |")
        if index == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")


CRASHES: list[str] = []  # parts that raised: reported, the other parts still run


def each_length(fn: Callable[[int], object], lengths: list[int]) -> Callable[[], None]:
    def run() -> None:
        for length in lengths:
            fn(length)

    return run


def part(label: str, fn: Callable[[], object]) -> None:
    """Run one part; a crash is printed, counted as a failure, and the next part runs (a lease is short)."""
    start = time.perf_counter()
    try:
        fn()
    except Exception as error:  # noqa: BLE001 - every part's crash is reported at the end
        traceback.print_exc()
        CRASHES.append(f"part ({label}) crashed: {type(error).__name__}: {str(error).splitlines()[0][:200]}")
    print(f"part ({label}): {time.perf_counter() - start:.0f} s", flush=True)
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="32k,128k", help="(c) lengths (CUDA only)")
    parser.add_argument(
        "--check-length", type=int, default=None, help="(a) length (4096 on CUDA, 512 on CPU)"
    )
    parser.add_argument(
        "--model-length", type=int, default=None, help="(b) length (2048 on CUDA, 256 on CPU)"
    )
    parser.add_argument("--oracle-rows", type=int, default=ORACLE_ROWS, help="(a) oracle rows per probe")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profile", default="", help="(CUDA) methods whose longest prefill to profile")
    parser.add_argument("--methods", default="", help="only these methods (default: every method)")
    parser.add_argument("--profile-decode", default="", help="(CUDA) methods whose model decode to profile")
    parser.add_argument("--model-layers", type=int, default=4, help="(e) the random model's layers")
    parser.add_argument("--model-methods", default=MODEL_METHODS, help="(e) and (i) methods, rope first")
    parser.add_argument("--model-repeats", type=int, default=2, help="(e) generations per method (best)")
    parser.add_argument("--skip", default="", help="parts to skip, e.g. c,e,f")
    args = parser.parse_args(argv)
    ONLY[:] = [name for name in args.methods.split(",") if name]
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    dtype = torch.bfloat16 if cuda else torch.float32
    where = torch.cuda.get_device_name() if cuda else "CPU (no CUDA device: parts (c)-(g) and (i) skipped)"
    print(f"device: {where}")
    backend = kernels.describe(device, dtype)
    print(f"kernel backend for the pieces: {backend} ({kernels.ENV}={kernels.setting()})")
    if cuda:
        print(f"FlashAttention window_size on this build: {window_support(device)}")
    skip = set(args.skip.split(","))
    run = {name: name not in skip and (cuda or name in "abh") for name in "abcdefghi"}
    lengths = [parse_length(x) for x in args.lengths.split(",")]
    rows: dict[str, Row] = {}
    length = args.check_length or (4096 if cuda else 512)
    tol = 3e-2 if cuda else 1e-4
    if run["a"]:
        part("a", lambda: check_attention(rows, length, device, dtype, tol, args.oracle_rows))
    if run["b"]:
        part("b", lambda: check_model(rows, args.model_length or (2048 if cuda else 256), device, dtype, tol))
    if run["f"]:
        part("f", each_length(lambda length: kernel_survey(length, args.repeats), lengths))
    if run["c"]:
        part("c", each_length(lambda length: measure_speed(rows, length, args.repeats), lengths))
        for name in filter(None, args.profile.split(",")):
            part("profile", functools.partial(profile_prefill, name, max(lengths)))
    if cuda and args.profile_decode:
        decode_shape = ModelShapeArgs(layers=args.model_layers)
        names = args.profile_decode.split(",")
        part("profile decode", lambda: profile_decode(names, max(lengths), decode_shape))
    print_table(rows)
    tables = [rows]
    model_methods = args.model_methods.split(",")
    shape = ModelShapeArgs(layers=args.model_layers)
    if run["e"]:
        model_rows: dict[str, Row] = {}
        print(f"(e) a random model, {shape.layers} Llama-3-8B-shaped layers, vocabulary {shape.vocab}, bf16:")

        def whole_model() -> None:
            for length in lengths:
                for warning in measure_model(
                    model_rows, length, model_methods, shape=shape, repeats=args.model_repeats
                ):
                    print("WARNING: memory estimate low:", warning)
                torch.cuda.empty_cache()  # the last length's model and cache

        part("e", whole_model)
        print_table(model_rows)
    if run["g"]:
        paged_rows: dict[str, Row] = {}
        print("(g) the vLLM backend's paged attention (8B-shaped layer, blocks of 16, 4 rows decoding):")
        methods = args.methods or PAGED_METHODS
        paged = each_length(lambda n: measure_paged(paged_rows, n, args.repeats, methods=methods), lengths)
        part("g", paged)
        print_table(paged_rows)
        tables.append(paged_rows)
    if run["h"]:
        family_rows: dict[str, Row] = {}
        print(f"(h) model families, patched on {device} in bf16 against fp32 on the CPU:")
        family_methods = args.methods or FAMILY_METHODS
        part("h", lambda: check_families(family_rows, device, torch.bfloat16, methods=family_methods))
        print_table(family_rows)
        tables.append(family_rows)
    if run["i"]:
        decode_rows: dict[str, Row] = {}
        print(f"(i) where a decode step's time goes ({shape.layers} Llama-3-8B-shaped layers, bf16):")
        part(
            "i", each_length(lambda n: decode_breakdown(decode_rows, n, model_methods, shape=shape), lengths)
        )
        print_table(decode_rows)
    failures = [f"{row.method}: {fail}" for table in tables for row in table.values() for fail in row.failed]
    for failure in failures + CRASHES:
        print("FAILED", failure, file=sys.stderr)
    if not cuda:
        print("no CUDA device: (a), (b) and (h) ran on CPU; (c)-(g) and (i) need a GPU")
    return 1 if failures or CRASHES else 0


if __name__ == "__main__":
    sys.exit(main())
