"""Partial rotary embeddings (GPT-NeoX style: StableLM, Phi-2, Phi-4-mini): only the first ``rotary_dim``
dimensions of each head turn, dimension ``i`` paired with ``i + rotary_dim / 2`` (transformers'
``apply_rotary_pos_emb`` on ``q[..., :rotary_dim]``); the others pass unrotated.

The engine rotates whole heads (dimension ``i`` paired with ``i + head_dim / 2``). So a partial head runs
as a whole one: query and key dimensions reordered by one permutation (:func:`head_order`: the first half
of the rotated dimensions, then half of the passed ones, then the second rotated half, then the other
passed ones) so that each rotated pair sits ``head_dim / 2`` apart, and the plan's frequencies padded with
zeros for the passed pairs (:func:`whole_head_plan`: a zero frequency turns by 0 at any position). A
permutation applied to both query and key leaves every dot product, so every attention weight, as it was;
values are not touched. Nothing else changes: the HF cache, vLLM's paged cache and every kernel see a head
of ``head_dim`` dimensions."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from .engine import AttentionPlan

PositionMap = Callable[[torch.Tensor], torch.Tensor]


def head_order(rotary_dim: int, head_dim: int) -> torch.Tensor:
    """Dimension indices of the whole-head layout, in the order the engine reads them."""
    half, passed = rotary_dim // 2, (head_dim - rotary_dim) // 2
    return torch.cat(
        [
            torch.arange(0, half),
            torch.arange(rotary_dim, rotary_dim + passed),
            torch.arange(half, rotary_dim),
            torch.arange(rotary_dim + passed, head_dim),
        ]
    )


def _padded(positions: PositionMap, frequencies: int) -> PositionMap:
    """A position map of one position per frequency ([..., F]) given ``frequencies`` columns (zeros for the
    added ones: their frequency is 0); a 1-D map (one position for all frequencies) as it is."""

    def padded(idx: torch.Tensor) -> torch.Tensor:
        out = positions(idx)
        if out.dim() == 1:
            return out
        extra = frequencies - out.shape[-1]
        return torch.nn.functional.pad(out, (0, extra))

    return padded


def whole_head_plan(plan: AttentionPlan, head_dim: int) -> AttentionPlan:
    """``plan`` for the whole-head layout: its frequencies padded with zeros to ``head_dim / 2``, its
    per-frequency position maps padded alike (maps shared by segments stay shared: one key copy each)."""
    frequencies = head_dim // 2
    own = plan.inv_freq
    if own.numel() == frequencies:
        return plan
    inv_freq = torch.cat([own, torch.zeros(frequencies - own.numel(), dtype=own.dtype, device=own.device)])
    wrapped: dict[int, PositionMap] = {}

    def wrap(positions: PositionMap) -> PositionMap:
        if id(positions) not in wrapped:
            wrapped[id(positions)] = _padded(positions, frequencies)
        return wrapped[id(positions)]

    segments = [dataclasses.replace(s, q_pos=wrap(s.q_pos), k_pos=wrap(s.k_pos)) for s in plan.segments]
    return dataclasses.replace(plan, segments=segments, inv_freq=inv_freq, _cache={}, _groups=None)
