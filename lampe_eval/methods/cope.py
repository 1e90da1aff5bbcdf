"""CoPE (Li et al. 2026, arXiv 2602.05258; official code hrlics/CoPE ``modeling_cope.py``,
``LlamaRotaryEmbedding.__init__``): RoPE's ``low`` lowest frequencies (the last ``min(low, D/2)``
inverse frequencies; 20 in the official code, ``clip_low_n``) multiplied by a raised cosine,
``0.5 (1 + cos(linspace(0, pi, n)))``: the first of them kept whole, the lowest set to 0, so the
slowest rotations (the ones a model never saw complete within its window) stop carrying position.
``clip=hard`` is the paper's HardClip ablation (``use_hardclip``): those frequencies set to 0 at once.

The taper multiplies the model's own frequencies (its rope type's, e.g. Llama-3.1's ``llama3``), as the
official code applies it after ``rope_init_fn``; the attention factor is the model's own
(``model_scaling=replace``: plain RoPE from ``rope_theta``, as for the other frequency methods). CoPE's
checkpoints were trained with it: applied to a model trained without it, it is a training-free control
(a frequency change of the longest wavelengths alone), not the paper's trained result.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import LampeEvalError
from .base import METHODS, FrequencyMethod, RopeBase
from .frequency import KEEP, source_frequencies, validate_model_scaling

COSINE, HARD = "cosine", "hard"


def tapered(inv_freq: torch.Tensor, low: int, clip: str) -> torch.Tensor:
    """``inv_freq`` with its last ``min(low, len)`` entries multiplied by CoPE's raised cosine (``cosine``)
    or set to 0 (``hard``)."""
    count = min(low, inv_freq.numel())
    if count == 0:
        return inv_freq
    out = inv_freq.clone()
    if clip == HARD:
        out[-count:] = 0.0
    else:
        theta = torch.linspace(0.0, torch.pi, steps=count, dtype=torch.float32)
        out[-count:] = out[-count:] * (0.5 * (1.0 + torch.cos(theta))).to(out.dtype)
    return out


@METHODS.register("cope")
@dataclass
class CoPE(FrequencyMethod):
    display_order = 76
    summary = (
        "CoPE: the 20 lowest RoPE frequencies tapered to 0 by a raised cosine (trained in its paper; a "
        "training-free control here); clip=hard: set to 0"
    )

    low: int = 20
    clip: str = COSINE
    model_scaling: str = KEEP  # replace: taper plain RoPE, dropping the model's own scaling

    def validate(self) -> None:
        if self.low < 0:
            raise LampeEvalError(f"cope: low must be >= 0 (frequencies tapered), got {self.low}")
        if self.clip not in (COSINE, HARD):
            raise LampeEvalError(f"cope: clip must be {COSINE!r} or {HARD!r}, got {self.clip!r}")
        validate_model_scaling(self)

    def frequencies(self, base: RopeBase, kv_len: int):
        inv_freq, attention = source_frequencies(self.model_scaling, base, kv_len)
        return tapered(inv_freq, self.low, self.clip), attention
