"""Gemma 3 (text): Llama's projections, then an RMSNorm over each head's query and key (``q_norm``,
``k_norm``) before RoPE, the scale ``query_pre_attn_scalar ** -0.5`` (the layer's ``scaling``), and
sliding-window layers (``layer_types``: five local to one global in the released models) with their own
RoPE base (transformers' ``Gemma3Attention.forward``, ``Gemma3RotaryEmbedding``). A method changes the
global layers only, with the global layers' RoPE (``full_attention_*`` on the rotary embedding, the
checkpoints' own linear scaling included); a local layer never sees a distance beyond its window and
keeps its own attention. Gemma 2: no query/key norms, one RoPE for every layer, local and global layers
alternating, and attention logits soft-capped (``attn_logit_softcapping * tanh(logit / cap)``), which the
engine computes on its portable path (``attention/kernels.py``: ``attend_math``)."""

from __future__ import annotations

from typing import Any

from ..model_facts import GLOBAL_LAYER_TYPE
from .base import FAMILIES, AttentionFamily, full_attention_layers, per_head_norms, separate_projections

GLOBAL = GLOBAL_LAYER_TYPE  # the global layers' layer type, which names their rotary attributes


def refusal(config: Any) -> str | None:
    if getattr(config, "use_bidirectional_attention", False):
        return f"{config.model_type}: bidirectional attention is not supported"
    if not full_attention_layers(config):
        return f"{config.model_type}: no global attention layer for a method to change"
    return None


GEMMA3 = AttentionFamily(
    name="gemma3",
    classes=("Gemma3Attention",),
    model_types=("gemma3_text",),
    project=per_head_norms,
    refusal=refusal,
    global_layers=full_attention_layers,
    rotary=(f"{GLOBAL}_original_inv_freq", f"{GLOBAL}_attention_scaling"),
)
GEMMA2 = AttentionFamily(
    name="gemma2",
    classes=("Gemma2Attention",),
    model_types=("gemma2",),
    project=separate_projections,
    refusal=refusal,
    global_layers=full_attention_layers,
)
FAMILIES.add(GEMMA3)
FAMILIES.add(GEMMA2)
