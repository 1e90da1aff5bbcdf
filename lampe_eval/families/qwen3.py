"""Qwen3 and Qwen3-MoE: Llama's projections, then an RMSNorm over each head's query and key (``q_norm``,
``k_norm``, on the head dimension) before RoPE (transformers' ``Qwen3Attention.forward``, and
``Qwen3MoeAttention.forward``, the same attention beside a mixture-of-experts MLP, which no method
touches): the key a method rotates and caches is the normalised one."""

from __future__ import annotations

from .base import FAMILIES, AttentionFamily, full_attention_layers, per_head_norms, sliding_window_refusal

FAMILY = AttentionFamily(
    name="qwen3",
    classes=("Qwen3Attention", "Qwen3MoeAttention"),
    model_types=("qwen3", "qwen3_moe"),
    project=per_head_norms,
    refusal=sliding_window_refusal,
    global_layers=full_attention_layers,  # sliding-window layers keep their own attention
)
FAMILIES.add(FAMILY)
