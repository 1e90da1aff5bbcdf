"""MrRoPE (Tian et al., "MrRoPE: Mixed-radix Rotary Position Embedding", ICLR 2026, arXiv 2601.22181):
YaRN's three bands of frequencies, its correction range and its attention temperature, with the middle band
converted by a uniform (``variant=uni``, MrRoPE-Uni) or progressive (``variant=pro``, MrRoPE-Pro) radix
schedule instead of YaRN's linear blend.

The paper's framework (Sec. 3, the mixed-radix rotation angle): frequency j (1-indexed, D_r = D/2 of them)
turns at ``m * b^(-(j-1)/D_r) / prod_{d=1}^{j-1} lambda_d``, with ``lambda_d = 1`` outside the middle band
``d_l <= d < d_h`` and, inside it, ``lambda_d = S^(1/(d_h - d_l))`` (Uni) or
``lambda_d = S^(2 (1 + d - d_l) / ((1 + d_h - d_l)(d_h - d_l)))`` (Pro: the exponents an arithmetic sequence
summing to 1, so the lowest frequencies get the larger factor). The cumulative exponent of frequency j is
then, with ``n = d_h - d_l`` and ``q = clip(j - d_l, 0, n)``::

    Uni: q / n        Pro: q (q + 1) / (n (n + 1))

from 0 (kept) to 1 (divided by S, position interpolation). ``d_l`` and ``d_h`` are YaRN's: the 0-indexed
correction range ``low`` / ``high`` of beta_fast = 32 and beta_slow = 1 rotations over the pretraining
window (floor / ceil, clamped), numbered from 1 (``d_l = low + 1``), so the kept and the fully interpolated
frequencies are YaRN's own (frequency ``low`` kept, ``high`` divided by S) and Uni's exponent is YaRN's ramp
``(i - low) / (high - low)``. The authors' code (``mattian7/mrRoPE``, ``scaled_rope/LlamaYaRNRadix.py``:
``yarn_radix`` = Uni, ``yarn_radix3`` = Pro) computes the same tables from the same 0-indexed range.
The cos/sin factor is YaRN's 0.1 ln S + 1 (``attention_factor`` > 0 overrides it), as in that code
(``get_mscale(scale) * attn_factor``). docs/methods-extra.md has the sources.

A rope type of its own, like ``yarn``: on a model that ships a scaling of its own it refuses unless
``model_scaling=replace``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..errors import LampeEvalError
from .base import METHODS, RopeBase
from .frequency import _Factor, check_model_scaling, plain_frequencies

VARIANTS = ("uni", "pro")


def correction_range(
    dim: int, theta: float, window: int, beta_fast: float, beta_slow: float
) -> tuple[int, int]:
    """YaRN's 0-indexed band (low, high): floor / ceil of the frequency index at beta_fast / beta_slow
    rotations over the window, clamped to [0, dim - 1] (transformers' ``find_correction_range``)."""

    def correction_dim(rotations: float) -> float:
        return dim * math.log(window / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    return max(math.floor(correction_dim(beta_fast)), 0), min(math.ceil(correction_dim(beta_slow)), dim - 1)


def radix_exponents(count: int, low: int, high: int, variant: str) -> torch.Tensor:
    """Per frequency i (0-indexed, ``count`` of them): the cumulative exponent e_i of S (frequency / S^e_i).
    A band of no width (high <= low) keeps the frequencies up to ``low`` and interpolates the rest, as
    YaRN's ramp does then."""
    i = torch.arange(count, dtype=torch.float64)
    n = high - low
    if n <= 0:
        return (i > low).double()
    q = (i - low).clamp(0, n)
    if variant == "uni":
        return q / n
    return q * (q + 1) / (n * (n + 1))


@METHODS.register("mrrope")
@dataclass
class MrRoPE(_Factor):
    display_order = 42
    summary = (
        "mixed-radix RoPE: YaRN's bands, middle band by a uniform/progressive radix schedule (ICLR 2026)"
    )

    variant: str = "pro"  # uni: MrRoPE-Uni, pro: MrRoPE-Pro (the paper's method)
    beta_fast: float = 32.0  # YaRN's alpha (d_l): rotations over the window of the last kept frequency
    beta_slow: float = 1.0  # YaRN's beta (d_h): rotations of the first fully interpolated one
    attention_factor: float = 0.0  # 0: YaRN's 0.1 ln(factor) + 1

    def validate(self) -> None:
        super().validate()
        if self.variant not in VARIANTS:
            raise LampeEvalError(
                f"mrrope: variant must be one of {', '.join(VARIANTS)}, not {self.variant!r}"
            )
        if not self.beta_fast > self.beta_slow > 0:
            raise LampeEvalError("mrrope: beta_fast must be greater than beta_slow, and beta_slow > 0")
        if self.attention_factor < 0:
            raise LampeEvalError("mrrope: attention_factor must be >= 0 (0: YaRN's 0.1 ln(factor) + 1)")

    def temperature(self) -> float:
        if self.attention_factor > 0:
            return self.attention_factor
        return 0.1 * math.log(self.factor) + 1.0 if self.factor > 1 else 1.0

    def exponents(self, base: RopeBase) -> torch.Tensor:
        dim = base.rotary_dim
        low, high = correction_range(dim, base.theta, base.window, self.beta_fast, self.beta_slow)
        return radix_exponents(dim // 2, low, high, self.variant)

    def frequencies(self, base: RopeBase, kv_len: int):
        check_model_scaling(self, base)
        plain = plain_frequencies(base.theta, base.rotary_dim).double()
        inv_freq = plain * torch.tensor(self.factor, dtype=torch.float64) ** -self.exponents(base)
        return inv_freq.float(), self.temperature()
