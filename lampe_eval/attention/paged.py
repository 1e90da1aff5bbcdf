"""A position method's keys and values in an engine's paged KV cache (vLLM's blocks).

A layer's cache is ``[blocks, key heads, block size, (copies + 1) x head dim]`` (what vLLM allocates for a
spec whose ``head_size`` is ``copies x head dim`` and whose ``head_size_v`` is the head dim). Within a block
and head it is read as ``copies + 1`` planes of ``block size x head dim`` values: the keys rotated at each key
copy's positions (the plan's distinct key maps), then the values. A key plane holds its block's keys as rows
(``[block size, head dim]``, as vLLM's FlashAttention and the Triton kernel read them) or, with
``key_columns``, as columns (``[head dim, block size]``: vLLM's CPU attention's layout, so that its kernel can
read a key copy, :mod:`lampe_eval.backends.vllm.cpu_decode`); values are rows in both.

:class:`PagedCache` writes a call's new keys (rotated once per copy: a decode step rotates only its new key)
and values at the token slots the engine gives (``block * block_size + offset``) and gathers one sequence's
keys and values, in order, through its block table: every sequence reads its own key range, nothing is
padded to the longest sequence of a batch, nothing is kept outside the engine's cache.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from .engine import AttentionPlan, SegmentStep, attend_rotated, segmented_attention
from .kernels import paged_triton


@dataclass
class PagedCache:
    """One layer's paged cache read as key copies and values, views of the engine's tensor (no copy): each
    key copy [blocks, heads, head dim, block size] (a block's keys as columns, whatever the memory layout),
    the values [blocks, heads, block size, head dim]."""

    keys: list[torch.Tensor]
    values: torch.Tensor
    key_columns: bool = False  # the key planes' memory holds columns (vLLM's CPU layout), else rows

    @classmethod
    def view(cls, cache: torch.Tensor, copies: int, head_dim: int, key_columns: bool = False) -> PagedCache:
        """The views of a layer's cache tensor [blocks, heads, block size, (copies + 1) * dim]."""
        blocks, heads, block_size, width = cache.shape
        if width != (copies + 1) * head_dim:
            raise ValueError(
                f"a paged cache row of {width} values holds no {copies} key copies and values "
                f"of dim {head_dim}"
            )
        planes = cache.view(blocks, heads, (copies + 1) * block_size, head_dim).split(block_size, dim=2)
        if key_columns:  # each block's plane memory read as [dim, block size]
            keys = [plane.view(blocks, heads, head_dim, block_size) for plane in planes[:copies]]
        else:
            keys = [plane.transpose(2, 3) for plane in planes[:copies]]
        return cls(keys, planes[copies], key_columns)

    @property
    def block_size(self) -> int:
        return int(self.values.shape[2])

    def key_plane(self, copy: int) -> torch.Tensor:
        """Key copy ``copy`` as an engine kernel is handed it: [blocks, heads, block size, dim] over the
        plane's memory (rows, or vLLM's CPU columns when ``key_columns``)."""
        plane = self.keys[copy]
        return plane.view(self.values.shape) if self.key_columns else plane.transpose(2, 3)

    def write(self, slots: torch.Tensor, keys: list[torch.Tensor], value: torch.Tensor) -> None:
        """Store tokens at ``slots`` [n]: their keys, one [n, heads, dim] per copy (a plan may use fewer
        copies than the cache holds), and values."""
        self.write_at(slots // self.block_size, slots % self.block_size, keys, value)

    def write_at(
        self, block: torch.Tensor, offset: torch.Tensor, keys: list[torch.Tensor], value: torch.Tensor
    ) -> None:
        """:meth:`write` at tokens given by block and offset."""
        if len(keys) > len(self.keys):
            raise ValueError(f"a plan with {len(keys)} key copies in a cache that holds {len(self.keys)}")
        for plane, new in zip(self.keys, keys, strict=False):
            plane[block, :, :, offset] = new.to(plane.dtype)
        self.values[block, :, offset] = value.to(self.values.dtype)

    def gather(
        self, blocks: torch.Tensor, length: int, copies: int
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """One sequence's first ``length`` tokens through its block table ``blocks``: its first ``copies``
        key copies and its values, each [1, heads, length, dim]."""
        used = blocks[: -(-length // self.block_size)]

        def read(plane: torch.Tensor) -> torch.Tensor:  # [used, heads, block size, dim] -> [1, heads, n, dim]
            heads, dim = plane.shape[1], plane.shape[3]
            return plane.transpose(0, 1).reshape(1, heads, -1, dim)[:, :, :length]

        return [read(plane[used].transpose(2, 3)) for plane in self.keys[:copies]], read(self.values[used])


def attend_paged(
    cache: PagedCache,
    plan: AttentionPlan,
    scale: float,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    slots: torch.Tensor,
    blocks: torch.Tensor,
    q_start: int,
    rotated: bool = True,
    softcap: float | None = None,
    kernel: str | None = None,
) -> torch.Tensor:
    """One sequence's call: un-rotated ``query`` [n, Hq, D], ``key`` and ``value`` [n, Hkv, D] of tokens
    ``q_start..q_start+n-1`` (stored at ``slots``), attending its tokens ``0..q_start+n-1`` through its block
    table ``blocks`` following ``plan``; returns [n, Hq, D]. The arithmetic of the Hugging Face backend's
    patched attention: ``rotated`` keys are stored once per key copy; otherwise (positions that move with
    the length) copy 0 holds un-rotated keys, all re-rotated by the plan at every call. ``softcap``: logits
    soft-capped (Gemma 2), as the engine does; ``kernel``: the engine's prefill kernel."""
    end = q_start + key.shape[0]
    heads_first = [t.transpose(0, 1)[None] for t in (query, key, value)]  # [1, H, n, D]
    q, k, v = heads_first
    new = plan.rotate_keys(k, q_start) if rotated else [k]
    cache.write(slots, [keys[0].transpose(0, 1) for keys in new], value)
    if q_start == 0:  # the whole sequence is here: no read of the cache
        keys, values = new, v
    else:
        keys, values = cache.gather(blocks, end, len(new))
    if rotated:
        copies = [(copy, 0) for copy in keys]
        out = attend_rotated(q, copies, values, plan, q_start, scale, softcap=softcap, kernel=kernel)
    else:
        out = segmented_attention(q, keys[0], values, plan, q_start, scale, softcap=softcap, kernel=kernel)
    return out[0].transpose(0, 1)


def key_copies(plan: AttentionPlan) -> int:
    """How many rotated key copies ``plan`` keeps (its distinct key maps)."""
    return len(plan.key_groups()[1])


class EngineKernel(Protocol):
    """An engine's own paged attention (:mod:`lampe_eval.backends.vllm.cpu_decode`) for decode rows that each
    see one causal run of their keys, from the first: ``rows(seq_lens, tables)`` gives, once per pass, what
    attends those rows' rotated and scaled queries [rows, Hq, D] over a key plane and the values (as
    :meth:`PagedCache.key_plane` and :attr:`PagedCache.values` hand them) with an optional soft cap."""

    def rows(self, seq_lens: list[int], tables: torch.Tensor) -> EngineRows: ...


EngineRows = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, "float | None"], torch.Tensor]


KEY_TILE = 128  # keys per tile of a batched decode (whole cache blocks: at least one)
SLAB_BYTES = 256 * 2**20  # the fp32 keys and values one slab of tiles reads: a decode's transient memory


class PagedDecode:
    """One forward pass's decode rows whose plans share a shape (:func:`decode_shape`), attended as one
    batch, split-K: each row's query rotated for every segment of its plan; each segment's key range (a
    run) read from the paged cache in tiles of whole blocks (keys outside the run masked; no row padded to
    another's length); each tile's softmax statistics merged per row by log-sum-exp (a pair two segments
    see counts twice, as on the per-sequence path). Tiles are read in slabs of at most :data:`SLAB_BYTES`,
    so a layer's transient memory stays bounded at any batch and length. Built once per pass, run by every
    patched layer (:meth:`attend`): about ten PyTorch calls per slab, five to merge. A batch whose rows each
    see one causal run of their keys (a plan of one segment) runs the engine's own kernel instead, where one
    is given (``kernel``) and reads the cache's key layout; ``triton``: the tiles on the Triton kernel where
    it takes the cache (the ``paged-triton`` decode, ``kernels/choice.py``), else on PyTorch."""

    def __init__(
        self,
        steps: list[SegmentStep],
        slots: torch.Tensor,
        tables: torch.Tensor,
        kernel: EngineKernel | None = None,
        triton: bool = False,
    ) -> None:
        """``steps``: each row's :meth:`AttentionPlan.segment_step`; ``slots`` [rows]: where each row's new
        token goes; ``tables`` [rows, blocks]: each row's block table; ``kernel``: the engine's own paged
        attention, run instead of the tiles when every row sees one causal run of its keys from the first."""
        if not steps or len({decode_shape(s) for s in steps}) != 1:
            raise ValueError("a paged decode needs steps of one shape")
        # the engine kernel's call for these rows, with the part and key copy it attends (one causal run)
        self.engine: tuple[EngineRows, int, int] | None = None
        if kernel is not None and (one_part := _one_causal_part(steps)) is not None:
            part, copy = one_part
            self.engine = (kernel.rows([s.ranges[part][1] for s in steps], tables), part, copy)
        self.rows, self.slots, self.device = len(steps), slots, tables.device
        self.query_rotation = _stack([s.query_rotation for s in steps])  # [rows or 1, H, D, parts * D]
        self.key_rotation = _stack([s.key_rotation for s in steps])  # [rows or 1, H, D, copies * D]
        self.copies = 1 + max(steps[0].copies)
        parts = len(steps[0].copies)
        # every (row, part) with keys to see: a run of key positions lo..hi-1, by key copy
        self.runs = sorted(
            (copy, row, row * parts + part, lo, hi)
            for row, step in enumerate(steps)
            for part, (copy, (lo, hi)) in enumerate(zip(step.copies, step.ranges, strict=True))
            if hi > lo
        )
        self.tables = tables.cpu()
        self.triton = triton
        self._where: tuple | None = None
        self._scaled: dict[float, torch.Tensor] = {}

    def _tiles(self, block: int, bytes_per_key: int) -> tuple:
        """Each run cut into tiles of whole ``block``-token blocks: the tiles' cache blocks [tiles, blocks
        per tile], additive masks [1, tiles, 1, keys per tile], rows, queries, first positions and runs'
        bounds, and the slabs (key copy, first tile, end tile). Computed at the first layer, once per pass."""
        per_tile = max(1, KEY_TILE // block)
        copy, row, query, lo, hi = (torch.tensor(column) for column in zip(*self.runs, strict=True))
        first_block = lo // block
        tiles = ((hi - 1) // block - first_block) // per_tile + 1
        run = torch.repeat_interleave(torch.arange(len(self.runs)), tiles)
        index_in_run = torch.arange(len(run)) - (torch.cumsum(tiles, 0) - tiles)[run]
        block_index = (first_block[run] + index_in_run * per_tile)[:, None] + torch.arange(per_tile)
        position = block_index[:, :, None] * block + torch.arange(block)  # [tiles, per tile, block]
        inside = ((position >= lo[run][:, None, None]) & (position < hi[run][:, None, None])).flatten(1)
        width = self.tables.shape[1]  # blocks past a row's table are read as its last one, masked
        blocks = self.tables[row[run][:, None], block_index.clamp(max=width - 1)]
        mask = torch.where(inside, 0.0, float("-inf"))[None, :, None, :]
        per_slab = max(1, SLAB_BYTES // (per_tile * block * bytes_per_key))
        counts = torch.bincount(copy[run], minlength=self.copies).tolist()  # tiles are sorted by copy
        slabs, at = [], 0
        for key_copy, count in enumerate(counts):
            slabs += [(key_copy, a, min(a + per_slab, at + count)) for a in range(at, at + count, per_slab)]
            at += count
        start = block_index[:, 0] * block
        moved = (blocks, mask, row[run], query[run], start, lo[run], hi[run])
        return (*(t.to(self.device) for t in moved), slabs, counts)

    def attend(
        self,
        cache: PagedCache,
        scale: float,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        softcap: float | None = None,
    ) -> torch.Tensor:
        """The rows' un-rotated ``query`` [rows, Hq, D], ``key`` and ``value`` [rows, Hkv, D]: store the new
        keys (rotated at every copy) and values, attend; returns [rows, Hq, D]. ``softcap``: logits
        soft-capped as ``softcap * tanh(logit / softcap)`` (Gemma 2)."""
        rows, q_heads, dim = query.shape
        kv_heads = key.shape[1]
        group = q_heads // kv_heads
        rotated = _rotate(key, self.key_rotation).view(rows, kv_heads, -1, dim)
        cache.write(self.slots, [rotated[:, :, c] for c in range(self.copies)], value)
        if scale not in self._scaled:  # the softmax scale folded into the rotation, once per pass
            self._scaled[scale] = self.query_rotation * scale
        if self.engine is not None and cache.key_columns:
            attend, part, copy = self.engine
            queries = _rotate(query, self._scaled[scale]).view(rows, q_heads, -1, dim)[:, :, part]
            return attend(queries, cache.key_plane(copy), cache.values, softcap)
        if self._where is None:
            self._where = self._tiles(cache.block_size, 2 * kv_heads * dim * 4)
        tile_row = self._where[2]
        queries = _rotate(query, self._scaled[scale]).view(rows, kv_heads, group, -1, dim)
        queries = queries.permute(1, 0, 3, 2, 4).reshape(kv_heads, -1, group, dim).float().contiguous()
        peaks, sums, outs = self._tile_statistics(cache, queries, softcap)  # queries: [Hkv, runs, group, D]
        index = tile_row[None, :, None].expand_as(peaks)
        peak = peaks.new_full((kv_heads, rows, group), float("-inf")).scatter_reduce_(
            1, index, peaks, "amax", include_self=True
        )
        factor = torch.exp(peaks - peak[:, tile_row])
        total = peaks.new_zeros((kv_heads, rows, group)).index_add_(1, tile_row, sums * factor)
        out = outs.new_zeros((kv_heads, rows, group, dim)).index_add_(1, tile_row, outs * factor[..., None])
        return (out / total[..., None]).transpose(0, 1).reshape(rows, q_heads, dim).to(query.dtype)

    def _tile_statistics(
        self, cache: PagedCache, queries: torch.Tensor, softcap: float | None
    ) -> tuple[torch.Tensor, ...]:
        """Each tile's softmax peak and sum [Hkv, tiles, group] and weighted values [Hkv, tiles, group, D]:
        one Triton kernel per key copy where it runs (``paged_triton.py``; no soft cap), else gathered
        slabs."""
        kv_heads, _, group, dim = queries.shape
        assert self._where is not None, "attend() computes the tiles first"
        blocks, mask, _, tile_query, start, lo, hi, slabs, counts = self._where
        peaks = queries.new_empty((kv_heads, blocks.shape[0], group))
        sums, outs = torch.empty_like(peaks), queries.new_empty((*peaks.shape, dim))
        keys_per_tile = blocks.shape[1] * cache.block_size
        if (
            self.triton
            and not softcap
            and not cache.key_columns
            and paged_triton.takes(cache.block_size, keys_per_tile, dim)
        ):
            ends = list(itertools.accumulate(counts))  # the copies' tile ranges (tiles are sorted by copy)
            for copy, (a, b) in enumerate(zip([0, *ends], ends, strict=False)):
                if b > a:
                    tiles = tuple(t[a:b] for t in (blocks, tile_query, start, lo, hi))
                    paged_triton.tile_statistics(
                        queries, cache.key_plane(copy), cache.values, tiles, a, (peaks, sums, outs)
                    )
            return peaks, sums, outs
        for copy, a, b in slabs:  # a slab's keys [tiles, Hkv, D, keys per tile] and values (keys as rows)
            keys, values = (
                _read_tiles(cache.keys[copy], blocks[a:b], 3),
                _read_tiles(cache.values, blocks[a:b], 2),
            )
            tile_queries = queries[:, tile_query[a:b]].transpose(0, 1)  # [tiles, Hkv, group, D]
            scores = tile_queries @ keys  # [tiles, Hkv, group, keys per tile]
            if softcap:
                scores = softcap * torch.tanh(scores / softcap)
            scores = scores + mask[0, a:b, None]
            peak = scores.amax(-1)
            weights = torch.exp(scores - peak[..., None])
            peaks[:, a:b] = peak.transpose(0, 1)
            sums[:, a:b] = weights.sum(-1).transpose(0, 1)
            outs[:, a:b] = (weights @ values).transpose(0, 1)
        return peaks, sums, outs


def _read_tiles(plane: torch.Tensor, blocks: torch.Tensor, along: int) -> torch.Tensor:
    """Tiles of whole cache blocks ``blocks`` [tiles, blocks per tile] of a plane [cache blocks, heads, ., .]
    whose block's tokens lie along dim ``along`` (2: values, 3: keys as columns), in fp32: [tiles, heads, .,
    .], a tile's blocks side by side along ``along``. Read by ``index_select`` along the cache blocks (one
    contiguous run per block and head: 4x faster on this CPU than indexing a heads-first view)."""
    tiles, per_tile = blocks.shape
    read = torch.index_select(plane, 0, blocks.reshape(-1))  # [tiles * per tile, heads, ., .]
    if per_tile > 1:
        read = read.unflatten(0, (tiles, per_tile)).movedim(1, along)  # the tile's blocks beside the tokens
        read = read.flatten(along, along + 1)
    return read.float()


def _one_causal_part(steps: list[SegmentStep]) -> tuple[int, int] | None:
    """The part and key copy through which every row sees all its visible keys, when that is one causal run
    from its first key in the same part for every row (the engine's own kernel then attends them), else
    None."""
    seen = set()
    for step in steps:
        visible = [p for p, (lo, hi) in enumerate(step.ranges) if hi > lo]
        if len(visible) != 1 or step.ranges[visible[0]][0] != 0:
            return None
        seen.add((visible[0], step.copies[visible[0]]))
    return seen.pop() if len(seen) == 1 else None


def decode_shape(step: SegmentStep) -> tuple:
    """What rows must share to decode in one batch: the parts' key copies and the rotations' shapes."""
    return (step.copies, tuple(step.query_rotation.shape), tuple(step.key_rotation.shape))


def _rotate(x: torch.Tensor, rotation: torch.Tensor) -> torch.Tensor:
    """``x`` [rows, H, D] times ``rotation`` [rows or 1, H or 1, D, X]: [rows, H, X], in one GEMM when
    the rotation is shared (a broadcast matmul would copy it per row and head)."""
    rows, heads, dim = x.shape
    if rotation.shape[1] == 1:
        if rotation.shape[0] == 1:
            return (x.reshape(rows * heads, dim) @ rotation[0, 0]).view(rows, heads, -1)
        return torch.bmm(x, rotation[:, 0])
    return (x[:, :, None, :] @ rotation)[:, :, 0]  # per head (Ms-PoE)


def _stack(matrices: list[torch.Tensor]) -> torch.Tensor:
    """[rows, H, D, X]; one shared [1, H, D, X] when every row has the same matrix object (one plan)."""
    if all(m is matrices[0] for m in matrices):
        return matrices[0][None]
    return torch.stack(matrices)
