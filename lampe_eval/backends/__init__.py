"""Inference backends: what runs a benchmark's requests (:mod:`.base`: ``GenerationRequest``,
``NLLRequest`` and their results) on a loaded model or against a server, each a :class:`BaseBackend`
registered by name in :data:`BACKENDS`. Benchmarks, the runner and the tools reach a model only through
one.

This module imports the shipped backends (``hf``, ``vllm``, ``openai``) so that they register, re-exports
the request and backend types, gives ``BACKEND_NAMES`` (the names registered when it is read: a backend of
one's own too, once ``--import`` loaded its module) and :func:`create_backend` (a backend on a loaded
model). Beside the backends the package holds what they share (``rounds``: batched rounds of requests,
``plans``, ``text``, ``rope_config``), the Hugging Face patch (``hf_patch``) and the vLLM backend's other
modules (``vllm_*``: its worker, plugin, attention backend, cache sizing, ``lampe-eval serve``). Adding a
backend: its module registered with ``@BACKENDS.register(name)``, and for a shipped one its name in the
tuple below (``docs/backends.md``).
"""

from __future__ import annotations

import importlib
from typing import Any

from ..models import LoadedModel
from ..settings import RunSettings
from .base import (
    BACKENDS,
    Backend,
    BaseBackend,
    Generation,
    GenerationRequest,
    NLLRequest,
    Placement,
    Request,
    Result,
    Rounds,
    TokenNLL,
)

# The backends that ship with lampe-eval: each module registers its class on import.
for _module in ("hf", "vllm", "openai"):
    importlib.import_module(f"{__name__}.{_module}")


def __getattr__(name: str) -> tuple[str, ...]:
    if name == "BACKEND_NAMES":  # the registered names now (a plugin's included once it is imported)
        return tuple(BACKENDS.names())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def create_backend(name: str, lm: LoadedModel, batch_size: int = 1, **settings: Any) -> BaseBackend:
    """The backend ``name`` on a loaded model (``lm`` as its class's ``load`` gives it, e.g. for ``vllm``
    :func:`lampe_eval.models.load_for_engine`); ``settings``: more :class:`RunSettings` fields (``dtype``)."""
    return BACKENDS.get(name).create(lm, RunSettings(backend=name, batch_size=batch_size, **settings))


__all__ = [
    "BACKENDS",
    "BACKEND_NAMES",
    "Backend",
    "BaseBackend",
    "Generation",
    "GenerationRequest",
    "NLLRequest",
    "Placement",
    "Request",
    "Result",
    "Rounds",
    "TokenNLL",
    "create_backend",
]
