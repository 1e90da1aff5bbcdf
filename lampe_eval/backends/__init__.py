"""Inference backends: the only code that touches a model object (see :mod:`.base`), registered by name
in :data:`BACKENDS`. Adding one: its module, registered with ``@BACKENDS.register(name)``, plus its line
below (or ``--import`` of the module for one of your own): ``docs/backends.md``."""

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
