"""Phi-3 and Phi-4: one fused ``qkv_proj`` (query, then key, then value columns), no norm before RoPE
(transformers' ``Phi3Attention.forward``). A partial rotary dimension (``partial_rotary_factor`` below 1,
Phi-4-mini) runs as a whole head (``attention/partial.py``). Refused: the model's own ``longrope`` scaling
(the 128K Phi-3 checkpoints), whose frequencies switch with the sequence's length: a method would be
stacked on them silently."""

from __future__ import annotations

from typing import Any

import torch

from ..model_facts import ModelFacts
from .base import FAMILIES, AttentionFamily, heads_first


def project(layer: Any, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    qkv = layer.qkv_proj(hidden)
    query_width = layer.config.num_attention_heads * layer.head_dim
    key_width = layer.num_key_value_heads * layer.head_dim
    query, key, value = qkv.split((query_width, key_width, key_width), dim=-1)
    dim = layer.head_dim
    return heads_first(query, dim), heads_first(key, dim), heads_first(value, dim)


def refusal(config: Any) -> str | None:
    kind = ModelFacts.from_config(config).rope_type
    if kind != "default":
        return (
            f"{config.model_type}: the model's own {kind!r} RoPE scaling (rope_scaling in its config.json) "
            "would sit under the method: use a checkpoint without it (e.g. the 4K Phi-3 models) or --method "
            "rope"
        )
    return None


FAMILY = AttentionFamily(
    name="phi3", classes=("Phi3Attention",), model_types=("phi3",), project=project, refusal=refusal
)
FAMILIES.add(FAMILY)
