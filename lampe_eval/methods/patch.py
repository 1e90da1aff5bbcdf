"""Install a method into a Hugging Face causal LM's attention layers, and remove it exactly.

The patched forward caches *un-rotated* keys (transformers caches rotated ones), so every method can
re-rotate keys at whatever positions the current step needs: decoding works for all of them, and
dynamic methods (dynamic NTK, LaMPE with ``remap_each_step``) are exact with a cache.

Supported: the Llama-style attention modules of Llama, Mistral and Qwen2 (same projections, full
rotary dimension, no per-head norms). Anything else raises UnsupportedModelError.
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from ..attention import AttentionPlan, segmented_attention
from ..errors import LampeEvalError, UnsupportedModelError
from .base import Method, RopeBase

SUPPORTED_ATTENTION = ("LlamaAttention", "MistralAttention", "Qwen2Attention")
_STATE_ATTR = "_lampe_eval_patch_state"  # the PatchState of a patched model (see generation_budget)


@dataclass
class PatchState:
    """Shared by all layers of one patched model."""

    method: Method
    base: RopeBase
    context_length: int | None = None  # l: the prompt length, frozen at prefill
    total_length: int | None = None  # prompt + new tokens of the running generation (generation_budget)
    _plan_key: tuple[int, int, int | None] | None = field(default=None, repr=False)
    _plan: AttentionPlan | None = field(default=None, repr=False)

    def plan_for(self, q_start: int, kv_len: int) -> AttentionPlan:
        # A pass from position 0 is a new sequence: its length is the prompt length l. Without a KV cache
        # every generation step starts at 0, so l follows the growing sequence (LaMPE then behaves as
        # remap_each_step=True); with a cache l stays frozen at the prompt length.
        if q_start == 0:
            self.context_length = kv_len
        context = self.context_length if self.context_length is not None else kv_len
        key = (context, kv_len, self.total_length)
        if key != self._plan_key:  # computed once per forward pass, shared by all layers
            self._plan = self.method.plan_with_budget(self.base, context, kv_len, self.total_length)
            self._plan_key = key
        assert self._plan is not None
        return self._plan


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
            if "forward" in vars(layer):
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


def rope_base(model: Any, window: int | None = None) -> RopeBase:
    """The model's own RoPE (frequencies as the model ships them, e.g. Llama-3.1's llama3 scaling)."""
    rotary = getattr(getattr(model, "model", model), "rotary_emb", None)
    if rotary is None or not hasattr(rotary, "inv_freq"):
        raise UnsupportedModelError(
            f"{type(model).__name__}: no rotary embedding found (is it a RoPE model?)"
        )
    config = model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    inv_freq = getattr(rotary, "original_inv_freq", rotary.inv_freq).detach().float().clone()
    if inv_freq.numel() * 2 != head_dim:
        raise UnsupportedModelError(
            f"{config.model_type}: partial rotary embeddings "
            f"(rotary dim {inv_freq.numel() * 2} of {head_dim}) are not supported"
        )
    from ..models import window_from_config

    return RopeBase(
        inv_freq=inv_freq,
        attention_scaling=float(rotary.attention_scaling),
        window=int(window or window_from_config(config)),
        head_dim=head_dim,
        config=config,
    )


def attention_layers(model: Any) -> list[torch.nn.Module]:
    layers = [m for m in model.modules() if type(m).__name__ in SUPPORTED_ATTENTION]
    if not layers:
        names = sorted({type(m).__name__ for m in model.modules() if type(m).__name__.endswith("Attention")})
        raise UnsupportedModelError(
            f"unsupported architecture {getattr(model.config, 'model_type', type(model).__name__)!r} "
            f"(attention modules {names or 'none'}); supported: {', '.join(SUPPORTED_ATTENTION)}"
        )
    return layers


def _check_config(model: Any) -> None:
    config = model.config
    if getattr(config, "use_sliding_window", True) and getattr(config, "sliding_window", None):
        if config.model_type == "qwen2" and not getattr(config, "use_sliding_window", False):
            return
        raise UnsupportedModelError(
            f"{config.model_type} with sliding-window attention ({config.sliding_window}) is not supported"
        )


def _reject_padding(module: Any, args: tuple, kwargs: dict) -> None:
    mask = kwargs.get("attention_mask")
    if isinstance(mask, torch.Tensor) and mask.dim() == 2 and not bool(mask.all()):
        raise LampeEvalError("patched attention does not support padded batches: run one sequence at a time")


def apply_method(model: Any, method: Method, window: int | None = None) -> PatchHandle:
    """Patch every attention layer of ``model`` with ``method``. ``rope`` patches nothing."""
    if method.kind == "baseline":
        return PatchHandle([], [], None)
    layers = attention_layers(model)
    _check_config(model)
    state = PatchState(method=method, base=rope_base(model, window))
    for layer in layers:
        if "forward" in vars(layer):
            raise LampeEvalError("this model is already patched: remove the previous method first")
        layer.forward = types.MethodType(_make_forward(state), layer)
    base_model = getattr(model, "model", model)
    hooks = [base_model.register_forward_pre_hook(_reject_padding, with_kwargs=True)]
    setattr(model, _STATE_ATTR, state)
    return PatchHandle(layers, hooks, state, model)


@contextmanager
def generation_budget(model: Any, total_length: int) -> Iterator[None]:
    """Tell a patched model's method how long the coming generation gets (prompt + new tokens), e.g.
    for LaMPE's ``identity_within_window``; no-op on an unpatched model."""
    state = getattr(model, _STATE_ATTR, None)
    if state is None:
        yield
        return
    state.total_length = total_length
    try:
        yield
    finally:
        state.total_length = None


def _make_forward(state: PatchState):
    def forward(
        self: Any,
        hidden_states: torch.Tensor,
        position_embeddings: Any = None,
        attention_mask: Any = None,
        past_key_values: Any = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, None]:
        batch, n, _ = hidden_states.shape
        shape = (batch, n, -1, self.head_dim)
        query = self.q_proj(hidden_states).view(shape).transpose(1, 2)
        key = self.k_proj(hidden_states).view(shape).transpose(1, 2)
        value = self.v_proj(hidden_states).view(shape).transpose(1, 2)
        q_start = 0
        if past_key_values is not None:
            q_start = past_key_values.get_seq_length(self.layer_idx)
            key, value = past_key_values.update(key, value, self.layer_idx)  # un-rotated keys
            if key.shape[2] != q_start + n:  # a pre-allocated (static) cache: its length is not l
                raise LampeEvalError(
                    f"patched attention needs a dynamic KV cache; {type(past_key_values).__name__} "
                    f"returned {key.shape[2]} keys for {q_start + n} positions (use the default DynamicCache)"
                )
        plan = state.plan_for(q_start, key.shape[2])
        out = segmented_attention(query, key, value, plan, q_start, self.scaling)
        out = out.transpose(1, 2).reshape(batch, n, -1)
        return self.o_proj(out), None

    return forward
