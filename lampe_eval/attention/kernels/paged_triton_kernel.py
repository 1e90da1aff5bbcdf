"""The Triton kernel of ``paged_triton.py`` (imported only where Triton is installed): one program per
(tile, key head) of a batched paged decode reads the tile's keys and values from the engine's blocks and
writes the tile's softmax peak, sum and weighted values."""

import triton
import triton.language as tl


@triton.jit
def tiles_kernel(
    queries,  # [Hkv, runs, group, D] fp32
    keys,  # one key copy's plane [blocks, Hkv, block, D] (a view: strides given)
    values,  # [blocks, Hkv, block, D]
    tile_blocks,  # [tiles, blocks per tile] int64: the cache blocks of each tile
    tile_query,  # [tiles] int64: the run (query row) each tile serves
    tile_start,  # [tiles] int64: the position of each tile's first key
    tile_lo,  # [tiles] int64: the run's first position
    tile_hi,  # [tiles] int64: the run's end
    peaks,  # [Hkv, all tiles, group] fp32 (out)
    sums,  # [Hkv, all tiles, group] fp32 (out)
    outs,  # [Hkv, all tiles, group, D] fp32 (out)
    first_tile,  # this launch's first tile in the outputs
    all_tiles,
    runs,
    group,
    stride_kb,
    stride_kh,
    stride_kt,
    stride_vb,
    stride_vh,
    stride_vt,
    BLOCK: tl.constexpr,
    PER_TILE: tl.constexpr,
    DIM: tl.constexpr,
    GROUP_PAD: tl.constexpr,
):
    tile = tl.program_id(0)
    head = tl.program_id(1)
    keys_per_tile: tl.constexpr = BLOCK * PER_TILE
    t = tl.arange(0, keys_per_tile)
    d = tl.arange(0, DIM)
    g = tl.arange(0, GROUP_PAD)
    block = tl.load(tile_blocks + tile * PER_TILE + t // BLOCK)
    offset = t % BLOCK
    key_at = keys + block[:, None] * stride_kb + head * stride_kh + offset[:, None] * stride_kt + d[None, :]
    value_at = (
        values + block[:, None] * stride_vb + head * stride_vh + offset[:, None] * stride_vt + d[None, :]
    )
    k = tl.load(key_at)  # [keys, D], the cache's dtype: the dots run on it with fp32 sums (as FlashAttention)
    v = tl.load(value_at)
    query = tl.load(tile_query + tile)
    q_at = queries + ((head * runs + query) * group + g[:, None]) * DIM + d[None, :]
    q = tl.load(q_at, mask=g[:, None] < group, other=0.0).to(k.dtype)  # [GROUP_PAD, D]
    scores = tl.dot(q, tl.trans(k), input_precision="ieee")  # [GROUP_PAD, keys]
    position = tl.load(tile_start + tile) + t
    inside = (position >= tl.load(tile_lo + tile)) & (position < tl.load(tile_hi + tile))
    scores = tl.where(inside[None, :], scores, float("-inf"))
    peak = tl.max(scores, axis=1)
    weights = tl.exp(scores - peak[:, None])
    total = tl.sum(weights, axis=1)
    out = tl.dot(weights.to(v.dtype), v, input_precision="ieee")  # [GROUP_PAD, D]
    row = (head * all_tiles + first_tile + tile) * group + g
    stored = g < group
    tl.store(peaks + row, peak, mask=stored)
    tl.store(sums + row, total, mask=stored)
    tl.store(outs + row[:, None] * DIM + d[None, :], out, mask=stored[:, None])
