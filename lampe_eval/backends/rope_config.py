"""A model's own RoPE (:class:`~lampe_eval.methods.base.RopeBase`, what methods resolve against), read from
a loaded Hugging Face model or, for an engine that loads its own weights, from its config alone; what the
config says (head dimension, heads, window, the global layers' RoPE parameters) from
:class:`~lampe_eval.model_facts.ModelFacts`."""

from __future__ import annotations

import functools
import importlib
from typing import Any

import torch

from ..errors import UnsupportedModelError
from ..families import family_of_config
from ..memory import ModelShape
from ..methods.base import RopeBase
from ..model_facts import ModelFacts


def rope_base(model: Any, window: int | None = None) -> RopeBase:
    """The model's own RoPE (frequencies as the model ships them, e.g. Llama-3.1's llama3 scaling; the
    global layers' for a family with local layers)."""
    # the decoder's (GPT-NeoX's: gpt_neox; a multimodal model's: its language model)
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else getattr(model, "base_model", model)
    rotary = getattr(decoder, "rotary_emb", None)
    if rotary is None:  # one without frequencies is refused by _rope_base_of
        raise UnsupportedModelError(
            f"{type(model).__name__}: no rotary embedding found (is it a RoPE model?)"
        )
    return _rope_base_of(rotary, ModelFacts.from_config(model.config), window)


def rope_base_from_config(config: Any, window: int | None = None) -> RopeBase:
    """:func:`rope_base` of a model not loaded here (the vLLM backend's): transformers' own rotary
    embedding module of the config's architecture, built without weights, gives the same frequencies."""
    facts = ModelFacts.from_config(config)
    config, model_type = facts.text, facts.model_type
    # the config class's package holds the modeling code (gemma3_text's is gemma3's)
    package = type(config).__module__.rpartition(".")[0]
    if not package.startswith("transformers.models."):
        package = f"transformers.models.{model_type}"
    try:
        module = importlib.import_module(f"{package}.modeling_{package.rpartition('.')[2]}")
    except ImportError as err:
        raise UnsupportedModelError(f"{model_type!r}: no transformers modeling module") from err
    classes = [c for n, c in vars(module).items() if n.endswith("RotaryEmbedding") and isinstance(c, type)]
    if not classes:
        raise UnsupportedModelError(f"{model_type!r}: no rotary embedding found (is it a RoPE model?)")
    return _rope_base_of(classes[0](config), facts, window)


def _frequencies(rotary: Any, config: Any) -> tuple[torch.Tensor, float] | None:
    """The rotary embedding's inverse frequencies as shipped and its attention factor, under the names the
    config's family keeps them (the global layers' for Gemma 3)."""
    family = family_of_config(config)
    freq_name, scaling_name = family.rotary if family else ("original_inv_freq", "attention_scaling")
    inv_freq = getattr(rotary, freq_name, None)
    if inv_freq is None:
        inv_freq = getattr(rotary, "inv_freq", None)
    if inv_freq is None:
        return None
    return inv_freq, float(getattr(rotary, scaling_name, 1.0))


def _rope_base_of(rotary: Any, facts: ModelFacts, window: int | None) -> RopeBase:
    config, head_dim = facts.text, facts.head_dim
    found = _frequencies(rotary, config)
    if found is None:
        raise UnsupportedModelError(f"{facts.model_type}: no rotary embedding found (is it a RoPE model?)")
    inv_freq, attention_scaling = found[0].detach().float().clone(), found[1]
    if inv_freq.numel() * 2 > head_dim:  # fewer: a partial rotary head (attention/partial.py)
        raise UnsupportedModelError(
            f"{facts.model_type}: a rotary dimension of {inv_freq.numel() * 2} exceeds the head dimension "
            f"{head_dim}"
        )
    return RopeBase.from_facts(facts, inv_freq, attention_scaling, window)


@functools.lru_cache(maxsize=16)
def model_shape(model: str) -> tuple[ModelShape, RopeBase] | None:
    """A model's shape and RoPE from its config, without loading it (None when only loading tells)."""
    from ..models import known_config, known_window

    config = known_config(model)
    if config is None:
        return None
    try:
        return ModelShape.from_config(model, config), rope_base_from_config(config, known_window(model))
    except Exception:  # noqa: BLE001 - a config transformers cannot build here: the load will say
        return None
