"""Context-extension methods behind one registry. Adding one: a module here + an import below."""

from . import (  # noqa: F401  (registers)
    dca,
    frequency,
    lampe,
    llama3,
    lm_infinite,
    longrope,
    rerope,
    rope,
    selfextend,
    streamingllm,
    string,
)
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
