"""Model families whose attention a method can be installed in: one module each (what the layer computes
before RoPE, what a family's config can refuse), each adding its families to the registry
:data:`FAMILIES` on import. This package imports every module it contains, so adding a family is one
module and no list to edit; a module of one's own adds its family when ``--import`` (``imports=``) loads it
(``docs/model-families.md``, "Adding a family")."""

from __future__ import annotations

from typing import Any

from ..model_facts import text_config
from ..registry import import_submodules
from .base import FAMILIES, AttentionFamily

import_submodules(__name__, __path__)


def attention_classes() -> tuple[str, ...]:
    return tuple(name for family in FAMILIES.values() for name in family.classes)


# No two families claim one class or one model type (FAMILIES refuses it), so the first match is the only one.
def family_of_layer(layer: Any) -> AttentionFamily | None:
    name = type(layer).__name__
    return next((family for family in FAMILIES.values() if name in family.classes), None)


def family_of_config(config: Any) -> AttentionFamily | None:
    """The family of a config's decoder (a multimodal config's text model)."""
    model_type = getattr(text_config(config), "model_type", None)
    return next((family for family in FAMILIES.values() if model_type in family.model_types), None)


__all__ = [
    "FAMILIES",
    "AttentionFamily",
    "attention_classes",
    "family_of_config",
    "family_of_layer",
    "text_config",
]
