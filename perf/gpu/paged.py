"""(g) the vLLM backend's paged attention code (``lampe_eval/attention/paged.py``), without vLLM."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from lampe_eval.attention import kernels
from lampe_eval.attention.counts import count
from lampe_eval.methods import RopeBase
from perf.gpu.common import Row, Shape, best_time, held, inputs, method_for, rope_base

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
    features = kernels.Features(paged=True, head_dim=x.q.shape[-1])
    triton = kernels.select(device, x.q.dtype, features, kernels.override()).decode == "paged-triton"
    decode = PagedDecode([plan.segment_step(n, x.q.dtype, device)] * batch, new_slots, x.tables, None, triton)

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
