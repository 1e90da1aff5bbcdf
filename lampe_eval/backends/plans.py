"""The plans of one installed method, shared by every patched layer of a forward pass: both backends
install a method with one :class:`PlanCache` (the Hugging Face patch's ``PatchState`` builds on it, the
vLLM worker uses it as it is)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..attention import AttentionPlan
from ..attention.paged import key_copies
from ..attention.partial import head_order, whole_head_plan
from ..methods.base import FrequencyMethod, Method, RopeBase


@dataclass
class PlanCache:
    """A method's plans kept by (l, kv_len, budget), computed once per forward pass and shared by all
    layers: one (a plan memoises its tables, so an old one is dropped), or one per sequence of a forward
    pass when the backend runs several sequences of different lengths through each layer (vLLM)."""

    method: Method
    base: RopeBase
    max_plans: int = 1
    # (query heads, key heads) this process holds when the model is split over tensor-parallel ranks
    heads: tuple[slice, slice] | None = None
    _plans: dict[tuple[int, int, int | None], AttentionPlan] = field(default_factory=dict, repr=False)
    _orders: dict[str, torch.Tensor] = field(default_factory=dict, repr=False)

    @property
    def partial_rotary(self) -> bool:
        """Whether only part of each head turns (``attention/partial.py``: it then runs as a whole head)."""
        return self.base.inv_freq.numel() * 2 < self.base.head_dim

    def head_order(self, device: torch.device | str = "cpu") -> torch.Tensor | None:
        """The query and key dimension order the engine takes (None: the model's own, a whole rotary),
        on ``device``: made once per device, not in every layer call."""
        if not self.partial_rotary:
            return None
        found = self._orders.get(str(device))
        if found is None:
            found = head_order(self.base.inv_freq.numel() * 2, self.base.head_dim).to(device)
            self._orders[str(device)] = found
        return found

    def plan(self, context_length: int, kv_len: int, total_length: int | None) -> AttentionPlan:
        """The plan for a sequence whose prompt had ``context_length`` tokens, now ``kv_len`` long, in a
        generation of ``total_length`` tokens (None: unknown); computed once per forward pass and shared
        by all layers."""
        key = (context_length, kv_len, total_length)
        if isinstance(self.method, FrequencyMethod) and self.method.fixed_key_positions():
            key = (0, 0, None)  # fixed frequencies: one plan for all lengths (rope init is slow)
        plan = self._plans.get(key)
        if plan is None:
            if len(self._plans) >= self.max_plans:  # those of an earlier forward pass: done
                self._plans.clear()
            plan = self.method.attention_plan(self.base, context_length, kv_len, total_length)
            if self.partial_rotary:
                plan = whole_head_plan(plan, self.base.head_dim)
            if self.heads is not None:
                plan = plan.for_heads(*self.heads)
            self._plans[key] = plan
        return plan


def method_key_copies(method: Method, base: RopeBase) -> int:
    """The rotated key copies per token ``method`` keeps in the engine's cache: its plans' distinct key
    maps, probed at lengths up to 64 windows (1 for a method that re-rotates un-rotated keys, and for one
    that runs through vLLM's own attention)."""
    if method.kind == "baseline" or not method.fixed_key_positions():
        return 1
    if isinstance(method, FrequencyMethod):
        return 1
    window = base.window
    lengths = (window // 2, window + 1, 2 * window + 3, 4 * window + 5, 16 * window + 7, 64 * window + 9)
    return max(key_copies(method.plan_with_budget(base, n, n, n)) for n in lengths)
