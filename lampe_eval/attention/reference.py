"""The naive oracle: dense softmax where pair (i, j) is scored as q_i . R(PE[i][j]) k_j.

Deliberately independent of the engine: it never rotates keys, it builds the relative-position
matrix PE from the segments and rotates each query once per key. O(n * kv * D) memory: tests only.
"""

from __future__ import annotations

import torch

from .engine import AttentionPlan
from .rope import apply_rope


def relative_positions(
    plan: AttentionPlan, q_start: int, n: int, kv: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(PE [n, kv] float, owner [n, kv] long: index of the segment covering each pair, -1 if none).
    Raises if two segments cover the same pair."""
    q_idx = torch.arange(q_start, q_start + n)
    k_idx = torch.arange(kv)
    pe = torch.zeros(n, kv, dtype=torch.float64)
    owner = torch.full((n, kv), -1, dtype=torch.long)
    for s, segment in enumerate(plan.segments):
        mask = segment.region.dense_mask(q_idx, kv)
        if (owner[mask] >= 0).any():
            raise AssertionError(f"segment {segment.name!r} overlaps an earlier segment")
        rel = segment.q_pos(q_idx).double()[:, None] - segment.k_pos(k_idx).double()[None, :]
        pe = torch.where(mask, rel, pe)
        owner[mask] = s
    return pe, owner


def oracle_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    plan: AttentionPlan,
    q_start: int,
    scale: float,
) -> torch.Tensor:
    """Reference output [B, Hq, n, D] (fp32) for un-rotated inputs, GQA by repeating keys."""
    batch, hq, n, dim = query.shape
    kv = key.shape[2]
    group = hq // key.shape[1]
    k = key.float().repeat_interleave(group, dim=1)
    v = value.float().repeat_interleave(group, dim=1)
    q = query.float()
    if plan.query_scale is not None:
        q = q * plan.query_scale(torch.arange(q_start, q_start + n)).float()[:, None]
    pe, owner = relative_positions(plan, q_start, n, kv)
    out = torch.zeros(batch, hq, n, dim)
    for i in range(n):
        # R(a) q . R(b) k = R(a - b) q . k: rotate query i once per key, by PE[i][j].
        q_rot = apply_rope(q[:, :, i : i + 1].expand(batch, hq, kv, dim), pe[i].float(), plan.inv_freq)
        scores = (q_rot * k).sum(-1) * scale * plan.rope_scaling**2
        scores = scores.masked_fill(owner[i] < 0, float("-inf"))
        out[:, :, i] = torch.einsum("bhk,bhkd->bhd", torch.softmax(scores, dim=-1), v)
    return out
