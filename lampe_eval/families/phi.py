"""Phi (Phi-1, Phi-1.5, Phi-2; ``model_type`` ``phi``): StableLM's arithmetic before RoPE (projections with
biases, optional per-head LayerNorms ``q_layernorm``/``k_layernorm``), the first
``partial_rotary_factor`` of each head rotated (Phi-2: 0.4 of 80), and a ``dense`` output projection
(transformers' ``PhiAttention.forward``). The partial head runs as a whole one (``attention/partial.py``)."""

from __future__ import annotations

from .base import FAMILIES, AttentionFamily, dense, layer_norm_heads

FAMILY = AttentionFamily(
    name="phi", classes=("PhiAttention",), model_types=("phi",), project=layer_norm_heads, output=dense
)
FAMILIES.add(FAMILY)
