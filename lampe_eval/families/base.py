"""What lampe-eval needs to know about one model family's attention layer to run a method in it (what a
config says, the families read from :mod:`lampe_eval.model_facts`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..model_facts import ModelFacts, full_attention_layers, text_config
from ..registry import InstanceRegistry

# (layer, hidden states [B, n, hidden]) -> un-rotated query [B, Hq, n, D], key and value [B, Hkv, n, D]
Projection = Callable[[Any, torch.Tensor], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
# (layer, attention output [B, n, Hq * D]) -> the layer's output [B, n, hidden]
Output = Callable[[Any, torch.Tensor], torch.Tensor]


def o_proj(layer: Any, out: torch.Tensor) -> torch.Tensor:
    """Llama's output projection."""
    return layer.o_proj(out)


def dense(layer: Any, out: torch.Tensor) -> torch.Tensor:
    """GPT-NeoX's and Phi's output projection."""
    return layer.dense(out)


def no_refusal(config: Any) -> str | None:
    return None


def every_layer(config: Any) -> list[int]:
    return list(range(ModelFacts.from_config(config).layers))


@dataclass(frozen=True)
class AttentionFamily:
    """A family of attention layers with the same arithmetic before RoPE.

    ``classes``: the transformers attention classes (by name); ``model_types``: the configs' ``model_type``
    values that build them; ``project``: the layer's query, key and value before RoPE, exactly as the
    layer's own forward computes them (projections, norms); ``refusal``: why a config of the family cannot
    run a method exactly (one line), or None; ``global_layers``: the layers a method may change (Gemma 3's
    sliding-window layers never see a distance beyond their window: they keep their own attention);
    ``rotary``: the names of the model's rotary embedding attributes holding the global layers' inverse
    frequencies and attention factor (their RoPE parameters: :attr:`ModelFacts.rope_parameters`);
    ``output``: the layer's output projection of the attention."""

    name: str
    classes: tuple[str, ...]
    model_types: tuple[str, ...]
    project: Projection
    refusal: Callable[[Any], str | None] = no_refusal
    global_layers: Callable[[Any], list[int]] = every_layer
    rotary: tuple[str, str] = ("original_inv_freq", "attention_scaling")
    output: Output = o_proj

    def changed_layers(self, config: Any, applied: range) -> list[int]:
        """The layers a method changes: of those it applies to (``Method.patched_layers``), the ones it may
        change (:attr:`global_layers`: local, sliding-window layers keep their own attention)."""
        allowed = set(self.global_layers(text_config(config)))
        return [i for i in applied if i in allowed]


def heads_first(x: torch.Tensor, head_dim: int) -> torch.Tensor:
    """[B, n, H * D] -> [B, H, n, D]."""
    batch, n, _ = x.shape
    return x.view(batch, n, -1, head_dim).transpose(1, 2)


def separate_projections(layer: Any, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Llama's: ``q_proj``, ``k_proj``, ``v_proj``, nothing else before RoPE."""
    dim = layer.head_dim
    return (
        heads_first(layer.q_proj(hidden), dim),
        heads_first(layer.k_proj(hidden), dim),
        heads_first(layer.v_proj(hidden), dim),
    )


def per_head_norms(layer: Any, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Llama's projections, then an RMSNorm over each head's query and key (``q_norm``, ``k_norm`` on the
    head dimension): Qwen3 and Gemma 3. The key a method rotates and caches is the normalised one."""
    dim = layer.head_dim
    query = layer.q_norm(heads_first(layer.q_proj(hidden), dim))
    key = layer.k_norm(heads_first(layer.k_proj(hidden), dim))
    return query, key, heads_first(layer.v_proj(hidden), dim)


def layer_norm_heads(layer: Any, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Llama's projections (biases as the layer has them), then, with ``qk_layernorm``, a LayerNorm per
    head over each query and key head (``q_layernorm``, ``k_layernorm``): StableLM and Phi(-2)."""
    dim = layer.head_dim
    query, key = heads_first(layer.q_proj(hidden), dim), heads_first(layer.k_proj(hidden), dim)
    if layer.qk_layernorm:
        query, key = layer.q_layernorm(query), layer.k_layernorm(key)
    return query, key, heads_first(layer.v_proj(hidden), dim)


def sliding_window_refusal(config: Any) -> str | None:
    """A model whose every layer attends through a sliding window (Mistral v0.1, Qwen with
    ``use_sliding_window`` from layer 0): no layer a method could change; sliding layers beside full ones
    keep their own attention (:func:`full_attention_layers`)."""
    if full_attention_layers(config):
        return None
    facts = ModelFacts.from_config(config)
    return (
        f"{facts.model_type}: every layer is a sliding-window layer (window {facts.sliding_window}), so no "
        "layer is left for a method to change (only --method rope runs on it)"
    )


def _check_family(family: AttentionFamily) -> None:
    """A family is an :class:`AttentionFamily` claiming classes and model types no other family claims, so
    that which family a layer or a config belongs to never depends on the order of registration."""
    if not isinstance(family, AttentionFamily):
        raise TypeError(f"{family!r}: a model family is a lampe_eval.families.AttentionFamily")
    for other in FAMILIES.values():
        claimed = sorted(
            ({*family.classes} & {*other.classes}) | ({*family.model_types} & {*other.model_types})
        )
        if claimed:
            raise ValueError(
                f"model family {family.name!r} claims {', '.join(claimed)}, which model family "
                f"{other.name!r} claims already (FAMILIES.remove it first to replace it)"
            )


# Every family by name: each module of lampe_eval/families adds its own on import, a module of one's own
# when --import (imports=) loads it.
FAMILIES: InstanceRegistry[AttentionFamily] = InstanceRegistry("model family", check=_check_family)
