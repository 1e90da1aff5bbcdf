"""Context-extension methods behind one registry: position arithmetic and plans only (patching a model is
a backend's business: :mod:`lampe_eval.backends.hf.patch`). Adding one: a module here; it registers on
import."""

from ..registry import import_submodules
from .base import METHODS, FrequencyMethod, Method, PositionMethod, RopeBase, create_method
from .resolve import ResolvedMethod, resolve_method, window_base

import_submodules(__name__, __path__)

__all__ = [
    "METHODS",
    "FrequencyMethod",
    "Method",
    "PositionMethod",
    "ResolvedMethod",
    "RopeBase",
    "create_method",
    "resolve_method",
    "window_base",
]
