"""vLLM's own CPU paged attention (``cpu_attention_with_kv_cache``) for the decode rows of a position method
that each see one causal run of their keys from the first (a plan of one segment: Ms-PoE, a frequency method
with InfoScale, LaMPE below 2 x s1 tokens, where it is plain causal attention), run on the rows' rotated
queries and a rotated key copy (:class:`~lampe_eval.attention.paged.PagedDecode`). The same arithmetic as the
tiles' PyTorch path, in one C++ call per layer instead of about twenty PyTorch calls.

vLLM's CPU kernels read a block's keys as columns (``[head dim, block size]``) for their ``vec`` and
``vec16`` instruction sets and in other layouts for others (AMX packs them): the patched layers on CPU store
their keys as columns on the ``paged-engine`` decode (``PagedCache(key_columns=True)``: the default on CPU),
and :func:`cpu_decode_kernel` runs the kernel only
where it reads that layout, checked once per dtype, block size and head dim against a dense softmax (a
layout it reads differently leaves the decode to the tiles).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from ...attention.paged import EngineRows, PagedCache


@dataclass
class CpuDecodeKernel:
    """vLLM's CPU paged attention for one instruction set (``isa``, vLLM's name for it)."""

    isa: str
    dtype: torch.dtype

    def rows(self, seq_lens: list[int], tables: torch.Tensor) -> EngineRows:
        """What attends one pass's decode rows (``seq_lens`` keys each, through ``tables``): vLLM's scheduler
        metadata made at the first layer, reused by the others."""
        from vllm import _custom_ops as ops

        lengths = torch.tensor(seq_lens, dtype=torch.int32)
        starts = torch.arange(len(seq_lens) + 1, dtype=torch.int32)
        table = tables.to(torch.int32)
        scheduled: dict[int, torch.Tensor] = {}

        def attend(
            queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, softcap: float | None
        ) -> torch.Tensor:
            """``queries`` [rows, Hq, D] rotated and scaled; ``keys`` and ``values`` [blocks, Hkv, block, D]
            views of a layer's cache; returns [rows, Hq, D]."""
            q_heads, kv_heads, dim = queries.shape[1], keys.shape[1], queries.shape[2]
            if q_heads not in scheduled:
                scheduled[q_heads] = self._schedule(lengths, starts, q_heads, kv_heads, dim)
            out = torch.empty(queries.shape, dtype=values.dtype)
            ops.cpu_attention_with_kv_cache(
                query=queries.to(values.dtype).contiguous(),
                key_cache=keys,
                value_cache=values,
                output=out,
                query_start_loc=starts,
                seq_lens=lengths,
                scale=1.0,  # folded into the queries' rotation
                causal=True,
                alibi_slopes=None,
                sliding_window=-1,
                block_table=table,
                softcap=float(softcap or 0.0),
                scheduler_metadata=scheduled[q_heads],
                s_aux=None,
            )
            return out

        return attend

    def _schedule(
        self, lengths: torch.Tensor, starts: torch.Tensor, q_heads: int, kv_heads: int, dim: int
    ) -> torch.Tensor:
        from vllm import _custom_ops as ops
        from vllm import envs

        return ops.cpu_attn_get_scheduler_metadata(
            num_reqs=len(lengths),
            num_heads=q_heads,
            num_kv_heads=kv_heads,
            head_dim=dim,
            seq_lens=lengths,
            dtype=self.dtype,
            query_start_loc=starts,
            causal=True,
            sliding_window_size=-1,
            isa=self.isa,
            enable_kv_split=envs.VLLM_CPU_ATTN_SPLIT_KV,
        )


def cpu_decode_kernel(dtype: torch.dtype, block_size: int, head_dim: int) -> CpuDecodeKernel | None:
    """vLLM's CPU paged attention where it reads keys stored as columns for this dtype, block size and head
    dim (checked once, on a small cache, against a dense softmax), else None."""
    return _checked_kernel(dtype, block_size, head_dim)


@functools.cache
def _checked_kernel(dtype: torch.dtype, block_size: int, head_dim: int) -> CpuDecodeKernel | None:
    try:
        from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

        kernel = CpuDecodeKernel(_get_attn_isa(dtype, block_size, head_dim), dtype)
        return kernel if _reads_key_columns(kernel, block_size, head_dim) else None
    except (ImportError, RuntimeError, NotImplementedError, AttributeError):
        return None


def _reads_key_columns(kernel: CpuDecodeKernel, block_size: int, head_dim: int) -> bool:
    """Whether ``kernel`` gives a dense softmax's output over keys :class:`PagedCache` stores as columns: two
    rows of 2.5 and 3 blocks, blocks out of order, 4 query and 2 key heads, the second of two key copies."""
    generator = torch.Generator().manual_seed(0)
    copies, heads, lengths = 2, 2, [2 * block_size + block_size // 2, 3 * block_size]
    tensor = torch.zeros(7, heads, block_size, (copies + 1) * head_dim, dtype=kernel.dtype)
    cache = PagedCache.view(tensor, copies, head_dim, key_columns=True)
    tables = torch.tensor([[3, 0, 5], [1, 6, 4]])
    keys = [torch.randn(n, heads, head_dim, generator=generator) for n in lengths]
    values = [torch.randn(n, heads, head_dim, generator=generator) for n in lengths]
    for row, n in enumerate(lengths):
        slots = tables[row, torch.arange(n) // block_size] * block_size + torch.arange(n) % block_size
        cache.write(slots, [-keys[row], keys[row]], values[row])
    queries = torch.randn(2, 2 * heads, head_dim, generator=generator) / head_dim**0.5
    got = kernel.rows(lengths, tables)(queries, cache.key_plane(1), cache.values, None).float()
    tolerance = 1e-4 if kernel.dtype == torch.float32 else 3e-2
    for row in range(2):
        k, v = (t[row].to(kernel.dtype).float().transpose(0, 1) for t in (keys, values))  # [heads, n, D]
        q = queries[row].to(kernel.dtype).float().view(heads, 2, head_dim)
        want = (torch.softmax(q @ k.transpose(1, 2), dim=-1) @ v).reshape(2 * heads, head_dim)
        if not torch.allclose(got[row], want, atol=tolerance, rtol=tolerance):
            return False
    return True
