"""The naive oracle: dense softmax where pair (i, j) is scored as q_i . R(PE[i][j]) k_j.

Deliberately independent of the engine: it never rotates keys, it builds the relative-position
matrix of every segment and rotates each query once per key. O(n * kv * D) memory: tests only.

A pair covered by two segments (an official code's overlapping passes, reproduced on purpose) enters
the softmax twice, once at each segment's position. That must be declared: ``counts`` gives how many
times each pair is meant to be covered; without it any overlap raises.
"""

from __future__ import annotations

import torch

from .engine import AttentionPlan
from .rope import relative, rope_cos_sin, rotate_half

ORACLE_ROWS = 32  # query rows scored at once (memory: rows x keys x head_dim per head)


def segment_pairs(
    plan: AttentionPlan, q_start: int, n: int, kv: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per segment: (covered [n, kv] bool, PE [n, kv] float64) for queries q_start..q_start+n-1; PE is
    [n, kv, H, F] for per-head or per-frequency maps (:func:`lampe_eval.attention.rope.relative`)."""
    q_idx = torch.arange(q_start, q_start + n)
    k_idx = torch.arange(kv)
    pairs = []
    for segment in plan.segments:
        mask = segment.region.dense_mask(q_idx, kv)
        rel = relative(segment.q_pos(q_idx), segment.k_pos(k_idx))
        covered = mask.view(*mask.shape, *([1] * (rel.dim() - 2)))
        pairs.append((mask, torch.where(covered, rel, torch.zeros_like(rel))))
    return pairs


def coverage(plan: AttentionPlan, q_start: int, n: int, kv: int) -> torch.Tensor:
    """How many segments cover each pair ([n, kv] long)."""
    return sum((mask.long() for mask, _ in segment_pairs(plan, q_start, n, kv)), torch.zeros(n, kv).long())


def check_coverage(plan: AttentionPlan, q_start: int, n: int, kv: int, counts: torch.Tensor | None) -> None:
    """Raise unless the segments cover each pair ``counts`` times (default: at most once)."""
    if counts is None:
        covered = torch.zeros(n, kv, dtype=torch.bool)
        for segment, (mask, _) in zip(plan.segments, segment_pairs(plan, q_start, n, kv), strict=True):
            if (covered & mask).any():
                i, j = (int(x) for x in (covered & mask).nonzero()[0])
                raise AssertionError(
                    f"segment {segment.name!r} overlaps an earlier segment at pair ({q_start + i}, {j}) "
                    "and no overlap was declared"
                )
            covered |= mask
        return
    covered = coverage(plan, q_start, n, kv)
    if not torch.equal(covered, counts.long()):
        i, j = (int(x) for x in (covered != counts).nonzero()[0])
        raise AssertionError(
            f"pair ({q_start + i}, {j}) is covered {int(covered[i, j])} times, declared {int(counts[i, j])}"
        )


def relative_positions(
    plan: AttentionPlan, q_start: int, n: int, kv: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(PE [n, kv] float ([n, kv, H, F] for per-head / per-frequency maps), owner [n, kv] long: index of
    the segment covering each pair, -1 if none).
    Raises if two segments cover the same pair (use :func:`segment_pairs` for declared overlaps)."""
    check_coverage(plan, q_start, n, kv, None)
    pairs = segment_pairs(plan, q_start, n, kv)
    if any(rel.dim() > 2 for _, rel in pairs):  # per head / per frequency: PE [n, kv, H, F]
        pairs = [(mask, rel.view(n, kv, 1, 1) if rel.dim() == 2 else rel) for mask, rel in pairs]
    shape = torch.broadcast_shapes(*(rel.shape for _, rel in pairs))
    pe = torch.zeros(shape, dtype=torch.float64)
    owner = torch.full((n, kv), -1, dtype=torch.long)
    for s, (mask, rel) in enumerate(pairs):
        pe = torch.where(mask.view(n, kv, *([1] * (len(shape) - 2))), rel, pe)
        owner[mask] = s
    return pe, owner


def oracle_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    plan: AttentionPlan,
    q_start: int,
    scale: float,
    counts: torch.Tensor | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    """Reference output [B, Hq, n, D] (fp32) for un-rotated inputs, GQA by repeating keys. ``counts``
    ([n, kv]): the declared number of softmax terms per pair (see the module docstring); ``softcap``:
    each logit soft-capped as ``softcap * tanh(logit / softcap)`` (Gemma 2)."""
    batch, hq, n, dim = query.shape
    rotary = 2 * plan.inv_freq.numel()  # < dim: GPT-NeoX-style partial rotary (transformers' arithmetic)
    kv = key.shape[2]
    group = hq // key.shape[1]
    k = key.float().repeat_interleave(group, dim=1)
    v = value.float().repeat_interleave(group, dim=1)
    q = query.float()
    if plan.query_scale is not None:
        q = q * plan.query_scale(torch.arange(q_start, q_start + n)).float()[:, None]
    if plan.key_scale is not None:
        k = k * plan.key_scale(torch.arange(kv)).float()[:, None]
    check_coverage(plan, q_start, n, kv, counts)
    pairs = segment_pairs(plan, q_start, n, kv)
    v_terms = v.repeat(1, 1, len(pairs), 1)  # a key's value once per segment term
    out = torch.zeros(batch, hq, n, dim)
    for first in range(0, n, ORACLE_ROWS):
        rows = slice(first, min(n, first + ORACLE_ROWS))
        q_rows = q[:, :, rows, None, :]  # [B, H, r, 1, D]
        terms = []
        for mask, pe in pairs:
            # R(a) q . R(b) k = R(a - b) q . k: rotate query i once per key, by PE[i][j]
            if pe.dim() == 2:
                cos, sin = rope_cos_sin(pe[rows].reshape(-1), plan.inv_freq, 1.0, torch.float32)
                cos, sin = cos.view(*pe[rows].shape, rotary), sin.view(*pe[rows].shape, rotary)
            else:  # per head / per frequency: PE [r, kv, H, F] -> tables [H, r, kv, D]
                cos, sin = rope_cos_sin(pe[rows].permute(2, 0, 1, 3), plan.inv_freq, 1.0, torch.float32)
            turned = q_rows[..., :rotary]  # a partial rotary head turns its first dimensions only
            q_rot = turned * cos + rotate_half(turned) * sin  # [B, H, r, kv, rotary]
            if rotary < dim:
                passed = q_rows[..., rotary:].expand(*q_rot.shape[:-1], dim - rotary)
                q_rot = torch.cat([q_rot, passed], dim=-1)
            scores = (q_rot * k[:, :, None]).sum(-1) * scale * plan.rope_scaling**2
            if softcap:
                scores = torch.tanh(scores / softcap) * softcap
            terms.append(scores.masked_fill(~mask[rows], float("-inf")))
        # one softmax over the terms of every segment: a pair covered twice contributes two terms
        probs = torch.softmax(torch.cat(terms, dim=-1), dim=-1)
        out[:, :, rows] = torch.einsum("bhrk,bhkd->bhrd", probs, v_terms)
    return out
