"""Exact multi-segment attention in O(L) memory.

Keys are rotated once per distinct key-position map (segments that share one, like LaMPE's head and tail
or DCA's three chunk relations, share one rotated copy), queries once per segment. A prefill is compiled
once per plan, length and kind of kernel into a few dense kernel calls (``tiles.py``: one FlashAttention
call per band, a handful on the CPU kernel), each returning its softmax log-sum-exp (LSE), and runs without
reading any tensor back on the host. Partial results are merged exactly: ``out = sum_p exp(lse_p - lse) *
out_p`` with ``lse = logsumexp_p lse_p`` (segments may overlap: the merge counts a pair once per segment
covering it).

RoPE's factor on cos and sin (``rope_scaling``: the model's attention scaling, YaRN's temperature, DCA's
length-dependent factor) scales every logit by its square; it is applied to the query side only, so
rotated keys do not depend on it and a KV cache can keep them across decoding steps
(:func:`attend_rotated`, used by ``backends/hf/patch.py``). A factor that belongs to a key (``key_scale``, per
absolute key index: official DCA's cos/sin factor of the step that cached the key) is rotated into it.

Positions: a segment's maps return [n] (one position per token), or [H, n, F] (F = rotary_dim / 2: a
position per frequency, as DPE's dimension groups; H = 1, or one per head, as Ms-PoE's per-head scales,
query heads for ``q_pos`` and key heads for ``k_pos``); tables are then [H, n, D] and broadcast over heads.

Kernels (``kernels/``): the caller passes the prefill kernel its engine chose (``kernels.select``:
FlashAttention-2 or cuDNN on CUDA, the CPU flash kernel on CPU, an exact blockwise matmul path elsewhere);
a call without one uses this process's choice for the query's device and dtype.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from . import kernels
from .regions import PositionMap, Segment
from .rope import rope_cos_sin, rotate_half
from .tile_run import merge_into, run_tile
from .tiles import Tile, tiles

DEFAULT_BLOCK = 1024  # query rows per call on the portable (score-materialising) path
NEG_INF = float("-inf")
_MAX_CACHED = 64  # cached tables and compiled calls per plan (stay bounded when a plan serves many steps)


@dataclass(frozen=True)
class Prefill:
    """A multi-query call compiled (:meth:`AttentionPlan.prefill`): its kernel calls, the query rows each
    segment rotates, the keys each key copy rotates (merged ranges, absolute)."""

    tiles: tuple[Tile, ...]
    rows: dict[int, tuple[int, int]]  # segment -> (first row, end row), relative to the call
    keys: tuple[tuple[tuple[int, int], ...], ...]  # per key copy


@dataclass
class AttentionPlan:
    """Everything the engine needs for one attention call of a patched layer."""

    segments: list[Segment]
    inv_freq: torch.Tensor
    rope_scaling: float = 1.0  # multiplies cos and sin (so logits by its square)
    query_scale: Callable[[torch.Tensor], torch.Tensor] | None = None  # per absolute query index
    key_scale: Callable[[torch.Tensor], torch.Tensor] | None = None  # per absolute key index, in the key
    # cos/sin tables, compiled calls, rotation matrices: a plan serves every layer of a forward pass (with
    # fixed frequencies, a whole generation), so each is computed once, not once per layer
    _cache: dict[tuple, Any] = field(default_factory=dict, repr=False)
    _groups: tuple[list[int], list[int]] | None = field(default=None, repr=False)

    def _memo(self, key: tuple, make: Callable[[], Any]) -> Any:
        if key not in self._cache:
            if len(self._cache) > _MAX_CACHED:
                self._cache.clear()
            self._cache[key] = make()
        return self._cache[key]

    def key_groups(self) -> tuple[list[int], list[int]]:
        """(for each segment, the index of its rotated key copy; for each copy, its first segment).
        Segments share a copy when they share the key map object (``Segment.k_pos``)."""
        if self._groups is None:
            maps: list[object] = []
            copy_of: list[int] = []
            for segment in self.segments:
                found = next((c for c, m in enumerate(maps) if m is segment.k_pos), None)
                if found is None:
                    maps.append(segment.k_pos)
                    found = len(maps) - 1
                copy_of.append(found)
            self._groups = (copy_of, [copy_of.index(c) for c in range(len(maps))])
        return self._groups

    def for_heads(self, query_heads: slice, key_heads: slice) -> AttentionPlan:
        """This plan for a shard of the heads (a tensor-parallel rank's): per-head positions ([H, n, F],
        Ms-PoE's) cut to ``query_heads`` and ``key_heads``; positions shared by every head are kept. Segments
        that shared a key map still share one (one key copy)."""
        shards: dict[tuple[int, str], PositionMap] = {}

        def shard(positions: PositionMap, heads: slice) -> PositionMap:
            key = (id(positions), str(heads))
            if key not in shards:
                shards[key] = _head_shard(positions, heads)
            return shards[key]

        segments = [
            dataclasses.replace(s, q_pos=shard(s.q_pos, query_heads), k_pos=shard(s.k_pos, key_heads))
            for s in self.segments
        ]
        return dataclasses.replace(self, segments=segments, _cache={}, _groups=None)

    def key_table(self, copy: int, first: int, end: int, dtype: torch.dtype, device: torch.device):
        """cos/sin [end-first, D] rotating keys ``first..end-1`` at key copy ``copy``'s positions (no
        ``rope_scaling``: it is on the query side; times ``key_scale`` when the plan has one)."""

        def make() -> tuple[torch.Tensor, torch.Tensor]:
            segment = self.segments[self.key_groups()[1][copy]]
            idx = torch.arange(first, end, device=device)
            if self.key_scale is None:
                return rope_cos_sin(segment.k_pos(idx), self.inv_freq, 1.0, dtype)
            cos, sin = rope_cos_sin(segment.k_pos(idx), self.inv_freq, 1.0, torch.float32)
            factor = self.key_scale(idx).to(device=device, dtype=torch.float32)[:, None]
            return (cos * factor).to(dtype), (sin * factor).to(dtype)

        return self._memo(("k", copy, first, end, dtype, device), make)

    def query_table(self, segment: int, first: int, end: int, dtype: torch.dtype, device: torch.device):
        """cos/sin [end-first, D] rotating queries ``first..end-1`` at the segment's positions, times
        ``rope_scaling`` squared and the per-query ``query_scale``."""

        def make() -> tuple[torch.Tensor, torch.Tensor]:
            idx = torch.arange(first, end, device=device)
            positions = self.segments[segment].q_pos(idx)
            cos, sin = rope_cos_sin(positions, self.inv_freq, self.rope_scaling**2, torch.float32)
            if self.query_scale is not None:
                factor = self.query_scale(idx).to(device=device, dtype=torch.float32)[:, None]
                cos, sin = cos * factor, sin * factor
            return cos.to(dtype), sin.to(dtype)

        return self._memo(("q", segment, first, end, dtype, device), make)

    def rotate_keys(self, key: torch.Tensor, first: int) -> list[torch.Tensor]:
        """Un-rotated keys ``first..`` [B, Hkv, n, D] rotated at every key copy's positions (one per copy)."""
        n, dim = key.shape[2], key.shape[3]
        copies = range(len(self.key_groups()[1]))
        if n == 1:  # a decode step: one matmul rotates the key for every copy at once
            rotated = key @ self.decode_step(first, key.dtype, key.device).key_rotation
            return [rotated[..., c * dim : (c + 1) * dim] for c in copies]
        return [apply_table(key, *self.key_table(c, first, first + n, key.dtype, key.device)) for c in copies]

    def decode_step(self, q_start: int, dtype: torch.dtype, device: torch.device) -> DecodeStep:
        """Everything a single-query call at ``q_start`` needs, computed once for all layers."""

        def make() -> DecodeStep:
            copy_of = self.key_groups()[0]
            parts = [
                (index, copy_of[index], *segment.region.interval(q_start))
                for index, segment in enumerate(self.segments)
            ]
            parts = [part for part in parts if part[3] > part[2]]
            queries, keys = self._step_rotations([part[0] for part in parts], q_start, device)
            return DecodeStep(queries.to(dtype), keys.to(dtype), [part[1:] for part in parts])

        return self._memo(("decode", q_start, dtype, device), make)

    def segment_step(self, q_start: int, dtype: torch.dtype, device: torch.device) -> SegmentStep:
        """A single-query call at ``q_start`` with *every* segment, visible or not (an empty one gets an
        empty key range), ordered by key copy: the same shape for every sequence a method plans, so
        a batched decode can run many sequences' decode steps as one batch."""

        def make() -> SegmentStep:
            copy_of = self.key_groups()[0]
            order = sorted(range(len(self.segments)), key=lambda s: copy_of[s])
            queries, keys = self._step_rotations(order, q_start, device)
            return SegmentStep(
                _heads_first(queries).to(dtype),
                _heads_first(keys).to(dtype),
                tuple(copy_of[s] for s in order),
                tuple(self.segments[s].region.interval(q_start) for s in order),
            )

        return self._memo(("segments", q_start, dtype, device), make)

    def _step_rotations(
        self, segments: list[int], q_start: int, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """fp32 rotation matrices of the query at ``q_start``, one block per segment of ``segments``, and
        of the key at ``q_start``, one block per key copy (:func:`side_by_side`)."""
        queries = [
            rotation_matrix(*self.query_table(s, q_start, q_start + 1, torch.float32, device))
            for s in segments
        ]
        keys = [
            rotation_matrix(*self.key_table(c, q_start, q_start + 1, torch.float32, device))
            for c in range(len(self.key_groups()[1]))
        ]
        return side_by_side(queries), side_by_side(keys)

    def rotate(self, x: torch.Tensor, segment: int, side: str, first: int, end: int) -> torch.Tensor:
        """Rotate rows ``first..end-1`` (absolute indices), held in ``x`` [..., end-first, D], at the
        segment's query (``side="q"``) or key (``side="k"``) positions, cos and sin times
        ``rope_scaling`` (the engine itself puts the whole factor on the query side)."""

        def make() -> tuple[torch.Tensor, torch.Tensor]:
            idx = torch.arange(first, end, device=x.device)
            seg = self.segments[segment]
            positions = seg.q_pos(idx) if side == "q" else seg.k_pos(idx)
            return rope_cos_sin(positions, self.inv_freq, self.rope_scaling, x.dtype)

        return apply_table(x, *self._memo((segment, side, first, end, x.dtype, x.device), make))

    def prefill(self, q_start: int, n: int, flash: bool) -> Prefill:
        """Queries ``q_start..q_start+n-1`` compiled into kernel calls (``flash``: for a FlashAttention
        backend, else for the CPU kernel), once per plan."""

        def make() -> Prefill:
            found = [tiles(s.region, i, q_start, n, flash) for i, s in enumerate(self.segments)]
            every = tuple(t for ts in found for t in ts)
            copy_of, firsts = self.key_groups()
            rows = {i: (ts[0].r0, max(t.row_end for t in ts)) for i, ts in enumerate(found) if ts}
            keys = tuple(
                tuple(_union(sorted((t.k0, t.key_end) for t in every if copy_of[t.segment] == c)))
                for c in range(len(firsts))
            )
            return Prefill(every, rows, keys)

        return self._memo(("prefill", q_start, n, flash), make)

    def reach(self, query: int) -> list[int]:
        """For each key copy, the smallest key index any query from ``query`` on can still see through
        it (regions' starts are non-decreasing): keys below it are never read again."""

        def make() -> list[int]:
            copy_of, first = self.key_groups()
            reach = [query] * len(first)
            for index, segment in enumerate(self.segments):
                start = segment.region.interval(query)[0]
                reach[copy_of[index]] = min(reach[copy_of[index]], start)
            return reach

        return self._memo(("reach", query), make)


def apply_table(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE rotation of ``x`` [..., n, D] with a cos/sin table [n, D]."""
    return x * cos + rotate_half(x) * sin


def rotation_matrix(cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """[D, D] matrix M of one row of a cos/sin table: ``x @ M`` is x rotated (rotation is linear in x)."""
    return apply_table(torch.eye(cos.shape[-1], dtype=cos.dtype, device=cos.device), cos, sin)


def side_by_side(matrices: list[torch.Tensor]) -> torch.Tensor:
    """[..., D, D] rotation matrices concatenated along the last dimension, shared ones ([D, D]) broadcast
    to the per-head ones ([H, D, D])."""
    lead = torch.broadcast_shapes(*(m.shape[:-2] for m in matrices))
    return torch.cat([m.expand(*lead, *m.shape[-2:]) for m in matrices], dim=-1)


@dataclass(frozen=True)
class DecodeStep:
    """A single-query call: rotation matrices side by side, one [D, D] block per visible segment
    (query side, cos/sin factor and query scale included) and per key copy; each visible segment's key
    copy and key range."""

    query_rotation: torch.Tensor  # [D, segments * D]
    key_rotation: torch.Tensor  # [D, copies * D]
    parts: list[tuple[int, int, int]]  # (copy, key_lo, key_hi)


@dataclass(frozen=True)
class SegmentStep:
    """A single-query call over every segment (:meth:`AttentionPlan.segment_step`): rotation matrices
    [H, D, parts * D] (queries: cos/sin factor and query scale included) and [H, D, copies * D] (keys),
    H = 1 unless positions are per head; each part's key copy (non-decreasing) and key range."""

    query_rotation: torch.Tensor
    key_rotation: torch.Tensor
    copies: tuple[int, ...]
    ranges: tuple[tuple[int, int], ...]  # (first key, stop) per part; first == stop: nothing visible


def _head_shard(positions: PositionMap, heads: slice) -> PositionMap:
    """``positions`` with its per-head rows ([H, n, F], H > 1) cut to ``heads``; others as they are."""

    def shard(idx: torch.Tensor) -> torch.Tensor:
        found = positions(idx)
        return found[heads] if found.dim() == 3 and found.shape[0] > 1 else found

    return shard


def _heads_first(matrices: torch.Tensor) -> torch.Tensor:
    """[D, X] or [H, D, X] rotation matrices as [H, D, X] (H = 1 when shared by every head)."""
    return matrices.reshape(-1, *matrices.shape[-2:])


KeyCopy = tuple[torch.Tensor, int]  # rotated keys [B, Hkv, len, D] and the absolute index of their first row


def segmented_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    plan: AttentionPlan,
    q_start: int,
    scale: float,
    block: int = DEFAULT_BLOCK,
    softcap: float | None = None,
    kernel: str | None = None,
) -> torch.Tensor:
    """Attention of un-rotated ``query`` [B, Hq, n, D] (absolute indices ``q_start + r``) over
    un-rotated ``key``/``value`` [B, Hkv, kv, D] (indices 0..kv-1), following ``plan``; ``softcap``: logits
    soft-capped as ``softcap * tanh(logit / softcap)`` (Gemma 2); ``kernel``: the prefill kernel
    (``kernels.PREFILL_KERNELS``; None: this process's choice). Returns [B, Hq, n, D] in the query dtype."""
    n = query.shape[2]
    kernel = kernel or kernels.layer_choice(query, softcap).prefill
    if n == 1:
        parts = plan.decode_step(q_start, query.dtype, query.device).parts
        needed = [[(lo, hi) for c, lo, hi in parts if c == copy] for copy in range(len(plan.key_groups()[1]))]
    else:
        flash = _takes_flash_tiles(kernel)
        needed = [list(r) for r in plan.prefill(q_start, n, flash).keys]
    copies: list[KeyCopy] = []
    for copy, wanted in enumerate(needed):
        ranges = _union(sorted(wanted))
        if not ranges:
            copies.append((key[:, :, :0], 0))
            continue
        lo, hi = ranges[0][0], ranges[-1][1]
        if len(ranges) == 1:
            rotated = apply_table(key[:, :, lo:hi], *plan.key_table(copy, lo, hi, key.dtype, key.device))
        else:  # keys between the ranges (e.g. between LaMPE's head and tail) are never read: left unset
            rotated = key.new_empty((*key.shape[:2], hi - lo, key.shape[3]))
            for a, b in ranges:
                table = plan.key_table(copy, a, b, key.dtype, key.device)
                rotated[:, :, a - lo : b - lo] = apply_table(key[:, :, a:b], *table)
        copies.append((rotated, lo))
    return attend_rotated(query, copies, value, plan, q_start, scale, block, softcap, kernel)


def _takes_flash_tiles(kernel: str) -> bool:
    """Whether ``kernel`` takes FlashAttention's tiles (windows, rectangular causal): every kernel but
    the CPU one (the portable path cuts any tile into masked blocks)."""
    return kernel != "cpu"


def _union(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted half-open ranges merged where they touch or overlap."""
    merged: list[tuple[int, int]] = []
    for lo, hi in ranges:
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def attend_rotated(
    query: torch.Tensor,
    keys: Sequence[KeyCopy],
    value: torch.Tensor,
    plan: AttentionPlan,
    q_start: int,
    scale: float,
    block: int = DEFAULT_BLOCK,
    softcap: float | None = None,
    kernel: str | None = None,
) -> torch.Tensor:
    """Attention of un-rotated ``query`` [B, Hq, n, D] over keys already rotated, one copy per key map
    (``plan.key_groups()``; rotated without ``rope_scaling``), and ``value`` [B, Hkv, kv, D].
    Each copy must hold the keys its segments see in this call; ``kernel`` as :func:`segmented_attention`.
    Returns [B, Hq, n, D] in the query dtype."""
    n = query.shape[2]
    kernel = kernel or kernels.layer_choice(query, softcap).prefill
    if n == 1:
        return _decode(query, keys, value, plan, q_start, scale, softcap, kernel)
    compiled = plan.prefill(q_start, n, _takes_flash_tiles(kernel))
    copy_of = plan.key_groups()[0]
    acc: tuple[torch.Tensor, torch.Tensor] | None = None
    segment, rotated, r0 = -1, query, 0
    for tile in compiled.tiles:  # tiles come segment by segment: one rotated query block alive at a time
        if tile.segment != segment:
            segment, (r0, r1) = tile.segment, compiled.rows[tile.segment]
            table = plan.query_table(segment, q_start + r0, q_start + r1, query.dtype, query.device)
            rotated = apply_table(query[:, :, r0:r1], *table)
        q = rotated[:, :, tile.r0 - r0 : tile.row_end - r0]
        copy, first = keys[copy_of[tile.segment]]
        k = copy[:, :, tile.k0 - first : tile.key_end - first]
        v = value[:, :, tile.k0 : tile.key_end]
        out, lse = run_tile(tile, q, k, v, scale, kernel, block, softcap)
        if acc is None and tile.r0 == 0 and tile.row_end == n:
            acc = (out, lse)  # the first tile covering every row starts the sums (no merge)
            continue
        if acc is None:
            acc = (
                torch.zeros(query.shape, dtype=torch.float32, device=query.device),
                torch.full(query.shape[:3], NEG_INF, dtype=torch.float32, device=query.device),
            )
        merge_into(acc[0][:, :, tile.r0 : tile.row_end], acc[1][:, :, tile.r0 : tile.row_end], out, lse)
    if acc is None:
        return torch.zeros_like(query)
    return acc[0].to(query.dtype)


def _decode(
    query: torch.Tensor,
    keys: Sequence[KeyCopy],
    value: torch.Tensor,
    plan: AttentionPlan,
    q_start: int,
    scale: float,
    softcap: float | None,
    kernel: str,
) -> torch.Tensor:
    """One query: one matmul rotates it for every segment, one kernel call per segment, one merge."""
    step = plan.decode_step(q_start, query.dtype, query.device)
    rotated = query @ step.query_rotation
    dim = query.shape[3]
    outs, lses = [], []
    for index, (copy, lo, hi) in enumerate(step.parts):
        k, first = keys[copy]
        q = rotated[..., index * dim : (index + 1) * dim]
        k_part, v_part = k[:, :, lo - first : hi - first], value[:, :, lo:hi]
        if softcap:
            out, lse = kernels.attend_math(q, k_part, v_part, scale, "full", None, softcap)
        else:
            out, lse = kernels.run_piece(q, k_part, v_part, scale, "full", None, kernel)
        outs.append(out)
        lses.append(lse)
    if len(outs) == 1:
        return outs[0].to(query.dtype)
    # every part has at least one key, so each lse is finite
    weights = torch.softmax(torch.stack(lses), dim=0)
    return (torch.stack(outs) * weights[..., None]).sum(dim=0).to(query.dtype)
