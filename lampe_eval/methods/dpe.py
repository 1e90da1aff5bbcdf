"""DPE, dimension-wise positional embeddings manipulation (Lu et al. 2025, arXiv 2504.18857).

Two passes merged by log-sum-exp, like SelfExtend but with a group size per group of RoPE dimensions:

* near  d < w:  true positions (P_q = i, P_k = j)
* far   d >= w: frequency f of dimension group g is rotated at P_q = floor(i / s_g) + w - w / s_g and
  P_k = floor(j / s_g) (s_g = ``scale_factors[g]``; group g holds frequencies
  ``dimension_groups[g] .. dimension_groups[g + 1] - 1`` of the head_dim / 2)

Official code: ``LuLuLuyi/DPE`` @ 46b85de, ``dpe_for_llama.py`` (``dpe_flash_forward``,
``atten_merge_forward``, ``concat_tensors``) and ``config/dpe_config.yaml`` (per model: local window 1024,
8 factors, groups [0, 8, ..., 64]); docs/methods.md 7. ``variant=official``: its prefill offset
w - w / s_g (float) and its decode offset w - w // s_g (integer), which differ when s_g does not divide w.
``variant=paper`` (default): the integer offset w - floor(w / s_g) in prefill and decode alike.

Defaults: w = min(1024, window // 8) (the official 1024 at 8K); one factor s for every group, the smallest
keeping the far positions below the window at the target length ((N - 1) // s + w - w // s < window), 2
without a target; ``dimension_groups`` empty: one equal group per factor. DPE's own search for a model's
factors (NIAH detection per dimension group) and its key-dimension selection (q/k 2-norms) are
``lampe-eval dpe-select`` (:mod:`lampe_eval.tools.dpe_select`, docs/methods.md 7.3). Not implemented: the
official ``select_topk_dim`` option (scale only the dimensions selected per layer and head; off by default
in the official code): plans here are shared by every layer, so the selection is only reported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from ..attention import Band, Segment
from ..errors import LampeEvalError
from .base import METHODS, PositionMethod, RopeBase, check_variant

OFFICIAL_WINDOW = 1024  # config/dpe_config.yaml: local_window_size of every model


def _as_ints(value: Any, what: str) -> tuple[int, ...]:
    """A list of integers given as a list / tuple (YAML) or as text ("2,8,2" or "[2, 8, 2]")."""
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        value = [v for v in value.strip("[]() ").split(",") if v.strip()]
    try:
        numbers = tuple(int(str(v).strip()) for v in value)
    except (TypeError, ValueError) as err:
        raise LampeEvalError(f"dpe: {what} must be a list of integers, got {value!r}") from err
    return numbers


def uniform_factor(window: int, local: int, target_length: int | None) -> int:
    """The smallest s whose far positions stay below the window at the target length."""
    if not target_length or target_length <= window:
        return 2
    s = 1
    while (target_length - 1) // s + local - local // s >= window and s < target_length:
        s += 1
    return s


@METHODS.register("dpe")
@dataclass
class DPE(PositionMethod):
    summary = (
        "true positions within w, grouped positions floor(pos / s_g) per group of RoPE dimensions beyond"
    )
    display_order = 90  # next to LaMPE, its nearest competitor

    window: int  # local window w (local_window_size)
    scale_factors: tuple[int, ...]  # s_g, one per dimension group
    dimension_groups: tuple[int, ...] = ()  # group boundaries over the frequencies; (): equal groups
    variant: str = "paper"

    @classmethod
    def default_params(cls, window: int, target_length: int | None, given: Mapping[str, Any]) -> dict:
        local = given.get("window", min(OFFICIAL_WINDOW, max(1, window // 8)))
        return {"window": local, "scale_factors": (uniform_factor(window, local, target_length),)}

    def __post_init__(self) -> None:
        self.scale_factors = _as_ints(self.scale_factors, "scale_factors")
        self.dimension_groups = _as_ints(self.dimension_groups, "dimension_groups")

    def validate(self) -> None:
        check_variant("dpe", self.variant)
        if self.window < 1:
            raise LampeEvalError("dpe: window must be >= 1")
        if not self.scale_factors or min(self.scale_factors) < 1:
            raise LampeEvalError("dpe: scale_factors must be integers >= 1, one per dimension group")
        groups = self.dimension_groups
        if groups and (
            len(groups) != len(self.scale_factors) + 1
            or groups[0] != 0
            or any(b <= a for a, b in zip(groups, groups[1:], strict=False))
        ):
            raise LampeEvalError(
                "dpe: dimension_groups must be increasing boundaries from 0, one more than scale_factors"
            )

    def frequency_factors(self, frequencies: int) -> torch.Tensor:
        """s_g of each of the ``frequencies`` RoPE frequencies ([F] float64)."""
        groups = self.dimension_groups
        count = len(self.scale_factors)
        if not groups:
            if frequencies < count:
                raise LampeEvalError(f"dpe: {count} scale factors for only {frequencies} RoPE frequencies")
            groups = tuple(round(g * frequencies / count) for g in range(count + 1))
        if groups[-1] != frequencies:
            raise LampeEvalError(
                f"dpe: dimension_groups end at {groups[-1]}, the model has {frequencies} RoPE frequencies "
                "(head_dim / 2)"
            )
        sizes = torch.tensor([b - a for a, b in zip(groups, groups[1:], strict=False)])
        return torch.tensor(self.scale_factors, dtype=torch.float64).repeat_interleave(sizes)

    def segments(self, base: RopeBase, context_length: int, kv_len: int) -> list[Segment]:
        w = self.window
        factors = self.frequency_factors(base.inv_freq.numel())
        whole = factors.long()
        decoding = kv_len > context_length
        if self.variant == "official" and not decoding:  # prefill: i // s + w - w / s, float32
            shift = (w / factors).float()
        else:  # the paper's reading, and the official decode: w - w // s, integers
            shift = torch.div(w, whole, rounding_mode="floor").float()

        def far_q(i: torch.Tensor) -> torch.Tensor:
            grouped = torch.div(i[:, None], whole.to(i.device), rounding_mode="floor") + w
            return (grouped.float() - shift.to(i.device))[None]

        def far_k(j: torch.Tensor) -> torch.Tensor:
            return torch.div(j[:, None], whole.to(j.device), rounding_mode="floor").float()[None]

        return [Segment("near", Band(0, w - 1)), Segment("far", Band(w), far_q, far_k)]
