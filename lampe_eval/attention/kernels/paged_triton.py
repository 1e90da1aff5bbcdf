"""The batched paged decode's tiles in one Triton kernel per key copy (CUDA): each program reads one tile's
keys and values straight from the engine's blocks (no gathered copy), and writes the tile's softmax
statistics (peak, sum, weighted values) for :class:`~lampe_eval.attention.paged.PagedDecode` to merge.

The PyTorch path in ``paged.py`` computes the same statistics with gathers and batched matmuls; it runs
where this kernel does not (CPU, no Triton, a head dim or block size that is not a power of two) and is the
reference the tests hold this kernel to (through Triton's interpreter, on CPU). Which one runs is the
engine's ``paged-triton`` or ``paged-torch`` decode (``choice.py``).
"""

from __future__ import annotations

import functools
from typing import Any

import torch


def takes(block: int, keys_per_tile: int, head_dim: int) -> bool:
    """Whether the kernel takes this cache: powers of two for the block, the tile and the head dim."""
    return all(n > 0 and n & (n - 1) == 0 for n in (block, keys_per_tile, head_dim))


@functools.cache
def tile_kernel() -> Any:
    """The Triton kernel (``paged_triton_kernel.py``, imported on first use: this module needs no Triton)."""
    from .paged_triton_kernel import tiles_kernel

    return tiles_kernel


def tile_statistics(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    tiles: tuple[torch.Tensor, ...],
    first: int,
    out: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
) -> None:
    """Fill ``out`` (peaks, sums, outs) at tiles ``first..`` for the tiles ``(blocks, query, start, lo, hi)``
    of one key copy: ``queries`` [Hkv, runs, group, D] fp32, ``keys`` and ``values`` planes [blocks, Hkv,
    block, D]."""
    blocks, query, start, lo, hi = tiles
    kv_heads, runs, group, dim = queries.shape
    peaks, sums, outs = out
    group_pad = max(16, 1 << (group - 1).bit_length())  # tl.dot takes 16 rows or more
    tile_kernel()[(blocks.shape[0], kv_heads)](
        queries,
        keys,
        values,
        blocks,
        query,
        start,
        lo,
        hi,
        peaks,
        sums,
        outs,
        first,
        peaks.shape[1],
        runs,
        group,
        keys.stride(0),
        keys.stride(1),
        keys.stride(2),
        values.stride(0),
        values.stride(1),
        values.stride(2),
        BLOCK=keys.shape[2],
        PER_TILE=blocks.shape[1],
        DIM=dim,
        GROUP_PAD=group_pad,
    )
