"""Llama, Mistral and Qwen2: separate q/k/v projections, full rotary dimension, no norm before RoPE."""

from __future__ import annotations

from .base import AttentionFamily, separate_projections, sliding_window_refusal

FAMILY = AttentionFamily(
    name="llama",
    classes=("LlamaAttention", "MistralAttention", "Qwen2Attention"),
    model_types=("llama", "mistral", "qwen2"),
    project=separate_projections,
    refusal=sliding_window_refusal,
)
