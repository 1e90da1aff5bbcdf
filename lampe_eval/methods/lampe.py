"""LaMPE: length-aware mapping length + head/middle/tail multi-grained attention (paper Sec. 3).

For input length l the mapping length is the scaled sigmoid m = L / (1 + exp(-(a*l + b))), clamped
to [s1 + s2 + 1, l]. Three distance bands d = i - j (paper Sec. 3.2):

* head   d <= s1:             true positions (P_q = i, P_k = j)
* middle s1 < d < l - s2:     P_q = floor(k*i + s1*(1 - k)), P_k = floor(k*j), k = (m-s1-s2)/(l-s1-s2)
* tail   d >= l - s2:         P_q = m - l + i, P_k = j

Generation: like the official code, l (hence m, k) is frozen at the prompt length and generated
tokens extend the same linear maps; ``remap_each_step=True`` re-derives everything from the growing
length instead (exact thanks to the un-rotated key cache). ``mscale`` is the official code's factor
on cos and sin (0.1 ln 2 + 1, logits x 1.1434); set it to 1 for the paper's plain formulas.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..attention import Band, Segment
from ..errors import LampeEvalError
from .base import METHODS, PositionMethod, RopeBase

OFFICIAL_MSCALE = 0.1 * math.log(2) + 1
# Shape of the official Llama-3-8B fit (a per token at an 8K window, b), rescaled to any window.
_LLAMA3_A_TIMES_WINDOW = 1.0493097327094324e-04 * 8192
_LLAMA3_B = -2.466638011138158


def mapping_length(l: int, L: float, a: float, b: float, s1: int, s2: int) -> int:
    """The paper's m(l), clamped to [s1 + s2 + 1, l]."""
    m = L / (1.0 + math.exp(-(a * l + b)))
    return int(min(max(math.floor(m), s1 + s2 + 1), l))


def lampe_segments(l: int, m: int, s1: int, s2: int) -> list[Segment]:
    """The three segments for context length l and mapping length m (plain RoPE when m >= l)."""
    if m >= l:
        return [Segment("rope", Band(0))]
    # k = num / den; the floors are taken in exact integer arithmetic (float64 is one off at some 64K
    # positions): floor(k*i + s1*(1 - k)) = (num*i + s1*(l - m)) // den, floor(k*j) = (num*j) // den
    num, den = m - s1 - s2, l - s1 - s2

    def middle_q(i: torch.Tensor) -> torch.Tensor:
        return torch.div(i.long() * num + s1 * (l - m), den, rounding_mode="floor").float()

    def middle_k(j: torch.Tensor) -> torch.Tensor:
        return torch.div(j.long() * num, den, rounding_mode="floor").float()

    def tail_q(i: torch.Tensor) -> torch.Tensor:
        return (i + (m - l)).float()

    return [
        Segment("head", Band(0, s1)),
        Segment("middle", Band(s1 + 1, l - s2 - 1), middle_q, middle_k),
        Segment("tail", Band(l - s2), tail_q),
    ]


@METHODS.register("lampe")
@dataclass
class LaMPE(PositionMethod):
    summary = (
        "sigmoid mapping length m(l) + head/middle/tail multi-grained positions (the paper); "
        "remap_each_step=true re-rotates every cached key at each step: slower decoding"
    )

    L: float  # sigmoid maximum, in tokens of mapping length (paper: <= 3/4 of the window)
    a: float
    b: float
    s1: int  # head (local) window
    s2: int  # tail window
    mscale: float = OFFICIAL_MSCALE
    m: int = 0  # > 0: use this fixed mapping length instead of the sigmoid
    identity_within_window: bool = True  # inputs no longer than the window keep plain positions
    remap_each_step: bool = False

    @classmethod
    def default_params(cls, window: int, target_length: int | None) -> dict:
        return {
            "L": 0.75 * window,
            "a": _LLAMA3_A_TIMES_WINDOW / window,
            "b": _LLAMA3_B,
            "s1": max(1, window // 16),
            "s2": max(1, min(1024, window // 64)),
        }

    def validate(self) -> None:
        if self.s1 < 0 or self.s2 < 1:
            raise LampeEvalError("lampe: s1 must be >= 0 and s2 >= 1 (the paper: a zero tail hurts)")
        if self.s1 + self.s2 >= self.L:
            raise LampeEvalError(f"lampe: L={self.L} must exceed s1 + s2 = {self.s1 + self.s2}")

    def mapping_length_for(self, l: int, window: int) -> int:
        if self.identity_within_window and l <= window:
            return l
        if self.m > 0:
            return int(min(max(self.m, self.s1 + self.s2 + 1), l))
        return mapping_length(l, self.L, self.a, self.b, self.s1, self.s2)

    def segments(self, base: RopeBase, context_length: int, kv_len: int) -> list[Segment]:
        l = kv_len if self.remap_each_step else context_length
        return lampe_segments(l, self.mapping_length_for(l, base.window), self.s1, self.s2)

    def fixed_key_positions(self) -> bool:
        return not self.remap_each_step  # remapping moves every key at every step
