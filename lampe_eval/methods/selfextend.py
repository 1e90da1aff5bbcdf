"""SelfExtend (Jin et al. 2024): neighbour attention within w, grouped (floor(pos / G)) beyond.

Neighbour d < w: true positions. Group d >= w: P_q = floor(i/G) + w - floor(w/G), P_k = floor(j/G).

Defaults: w = window / 4 and G the smallest meeting the README rule (2/3) window > w + (N - w) / G, from
the w given if any; a G given alone keeps w = window / 4 unless the rule then needs a smaller w.

``variant=paper`` (default) uses the integer group offset w - floor(w/G) everywhere, as the paper and the
fixed ``self_extend_patch/Llama_4_40.py`` (``datamllab/LongLM`` commit 715c1e3) do. ``variant=official``
follows ``self_extend_patch/Llama.py``, the file ``SelfExtend.apply`` uses by default: the float offset
w - w/G (computed in float32) in prefill and decode, so group positions are fractional when G does not
divide w (docs/methods.md 2.1). ``scale_base`` > 0 enables the optional log query scaling
q *= max(1, log(i + 1) / log(scale_base)); off by default, as in the paper's results.

``variant=logistic`` is SELF (Dang et al. 2025, arXiv 2505.17296; ``alexeipc/SELF-LLM``): key groups whose
size grows 1, 2, ..., G - 1 (``group_size`` is the code's ``capacity``) along the inverse logistic
x(y) = ln(y (c - 1) / (c - y)) / rate, counted from the first token, with its ``rate`` (0.02, the code's
only value). The group band keeps SelfExtend's shape: keys d >= w at gk(j), queries at w + gk(i - w), with
gk the official CUDA kernel's mapping (``self_extend_patch/attn_method/logistic.cu``, the prefill path of
``Llama.py``'s ``self_extend_forward``), quirks included (:func:`logistic_key_groups`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from ..attention import Band, Segment
from ..errors import LampeEvalError
from .base import METHODS, VARIANTS, PositionMethod, RopeBase

LOGISTIC = "logistic"
SELFEXTEND_VARIANTS = (*VARIANTS, LOGISTIC)
LOGISTIC_RATE = (
    0.02  # attn_method.py generate_logistically_grouping_position(rate=0.02): the code's only value
)


def default_group_size(window: int, neighbour: int, target_length: int | None) -> int:
    """Smallest G meeting the README rule (2/3) * window > w + (N - w) / G (strictly)."""
    if not target_length or target_length <= window:
        return 2
    # in integers: G * (2 * window - 3 * w) > 3 * (N - w)
    budget = max(2 * window - 3 * neighbour, 1)
    return max(2, 3 * (target_length - neighbour) // budget + 1)


def largest_group_position(length: int, group: int, neighbour: int, variant: str = "paper") -> float:
    """The largest relative position of a ``length``-token prefill (the last query, key 0)."""
    shift = neighbour / group if variant == "official" else neighbour // group
    return (length - 1) // group + neighbour - shift


def default_capacity(window: int, neighbour: int, target_length: int | None, rate: float) -> int:
    """SELF's capacity c for a target length N: a small c (bisection over 2..N: a larger capacity gives
    larger groups at every group index, so positions fall as c grows) whose largest position
    w + gk(N - 1 - w) stays below the window (the README's 2/3 rule is for constant groups); when even
    c = N does not (too slow a rate for this window), the constant-group default plus one (groups up to G)."""
    fallback = default_group_size(window, neighbour, target_length) + 1
    n = target_length
    if not n or n <= window or n - 1 - neighbour < 0 or not rate > 0:
        return fallback  # (a bad rate: validate says so)
    far = torch.tensor([n - 1 - neighbour])

    def fits(capacity: int) -> bool:
        return neighbour + int(logistic_key_groups(capacity, rate)(far).item()) < window

    low, high = 2, n
    if not fits(high):
        return fallback
    while low < high:
        middle = (low + high) // 2
        if fits(middle):
            high = middle
        else:
            low = middle + 1
    return high


def default_neighbour(window: int, group: int, target_length: int | None, variant: str = "paper") -> int:
    """w for a given G: window // 4, or the largest w meeting the README rule with that G when window // 4
    does not (failing that, the largest w whose positions stay below the window; window // 4 when none)."""
    w = max(1, window // 4)
    n = target_length
    if not n or n <= window or group < 2:
        return w
    # (2/3) window > w + (n - w) / G  <=>  3 (G - 1) w < 2 window G - 3 n
    rule = (2 * window * group - 3 * n - 1) // (3 * (group - 1))
    if rule >= 1:
        return min(w, rule)
    fit = w
    while fit > 1 and (excess := largest_group_position(n, group, fit, variant) - window + 1) > 0:
        fit = max(1, fit - max(1, math.ceil(excess)))
    return fit if largest_group_position(n, group, fit, variant) < window else w


def logistic_inverse(y: int, rate: float, capacity: float) -> float:
    """logistic.cu ``gs_inverse_generating_function``: the group index at which the group size reaches y
    on the logistic y(x) = c / (1 + (c - 1) exp(-rate x)) (y(0) = 1), in double precision."""
    return (math.log(y * capacity - y) - math.log(capacity - y)) / rate


def logistic_kernels(capacity: int, rate: float) -> list[tuple[int, int, int]]:
    """The ``gpu_key_group_id`` launches of logistic.cu's ``async_generator``, in order: (presum, the last
    group id before them, group size). Group size y (1 <= y <= c - 2) spans the group ids
    [ceil(x(y)), floor(x(y + 1))] (one fewer when x(y + 1) is an integer: ``freq_group``); the entries
    c - 1 and c stay zeroed by the ``cudaMemset`` (one id each), so the last launch (size c - 1) runs on to
    the end of the sequence. A size whose span or the next one's is empty launches nothing and leaves
    ``presum`` where it was (the host loop's ``continue``)."""
    groups = [(0, 0)] * (capacity + 1)
    for y in range(1, capacity - 1):
        lower, upper = logistic_inverse(y, rate, capacity), logistic_inverse(y + 1, rate, capacity)
        last = math.floor(upper) - (1 if upper == math.floor(upper) else 0)
        groups[y] = (math.ceil(lower), last)
    groups[0] = (0, -1)
    launches, presum = [], 0
    for y in range(1, capacity):
        size = groups[y][1] - groups[y][0] + 1
        if size <= 0 or groups[y + 1][1] - groups[y + 1][0] + 1 <= 0:
            continue
        launches.append((presum, groups[y - 1][1], y))
        presum += y * size
    return launches


def logistic_key_groups(capacity: int, rate: float):
    """gk(j), the group position of key index j, as logistic.cu writes it: each launch (presum P, last group
    id before it L, size y) writes ids P .. P + y * count (the last launch: to the end) with
    L + ceil((j - P) / y); a later launch overwrites the shared boundary id, so an id belongs to the last
    launch with P <= j. Id 0 is never written (``n - id < n``) and stays 0: ids 0 and 1 share group 0."""
    table = torch.tensor(logistic_kernels(capacity, rate), dtype=torch.int64).T.contiguous()

    def gk(j: torch.Tensor) -> torch.Tensor:
        presum, before, size = table.to(j.device)
        index = j.long().clamp(min=0)  # a query below w: the code's w + gk(0) = w (no group key anyway)
        which = torch.searchsorted(presum, index, right=True) - 1
        offset = index - presum[which]
        group = before[which] + torch.div(offset + size[which] - 1, size[which], rounding_mode="floor")
        return torch.where(index == 0, torch.zeros_like(group), group).float()

    return gk


@METHODS.register("selfextend")
@dataclass
class SelfExtend(PositionMethod):
    display_order = 20
    summary = "grouped positions floor(pos/G) beyond a neighbour window w (Jin et al. 2024)"

    group_size: int  # G (variant=logistic: the logistic's capacity c, groups of 1 .. c - 1 tokens)
    window: int  # neighbour window w
    scale_base: int = -1
    variant: str = "paper"  # paper | official | logistic (SELF)
    rate: float = LOGISTIC_RATE  # variant=logistic: the logistic's growth rate (per group id)

    @classmethod
    def default_params(cls, window: int, target_length: int | None, given: Mapping[str, Any]) -> dict:
        if given.get("variant") == LOGISTIC:
            neighbour = given.get("window", window // 4)
            rate = given.get("rate", LOGISTIC_RATE)
            capacity = default_capacity(window, neighbour, target_length, rate)
            return {"window": neighbour, "group_size": capacity}
        # the neighbour window w from the user's G, or G from the user's (or the default) w
        if "group_size" in given and "window" not in given:
            variant = str(given.get("variant", "paper"))
            return {"window": default_neighbour(window, given["group_size"], target_length, variant)}
        neighbour = given.get("window", window // 4)
        return {"window": neighbour, "group_size": default_group_size(window, neighbour, target_length)}

    def validate(self) -> None:
        if self.variant not in SELFEXTEND_VARIANTS:
            raise LampeEvalError(
                f"selfextend: variant must be one of {', '.join(SELFEXTEND_VARIANTS)}, not {self.variant!r}"
            )
        if self.group_size < 1 or self.window < 1:
            raise LampeEvalError("selfextend: group_size and window must be >= 1")
        if self.variant == LOGISTIC and self.group_size < 2:
            raise LampeEvalError("selfextend: variant=logistic needs group_size (the capacity) >= 2")
        if not self.rate > 0:
            raise LampeEvalError("selfextend: rate must be > 0")

    def params(self) -> dict[str, Any]:
        """``rate`` only for ``variant=logistic`` (the other variants' runs keep their identity)."""
        values = super().params()
        if self.variant != LOGISTIC:
            values.pop("rate", None)
        return values

    def segments(self, base: RopeBase, context_length: int, kv_len: int) -> list[Segment]:
        g, w = self.group_size, self.window
        if self.variant == LOGISTIC:  # SELF: queries at w + gk(i - w), keys at gk(j) (Llama.py, prefill)
            gk = logistic_key_groups(g, self.rate)

            def logistic_q(i: torch.Tensor) -> torch.Tensor:
                return gk(i - w) + w

            return [Segment("neighbour", Band(0, w - 1)), Segment("group", Band(w), logistic_q, gk)]
        if self.variant == "official":  # Llama.py: i // G + w - w / G, a float32 tensor
            shift = torch.tensor(w / g, dtype=torch.float32)

            def group_q(i: torch.Tensor) -> torch.Tensor:
                return (torch.div(i, g, rounding_mode="floor") + w).float() - shift.to(i.device)

        else:

            def group_q(i: torch.Tensor) -> torch.Tensor:
                return (torch.div(i, g, rounding_mode="floor") + w - w // g).float()

        def group_k(j: torch.Tensor) -> torch.Tensor:
            return torch.div(j, g, rounding_mode="floor").float()

        return [Segment("neighbour", Band(0, w - 1)), Segment("group", Band(w), group_q, group_k)]

    def query_scale(self, base: RopeBase):
        if self.scale_base <= 0:
            return None
        log_base = math.log(self.scale_base)
        return lambda i: torch.clamp(torch.log(i.float() + 1) / log_base, min=1.0)
