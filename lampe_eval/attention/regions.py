"""Segments: which (query, key) pairs a part of a method's attention covers, and at which positions.

A *region* gives, for every absolute query index i, one contiguous interval of visible keys
``[start(i), stop(i))``; both ends are non-decreasing in i (true for distance bands and for DCA's
chunk relations). That structure is what lets the engine call dense attention kernels on
rectangular slices and mask only thin edges, with no L x L tensor.

A *segment* is a region plus the positions RoPE gives its queries (``q_pos``) and keys (``k_pos``):
inside it, pair (i, j) is scored at relative position ``q_pos(i) - k_pos(j)``. A method's segments
must cover each pair they keep exactly once: every causal pair, except for methods that drop pairs
(StreamingLLM's evicted tokens, LM-Infinite's Λ mask); ``tests/test_methods_exact.py`` checks it for every
method against an independent definition of the kept pairs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

PositionMap = Callable[[torch.Tensor], torch.Tensor]


def identity(idx: torch.Tensor) -> torch.Tensor:
    return idx.to(torch.float32)


class Region:
    """Visible keys per query: ``[start(i), stop(i))``, both non-decreasing in i."""

    def bounds(self, queries: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def interval(self, query: int) -> tuple[int, int]:
        """``bounds`` of one query in Python ints (no tensor, so no device sync)."""
        start, stop = self.bounds(torch.tensor([query]))
        return int(start[0]), int(stop[0])

    def dense_mask(self, queries: torch.Tensor, num_keys: int) -> torch.Tensor:
        """Boolean [n, num_keys] view, for the oracle and the partition tests only."""
        start, stop = self.bounds(queries)
        keys = torch.arange(num_keys, device=queries.device)
        return (keys[None, :] >= start[:, None]) & (keys[None, :] < stop[:, None])


@dataclass(frozen=True)
class Band(Region):
    """Pairs with ``lo <= i - j <= hi`` (``hi=None``: no upper bound), restricted to j >= 0."""

    lo: int
    hi: int | None = None

    def bounds(self, queries: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        stop = (queries - self.lo + 1).clamp(min=0)
        start = torch.zeros_like(queries) if self.hi is None else (queries - self.hi).clamp(min=0)
        return start, torch.maximum(stop, start)

    def interval(self, query: int) -> tuple[int, int]:
        start = 0 if self.hi is None else max(0, query - self.hi)
        return start, max(query - self.lo + 1, start)


@dataclass(frozen=True)
class ChunkRelation(Region):
    """DCA's chunk relations for chunk size ``size``: ``gap`` 0 = same chunk (causal), 1 = the previous
    chunk, 2 = every chunk before the previous one."""

    size: int
    gap: int

    def bounds(self, queries: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        chunk_start = (queries // self.size) * self.size
        if self.gap == 0:
            return chunk_start, queries + 1
        prev_start = (chunk_start - self.size).clamp(min=0)
        if self.gap == 1:
            return prev_start, chunk_start
        return torch.zeros_like(queries), prev_start

    def interval(self, query: int) -> tuple[int, int]:
        chunk_start = (query // self.size) * self.size
        if self.gap == 0:
            return chunk_start, query + 1
        prev_start = max(chunk_start - self.size, 0)
        return (prev_start, chunk_start) if self.gap == 1 else (0, prev_start)


@dataclass(frozen=True)
class FirstKeys(Region):
    """The first ``count`` keys, for queries at distance ``i - j >= lo`` from them: attention sinks
    (StreamingLLM) or LM-Infinite's global branch, beyond a local band of ``lo`` distances."""

    count: int
    lo: int

    def bounds(self, queries: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        stop = (queries - self.lo + 1).clamp(min=0, max=self.count)
        return torch.zeros_like(queries), stop

    def interval(self, query: int) -> tuple[int, int]:
        return 0, min(max(query - self.lo + 1, 0), self.count)


@dataclass(frozen=True)
class Segment:
    name: str
    region: Region
    q_pos: PositionMap = identity
    k_pos: PositionMap = identity
