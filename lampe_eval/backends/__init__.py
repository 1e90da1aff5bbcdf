"""Inference backends: the only code that touches a model object (see :mod:`.base`)."""

from __future__ import annotations

from typing import Any

from ..errors import unknown
from ..models import LoadedModel
from .base import Backend, Generation, GenerationRequest, NLLRequest, Request, Result, Rounds, TokenNLL

BACKEND_NAMES = ("hf", "vllm")


def create_backend(name: str, lm: LoadedModel, batch_size: int = 1, **settings: Any) -> Backend:
    """The backend ``name`` on a loaded model (for ``vllm``: loaded by ``models.load_for_engine``)."""
    if name == "hf":
        from .hf import HFBackend

        return HFBackend(lm, batch_size=batch_size)
    if name == "vllm":
        from .vllm import VLLMBackend

        return VLLMBackend(lm, batch_size=batch_size, dtype=settings.get("dtype"))
    raise unknown("backend", name, list(BACKEND_NAMES))


__all__ = [
    "BACKEND_NAMES",
    "Backend",
    "Generation",
    "GenerationRequest",
    "NLLRequest",
    "Request",
    "Result",
    "Rounds",
    "TokenNLL",
    "create_backend",
]
