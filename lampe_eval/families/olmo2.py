"""OLMo 2: Llama's projections, then an RMSNorm over the whole query and key projection (all heads
together, unlike Qwen3's per head) before the split into heads and RoPE (transformers'
``Olmo2Attention.forward``)."""

from __future__ import annotations

from typing import Any

import torch

from .base import FAMILIES, AttentionFamily, heads_first


def project(layer: Any, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    query = heads_first(layer.q_norm(layer.q_proj(hidden)), layer.head_dim)
    key = heads_first(layer.k_norm(layer.k_proj(hidden)), layer.head_dim)
    return query, key, heads_first(layer.v_proj(hidden), layer.head_dim)


FAMILY = AttentionFamily(name="olmo2", classes=("Olmo2Attention",), model_types=("olmo2",), project=project)
FAMILIES.add(FAMILY)
