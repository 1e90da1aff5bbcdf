"""The CPU flash kernel for one piece: ``aten._scaled_dot_product_flash_attention_for_cpu`` ([B, H, S, D],
causal aligned top-left, additive masks; an empty row gives LSE 0, masked out here)."""

from __future__ import annotations

import torch

from .flash import NEG_INF, Piece


def cpu_piece(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, kind: str, mask: torch.Tensor | None
) -> Piece:
    if q.shape[0] > 1 and q.shape[2] == 1:
        # one query row: the CPU kernel splits the keys over threads by batch size, so a sequence's sums
        # would depend on its batch; one call per sequence keeps --batch-size N equal to 1 bit for bit
        pieces = [
            cpu_piece(q[b : b + 1], k[b : b + 1], v[b : b + 1], scale, kind, mask) for b in range(q.shape[0])
        ]
        return torch.cat([p[0] for p in pieces]), torch.cat([p[1] for p in pieces])
    additive = None
    if mask is not None:
        additive = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill_(~mask, NEG_INF)
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, v, 0.0, kind == "causal", attn_mask=additive, scale=scale
    )
    if mask is not None:  # the CPU kernel reports lse 0 (not -inf) for rows with no visible key
        lse = lse.masked_fill(~mask.any(dim=1), NEG_INF)
    return out.float(), lse.float()
