"""Frequency-scaling methods: PI (linear), NTK-aware, dynamic NTK, YaRN, NTK-by-parts.

They keep true positions and change RoPE's inverse frequencies (and, for YaRN, the attention
temperature). transformers' own ``ROPE_INIT_FUNCTIONS`` compute linear, dynamic and YaRN from a
copy of the model config; static NTK (absent from transformers) is the YaRN paper's eq. 16:
theta' = theta * s^(D / (D - 2)). ``factor`` defaults to target length / pretraining window.

**A model's own rope scaling** (Llama-3.1's ``llama3``, a ``yarn`` or ``longrope`` config) is never
dropped silently (``model_scaling``, default ``keep``):

* ``linear`` divides the model's own frequencies by the factor (positions / s on top of its scaling);
* ``ntk`` and ``dynamic_ntk`` raise ``rope_theta`` and recompute the model's own rope type from it,
  as transformers does when one edits ``rope_theta`` in such a config;
* ``yarn``, ``ntk_by_parts``, ``llama3`` and ``longrope`` are rope types themselves: they would replace
  the model's, and two frequency scalings do not stack (transformers defines no composition), so on
  such a model they refuse with a one-line error.

``model_scaling=replace`` rebuilds from ``rope_theta`` alone, dropping the model's scaling on purpose
(what LaMPE's InfiniteBench driver did for YaRN on Llama-3.1).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from ..errors import LampeEvalError
from .base import METHODS, FrequencyMethod, RopeBase

KEEP, REPLACE = "keep", "replace"


def default_factor(window: int, target_length: int | None) -> float:
    return max(1.0, (target_length or window) / window)


def plain_frequencies(theta: float, dim: int) -> torch.Tensor:
    """Unscaled RoPE, with transformers' arithmetic (``compute_default_rope_parameters``)."""
    return 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))


def _init_config(base: RopeBase, rope_parameters: Mapping[str, Any], max_positions: int | None = None) -> Any:
    """What transformers' rope init functions take: a copy of the model's config carrying
    ``rope_parameters`` (and ``max_positions`` as ``max_position_embeddings``; None: the model's own)."""
    config = copy.deepcopy(base.config)
    config.rope_parameters = dict(rope_parameters)
    if max_positions is not None:
        config.max_position_embeddings = max_positions
    return config


def own_frequencies(base: RopeBase, kv_len: int, theta: float | None = None) -> tuple[torch.Tensor, float]:
    """The model's own frequencies and attention factor, as transformers computes them for a sequence
    of ``kv_len`` tokens (its own rope type, e.g. llama3), optionally from another ``rope_theta``."""
    theta = base.theta if theta is None else theta
    if base.rope_type == "default":
        return plain_frequencies(theta, base.rotary_dim), 1.0
    config = _init_config(base, {**base.rope_parameters, "rope_theta": theta})
    inv_freq, factor = ROPE_INIT_FUNCTIONS[base.rope_type](config, torch.device("cpu"), seq_len=kv_len)
    return inv_freq.float(), float(factor)


def hf_frequencies(
    base: RopeBase, rope_parameters: dict[str, Any], max_positions: int | None, seq_len: int | None = None
):
    """Run transformers' rope init function on a config copy carrying ``rope_parameters`` (over the model's
    ``rope_theta``) and ``max_positions`` (None: the model's own ``max_position_embeddings``)."""
    own = base.rope_parameters
    # a partial rotary head keeps its rotary dimension (GPT-NeoX's configs hold it here alone)
    partial = {key: own[key] for key in ("partial_rotary_factor",) if key in own}
    config = _init_config(base, {"rope_theta": base.theta, **partial, **rope_parameters}, max_positions)
    fn = ROPE_INIT_FUNCTIONS[rope_parameters["rope_type"]]
    inv_freq, factor = (
        fn(config, torch.device("cpu"), seq_len=seq_len) if seq_len else fn(config, torch.device("cpu"))
    )
    return inv_freq.float(), float(factor)


def check_model_scaling(method: Any, base: RopeBase, also_composes_with: tuple[str, ...] = ()) -> None:
    """For a method that is a rope type itself: refuse a model with its own scaling unless
    ``model_scaling=replace`` (``also_composes_with``: own rope types the method does take over)."""
    own = base.rope_type
    if method.model_scaling == KEEP and own not in ("default", *also_composes_with):
        raise LampeEvalError(
            f"{method.name}: this model ships its own {own!r} rope scaling, which {method.name} would "
            "replace (two frequency scalings do not stack); use -p model_scaling=replace to drop it "
            "on purpose, or linear/ntk/dynamic_ntk, which compose with it"
        )


def source_frequencies(
    model_scaling: str, base: RopeBase, kv_len: int, theta: float | None = None
) -> tuple[torch.Tensor, float]:
    """What a frequency method changes: the model's own frequencies (``keep``) or plain RoPE (``replace``)."""
    if model_scaling == REPLACE:
        return plain_frequencies(base.theta if theta is None else theta, base.rotary_dim), 1.0
    return own_frequencies(base, kv_len, theta)


def validate_model_scaling(method: Any) -> None:
    if method.model_scaling not in (KEEP, REPLACE):
        raise LampeEvalError(f"{method.name}: model_scaling must be {KEEP!r} or {REPLACE!r}")


@dataclass
class _Factor(FrequencyMethod):
    factor: float
    model_scaling: str = KEEP

    @classmethod
    def default_params(cls, window: int, target_length: int | None, given: Mapping[str, Any]) -> dict:
        return {"factor": default_factor(window, target_length)}

    def validate(self) -> None:
        if self.factor < 1:
            raise LampeEvalError(f"{self.name}: factor must be >= 1")
        validate_model_scaling(self)

    def source(self, base: RopeBase, kv_len: int, theta: float | None = None) -> tuple[torch.Tensor, float]:
        return source_frequencies(self.model_scaling, base, kv_len, theta)


@METHODS.register("linear")
@dataclass
class Linear(_Factor):
    display_order = 70
    summary = "position interpolation: positions / factor (Chen et al. 2023), a control"

    def frequencies(self, base: RopeBase, kv_len: int):
        inv_freq, attention = self.source(base, kv_len)
        return inv_freq / self.factor, attention


def ntk_theta(theta: float, factor: float, dim: int) -> float:
    """NTK-aware base (YaRN paper eq. 16); transformers' dynamic NTK uses the same exponent."""
    return theta * factor ** (dim / (dim - 2))


@METHODS.register("ntk")
@dataclass
class NTK(_Factor):
    display_order = 50
    summary = "NTK-aware base scaling theta * factor^(D/(D-2)) (static)"

    def frequencies(self, base: RopeBase, kv_len: int):
        return self.source(base, kv_len, ntk_theta(base.theta, self.factor, base.rotary_dim))


@METHODS.register("dynamic_ntk")
@dataclass
class DynamicNTK(_Factor):
    display_order = 60
    summary = (
        "NTK base rescaled to the current length (transformers 'dynamic'); exact: re-rotates every cached "
        "key at each step: decoding 1.5x (4K) to 3x (16K) slower on CPU (docs/gpu-performance.md)"
    )

    @classmethod
    def default_params(cls, window: int, target_length: int | None, given: Mapping[str, Any]) -> dict:
        return {"factor": 2.0}

    def frequencies(self, base: RopeBase, kv_len: int):
        if kv_len <= base.window:
            return self.source(base, kv_len)
        # transformers' _compute_dynamic_ntk_parameters, with max_position_embeddings = the window
        scale = (self.factor * kv_len / base.window) - (self.factor - 1)
        return self.source(base, kv_len, ntk_theta(base.theta, scale, base.rotary_dim))

    def fixed_key_positions(self) -> bool:
        return False  # frequencies follow the length: cached keys are re-rotated every step


@dataclass
class _NTKByParts(_Factor):
    """transformers' ``yarn`` with the window as the original length; subclasses set the temperature."""

    beta_fast: float = 32.0
    beta_slow: float = 1.0

    def temperature(self) -> float:
        """cos/sin factor; 0: transformers' default 0.1 ln(factor) + 1."""
        raise NotImplementedError

    def frequencies(self, base: RopeBase, kv_len: int):
        check_model_scaling(self, base)
        params: dict[str, Any] = {
            "rope_type": "yarn",
            "factor": self.factor,
            "original_max_position_embeddings": base.window,
            "beta_fast": self.beta_fast,
            "beta_slow": self.beta_slow,
        }
        if self.temperature() > 0:
            params["attention_factor"] = self.temperature()
        return hf_frequencies(base, params, int(base.window * self.factor))


@METHODS.register("yarn")
@dataclass
class YaRN(_NTKByParts):
    display_order = 40
    summary = "NTK-by-parts frequencies + attention temperature 0.1 ln(s) + 1 (Peng et al. 2023)"

    attention_factor: float = 0.0  # 0: YaRN's default 0.1 * ln(factor) + 1

    def temperature(self) -> float:
        return self.attention_factor


@METHODS.register("ntk_by_parts")
@dataclass
class NTKByParts(_NTKByParts):
    display_order = 72
    summary = "YaRN's per-frequency interpolation without its temperature (attention factor 1)"

    def temperature(self) -> float:
        return 1.0
