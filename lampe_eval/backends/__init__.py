"""Inference backends: what runs a benchmark's requests (:mod:`.base`: ``GenerationRequest``,
``NLLRequest`` and their results) on a loaded model or against a server, each a :class:`BaseBackend`
registered by name in :data:`BACKENDS`. Benchmarks, the runner and the tools reach a model only through
one.

This module imports the shipped backends (``hf``, ``vllm``, ``openai``) so that they register, re-exports
the request and backend types, gives ``BACKEND_NAMES`` (the names registered when it is read: a backend of
one's own too, once ``--import`` loaded its module) and :func:`create_backend` (a backend on a loaded
model). One room per engine: ``hf/`` (the Hugging Face backend and its attention patch), ``vllm/`` (the
vLLM backend, its checks and engine start, and what runs in vLLM's processes: plugin, attention backend,
worker; ``lampe-eval serve``) and ``openai.py``. Beside them, the contract every backend shares: ``base``
(requests, results, :class:`BaseBackend`, :class:`OwnWeightsBackend` for an engine that loads its own
weights), ``rounds`` (batched rounds of requests), ``plans``, ``text`` and ``rope_config``. Adding a
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
    OwnWeightsBackend,
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
    "OwnWeightsBackend",
    "Placement",
    "Request",
    "Result",
    "Rounds",
    "TokenNLL",
    "create_backend",
]
