"""Context-extension methods behind one registry. Adding one: a module here + an import below."""

from . import dca, frequency, lampe, rerope, rope, selfextend, string  # noqa: F401  (registers)
from .base import METHODS, FrequencyMethod, Method, PositionMethod, RopeBase, create_method
from .patch import PatchHandle, apply_method, rope_base

__all__ = [
    "METHODS",
    "FrequencyMethod",
    "Method",
    "PatchHandle",
    "PositionMethod",
    "RopeBase",
    "apply_method",
    "create_method",
    "rope_base",
]
