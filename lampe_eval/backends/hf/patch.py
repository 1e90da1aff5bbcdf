"""Install a method into a Hugging Face causal LM's attention layers, and remove it exactly.

Generation with a KV cache: once the prompt is prefilled, a method's plan is fixed (LaMPE's l, SelfExtend's
G, DCA's chunks...) and every key keeps its position, so the cache holds keys *already rotated*, one copy
per distinct key map (``attention/kv_cache.py``), and each step rotates only the new query and key: decoding
costs about what the unpatched model's does. Methods whose positions move with every step
(``Method.fixed_key_positions()`` false: dynamic NTK, LaMPE with ``remap_each_step``) cache *un-rotated*
keys instead and re-rotate all of them at every step: exact, but slower. Without a cache every forward is
a prefill of the whole sequence.

Which cache: generate with ``past_key_values=new_cache(model, prompt + new tokens)``. That is a
:class:`~lampe_eval.attention.kv_cache.RotatedKeyCache` (the primary path): it carries the generation's
budget and state and keeps its rotated key copies consistent through crop, beam search and batch
selection. A cache made elsewhere (transformers' own ``DynamicCache``, as lm-evaluation-harness's
``generate`` makes) still works through the fallback: the copies are kept in a table by cache object,
changes to the cache are noticed after the fact, and the budget comes from :func:`generation_budget`.

Supported: the attention layers of the families in ``lampe_eval/families`` (Llama, Mistral, Qwen2, Qwen3,
OLMo 2, Phi-3/4, Gemma 3's global layers): each family says how its layer computes query, key and value
before RoPE, and which layers a method may change. Anything else raises UnsupportedModelError, and so does
a family's config that a method cannot run exactly.
"""

from __future__ import annotations

import logging
import types
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from ...attention import AttentionPlan, kernels, segmented_attention
from ...attention.engine import attend_rotated
from ...attention.kv_cache import (
    GenerationState,
    GrowingCache,
    GrowingLayer,
    RotatedKeyCache,
    RotatedKeys,
    SideCopies,
)
from ...errors import LampeEvalError, UnsupportedModelError
from ...families import AttentionFamily, attention_classes, family_of_layer, text_config
from ...methods.base import Method, RopeBase
from ...model_facts import ModelFacts
from ..plans import PlanCache
from ..rope_config import rope_base

log = logging.getLogger(__name__)

_STATE_ATTR = "_lampe_eval_patch_state"  # the PatchState of a patched model (see new_cache)


# FALLBACK only (caches not made by new_cache): the rotated key copies of every generation, by cache
# object; a new cache is a new generation. A RotatedKeyCache carries its own.
_GENERATIONS: weakref.WeakKeyDictionary[Any, tuple[PatchState, RotatedKeys]] = weakref.WeakKeyDictionary()


def new_cache(model: Any, total_length: int | None = None) -> Any:
    """The KV cache one generation of ``model`` should use, carrying the budget: a RotatedKeyCache when
    ``model`` is patched, else a GrowingCache (both keep the config's sliding-window layers)."""
    config = getattr(model, "config", None)
    # what generate itself would make (a config with sliding-window layers gets sliding layers), appending
    # in place
    decoder_config = text_config(config) if config is not None else None
    if getattr(model, _STATE_ATTR, None) is not None:
        return RotatedKeyCache(decoder_config, total_length)
    return GrowingCache(decoder_config, total_length)


@dataclass
class PatchState(PlanCache):
    """Shared by all layers of one patched model: the method's plans, and the bookkeeping of the
    generation under way."""

    context_length: int | None = None  # l of the latest sequence prefilled (the prompt length)
    # FALLBACK budget (prompt + new tokens) for caches that carry none, set by generation_budget
    total_length: int | None = None
    softcap: float | None = None  # Gemma 2's attention logit soft-capping (attn_logit_softcapping)
    kernel: str = "portable"  # the prefill kernel (``kernels.select``)

    def plan_for(self, q_start: int, kv_len: int) -> AttentionPlan:
        """The plan of a forward pass with no cache state: a pass from position 0 is a new sequence of
        prompt length l = ``kv_len`` (without a KV cache every generation step starts at 0, so l follows
        the growing sequence, as LaMPE's ``remap_each_step``)."""
        if q_start == 0:
            self.context_length = kv_len
        l = self.context_length if self.context_length is not None else kv_len
        return self.plan(l, kv_len, self.total_length)

    def generation(self, cache: Any, layer_idx: int, q_start: int, kv_len: int) -> GenerationState:
        """This cache's generation; a pass from position 0 starts a new one (l = ``kv_len``). A
        RotatedKeyCache carries it (and its budget); any other cache gets it from the fallback table."""
        primary_path = isinstance(cache, RotatedKeyCache)
        if primary_path:
            current = cache.generation
        else:  # FALLBACK: a cache made elsewhere
            entry = _GENERATIONS.get(cache)
            current = entry[1].generation if entry is not None else None
        if q_start == 0 and (current is None or current.owner is not self or layer_idx in current.started):
            budget = self.total_length  # the fallback's budget (generation_budget)
            if primary_path and cache.total_length is not None:
                budget = cache.total_length
            plan = self.plan(kv_len, kv_len, budget)
            reach = plan.reach(kv_len)
            current = GenerationState(
                owner=self,
                context_length=kv_len,
                primary=reach.index(min(reach)),  # the copy that reaches the oldest keys
                segments=len(plan.segments),
                keys_are_rotated=self.method.fixed_key_positions(),
                total_length=budget,
            )
            if primary_path:
                cache.generation = current
            else:
                _GENERATIONS[cache] = (self, RotatedKeys(current))
            self.context_length = kv_len
        if current is None or current.owner is not self:
            raise LampeEvalError(
                f"this KV cache was filled without the {self.method.name} patch (by the unpatched model or "
                "another method): start the generation from the prompt with the patched model"
            )
        current.started.add(layer_idx)
        if current.keys_are_rotated and current.segments != len(
            self.plan(current.context_length, kv_len, current.total_length).segments
        ):
            raise LampeEvalError(
                f"{self.method.name}: its segments changed during generation, so its fixed_key_positions() "
                "must be False"
            )
        return current


def kv_cache_bytes(cache: Any) -> int:
    """Bytes a KV cache holds: the Hugging Face cache's keys and values plus, for a patched model, the
    rotated key copies kept beside them."""
    total = 0
    for layer in getattr(cache, "layers", []):
        if isinstance(layer, GrowingLayer):
            total += layer.nbytes
            continue
        for tensor in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            if isinstance(tensor, torch.Tensor):
                total += tensor.nbytes
    if isinstance(cache, RotatedKeyCache):
        return total + cache.side_bytes()
    entry = _GENERATIONS.get(cache)  # FALLBACK
    return total + (entry[1].side_bytes() if entry else 0)


class PatchHandle:
    """Returned by :func:`apply_method`; ``remove()`` (or leaving the ``with`` block) restores the model."""

    def __init__(
        self, layers: list[torch.nn.Module], hooks: list[Any], state: PatchState | None, model: Any = None
    ) -> None:
        self.layers = layers
        self.hooks = hooks
        self.state = state
        self.model = model

    def remove(self) -> None:
        for layer in self.layers:
            if hasattr(layer, "_hf_hook"):  # accelerate's wrapper stays; it calls the class's forward again
                layer._old_forward = types.MethodType(type(layer).forward, layer)
            elif "forward" in vars(layer):
                del layer.forward  # back to the class's own forward
        for hook in self.hooks:
            hook.remove()
        if self.model is not None and getattr(self.model, _STATE_ATTR, None) is self.state:
            delattr(self.model, _STATE_ATTR)
        self.layers, self.hooks, self.model = [], [], None

    def __enter__(self) -> PatchHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def attention_layers(model: Any) -> list[torch.nn.Module]:
    supported = attention_classes()
    layers = [m for m in model.modules() if type(m).__name__ in supported]
    if not layers:
        names = sorted({type(m).__name__ for m in model.modules() if type(m).__name__.endswith("Attention")})
        raise UnsupportedModelError(
            f"unsupported architecture {getattr(model.config, 'model_type', type(model).__name__)!r} "
            f"(attention modules {names or 'none'}); supported: {', '.join(supported)}"
        )
    return layers


def attention_family(model: Any) -> AttentionFamily:
    """The family of ``model``'s attention layers; refused when its config cannot run a method exactly."""
    family = family_of_layer(attention_layers(model)[0])
    assert family is not None  # attention_layers found a registered class
    why = family.refusal(text_config(model.config))
    if why:
        raise UnsupportedModelError(why)
    return family


def _reject_padding(module: Any, args: tuple, kwargs: dict) -> None:
    mask = kwargs.get("attention_mask")
    if isinstance(mask, torch.Tensor) and mask.dim() == 2 and not bool(mask.all()):
        raise LampeEvalError("patched attention does not support padded batches: run one sequence at a time")


def apply_method(
    model: Any,
    method: Method,
    window: int | None = None,
    base: RopeBase | None = None,
    kernel: str | None = None,
) -> PatchHandle:
    """Patch every attention layer of ``model`` with ``method``. ``rope`` patches nothing. ``base``: the
    model's RoPE when the caller has it already (else read from the model); ``kernel``: the prefill kernel
    the caller chose (``kernels.select``; else this process's choice for the model's device and dtype)."""
    if method.kind == "baseline":
        return PatchHandle([], [], None)
    family = attention_family(model)
    layers = attention_layers(model)
    config = text_config(model.config)  # a multimodal model's decoder's (Gemma 3's text model)
    softcap = ModelFacts.from_config(config).softcap
    kernel = kernel or model_kernels(model).prefill
    state = PatchState(method=method, base=base or rope_base(model, window), softcap=softcap, kernel=kernel)
    if softcap:
        log.warning(
            "%s: soft-capped attention logits run on the portable attention path (exact; no fused kernel "
            "here computes them, so slower than the model's other layers)",
            config.model_type,
        )
    layers = [layers[i] for i in family.changed_layers(config, method.patched_layers(len(layers)))]
    forward = _make_forward(state, family)
    for layer in layers:
        if _is_patched(layer):
            raise LampeEvalError("this model is already patched: remove the previous method first")
    for layer in layers:
        bound = types.MethodType(forward, layer)
        if hasattr(layer, "_hf_hook"):
            # accelerate (device_map) wrapped ``forward`` to move inputs and weights to the layer's device
            # before calling ``_old_forward``: replace what it calls, so its hook keeps running
            layer._old_forward = bound
        else:
            layer.forward = bound
    hooks = [getattr(model, "base_model", model).register_forward_pre_hook(_reject_padding, with_kwargs=True)]
    setattr(model, _STATE_ATTR, state)
    return PatchHandle(layers, hooks, state, model)


@contextmanager
def generation_budget(model: Any, total_length: int) -> Iterator[None]:
    """Tell a patched model's method how long the coming generation gets (prompt + new tokens), e.g.
    for LaMPE's ``identity_within_window``; no-op on an unpatched model. The FALLBACK for generations whose
    cache carries no budget (a cache not made by :func:`new_cache`, or made with ``total_length=None``);
    a RotatedKeyCache's own budget wins."""
    state = getattr(model, _STATE_ATTR, None)
    if state is None:
        yield
        return
    state.total_length = total_length
    try:
        yield
    finally:
        state.total_length = None


def _is_patched(layer: torch.nn.Module) -> bool:
    """A forward replaced on the instance (under accelerate's hook: the one the hook calls, if ours)."""
    if hasattr(layer, "_hf_hook"):
        return getattr(layer._old_forward, "lampe_eval_patch", False)
    return "forward" in vars(layer)


def _make_forward(state: PatchState, family: AttentionFamily):
    partial = state.partial_rotary
    heads, kv_heads = state.base.heads, state.base.kv_heads
    key_heads = state.method.key_heads(heads, kv_heads) if heads and kv_heads else None

    def forward(
        self: Any,
        hidden_states: torch.Tensor,
        position_embeddings: Any = None,
        attention_mask: Any = None,
        past_key_values: Any = None,
        layer_past: Any = None,  # GPT-NeoX's name for the cache
        **kwargs: Any,
    ) -> tuple[torch.Tensor, None]:
        cache = past_key_values if past_key_values is not None else layer_past
        batch, n, _ = hidden_states.shape
        query, key, value = family.project(self, hidden_states)
        if partial:  # a partial rotary head runs as a whole one (attention/partial.py)
            order = state.head_order(query.device)
            query, key = query[..., order], key[..., order]
        if key_heads is not None and key.shape[1] != key_heads:  # keys per query head (Method.key_heads)
            group = key_heads // key.shape[1]
            key, value = key.repeat_interleave(group, dim=1), value.repeat_interleave(group, dim=1)
        out = attend_patched(state, self.layer_idx, self.scaling, query, key, value, cache)
        return family.output(self, out.transpose(1, 2).reshape(batch, n, -1)), None

    forward.lampe_eval_patch = True  # type: ignore[attr-defined]
    return forward


def attend_patched(
    state: PatchState,
    layer_idx: int,
    scale: float,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cache: Any,
) -> torch.Tensor:
    """One patched layer's attention: un-rotated ``query`` [B, Hq, n, D], ``key``/``value`` [B, Hkv, n, D]
    of the new tokens, and the generation's KV ``cache`` (None: a pass over the whole sequence). The vLLM
    backend runs the same engine calls over its paged cache (``attention/paged.py``), which the tests hold
    equal to this."""
    n = query.shape[2]
    if cache is None:
        plan = state.plan_for(0, n)
        return segmented_attention(
            query, key, value, plan, 0, scale, softcap=state.softcap, kernel=state.kernel
        )
    q_start = cache.get_seq_length(layer_idx)
    generation = state.generation(cache, layer_idx, q_start, q_start + n)
    plan = state.plan(generation.context_length, q_start + n, generation.total_length)
    if generation.keys_are_rotated:
        return _attend_with_rotated_cache(
            layer_idx, scale, generation, plan, query, key, value, cache, q_start, state
        )
    # positions move every step: cache un-rotated keys, re-rotate them all
    key, value = _update(cache, key, value, layer_idx, q_start + n)
    return segmented_attention(
        query, key, value, plan, q_start, scale, softcap=state.softcap, kernel=state.kernel
    )


def placement(model: Any) -> tuple[torch.device, torch.dtype]:
    """Where ``model``'s weights are and in which dtype (CPU, fp32 for a stand-in without weights)."""
    parameter = next(model.parameters(), None)
    if parameter is None:
        return torch.device("cpu"), torch.float32
    return parameter.device, parameter.dtype


def model_kernels(model: Any) -> kernels.KernelChoice:
    """This process's kernels for ``model``'s patched layers (its device, dtype and soft-capped logits): what
    the HF backend records and hands :func:`apply_method`, and what a direct call of it runs."""
    config = getattr(model, "config", None)  # a test's stand-in model may have none
    features = kernels.Features(softcap=config is not None and ModelFacts.from_config(config).soft_capped)
    return kernels.select(*placement(model), features, kernels.override())


def _update(cache: Any, key: torch.Tensor, value: torch.Tensor, layer_idx: int, kv_len: int):
    key, value = cache.update(key, value, layer_idx)
    if key.shape[2] != kv_len:  # a pre-allocated (static) cache: its length is not l
        raise LampeEvalError(
            f"patched attention needs a dynamic KV cache; {type(cache).__name__} "
            f"returned {key.shape[2]} keys for {kv_len} positions (use the default DynamicCache)"
        )
    return key, value


def _attend_with_rotated_cache(
    idx: int,
    scale: float,
    generation: GenerationState,
    plan: AttentionPlan,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cache: Any,
    q_start: int,
    state: PatchState,
) -> torch.Tensor:
    """Rotate the new keys once per key copy (a decode step: one matmul for all copies), store them (the
    primary copy in the cache, the others beside it), attend, then drop what no later query can see."""
    kv_len = q_start + key.shape[2]
    rotated = plan.rotate_keys(key, q_start)
    side: SideCopies
    if isinstance(cache, RotatedKeyCache):  # primary path: the cache keeps its side copies consistent
        primary, value = _update(cache, rotated[generation.primary], value, idx, kv_len)
        side = cache.side_copies(idx)
    else:  # FALLBACK: a cache made elsewhere; notice whether it changed since our last write
        layers = getattr(cache, "layers", None)
        before = getattr(layers[idx], "keys", None) if layers and len(layers) > idx else None
        side = _GENERATIONS[cache][1].layer(idx, q_start, before)
        # such a cache appends by torch.cat, whose CUDA kernel copies the whole cache on a slow path when an
        # input is strided (a decode step's copies are column slices of one matmul): 4x the time per step
        primary, value = _update(cache, rotated[generation.primary].contiguous(), value, idx, kv_len)
    copies = side.extend(plan, generation.primary, rotated, primary, q_start)
    out = attend_rotated(
        query, copies, value, plan, q_start, scale, softcap=state.softcap, kernel=state.kernel
    )
    side.trim(plan, kv_len)
    return out
