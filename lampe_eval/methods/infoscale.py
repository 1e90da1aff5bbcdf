"""InfoScale: an attention temperature that keeps attention entropy at its trained level, on top of any
method (``--param infoscale=true``).

Li et al., "Information Entropy Invariance: Enhancing Length Extrapolation in Attention Mechanisms"
(arXiv 2501.08570); official code HT-NEKO/Information-Entropy-Invariance, ``model/my_gau_alpha_eval/
layer.py`` (``normalization == "InfoScale"``): the logits of a query that attends over ``l`` keys are
multiplied by

    sqrt(1 - l^(-2/d)) / sqrt(1 - L^(-2/d))

with ``d`` the head dimension and ``L`` the training length. The official model (GAU-alpha, bidirectional)
gives every query the number of keys of its sequence; in a causal model the query at absolute index ``i``
attends over ``l = i + 1`` keys. The models here were trained without the factor, so a query that sees at
most ``L`` keys (``l <= L``) keeps the factor 1 (the factor would be under 1 there, a distribution the model
never saw); past ``L`` it grows slowly (d = 64, L = 8192: 1.063 at l = 4L, 1.120 at 16L). It multiplies
whatever per-query scale the method has (ReRoPE's log-n, DCA's), as a scale on the rotated query.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import torch

from ..attention import AttentionPlan

QueryScale = Callable[[torch.Tensor], torch.Tensor]


def infoscale_factor(head_dim: int, window: int) -> QueryScale:
    """Per absolute query index ``i``: the InfoScale factor for ``l = i + 1`` keys, at least 1."""
    exponent = -2.0 / head_dim
    trained = math.sqrt(1.0 - window**exponent)

    def factor(i: torch.Tensor) -> torch.Tensor:
        keys = i.double() + 1.0
        return torch.clamp(torch.sqrt(1.0 - keys.pow(exponent)) / trained, min=1.0).float()

    return factor


def with_infoscale(plan: AttentionPlan, head_dim: int, window: int) -> AttentionPlan:
    """``plan`` with InfoScale's factor multiplied into its per-query scale."""
    factor = infoscale_factor(head_dim, window)
    own = plan.query_scale
    scale: QueryScale = factor if own is None else (lambda i: own(i) * factor(i))
    return dataclasses.replace(plan, query_scale=scale, _cache={}, _groups=None)
