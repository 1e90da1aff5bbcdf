"""A position method's keys and values in an engine's paged KV cache (vLLM's blocks).

A layer's cache is ``[blocks, key heads, block size, (copies + 1) x head dim]`` (what vLLM allocates for a
spec whose ``head_size`` is ``copies x head dim`` and whose ``head_size_v`` is the head dim). Within a block
and head it is read as ``copies + 1`` planes of ``block size x head dim``: the keys rotated at each key copy's
positions (the plan's distinct key maps), then the values. With one copy that is the layout of vLLM's own
CPU attention (keys, then values), so a model whose other layers run vLLM's attention shares the format.

:class:`PagedCache` writes a call's new keys (rotated once per copy: a decode step rotates only its new key)
and values at the token slots the engine gives (``block * block_size + offset``) and gathers one sequence's
keys and values, in order, through its block table: every sequence reads its own key range, nothing is
padded to the longest sequence of a batch, nothing is kept outside the engine's cache.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .engine import AttentionPlan, attend_rotated, segmented_attention


@dataclass
class PagedCache:
    """One layer's paged cache read as key copies and values: each a [blocks, heads, block size, dim]
    view of the engine's tensor (no copy)."""

    keys: list[torch.Tensor]
    values: torch.Tensor

    @classmethod
    def view(cls, cache: torch.Tensor, copies: int, head_dim: int) -> PagedCache:
        """The views of a layer's cache tensor [blocks, heads, block size, (copies + 1) * dim]."""
        blocks, heads, block_size, width = cache.shape
        if width != (copies + 1) * head_dim:
            raise ValueError(
                f"a paged cache row of {width} values holds no {copies} key copies and values "
                f"of dim {head_dim}"
            )
        planes = cache.view(blocks, heads, (copies + 1) * block_size, head_dim).split(block_size, dim=2)
        return cls(list(planes[:copies]), planes[copies])

    @property
    def block_size(self) -> int:
        return int(self.values.shape[2])

    def write(self, slots: torch.Tensor, keys: list[torch.Tensor], value: torch.Tensor) -> None:
        """Store tokens at ``slots`` [n]: their keys, one [n, heads, dim] per copy (a plan may use fewer
        copies than the cache holds), and values."""
        if len(keys) > len(self.keys):
            raise ValueError(f"a plan with {len(keys)} key copies in a cache that holds {len(self.keys)}")
        block, offset = slots // self.block_size, slots % self.block_size
        for plane, new in zip(self.keys, keys, strict=False):
            plane[block, :, offset] = new.to(plane.dtype)
        self.values[block, :, offset] = value.to(self.values.dtype)

    def gather(
        self, blocks: torch.Tensor, length: int, copies: int
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """One sequence's first ``length`` tokens through its block table ``blocks``: its first ``copies``
        key copies and its values, each [1, heads, length, dim]."""
        used = blocks[: -(-length // self.block_size)]

        def read(plane: torch.Tensor) -> torch.Tensor:
            heads, dim = plane.shape[1], plane.shape[3]
            return plane[used].transpose(0, 1).reshape(1, heads, -1, dim)[:, :, :length]

        return [read(plane) for plane in self.keys[:copies]], read(self.values)


def attend_paged(
    cache: PagedCache,
    plan: AttentionPlan,
    scale: float,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    slots: torch.Tensor,
    blocks: torch.Tensor,
    q_start: int,
    rotated: bool = True,
) -> torch.Tensor:
    """One sequence's call: un-rotated ``query`` [n, Hq, D], ``key`` and ``value`` [n, Hkv, D] of tokens
    ``q_start..q_start+n-1`` (stored at ``slots``), attending its tokens ``0..q_start+n-1`` through its block
    table ``blocks`` following ``plan``; returns [n, Hq, D]. The arithmetic of the Hugging Face backend's
    patched attention: ``rotated`` keys are stored once per key copy; otherwise (positions that move with
    the length) copy 0 holds un-rotated keys, all re-rotated by the plan at every call."""
    end = q_start + key.shape[0]
    heads_first = [t.transpose(0, 1)[None] for t in (query, key, value)]  # [1, H, n, D]
    q, k, v = heads_first
    new = plan.rotate_keys(k, q_start) if rotated else [k]
    cache.write(slots, [keys[0].transpose(0, 1) for keys in new], value)
    if q_start == 0:  # the whole sequence is here: no read of the cache
        keys, values = new, v
    else:
        keys, values = cache.gather(blocks, end, len(new))
    if rotated:
        out = attend_rotated(q, [(copy, 0) for copy in keys], values, plan, q_start, scale)
    else:
        out = segmented_attention(q, keys[0], values, plan, q_start, scale)
    return out[0].transpose(0, 1)


def key_copies(plan: AttentionPlan) -> int:
    """How many rotated key copies ``plan`` keeps (its distinct key maps)."""
    return len(plan.key_groups()[1])
