"""Rotated key copies kept across decoding steps.

Once a generation's plan is fixed (LaMPE's l frozen at the prompt, SelfExtend's G, DCA's chunks...),
every segment gives each key a position that depends on the key's index alone, so keys can be rotated
once, when they enter the cache. One copy per distinct key map (:meth:`AttentionPlan.key_groups`): the
*primary* copy, the one that reaches the oldest keys, lives in the Hugging Face cache next to the values
(so ``get_seq_length``, ``crop`` and beam reordering keep working); every other copy lives here, in a
:class:`KeyBuffer` that drops the keys no later query can see through it (a region's start never moves
back), so a copy used only by bands of bounded width (SelfExtend's neighbour band, ReRoPE's window,
STRING's diagonal, LaMPE's head) holds only the last few keys.

If the cache was changed behind our back (cropped, reordered by beam search), the side copies are
rebuilt from the primary copy by rotating it by the difference of positions.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import torch

from .engine import AttentionPlan, KeyCopy, apply_table
from .rope import rope_cos_sin

MIN_SPARE = 64  # rows of spare room a buffer keeps at the end (so appends rarely reallocate)


class KeyBuffer:
    """Rotated keys at absolute indices ``[first, end)``, with spare room at the end for appends."""

    def __init__(self, keys: torch.Tensor, first: int) -> None:
        self.first = first
        self.end = first + keys.shape[2]
        self.data = self._allocate(keys, keys.shape[2])
        self.offset = 0  # row of ``data`` that holds key ``first``

    @staticmethod
    def _allocate(live: torch.Tensor, rows: int) -> torch.Tensor:
        spare = max(MIN_SPARE, rows // 8)
        data = live.new_empty((*live.shape[:2], rows + spare, live.shape[3]))
        data[:, :, : live.shape[2]] = live
        return data

    def view(self) -> KeyCopy:
        return self.data[:, :, self.offset : self.offset + self.end - self.first], self.first

    def append(self, keys: torch.Tensor) -> None:
        n = keys.shape[2]
        frozen = self.data.is_inference() and not torch.is_inference_mode_enabled()
        if self.offset + self.end - self.first + n > self.data.shape[2] or frozen:
            self._compact(n)  # full (or not writable outside inference mode): move into a new tensor
        stop = self.offset + self.end - self.first
        self.data[:, :, stop : stop + n] = keys
        self.end += n

    def drop_before(self, index: int) -> None:
        """Forget keys below ``index``; their memory is reclaimed once they outnumber the live keys."""
        index = min(max(index, self.first), self.end)
        self.offset += index - self.first
        self.first = index
        if self.offset > max(MIN_SPARE, self.end - self.first):
            self._compact(0)

    def _compact(self, extra: int) -> None:
        live = self.view()[0]
        self.data = self._allocate(live, live.shape[2] + extra)
        self.offset = 0

    @property
    def nbytes(self) -> int:
        return self.data.nbytes


@dataclass
class LayerKeys:
    """One layer's side copies (key copy index -> buffer) and what the cache held when we last wrote it."""

    buffers: dict[int, KeyBuffer] = field(default_factory=dict)
    fresh: dict[int, KeyCopy] = field(default_factory=dict)  # copies made by this call, not yet buffered
    length: int = 0
    written: weakref.ref | None = None  # the cache's key tensor after our last update

    def in_sync(self, q_start: int, cache_keys: torch.Tensor | None) -> bool:
        return (
            self.length == q_start
            and self.written is not None
            and cache_keys is not None
            and self.written() is cache_keys
        )


@dataclass
class RotatedKeys:
    """The rotated key copies of one generation (one cache object), all layers."""

    context_length: int  # l, the prompt length the plan is frozen at
    primary: int  # the key copy the Hugging Face cache holds
    segments: int  # how many segments the plan had at prefill (it must not change)
    keys_are_rotated: bool = True  # False: the cache holds un-rotated keys, re-rotated every step
    layers: dict[int, LayerKeys] = field(default_factory=dict)

    def extend(
        self,
        layer_idx: int,
        plan: AttentionPlan,
        rotated: list[torch.Tensor],
        primary_keys: torch.Tensor,
        q_start: int,
        cache_keys_before: torch.Tensor | None,
    ) -> list[KeyCopy]:
        """Append this call's new keys (``rotated``: one tensor per copy) to the side copies and return every
        copy covering what this call reads. ``primary_keys`` is the full primary copy from the cache."""
        layer = self.layers.setdefault(layer_idx, LayerKeys())
        if q_start > 0 and not layer.in_sync(q_start, cache_keys_before):
            self._rebuild(layer, plan, primary_keys[:, :, :q_start], q_start)
        copies: list[KeyCopy] = []
        for copy, keys in enumerate(rotated):
            if copy == self.primary:
                copies.append((primary_keys, 0))
                continue
            buffer = layer.buffers.get(copy)
            if buffer is None:  # a prefill: attend from the fresh copy, buffer only what stays reachable
                layer.fresh[copy] = (keys, q_start)
                copies.append(layer.fresh[copy])
            else:
                buffer.append(keys)
                copies.append(buffer.view())
        layer.length = primary_keys.shape[2]
        layer.written = weakref.ref(primary_keys)
        return copies

    def trim(self, layer_idx: int, plan: AttentionPlan, next_query: int) -> None:
        """Drop the keys no query from ``next_query`` on can see through each side copy."""
        reach = plan.reach(next_query)
        layer = self.layers[layer_idx]
        for copy, (keys, first) in layer.fresh.items():
            keep = min(max(reach[copy], first), first + keys.shape[2])
            layer.buffers[copy] = KeyBuffer(keys[:, :, keep - first :], keep)
        layer.fresh.clear()
        for copy, buffer in layer.buffers.items():
            buffer.drop_before(reach[copy])

    def _rebuild(
        self, layer: LayerKeys, plan: AttentionPlan, primary_keys: torch.Tensor, q_start: int
    ) -> None:
        """Recompute the side copies of keys ``< q_start`` from the primary copy: a key rotated at position p
        becomes the key rotated at p' by one more rotation by p' - p (rotations compose)."""
        reach = plan.reach(q_start)
        layer.buffers.clear()
        for copy in range(len(reach)):
            if copy == self.primary:
                continue
            lo = min(reach[copy], q_start)
            idx = torch.arange(lo, q_start, device=primary_keys.device)
            first = plan.key_groups()[1]
            delta = plan.segments[first[copy]].k_pos(idx) - plan.segments[first[self.primary]].k_pos(idx)
            table = rope_cos_sin(delta, plan.inv_freq, 1.0, primary_keys.dtype)
            layer.buffers[copy] = KeyBuffer(apply_table(primary_keys[:, :, lo:q_start], *table), lo)

    def side_bytes(self) -> int:
        return sum(b.nbytes for layer in self.layers.values() for b in layer.buffers.values())
