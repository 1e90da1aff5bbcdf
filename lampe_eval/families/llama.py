"""Llama, Mistral and Qwen2, and the mixture-of-experts models with their attention (Mixtral: Mistral's;
Qwen2-MoE: Qwen2's, query/key/value biases included): separate q/k/v projections, full rotary dimension,
no norm before RoPE (the experts are the MLP, which no method touches); Qwen2's sliding-window layers
(``use_sliding_window``) keep their own attention."""

from __future__ import annotations

from .base import (
    FAMILIES,
    AttentionFamily,
    full_attention_layers,
    separate_projections,
    sliding_window_refusal,
)

FAMILY = AttentionFamily(
    name="llama",
    classes=("LlamaAttention", "MistralAttention", "Qwen2Attention", "MixtralAttention", "Qwen2MoeAttention"),
    model_types=("llama", "mistral", "qwen2", "mixtral", "qwen2_moe"),
    project=separate_projections,
    refusal=sliding_window_refusal,
    global_layers=full_attention_layers,  # sliding-window layers keep their own attention
)
FAMILIES.add(FAMILY)
