"""The Hugging Face backend (``--backend hf``, the default): ``transformers`` generation and chunked NLL on a
loaded model (:mod:`.backend`, :class:`HFBackend`), with a lampe-eval method patched into its attention
layers (:mod:`.patch`: :func:`apply_method`, :func:`new_cache`, and the patch's rotated-key cache).

Importing this package registers the backend; it imports what the backend itself imports, nothing more.
"""

from __future__ import annotations

from .backend import HFBackend, chunked_nll_rows
from .patch import PatchHandle, apply_method, attention_layers, kv_cache_bytes, new_cache

__all__ = [
    "HFBackend",
    "PatchHandle",
    "apply_method",
    "attention_layers",
    "chunked_nll_rows",
    "kv_cache_bytes",
    "new_cache",
]
