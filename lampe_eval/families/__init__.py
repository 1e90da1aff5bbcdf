"""Model families whose attention a method can be installed in: one module each (what the layer computes
before RoPE, what a family's config can refuse), gathered here in one registry."""

from __future__ import annotations

from typing import Any

from ..model_facts import text_config
from . import gemma, gpt_neox, llama, olmo2, phi, phi3, qwen3, stablelm
from .base import AttentionFamily

FAMILIES: tuple[AttentionFamily, ...] = (
    llama.FAMILY,
    qwen3.FAMILY,
    olmo2.FAMILY,
    phi3.FAMILY,
    stablelm.FAMILY,
    phi.FAMILY,
    gpt_neox.FAMILY,
    gemma.GEMMA3,
    gemma.GEMMA2,
)


def attention_classes() -> tuple[str, ...]:
    return tuple(name for family in FAMILIES for name in family.classes)


def family_of_layer(layer: Any) -> AttentionFamily | None:
    name = type(layer).__name__
    return next((family for family in FAMILIES if name in family.classes), None)


def family_of_config(config: Any) -> AttentionFamily | None:
    """The family of a config's decoder (a multimodal config's text model)."""
    model_type = getattr(text_config(config), "model_type", None)
    return next((family for family in FAMILIES if model_type in family.model_types), None)


__all__ = [
    "FAMILIES",
    "AttentionFamily",
    "attention_classes",
    "family_of_config",
    "family_of_layer",
    "text_config",
]
