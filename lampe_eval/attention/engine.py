"""Exact multi-segment attention in O(L) memory.

Keys are rotated once per distinct key-position map (segments that share one, like LaMPE's head and tail
or DCA's three chunk relations, share one rotated copy), queries once per segment. Each segment then
attends each block of its queries to its visible keys in up to three pieces (an unmasked rectangle, a
causal triangle, thin masked edges) with a kernel that also returns the softmax log-sum-exp (LSE).
Partial results are merged exactly: ``out = sum_p exp(lse_p - lse) * out_p`` with
``lse = logsumexp_p lse_p`` (segments may overlap: the merge counts a pair once per segment covering it).

RoPE's factor on cos and sin (``rope_scaling``: the model's attention scaling, YaRN's temperature, DCA's
length-dependent factor) scales every logit by its square; it is applied to the query side only, so
rotated keys do not depend on it and a KV cache can keep them across decoding steps
(:func:`attend_rotated`, used by ``backends/hf_patch.py``). A factor that belongs to a key (``key_scale``, per
absolute key index: official DCA's cos/sin factor of the step that cached the key) is rotated into it.

Positions: a segment's maps return [n] (one position per token), or [H, n, F] (F = rotary_dim / 2: a
position per frequency, as DPE's dimension groups; H = 1, or one per head, as Ms-PoE's per-head scales,
query heads for ``q_pos`` and key heads for ``k_pos``); tables are then [H, n, D] and broadcast over heads.

Kernels (``kernels.py``): FlashAttention-2 on CUDA (the flash-attn wheel or PyTorch's copy), the CPU
flash kernel on CPU, an exact blockwise matmul path elsewhere or when ``LAMPE_EVAL_KERNEL=portable``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from . import kernels
from .regions import Segment
from .rope import rope_cos_sin, rotate_half

DEFAULT_BLOCK = 1024
SINGLE_MASK_KEYS = 1024  # a block whose keys span at most this is attended in one masked call
PORTABLE_MAX_KEYS = 8192  # widest key slice per call on the portable (score-materialising) path
FORCE_PORTABLE = False  # tests flip this to check the portable path on CPU (or LAMPE_EVAL_KERNEL)
NEG_INF = float("-inf")
_MAX_CACHED = 64  # cached tables and schedules per plan (stay bounded when a plan serves many steps)


@dataclass(frozen=True)
class SegmentPart:
    """What one segment covers in one attention call: query rows ``r0..r1-1`` (relative to the call's
    first query), each seeing keys ``[starts[r], stops[r])`` (absolute indices), all within
    ``[key_lo, key_hi)``."""

    segment: int
    copy: int  # which rotated key copy (distinct key map) the segment reads
    r0: int
    r1: int
    starts: torch.Tensor
    stops: torch.Tensor
    key_lo: int
    key_hi: int
    breaks: list[int]  # rows (relative to r0) where the region's start may jump
    block: int


@dataclass
class AttentionPlan:
    """Everything the engine needs for one attention call of a patched layer."""

    segments: list[Segment]
    inv_freq: torch.Tensor
    rope_scaling: float = 1.0  # multiplies cos and sin (so logits by its square)
    query_scale: Callable[[torch.Tensor], torch.Tensor] | None = None  # per absolute query index
    key_scale: Callable[[torch.Tensor], torch.Tensor] | None = None  # per absolute key index, in the key
    # cos/sin tables, schedules, rotation matrices: a plan serves every layer of a forward pass (with
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
            parts = self.schedule(q_start, 1, DEFAULT_BLOCK, device)
            queries, keys = self._step_rotations([p.segment for p in parts], q_start, device)
            return DecodeStep(
                queries.to(dtype), keys.to(dtype), [(p.copy, p.key_lo, p.key_hi) for p in parts]
            )

        return self._memo(("decode", q_start, dtype, device), make)

    def segment_step(self, q_start: int, dtype: torch.dtype, device: torch.device) -> SegmentStep:
        """A single-query call at ``q_start`` with *every* segment, visible or not (an empty one gets an
        empty key range), ordered by key copy: the same shape for every sequence a method plans, so
        a batched decode can run many sequences' decode steps as one batch."""

        def make() -> SegmentStep:
            copy_of = self.key_groups()[0]
            order = sorted(range(len(self.segments)), key=lambda s: copy_of[s])
            at = torch.tensor([q_start], device=device)
            bounds = [self.segments[s].region.bounds(at) for s in order]
            queries, keys = self._step_rotations(order, q_start, device)
            return SegmentStep(
                _heads_first(queries).to(dtype),
                _heads_first(keys).to(dtype),
                tuple(copy_of[s] for s in order),
                tuple((int(start[0]), int(stop[0])) for start, stop in bounds),
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

    def schedule(self, q_start: int, n: int, block: int, device: torch.device) -> list[SegmentPart]:
        """The non-empty part of every segment for queries ``q_start..q_start+n-1``."""

        def make() -> list[SegmentPart]:
            copy_of = self.key_groups()[0]
            q_idx = torch.arange(q_start, q_start + n, device=device)
            parts = []
            for index, segment in enumerate(self.segments):
                starts, stops = segment.region.bounds(q_idx)
                rows = (stops > starts).nonzero()
                if rows.numel() == 0:
                    continue
                # only the rows and keys this segment touches are rotated and attended
                r0, r1 = int(rows[0, 0]), int(rows[-1, 0]) + 1
                starts, stops = starts[r0:r1], stops[r0:r1]
                first_row = q_start + r0
                breaks = [b - first_row for b in segment.region.breakpoints(first_row, q_start + r1)]
                keys = (int(starts.min()), int(stops.max()))
                rows_per_block = segment.region.block_size(block)
                parts.append(
                    SegmentPart(index, copy_of[index], r0, r1, starts, stops, *keys, breaks, rows_per_block)
                )
            return parts

        return self._memo(("schedule", q_start, n, block, device), make)

    def reach(self, query: int) -> list[int]:
        """For each key copy, the smallest key index any query from ``query`` on can still see through
        it (regions' starts are non-decreasing): keys below it are never read again."""

        def make() -> list[int]:
            copy_of, first = self.key_groups()
            reach = [query] * len(first)
            at = torch.tensor([query])
            for index, segment in enumerate(self.segments):
                start = int(segment.region.bounds(at)[0][0])
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
) -> torch.Tensor:
    """Attention of un-rotated ``query`` [B, Hq, n, D] (absolute indices ``q_start + r``) over
    un-rotated ``key``/``value`` [B, Hkv, kv, D] (indices 0..kv-1), following ``plan``.
    Returns [B, Hq, n, D] in the query dtype."""
    parts = plan.schedule(q_start, query.shape[2], block, query.device)
    copies: list[KeyCopy] = []
    for copy in range(len(plan.key_groups()[1])):
        ranges = _union(sorted((p.key_lo, p.key_hi) for p in parts if p.copy == copy))
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
    return attend_rotated(query, copies, value, plan, q_start, scale, block)


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
) -> torch.Tensor:
    """Attention of un-rotated ``query`` [B, Hq, n, D] over keys already rotated, one copy per key map
    (``plan.key_groups()``; rotated without ``rope_scaling``), and ``value`` [B, Hkv, kv, D].
    Each copy must hold the keys its segments see in this call. Returns [B, Hq, n, D] in the query dtype."""
    n = query.shape[2]
    if n == 1:
        return _decode(query, keys, value, plan, q_start, scale)
    acc: tuple[torch.Tensor, torch.Tensor] | None = None
    for part in plan.schedule(q_start, n, block, query.device):
        table = plan.query_table(
            part.segment, q_start + part.r0, q_start + part.r1, query.dtype, query.device
        )
        q_rot = apply_table(query[:, :, part.r0 : part.r1], *table)
        copy, first = keys[part.copy]
        k = copy[:, :, part.key_lo - first : part.key_hi - first]
        v = value[:, :, part.key_lo : part.key_hi]
        out, lse = interval_attention(
            q_rot, k, v, part.starts - part.key_lo, part.stops - part.key_lo, scale, part.block, part.breaks
        )
        if acc is None and part.r0 == 0 and part.r1 == n:
            acc = (out, lse)  # the first part covering every row starts the sums (no merge)
            continue
        if acc is None:
            acc = (
                torch.zeros(query.shape, dtype=torch.float32, device=query.device),
                torch.full(query.shape[:3], NEG_INF, dtype=torch.float32, device=query.device),
            )
        merge_into(acc[0][:, :, part.r0 : part.r1], acc[1][:, :, part.r0 : part.r1], out, lse)
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
) -> torch.Tensor:
    """One query: one matmul rotates it for every segment, one kernel call per segment, one merge."""
    step = plan.decode_step(q_start, query.dtype, query.device)
    rotated = query @ step.query_rotation
    dim = query.shape[3]
    outs, lses = [], []
    for index, (copy, lo, hi) in enumerate(step.parts):
        k, first = keys[copy]
        q = rotated[..., index * dim : (index + 1) * dim]
        out, lse = _attend(q, k[:, :, lo - first : hi - first], value[:, :, lo:hi], scale, "full", None)
        outs.append(out)
        lses.append(lse)
    if len(outs) == 1:
        return outs[0].to(query.dtype)
    # every part has at least one key, so each lse is finite
    weights = torch.softmax(torch.stack(lses), dim=0)
    return (torch.stack(outs) * weights[..., None]).sum(dim=0).to(query.dtype)


def merge_into(acc_out: torch.Tensor, acc_lse: torch.Tensor, out: torch.Tensor, lse: torch.Tensor) -> None:
    """Exact LSE merge of a partial attention (out, lse) into the accumulators, in place, in fp32."""
    new_lse = torch.logaddexp(acc_lse, lse)
    finite = torch.isfinite(new_lse)
    w_acc = torch.where(finite, torch.exp(acc_lse - new_lse), torch.zeros_like(new_lse))
    w_new = torch.where(finite, torch.exp(lse - new_lse), torch.zeros_like(new_lse))
    acc_out.mul_(w_acc[..., None]).add_(out.float() * w_new[..., None])
    acc_lse.copy_(new_lse)


def _blocks(n: int, block: int, breaks: list[int]) -> Iterator[tuple[int, int]]:
    cuts = sorted({0, n, *range(block, n, block), *(b for b in breaks if 0 < b < n)})
    yield from zip(cuts[:-1], cuts[1:], strict=True)


def interval_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    starts: torch.Tensor,
    stops: torch.Tensor,
    scale: float,
    block: int = DEFAULT_BLOCK,
    breaks: list[int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Row r of ``q`` attends keys ``[starts[r], stops[r])`` (non-decreasing in r). Returns fp32
    (out [B, H, n, D], lse [B, H, n]); rows with no key get out 0 and lse -inf."""
    n = q.shape[2]
    out = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    lse = torch.full(q.shape[:3], NEG_INF, dtype=torch.float32, device=q.device)
    for a, b in _blocks(n, block, breaks or []):
        nonempty = (stops[a:b] > starts[a:b]).nonzero()
        if nonempty.numel() == 0:
            continue
        a = a + int(nonempty[0, 0])  # leading rows with no key keep lse -inf
        s, e = starts[a:b], stops[a:b]
        pieces = _plan_pieces(s, e)
        backend = kernels.backend_for(q, FORCE_PORTABLE)
        if backend == "portable":  # it materialises scores: bound their width
            pieces = _split_wide(pieces, PORTABLE_MAX_KEYS)
        block_out: tuple[torch.Tensor, torch.Tensor] | None = None
        for key_lo, key_hi, kind in pieces:
            mask, width = None, 0
            if kind == "mask" and backend in kernels.FLASH_CALLS:
                width = _band_width(s, e, key_lo, key_hi)
                kind = "window" if width else kind
            if kind == "mask":
                keys = torch.arange(key_lo, key_hi, device=q.device)
                mask = (keys[None, :] >= s[:, None]) & (keys[None, :] < e[:, None])
            piece = (q[:, :, a:b], k[:, :, key_lo:key_hi], v[:, :, key_lo:key_hi])
            o, l_ = _attend(*piece, scale, kind, mask, window=width)
            if block_out is None:
                block_out = (o, l_)
            else:
                merge_into(*block_out, o, l_)
        if block_out is not None:
            out[:, :, a:b], lse[:, :, a:b] = block_out
    return out, lse


def _split_wide(pieces: list[tuple[int, int, str]], width: int) -> list[tuple[int, int, str]]:
    """Cut unmasked rectangles into slices of at most ``width`` keys (merged exactly afterwards)."""
    out: list[tuple[int, int, str]] = []
    for lo, hi, kind in pieces:
        if kind != "full":
            out.append((lo, hi, kind))
            continue
        out.extend((start, min(start + width, hi), kind) for start in range(lo, hi, width))
    return out


def _plan_pieces(s: torch.Tensor, e: torch.Tensor) -> list[tuple[int, int, str]]:
    """Split a block's key range into an unmasked rectangle, causal triangles and masked edges."""
    rows = s.shape[0]
    s_first, s_last, e_first, e_last = int(s[0]), int(s[-1]), int(e[0]), int(e[-1])
    if rows == 1:  # a decode step: one unmasked call
        return [(s_first, e_last, "full")]
    pieces: list[tuple[int, int, str]] = []
    if _unit_slope(e) and e_first >= 1 and s_last <= e_first - 1:
        # Row r sees up to key e_first - 1 + r: a top-left causal square starting at e_first - 1.
        if s_first < s_last:
            # a band's left edge (row r sees from s_first + r): the same square, reversed
            pieces.append((s_first, s_last, "anticausal" if _unit_slope(s) else "mask"))
        if s_last < e_first - 1:
            pieces.append((s_last, e_first - 1, "full"))
        pieces.append((e_first - 1, e_last, "causal"))
    elif s_last <= e_first:
        if s_first < s_last:
            pieces.append((s_first, s_last, "mask"))
        if s_last < e_first:
            pieces.append((s_last, e_first, "full"))
        if e_first < e_last:
            pieces.append((e_first, e_last, "mask"))
    else:
        pieces.append((s_first, e_last, "mask"))
    # a thin block with edges on both sides: one masked call beats three calls and their merges; a plain
    # rectangle + causal triangle is always cheaper unmasked (the kernel skips the triangle's far half)
    simple = len(pieces) <= 2 and all(kind != "mask" for *_, kind in pieces)
    if not simple and e_last - s_first <= SINGLE_MASK_KEYS:
        return [(s_first, e_last, "mask")]
    return pieces


def _band_width(s: torch.Tensor, e: torch.Tensor, key_lo: int, key_hi: int) -> int:
    """w when row r of the piece ``[key_lo, key_hi)`` sees keys ``[max(key_lo, e[r] - w), e[r])`` with
    ``e[r] = key_hi - rows + 1 + r``: a distance band cut by the piece's edges, which FlashAttention's
    bottom-right ``window_size=(w - 1, 0)`` expresses exactly (no mask); 0 when it is not that."""
    width = int(e[-1]) - int(s[-1])
    if int(e[-1]) != key_hi or width < 1 or not _unit_slope(e):
        return 0
    return width if bool((s == (e - width).clamp(min=key_lo)).all()) else 0


def _unit_slope(x: torch.Tensor) -> bool:
    """x[r] = x[0] + r for every row."""
    rows = x.shape[0]
    return int(x[-1]) - int(x[0]) == rows - 1 and bool(
        (x - x[0] == torch.arange(rows, device=x.device)).all()
    )


def _attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    kind: str,
    mask: torch.Tensor | None,
    window: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One dense piece: (out, lse) in fp32 on the backend for ``q`` (``kernels.py``). ``kind`` is "full",
    "causal" (top-left square), "anticausal" (row r sees keys r.. of the piece, which has one key fewer
    than rows), "mask" or "window" (FlashAttention backends: the last ``window`` keys up to the
    bottom-right diagonal)."""
    return kernels.attend(q, k, v, scale, kind, mask, kernels.backend_for(q, FORCE_PORTABLE), window)
