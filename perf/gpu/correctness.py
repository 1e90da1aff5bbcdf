"""The correctness parts of the GPU check, each a pass/fail per method: (a) attention against the portable
path and the dense oracle, (b) patched logits against the unpatched model, (h) every model family on the
device against fp32 on the CPU. ``perf/gpu_check.py`` and ``tests/test_gpu.py`` (``pytest -m gpu``) call
the same functions."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch

from lampe_eval.attention import segmented_attention
from lampe_eval.attention.reference import oracle_attention
from lampe_eval.backends.hf.patch import apply_method
from lampe_eval.methods import create_method
from lampe_eval.testing import FAMILY_EXAMPLES, tiny_family, tiny_llama
from perf.gpu.common import DIM, HKV, HQ, ORACLE_ROWS, Row, inputs, method_for, position_methods, rope_base


@dataclass(frozen=True)
class CheckSizes:
    """(a) and (b) on a device (``--check-length``/``--model-length`` override the lengths): 8B shapes in
    bf16 on CUDA, smaller shapes in fp32 on CPU; ``tol`` bounds (a)'s max error and (b)'s relative one."""

    attention_length: int
    model_length: int
    dtype: torch.dtype
    tol: float


def check_sizes(cuda: bool) -> CheckSizes:
    return CheckSizes(4096, 2048, torch.bfloat16, 3e-2) if cuda else CheckSizes(512, 256, torch.float32, 1e-4)


# (b): methods configured so that their mapping is the identity inside the window
IDENTITY_CONFIGS: list[tuple[str, dict]] = [
    ("lampe", {"mscale": 1.0}),
    ("selfextend", {"window": 10**6, "group_size": 4}),
    ("dca", {"chunk_size": 10**6 - 1, "local_window": 10**6 - 1, "max_position": 2 * 10**6}),
    ("rerope", {"window": 10**6, "logn": False}),
    ("string", {"shift": 10**6, "mscale": 1.0}),
    ("linear", {"factor": 1.0}),
]


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
        portable = segmented_attention(q, k, v, plan, 0, scale, kernel="portable").float()
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
