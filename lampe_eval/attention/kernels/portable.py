"""The portable path for one piece: exact fp32 matmuls that materialise the piece's scores (any device,
any mask, soft-capped logits)."""

from __future__ import annotations

import torch

from .flash import NEG_INF, Piece


def attend_math(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    kind: str,
    mask: torch.Tensor | None,
    softcap: float | None = None,
) -> Piece:
    """Portable exact path. GQA: queries are grouped per KV head, keys are broadcast, not copied.
    ``softcap``: logits soft-capped as ``softcap * tanh(logit / softcap)`` before the mask (Gemma 2)."""
    batch, hq, n, dim = q.shape
    hkv = k.shape[1]
    group = hq // hkv
    qg = q.reshape(batch, hkv, group, n, dim).float()
    scores = torch.matmul(qg, k.float()[:, :, None].transpose(-1, -2)) * scale  # [B, Hkv, G, n, kv]
    if softcap:
        scores = torch.tanh(scores / softcap) * softcap
    if kind == "causal":
        mask = torch.ones(n, k.shape[2], dtype=torch.bool, device=q.device).tril()
    if mask is not None:
        scores = scores.masked_fill(~mask, NEG_INF)
    lse = torch.logsumexp(scores, dim=-1)
    probs = torch.exp(scores - lse[..., None].masked_fill(~torch.isfinite(lse[..., None]), 0.0))
    out = torch.matmul(probs, v.float()[:, :, None])
    return out.reshape(batch, hq, n, dim), lse.reshape(batch, hq, n)
