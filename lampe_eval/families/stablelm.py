"""StableLM (GPT-NeoX-style partial rotary): Llama's separate projections (with a bias when
``use_qkv_bias``), then, with ``qk_layernorm``, a LayerNorm per head over each query and key head
(``q_layernorm``, ``k_layernorm``), and only the first ``partial_rotary_factor`` of each head rotated
(transformers' ``StableLmAttention.forward``; default 0.25). The partial head runs as a whole one
(``attention/partial.py``)."""

from __future__ import annotations

from typing import Any

import torch

from .base import AttentionFamily, heads_first


def project(layer: Any, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    dim = layer.head_dim
    query, key = heads_first(layer.q_proj(hidden), dim), heads_first(layer.k_proj(hidden), dim)
    if layer.qk_layernorm:
        query, key = layer.q_layernorm(query), layer.k_layernorm(key)
    return query, key, heads_first(layer.v_proj(hidden), dim)


FAMILY = AttentionFamily(
    name="stablelm", classes=("StableLmAttention",), model_types=("stablelm",), project=project
)
