"""LongRoPE (Ding et al. 2024, arXiv 2402.13753): a rescale factor per RoPE frequency.

inv_freq_i = 1 / (lambda_i * theta^(2i/D)) with lambda = ``long_factor`` beyond the original window
L0, ``short_factor`` within it, and cos/sin multiplied by the attention factor
sqrt(1 + ln(s) / ln(L0)) (1 when s <= 1), s = ``factor``: transformers' ``_compute_longrope_parameters``
(which this calls) and the official ``rope/longrope.py`` ("su" magnitude scaling), microsoft/LongRoPE.

Factors: from the model config when it ships ``longrope`` (Phi-3 style: its own factors and attention
factor, as transformers computes them), else from the parameters. Without either, the defaults are
LongRoPE's own starting point for its evolutionary search (``evolution/search.py``, "Generate initial
factors by YaRN"): long lambda_i = 1 + (s - 1) * ramp_i with YaRN's ramp (beta_fast 32, beta_slow 1,
L0 = window) and short lambda_i = 1 (plain RoPE within the window). The searched factors of a real
LongRoPE model are better; pass them as ``-p long_factor=[...]`` (one per frequency, D/2 values).

Short or long: transformers switches on each forward's length (and Phi-3 drops its cache when a
sequence crosses L0, since cached keys keep the old rotation). Here the choice is fixed per run,
``long`` = target length > window by default, factor > 1 without a target length (vLLM likewise fixes it
from the maximum model length), so prefill, decode and the cache always agree.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import LampeEvalError
from .base import METHODS, RopeBase
from .frequency import KEEP, _Factor, check_model_scaling, hf_frequencies


def yarn_ramp(dim: int, theta: float, window: int, beta_fast: float = 32.0, beta_slow: float = 1.0):
    """YaRN's interpolation ramp per frequency (0: kept, 1: fully interpolated), with the official
    YaRN code's truncated correction range (as transformers' ``yarn`` and LongRoPE's ``rope/yarn.py``)."""

    def correction_dim(rotations: float) -> float:
        return dim * math.log(window / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low = max(math.floor(correction_dim(beta_fast)), 0)
    high: float = min(math.ceil(correction_dim(beta_slow)), dim - 1)
    if low == high:
        high += 0.001  # as the official code: avoid a division by zero
    return ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)


def _as_factors(value: Any) -> tuple[float, ...] | None:
    if value is None or value == "":
        return None
    if isinstance(value, str):
        value = value.strip("[]() ").split(",")
    try:
        return tuple(float(v) for v in value)
    except (TypeError, ValueError) as err:
        raise LampeEvalError(f"longrope: factors must be a list of numbers, got {value!r}") from err


@METHODS.register("longrope")
@dataclass
class LongRoPE(_Factor):
    display_order = 76
    summary = "per-frequency rescale factors (short/long) + attention factor (Ding et al. 2024)"

    long: bool = False  # use the long factors (default: target length > window)
    short_factor: tuple[float, ...] | None = None
    long_factor: tuple[float, ...] | None = None
    attention_factor: float = 0.0  # 0: LongRoPE's sqrt(1 + ln(factor) / ln(L0)), or the model's own

    @classmethod
    def default_params(cls, window: int, target_length: int | None, given: Mapping[str, Any]) -> dict:
        derived = super().default_params(window, target_length, given)
        # long when the run goes past the window: the target length, or without one the factor's length
        factor = given.get("factor", derived["factor"])
        long = target_length > window if target_length else factor > 1
        return {**derived, "long": long}

    def __post_init__(self) -> None:
        self.short_factor = _as_factors(self.short_factor)
        self.long_factor = _as_factors(self.long_factor)

    def validate(self) -> None:
        super().validate()
        for factors in (self.short_factor, self.long_factor):
            if factors is not None and min(factors) <= 0:
                raise LampeEvalError("longrope: rescale factors must be > 0")

    def frequencies(self, base: RopeBase, kv_len: int):
        check_model_scaling(self, base, also_composes_with=("longrope",))
        half = base.rotary_dim // 2
        max_positions: int | None
        if base.rope_type == "longrope" and self.model_scaling == KEEP:
            shipped = dict(base.rope_parameters)
            window = int(shipped.get("original_max_position_embeddings") or base.window)
            params, max_positions = shipped, None  # None: the model's own max_position_embeddings
        else:
            window = base.window
            params = {
                "rope_type": "longrope",
                "factor": self.factor,
                "original_max_position_embeddings": window,
            }
            max_positions = int(window * self.factor)
            ramp = yarn_ramp(base.rotary_dim, base.theta, window)
            params["short_factor"] = [1.0] * half
            params["long_factor"] = (1 + (self.factor - 1) * ramp).tolist()
        if self.short_factor is not None:
            params = {**params, "short_factor": list(self.short_factor)}
        if self.long_factor is not None:
            params = {**params, "long_factor": list(self.long_factor)}
        if self.attention_factor > 0:
            params = {**params, "attention_factor": self.attention_factor}
        for key in ("short_factor", "long_factor"):
            if len(params[key]) != half:
                raise LampeEvalError(
                    f"longrope: {key} needs {half} values (head_dim / 2), got {len(params[key])}"
                )
        # transformers picks the long factors when the sequence is longer than the original window
        seq_len = window + 1 if self.long else None
        return hf_frequencies(base, {**params, "rope_type": "longrope"}, max_positions, seq_len)
