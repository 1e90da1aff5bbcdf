"""STRING (An et al. 2024): shift well-trained small positions over the large, rarely-trained ones.

* d < S:  PE = d
* d >= S: PE = d - S + W (P_q = i - S + W, P_k = j)
S (``shift``) defaults to int(0.33 * window), W (``local``) to 128, as in the official README.
``mscale``: the official code's factor on cos and sin (0.1 ln 2 + 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..attention import Band, Segment
from ..errors import LampeEvalError
from .base import METHODS, PositionMethod, RopeBase


@METHODS.register("string")
@dataclass
class String(PositionMethod):
    summary = "shifted positions: d >= S is seen at d - S + W (An et al. 2024)"

    shift: int
    local: int = 128
    mscale: float = 0.1 * math.log(2) + 1

    @classmethod
    def default_params(cls, window: int, target_length: int | None) -> dict:
        return {"shift": int(0.33 * window), "local": min(128, window // 8)}

    def validate(self) -> None:
        if not 0 <= self.local < self.shift:
            raise LampeEvalError("string: need 0 <= local < shift")

    def segments(self, base: RopeBase, context_length: int, kv_len: int) -> list[Segment]:
        offset = self.local - self.shift
        return [
            Segment("diagonal", Band(0, self.shift - 1)),
            Segment("shifted", Band(self.shift), lambda i: (i + offset).float()),
        ]
