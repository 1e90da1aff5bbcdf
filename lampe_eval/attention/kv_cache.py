"""Rotated key copies kept across decoding steps.

Once a generation's plan is fixed (LaMPE's l frozen at the prompt, SelfExtend's G, DCA's chunks...),
every segment gives each key a position that depends on the key's index alone, so keys can be rotated
once, when they enter the cache. One copy per distinct key map (:meth:`AttentionPlan.key_groups`): the
*primary* copy, the one that reaches the oldest keys, is the cache's own ``keys`` (next to the values, so
``get_seq_length`` and the masks keep working); every other copy is a *side copy*, a :class:`KeyBuffer`
that drops the keys no later query can see through it (a region's start never moves back), so a copy used
only by bands of bounded width (SelfExtend's neighbour band, ReRoPE's window, STRING's diagonal, LaMPE's
head) holds only the last few keys.

Two ways to keep them, both driving the same :class:`SideCopies`:

Every cache ``new_cache`` makes appends in place (:class:`GrowingLayer`), not by ``torch.cat`` as
transformers' ``DynamicCache`` does (a copy of the whole cache at every step); the unpatched model's is a
:class:`GrowingCache`.

* **Primary: :class:`RotatedKeyCache`** (``lampe_eval.backends.hf.patch.new_cache``). A ``DynamicCache`` whose
  layers (:class:`RotatedKeyLayer`) hold the side copies beside the keys and values, and whose object holds
  the generation (:class:`GenerationState`: l, the primary copy, the budget). ``crop``, beam search's
  ``reorder_cache``, ``batch_select_indices``, ``batch_repeat_interleave`` and ``reset`` are overridden to
  apply to the side copies too, so they never go stale.
* **Fallback: :class:`RotatedKeys`**, for a cache made elsewhere (transformers' own ``DynamicCache``, e.g.
  lm-evaluation-harness calling ``generate``): ``backends/hf/patch.py`` keeps it in a table by cache object,
  and a change made behind its back (crop, beam reordering) is noticed after the fact (the cache's key
  tensor is not the one last written) and repaired by rebuilding the side copies from the primary copy.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from .engine import AttentionPlan, KeyCopy, apply_table
from .rope import lift, rope_cos_sin

MIN_SPARE = 64  # rows of spare room a buffer keeps at the end (so appends rarely reallocate)


class KeyBuffer:
    """Rotated keys at absolute indices ``[first, end)``, with spare room at the end for appends."""

    def __init__(self, keys: torch.Tensor, first: int) -> None:
        self.first = first
        self.end = first + keys.shape[2]
        self.data = self._allocate(keys, keys.shape[2])
        self.offset = 0  # row of ``data`` that holds key ``first``

    @staticmethod
    def capacity(rows: int) -> int:
        """Rows a buffer allocated for ``rows`` keys holds (the memory estimate counts them)."""
        return rows + max(MIN_SPARE, rows // 8)

    @staticmethod
    def _allocate(live: torch.Tensor, rows: int) -> torch.Tensor:
        data = live.new_empty((*live.shape[:2], KeyBuffer.capacity(rows), live.shape[3]))
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

    def take_back(self, index: int) -> bool:
        """Hold keys from ``index`` on again, if :meth:`drop_before` forgot them but their rows are still
        in place (not compacted away); False if they are gone."""
        back = self.first - index
        if back <= 0:
            return True
        if back > self.offset:
            return False
        self.offset -= back
        self.first = index
        return True

    def drop_from(self, index: int) -> None:
        """Forget keys from ``index`` on (a crop); an empty buffer then starts at ``index``."""
        self.end = min(self.end, max(index, 0))
        self.first = min(self.first, self.end)

    def map_batch(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        """Replace the storage by ``fn(storage)``: a batch selection, repetition, reordering or move."""
        self.data = fn(self.data)

    def _compact(self, extra: int) -> None:
        live = self.view()[0]
        self.data = self._allocate(live, live.shape[2] + extra)
        self.offset = 0

    @property
    def nbytes(self) -> int:
        return self.data.nbytes


class SideCopies:
    """One layer's side copies: key copy index -> buffer, for every copy but the primary one."""

    def __init__(self) -> None:
        self.buffers: dict[int, KeyBuffer] = {}
        self.fresh: dict[int, KeyCopy] = {}  # copies made by this call, not yet buffered
        # before the next call: "" nothing, "missing": rebuild the copies that lack keys a query still sees
        # (after a crop), "all": rebuild every copy (the cache changed in a way we did not see)
        self.repair = ""

    def extend(
        self,
        plan: AttentionPlan,
        primary: int,
        rotated: list[torch.Tensor],
        primary_keys: torch.Tensor,
        q_start: int,
    ) -> list[KeyCopy]:
        """Append this call's new keys (``rotated``: one tensor per copy) and return every copy covering
        what this call reads. ``primary_keys`` is the full primary copy, this call's keys included."""
        if q_start == 0:  # a prefill: a new sequence
            self.clear()
        elif self.repair:
            self.rebuild(plan, primary, primary_keys[:, :, :q_start], q_start, self.repair == "missing")
        copies: list[KeyCopy] = []
        for copy, keys in enumerate(rotated):
            if copy == primary:
                copies.append((primary_keys, 0))
                continue
            buffer = self.buffers.get(copy)
            if buffer is None:  # a prefill: attend from the fresh copy, buffer only what stays reachable
                self.fresh[copy] = (keys, q_start)
                copies.append(self.fresh[copy])
            else:
                buffer.append(keys)
                copies.append(buffer.view())
        return copies

    def trim(self, plan: AttentionPlan, next_query: int) -> None:
        """Drop the keys no query from ``next_query`` on can see through each side copy."""
        reach = plan.reach(next_query)
        for copy, (keys, first) in self.fresh.items():
            keep = min(max(reach[copy], first), first + keys.shape[2])
            self.buffers[copy] = KeyBuffer(keys[:, :, keep - first :], keep)
        self.fresh.clear()
        for copy, buffer in self.buffers.items():
            buffer.drop_before(reach[copy])

    def rebuild(
        self,
        plan: AttentionPlan,
        primary: int,
        primary_keys: torch.Tensor,
        q_start: int,
        only_missing: bool = False,
    ) -> None:
        """Recompute the side copies of keys ``< q_start`` from the primary copy: a key rotated at position p
        becomes the key rotated at p' by one more rotation by p' - p (rotations compose). ``only_missing``
        (after a crop, whose side copies are otherwise right): only the copies lacking keys a query from
        ``q_start`` on sees (a band whose start moved back with the query) that they cannot take back."""
        reach = plan.reach(q_start)
        first = plan.key_groups()[1]
        for copy in range(len(reach)):
            if copy == primary:
                continue
            buffer = self.buffers.get(copy)
            if only_missing and buffer is not None and buffer.take_back(min(reach[copy], q_start)):
                continue  # holds every key it needs
            lo = min(reach[copy], q_start)
            idx = torch.arange(lo, q_start, device=primary_keys.device)
            to, fro = plan.segments[first[copy]].k_pos(idx), plan.segments[first[primary]].k_pos(idx)
            if to.dim() > 1 or fro.dim() > 1:  # per head or per frequency
                frequencies = plan.inv_freq.numel()
                to, fro = lift(to, frequencies), lift(fro, frequencies)
            delta = to - fro
            table = rope_cos_sin(delta, plan.inv_freq, 1.0, primary_keys.dtype)
            self.buffers[copy] = KeyBuffer(apply_table(primary_keys[:, :, lo:q_start], *table), lo)
        self.repair = ""

    def crop(self, length: int) -> None:
        """Keep keys below ``length`` (the cache was cropped to it). The next call's queries start earlier,
        so a band may reach further back than its copy now holds: it takes those keys back from the rows
        it dropped but still has, or else is rebuilt from the primary copy."""
        for buffer in self.buffers.values():
            buffer.drop_from(length)
        self.repair = self.repair or "missing"

    def map_batch(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        for buffer in self.buffers.values():
            buffer.map_batch(fn)

    def clear(self) -> None:
        self.buffers.clear()
        self.fresh.clear()
        self.repair = ""

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self.buffers.values())


@dataclass
class GenerationState:
    """What one generation fixes at its prefill."""

    owner: object  # the patch (backends.hf.patch.PatchState) that prefilled it
    context_length: int  # l, the prompt length the plan is frozen at
    primary: int  # the key copy the cache's own ``keys`` hold
    segments: int  # how many segments the plan had at prefill (it must not change)
    keys_are_rotated: bool = True  # False: the cache holds un-rotated keys, re-rotated every step
    total_length: int | None = None  # prompt + new tokens, if known (the plan's budget)
    started: set[int] = field(default_factory=set)  # layers that have prefilled this generation

    def __deepcopy__(self, memo: dict[int, Any]) -> GenerationState:
        """A copied cache (e.g. a prompt's cache copied for each continuation) continues the same
        generation of the same patch: the owner is shared, not copied."""
        return dataclasses.replace(self, started=set(self.started))


# --- appending in place ----------------------------------------------------------------------------------


class GrowingLayer(DynamicLayer):
    """A ``DynamicLayer`` that appends in place. transformers' layer appends with ``torch.cat``, which copies
    every cached key and value at every decoding step (on an H100 at 128K, 185 µs per layer and tensor:
    about a fifth of an 8B model's step). Here ``keys`` and ``values`` are views of buffers with room to
    grow, sized for the whole generation when the cache knows its budget (``reserve``), and a step writes
    its own rows. Whatever replaces ``keys``/``values`` (a batch selection, beam reordering, offloading) is
    copied into new buffers at the next append; a crop keeps the views, and the next append overwrites the
    rows it dropped."""

    def __init__(self, reserve: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.reserve = reserve  # rows to hold at the first append (prompt + new tokens), if known
        self.buffers: tuple[torch.Tensor, torch.Tensor] | None = None

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if torch.is_grad_enabled() and (key_states.requires_grad or value_states.requires_grad):
            self.buffers = None  # autograd must not see earlier keys written over in place
            return super().update(key_states, value_states, *args, **kwargs)
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        held = self.get_seq_length()
        rows = held + key_states.shape[-2]
        if not self._appendable(key_states, rows):
            self._adopt(key_states, held, rows)
        assert self.buffers is not None
        keys, values = self.buffers
        keys[:, :, held:rows] = key_states
        values[:, :, held:rows] = value_states
        self.keys, self.values = keys[:, :, :rows], values[:, :, :rows]
        return self.keys, self.values

    def _appendable(self, new: torch.Tensor, rows: int) -> bool:
        """Whether ``keys``/``values`` are still the leading rows of the buffers and ``rows`` fit there."""
        if self.buffers is None or rows > self.buffers[0].shape[2]:
            return False
        keys = self.buffers[0]
        if keys.is_inference() and not torch.is_inference_mode_enabled():
            return False  # made under inference_mode: not writable outside it
        if (new.shape[:2], new.shape[3], new.dtype, new.device) != (
            keys.shape[:2],
            keys.shape[3],
            keys.dtype,
            keys.device,
        ):
            return False
        return all(
            held.data_ptr() == buffer.data_ptr() and held.stride() == buffer.stride()
            for held, buffer in zip((self.keys, self.values), self.buffers, strict=True)
        )

    def _adopt(self, new: torch.Tensor, held: int, rows: int) -> None:
        """New buffers for ``rows`` rows or more, holding the ``held`` rows the layer has."""
        capacity = self.reserve if self.reserve is not None and rows <= self.reserve else self.capacity(rows)
        buffers = []
        for old in (self.keys, self.values):
            buffer = new.new_empty((*new.shape[:2], capacity, old.shape[3] if held else new.shape[3]))
            if held:
                buffer[:, :, :held] = old
            buffers.append(buffer)
        self.buffers = (buffers[0], buffers[1])

    @staticmethod
    def capacity(rows: int) -> int:
        """Rows a buffer made for ``rows`` holds when the budget is unknown (copied again every rows/32)."""
        return rows + max(256, rows // 32)

    def reset(self) -> None:
        super().reset()
        self.buffers = None

    @property
    def nbytes(self) -> int:
        """Bytes the layer holds (its buffers' spare rows included)."""
        if self.buffers is not None and self.is_initialized and self._appendable(self.keys, 0):
            return sum(buffer.nbytes for buffer in self.buffers)
        return sum(t.nbytes for t in (self.keys, self.values) if isinstance(t, torch.Tensor))


class GrowingCache(DynamicCache):
    """transformers' ``DynamicCache`` for a model's config (sliding-window layers stay its own, a window of
    keys each), its full layers :class:`GrowingLayer` holding ``total_length`` rows (prompt + new tokens)
    when known."""

    def __init__(self, config: Any = None, total_length: int | None = None, offloading: bool = False) -> None:
        super().__init__(config=config, offloading=offloading)
        self.total_length = total_length
        layers: list[Any] = self.layers
        layers[:] = [self.new_layer() if type(layer) is DynamicLayer else layer for layer in layers]
        self.layer_class_to_replicate = self.new_layer  # called with no argument, as a class would be

    def new_layer(self) -> GrowingLayer:
        return GrowingLayer(reserve=self.total_length)


# --- primary path: the cache carries the side copies and the generation ------------------------------


class RotatedKeyLayer(GrowingLayer):
    """A :class:`GrowingLayer` whose ``keys`` are the primary rotated copy, with the side copies beside them;
    every change to the keys and values (crop, batch selection, repetition, beam reordering, reset,
    offloading) is applied to the side copies too."""

    def __init__(self, reserve: int | None = None, **kwargs: Any) -> None:
        super().__init__(reserve, **kwargs)
        self.side = SideCopies()

    def reset(self) -> None:
        super().reset()
        self.side.clear()

    def crop(self, tokens_to_remove: int) -> None:
        super().crop(tokens_to_remove)
        if tokens_to_remove != 0 and self.is_initialized:
            self.side.crop(self.get_seq_length())

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        super().reorder_cache(beam_idx)
        self.side.map_batch(lambda t: t.index_select(0, beam_idx.to(t.device)))

    def batch_repeat_interleave(self, repeats: int) -> None:
        super().batch_repeat_interleave(repeats)
        self.side.map_batch(lambda t: t.repeat_interleave(repeats, dim=0))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        super().batch_select_indices(indices)
        self.side.map_batch(lambda t: t[indices, ...])

    def offload(self) -> None:
        super().offload()
        self.side.map_batch(lambda t: t.to("cpu", non_blocking=True))

    def prefetch(self) -> None:
        super().prefetch()
        if self.is_initialized:
            self.side.map_batch(lambda t: t.to(self.device, non_blocking=True))


class RotatedKeyCache(GrowingCache):
    """The KV cache of one generation of a patched model (make it with ``backends.hf.patch.new_cache``):
    its full layers :class:`RotatedKeyLayer`; with the model's ``config``, its sliding-window layers, which
    no method changes, transformers' own (a window of keys each).

    ``total_length``: prompt + new tokens (None: unknown), the budget the method plans with (e.g. LaMPE's
    ``identity_within_window``). ``generation`` is set by the patched attention at the prefill."""

    def __init__(self, config: Any = None, total_length: int | None = None, offloading: bool = False) -> None:
        super().__init__(config, total_length, offloading)
        self.generation: GenerationState | None = None

    def new_layer(self) -> RotatedKeyLayer:
        return RotatedKeyLayer(reserve=self.total_length)

    def side_copies(self, layer_idx: int) -> SideCopies:
        side: SideCopies = self.layers[layer_idx].side  # a patched layer is a full one: a RotatedKeyLayer
        return side

    def reset(self) -> None:
        super().reset()
        self.generation = None

    def side_bytes(self) -> int:
        return sum(layer.side.nbytes for layer in self.layers if isinstance(layer, RotatedKeyLayer))


# --- fallback: a cache made elsewhere; side copies kept by hf/patch.py, changes noticed after the fact ------


class LayerKeys(SideCopies):
    """One layer's side copies and what the (foreign) cache held when we last wrote it."""

    def __init__(self) -> None:
        super().__init__()
        self.length = 0
        self.written: weakref.ref | None = None  # the cache's key tensor after our last update

    def check(self, q_start: int, cache_keys: torch.Tensor | None) -> None:
        """Before an update: if the cache is not as we left it (cropped, reordered), rebuild every copy."""
        in_sync = (
            self.length == q_start
            and self.written is not None
            and cache_keys is not None
            and self.written() is cache_keys
        )
        if q_start > 0 and not in_sync:
            self.repair = "all"

    def extend(
        self,
        plan: AttentionPlan,
        primary: int,
        rotated: list[torch.Tensor],
        primary_keys: torch.Tensor,
        q_start: int,
    ) -> list[KeyCopy]:
        copies = super().extend(plan, primary, rotated, primary_keys, q_start)
        self.length = primary_keys.shape[2]
        self.written = weakref.ref(primary_keys)
        return copies


class RotatedKeys:
    """The side copies of one generation held in a cache made elsewhere, all layers."""

    def __init__(self, generation: GenerationState) -> None:
        self.generation = generation
        self.layers: dict[int, LayerKeys] = {}

    def layer(self, layer_idx: int, q_start: int, cache_keys_before: torch.Tensor | None) -> LayerKeys:
        """The layer's side copies, marked for a rebuild if the cache changed since we last wrote it."""
        layer = self.layers.setdefault(layer_idx, LayerKeys())
        layer.check(q_start, cache_keys_before)
        return layer

    def side_bytes(self) -> int:
        return sum(layer.nbytes for layer in self.layers.values())
