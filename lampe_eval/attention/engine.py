"""Exact multi-segment attention in O(L) memory.

For each segment: rotate queries and keys at the segment's positions, then attend each block of
queries to its visible keys in up to three pieces (an unmasked rectangle, a causal triangle, thin
masked edges) with a kernel that also returns the softmax log-sum-exp (LSE). Partial results are
merged exactly: ``out = sum_p exp(lse_p - lse) * out_p`` with ``lse = logsumexp_p lse_p``.

Kernels: on CPU, ``aten._scaled_dot_product_flash_attention_for_cpu`` (returns the LSE, handles GQA
by head broadcasting). Elsewhere a blockwise matmul path (exact; GQA without repeating keys).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

from .regions import Segment
from .rope import rope_cos_sin, rotate_half

DEFAULT_BLOCK = 1024
SINGLE_MASK_KEYS = 1024  # a block whose keys span at most this is attended in one masked call
PORTABLE_MAX_KEYS = 8192  # widest key slice per call on the portable (score-materialising) path
FORCE_PORTABLE = False  # tests flip this to check the portable path on CPU
NEG_INF = float("-inf")


@dataclass
class AttentionPlan:
    """Everything the engine needs for one attention call of a patched layer."""

    segments: list[Segment]
    inv_freq: torch.Tensor
    rope_scaling: float = 1.0  # multiplies cos and sin (so logits by its square)
    query_scale: Callable[[torch.Tensor], torch.Tensor] | None = None  # per absolute query index
    # cos/sin tables by (segment, "q"/"k", first index, end index, dtype): a plan serves every layer of a
    # forward pass, so each table is computed once per pass instead of once per layer
    _tables: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict, repr=False)

    def rotate(self, x: torch.Tensor, segment: int, side: str, first: int, end: int) -> torch.Tensor:
        """Rotate rows ``first..end-1`` (absolute indices), held in ``x`` [..., end-first, D], at the
        segment's query (``side="q"``) or key (``side="k"``) positions."""
        key = (segment, side, first, end, x.dtype, x.device)
        if key not in self._tables:
            idx = torch.arange(first, end, device=x.device)
            seg = self.segments[segment]
            positions = seg.q_pos(idx) if side == "q" else seg.k_pos(idx)
            if len(self._tables) > 64:  # a plan lives for one forward pass; stay bounded anyway
                self._tables.clear()
            self._tables[key] = rope_cos_sin(positions, self.inv_freq, self.rope_scaling, x.dtype)
        cos, sin = self._tables[key]
        return x * cos + rotate_half(x) * sin


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
    n = query.shape[2]
    device = query.device
    q_idx = torch.arange(q_start, q_start + n, device=device)
    if plan.query_scale is not None:
        query = query * plan.query_scale(q_idx).to(query.dtype)[:, None]
    acc_out = torch.zeros(query.shape, dtype=torch.float32, device=device)
    acc_lse = torch.full(query.shape[:3], NEG_INF, dtype=torch.float32, device=device)
    for seg_index, segment in enumerate(plan.segments):
        starts, stops = segment.region.bounds(q_idx)
        rows = (stops > starts).nonzero()
        if rows.numel() == 0:
            continue
        # only the rows and keys this segment touches are rotated and attended
        r0, r1 = int(rows[0, 0]), int(rows[-1, 0]) + 1
        starts, stops = starts[r0:r1], stops[r0:r1]
        key_lo, key_hi = int(starts.min()), int(stops.max())
        q_rot = plan.rotate(query[:, :, r0:r1], seg_index, "q", q_start + r0, q_start + r1)
        k_rot = plan.rotate(key[:, :, key_lo:key_hi], seg_index, "k", key_lo, key_hi)
        first_row = q_start + r0
        breaks = [b - first_row for b in segment.region.breakpoints(first_row, q_start + r1)]
        out, lse = interval_attention(
            q_rot,
            k_rot,
            value[:, :, key_lo:key_hi],
            starts - key_lo,
            stops - key_lo,
            scale,
            segment.region.block_size(block),
            breaks,
        )
        merge_into(acc_out[:, :, r0:r1], acc_lse[:, :, r0:r1], out, lse)
    return acc_out.to(query.dtype)


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
        if not _uses_cpu_kernel(q):  # the portable path materialises scores: bound their width
            pieces = _split_wide(pieces, PORTABLE_MAX_KEYS)
        for key_lo, key_hi, kind in pieces:
            mask = None
            if kind == "mask":
                keys = torch.arange(key_lo, key_hi, device=q.device)
                mask = (keys[None, :] >= s[:, None]) & (keys[None, :] < e[:, None])
            o, l_ = _attend(q[:, :, a:b], k[:, :, key_lo:key_hi], v[:, :, key_lo:key_hi], scale, kind, mask)
            if len(pieces) == 1:
                out[:, :, a:b], lse[:, :, a:b] = o, l_
            else:
                merge_into(out[:, :, a:b], lse[:, :, a:b], o, l_)
    return out, lse


def _uses_cpu_kernel(q: torch.Tensor) -> bool:
    return q.device.type == "cpu" and not FORCE_PORTABLE


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
    """Split a block's key range into an unmasked rectangle, a causal triangle and masked edges."""
    rows = s.shape[0]
    s_first, s_last, e_first, e_last = int(s[0]), int(s[-1]), int(e[0]), int(e[-1])
    if rows == 1:  # a decode step: one unmasked call
        return [(s_first, e_last, "full")]
    if e_last - s_first <= SINGLE_MASK_KEYS:  # thin: one masked call beats three calls + merges
        return [(s_first, e_last, "mask")]
    pieces: list[tuple[int, int, str]] = []
    unit_slope = e_last - e_first == rows - 1 and bool(
        (e - e_first == torch.arange(rows, device=e.device)).all()
    )
    if unit_slope and e_first >= 1 and s_last <= e_first - 1:
        # Row r sees up to key e_first - 1 + r: a top-left causal square starting at e_first - 1.
        if s_first < s_last:
            pieces.append((s_first, s_last, "mask"))
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
    return pieces


def _attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, kind: str, mask: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """One dense piece: (out, lse) in fp32. ``kind`` is "full", "causal" (top-left) or "mask"."""
    if _uses_cpu_kernel(q):
        additive = None
        if mask is not None:
            additive = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill_(~mask, NEG_INF)
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, kind == "causal", attn_mask=additive, scale=scale
        )
        if mask is not None:  # the CPU kernel reports lse 0 (not -inf) for rows with no visible key
            lse = lse.masked_fill(~mask.any(dim=1), NEG_INF)
        return out.float(), lse.float()
    return _attend_math(q, k, v, scale, kind, mask)


def _attend_math(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, kind: str, mask: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Portable exact path. GQA: queries are grouped per KV head, keys are broadcast, not copied."""
    batch, hq, n, dim = q.shape
    hkv = k.shape[1]
    group = hq // hkv
    qg = q.reshape(batch, hkv, group, n, dim).float()
    scores = torch.matmul(qg, k.float()[:, :, None].transpose(-1, -2)) * scale  # [B, Hkv, G, n, kv]
    if kind == "causal":
        mask = torch.ones(n, k.shape[2], dtype=torch.bool, device=q.device).tril()
    if mask is not None:
        scores = scores.masked_fill(~mask, NEG_INF)
    lse = torch.logsumexp(scores, dim=-1)
    probs = torch.exp(scores - lse[..., None].masked_fill(~torch.isfinite(lse[..., None]), 0.0))
    out = torch.matmul(probs, v.float()[:, :, None])
    return out.reshape(batch, hq, n, dim), lse.reshape(batch, hq, n)
