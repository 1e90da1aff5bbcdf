"""Qwen3: Llama's projections, then an RMSNorm over each head's query and key (``q_norm``, ``k_norm``, on
the head dimension) before RoPE (transformers' ``Qwen3Attention.forward``): the key a method rotates and
caches is the normalised one."""

from __future__ import annotations

from typing import Any

import torch

from .base import AttentionFamily, heads_first, sliding_window_refusal


def project(layer: Any, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    batch, n, _ = hidden.shape
    shape = (batch, n, -1, layer.head_dim)
    query = layer.q_norm(layer.q_proj(hidden).view(shape)).transpose(1, 2)
    key = layer.k_norm(layer.k_proj(hidden).view(shape)).transpose(1, 2)
    return query, key, heads_first(layer.v_proj(hidden), layer.head_dim)


FAMILY = AttentionFamily(
    name="qwen3",
    classes=("Qwen3Attention",),
    model_types=("qwen3",),
    project=project,
    refusal=sliding_window_refusal,
)
