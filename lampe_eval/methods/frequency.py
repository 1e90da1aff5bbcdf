"""Frequency-scaling methods: PI (linear), NTK-aware, dynamic NTK, YaRN.

They keep true positions and change RoPE's inverse frequencies (and, for YaRN, the attention
temperature). transformers' own ``ROPE_INIT_FUNCTIONS`` compute linear, dynamic and YaRN from a
copy of the model config; static NTK (absent from transformers) is the YaRN paper's eq. 16:
theta' = theta * s^(D / (D - 2)). ``factor`` defaults to target length / pretraining window.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from ..errors import LampeEvalError
from .base import METHODS, FrequencyMethod, RopeBase


def default_factor(window: int, target_length: int | None) -> float:
    return max(1.0, (target_length or window) / window)


def _theta(base: RopeBase) -> float:
    rope = base.config.rope_parameters
    return float(rope["rope_theta"])


def hf_frequencies(
    base: RopeBase, rope_parameters: dict[str, Any], max_positions: int, seq_len: int | None = None
):
    """Run transformers' rope init function on a config copy carrying ``rope_parameters``."""
    config = copy.deepcopy(base.config)
    config.rope_parameters = {"rope_theta": _theta(base), **rope_parameters}
    config.max_position_embeddings = max_positions
    fn = ROPE_INIT_FUNCTIONS[rope_parameters["rope_type"]]
    inv_freq, factor = (
        fn(config, torch.device("cpu"), seq_len=seq_len) if seq_len else fn(config, torch.device("cpu"))
    )
    return inv_freq.float(), float(factor)


@dataclass
class _Factor(FrequencyMethod):
    factor: float

    @classmethod
    def default_params(cls, window: int, target_length: int | None) -> dict:
        return {"factor": default_factor(window, target_length)}

    def validate(self) -> None:
        if self.factor < 1:
            raise LampeEvalError(f"{self.name}: factor must be >= 1")


@METHODS.register("linear")
@dataclass
class Linear(_Factor):
    summary = "position interpolation: positions / factor (Chen et al. 2023), a control"

    def frequencies(self, base: RopeBase, kv_len: int):
        return hf_frequencies(base, {"rope_type": "linear", "factor": self.factor}, base.window)


@METHODS.register("ntk")
@dataclass
class NTK(_Factor):
    summary = "NTK-aware base scaling theta * factor^(D/(D-2)) (static)"

    def frequencies(self, base: RopeBase, kv_len: int):
        dim = base.head_dim
        theta = _theta(base) * self.factor ** (dim / (dim - 2))
        inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        return inv_freq, base.attention_scaling


@METHODS.register("dynamic_ntk")
@dataclass
class DynamicNTK(_Factor):
    summary = (
        "NTK base rescaled to the current length (transformers 'dynamic'); exact: re-rotates every cached "
        "key at each step, so decoding is slower (README: Speed and memory)"
    )

    @classmethod
    def default_params(cls, window: int, target_length: int | None) -> dict:
        return {"factor": 2.0}

    def frequencies(self, base: RopeBase, kv_len: int):
        if kv_len <= base.window:
            return base.inv_freq, base.attention_scaling
        return hf_frequencies(
            base, {"rope_type": "dynamic", "factor": self.factor}, base.window, seq_len=kv_len
        )

    def fixed_key_positions(self) -> bool:
        return False  # frequencies follow the length: cached keys are re-rotated every step


@METHODS.register("yarn")
@dataclass
class YaRN(_Factor):
    summary = "NTK-by-parts frequencies + attention temperature 0.1 ln(s) + 1 (Peng et al. 2023)"

    beta_fast: float = 32.0
    beta_slow: float = 1.0
    attention_factor: float = 0.0  # 0: YaRN's default 0.1 * ln(factor) + 1

    def frequencies(self, base: RopeBase, kv_len: int):
        params: dict[str, Any] = {
            "rope_type": "yarn",
            "factor": self.factor,
            "original_max_position_embeddings": base.window,
            "beta_fast": self.beta_fast,
            "beta_slow": self.beta_slow,
        }
        if self.attention_factor > 0:
            params["attention_factor"] = self.attention_factor
        return hf_frequencies(base, params, int(base.window * self.factor))
