"""Many sequences' rotated keys and values in fixed slots, and one decode step for all of them at once.

An engine that batches sequences of different lengths (vLLM's continuous batching) runs a position method
with one plan per sequence (LaMPE's mapping follows each prompt's length). Running each sequence's decode
step through :func:`~lampe_eval.attention.engine.attend_rotated` costs a few dozen small PyTorch calls per
sequence and layer; here a decode step is a dozen calls per layer for the whole batch:

* :class:`SlotPool` holds one layer's keys, already rotated, one tensor per key copy (the plan's distinct
  key maps), and its values, for ``slots`` sequences of up to ``capacity`` tokens: a decode step writes
  its new key and value in place (no copy of the cache) and a batch of slots is a view.
* :class:`DecodeBatch` is one forward pass's decode rows: every sequence's query and key rotation for
  *every* segment (:meth:`AttentionPlan.segment_step`; a segment a row does not see gets an empty key
  range), stacked. Each part attends its key range across the batch (padded to the widest row and
  masked), and the parts are merged by one softmax over all of them: exactly the log-sum-exp merge of
  the per-sequence path, pairs seen by two segments counted twice as there.

Copies are kept whole (the per-sequence cache drops keys that a band no longer reaches), so the pool holds
``copies + 1`` tensors of ``slots x capacity`` tokens per layer. Methods whose key positions move with every
step (``fixed_key_positions()`` false) keep un-rotated keys in copy 0 and take the per-sequence path
(:func:`attend_sequence`), as the Hugging Face backend does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .engine import NEG_INF, AttentionPlan, KeyCopy, SegmentStep, attend_rotated, segmented_attention


@dataclass
class SlotPool:
    """One layer's keys (one tensor per key copy) and values: [slots, key heads, capacity, head dim]."""

    slots: int
    capacity: int
    keys: list[torch.Tensor] = field(default_factory=list)
    values: torch.Tensor | None = None

    def key_copy(self, copy: int, like: torch.Tensor) -> torch.Tensor:
        """Key copy ``copy`` (allocated, zeroed, on first use), shaped for heads and dim of ``like``
        ([..., heads, n, dim])."""
        while len(self.keys) <= copy:
            self.keys.append(self._new(like))
        return self.keys[copy]

    def value_store(self, like: torch.Tensor) -> torch.Tensor:
        if self.values is None:
            self.values = self._new(like)
        return self.values

    def _new(self, like: torch.Tensor) -> torch.Tensor:
        heads, dim = like.shape[-3], like.shape[-1]
        return like.new_zeros((self.slots, heads, self.capacity, dim))

    def check_room(self, end: int) -> None:
        if end > self.capacity:
            raise ValueError(f"a sequence reached {end} tokens; its slot holds {self.capacity}")


def attend_sequence(
    pool: SlotPool,
    slots: list[int],
    plan: AttentionPlan,
    scale: float,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    q_start: int,
    rotated: bool = True,
) -> torch.Tensor:
    """Sequences of one plan, stored in ``slots``, and one call for them: un-rotated ``query``
    [B, Hq, n, D], ``key`` and ``value`` [B, Hkv, n, D] of tokens ``q_start..`` (B = len(slots); several
    only for prefills, ``q_start`` 0, whose keys are all here); returns [B, Hq, n, D]. The arithmetic of
    the Hugging Face backend's patched attention (``backends.hf_patch.attend_patched``)."""
    if len(slots) != 1 and q_start != 0:
        raise ValueError("several sequences share a call only in a prefill")
    end = q_start + key.shape[2]
    pool.check_room(end)
    index = torch.tensor(slots, device=key.device)
    values = pool.value_store(value)
    values[index, :, q_start:end] = value
    if not rotated:  # positions move every step: un-rotated keys, all re-rotated by the plan
        pool.key_copy(0, key)[index, :, q_start:end] = key
        if q_start > 0:
            slot = slots[0]
            key, value = pool.keys[0][slot : slot + 1, :, :end], values[slot : slot + 1, :, :end]
        return segmented_attention(query, key, value, plan, q_start, scale)
    new = plan.rotate_keys(key, q_start)
    for copy, keys in enumerate(new):
        pool.key_copy(copy, key)[index, :, q_start:end] = keys
    if q_start == 0:  # a prefill reads the keys it just rotated
        copies: list[KeyCopy] = [(keys, 0) for keys in new]
        return attend_rotated(query, copies, value, plan, 0, scale)
    slot = slots[0]
    copies = [(pool.keys[copy][slot : slot + 1, :, :end], 0) for copy in range(len(new))]
    return attend_rotated(query, copies, values[slot : slot + 1, :, :end], plan, q_start, scale)


@dataclass(frozen=True)
class _Part:
    copy: int
    lo: int  # the batch's key range for this part: the union of its rows' ranges
    hi: int


class DecodeBatch:
    """One forward pass's decode rows of sequences whose plans share a shape (:func:`batch_shape`):
    built once per pass, run by every patched layer (:meth:`attend`)."""

    def __init__(self, steps: list[SegmentStep], slots: list[int], positions: list[int]) -> None:
        if not steps or len({batch_shape(s) for s in steps}) != 1:
            raise ValueError("a decode batch needs steps of one shape")
        device = steps[0].query_rotation.device
        self.rows = len(steps)
        self.first_slot = min(slots)
        self.width = max(slots) - self.first_slot + 1  # slots from first_slot, idle ones included
        offsets = [slot - self.first_slot for slot in slots]  # built on the CPU, moved once
        self.dense = offsets == list(range(self.rows))
        self.end = max(positions) + 1
        self.slots = torch.tensor(slots, device=device)
        self.positions = torch.tensor(positions, device=device)
        self.offsets = torch.tensor(offsets, device=device)
        self.query_rotation = _stack([s.query_rotation for s in steps])  # [rows or 1, H, D, parts * D]
        self.key_rotation = _stack([s.key_rotation for s in steps])  # [rows or 1, H, D, copies * D]
        self.copies = 1 + max(steps[0].copies)
        ranges = torch.tensor([[(lo, max(lo, hi)) for lo, hi in s.ranges] for s in steps])  # [rows, parts, 2]
        # per seen part: (the part, its column block in the query rotation, [width, keys] True where a row
        # must not look)
        kept = []
        for index, copy in enumerate(steps[0].copies):
            lo, hi = ranges[:, index, 0], ranges[:, index, 1]
            seen = hi > lo
            if not bool(seen.any()):
                continue  # no row sees this part: it costs nothing
            first, stop = int(lo[seen].min()), int(hi[seen].max())
            keys = torch.arange(first, stop)
            wide = torch.ones((self.width, stop - first), dtype=torch.bool)
            wide[offsets] = (keys[None, :] < lo[:, None]) | (keys[None, :] >= hi[:, None])
            kept.append((_Part(copy, first, stop), index, wide))
        # parts in key order: when they tile one key range (LaMPE's head, middle and tail of sequences of
        # one length), the weights are in that range's order and one matmul reads the values
        kept.sort(key=lambda entry: entry[0].lo)
        self.parts = [part for part, _, _ in kept]
        self.part_index = [index for _, index, _ in kept]
        hidden = [wide for _, _, wide in kept]
        self.tiled = all(a.hi == b.lo for a, b in zip(self.parts, self.parts[1:], strict=False))
        self._scaled: dict[float, torch.Tensor] = {}
        # idle slots inside the range see one key (of the first part) so their softmax stays finite
        everything = torch.cat(hidden, dim=1)
        everything[everything.all(dim=1), 0] = False
        self.hidden = everything.to(device)[:, None, None, :]  # [width, 1, 1, keys of all parts]

    def attend(
        self, pool: SlotPool, scale: float, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor
    ) -> torch.Tensor:
        """The decode rows' un-rotated ``query`` [rows, Hq, D], ``key`` and ``value`` [rows, Hkv, D]: store
        the new keys (rotated at every copy) and values in the rows' slots, attend; returns [rows, Hq, D]."""
        rows, q_heads, dim = query.shape
        kv_heads = key.shape[1]
        group = q_heads // kv_heads
        pool.check_room(self.end)
        rotated = _rotate(key, self.key_rotation).view(rows, kv_heads, -1, dim)
        for copy in range(self.copies):
            pool.key_copy(copy, key[:, :, None])[self.slots, :, self.positions] = rotated[:, :, copy]
        values = pool.value_store(value[:, :, None])
        values[self.slots, :, self.positions] = value
        # [rows, Hkv, parts, group, D]: each part's queries of one key head side by side for one matmul
        if scale not in self._scaled:  # the softmax scale folded into the rotation, once per pass
            self._scaled[scale] = self.query_rotation * scale
        queries = _rotate(query, self._scaled[scale]).view(rows, kv_heads, group, -1, dim)
        queries = queries.transpose(2, 3).contiguous()
        if not self.dense:  # rows to their slots' places in the range read
            placed = queries.new_zeros((self.width, *queries.shape[1:]))
            placed[self.offsets] = queries
            queries = placed
        window = slice(self.first_slot, self.first_slot + self.width)
        scores = torch.cat(
            [
                queries[:, :, index] @ pool.keys[part.copy][window, :, part.lo : part.hi].transpose(-1, -2)
                for index, part in zip(self.part_index, self.parts, strict=True)
            ],
            dim=-1,
        )  # [width, Hkv, group, keys of all parts]
        weights = torch.softmax(scores.masked_fill_(self.hidden, NEG_INF), dim=-1, dtype=torch.float32)
        weights = weights.to(values.dtype)
        if self.tiled:
            out = weights @ values[window, :, self.parts[0].lo : self.parts[-1].hi]
            return self._rows(out.reshape(self.width, q_heads, dim))
        out = None
        start = 0
        for part in self.parts:
            stop = start + part.hi - part.lo
            piece = weights[..., start:stop] @ values[window, :, part.lo : part.hi]
            out = piece if out is None else out + piece
            start = stop
        assert out is not None
        return self._rows(out.reshape(self.width, q_heads, dim))

    def _rows(self, out: torch.Tensor) -> torch.Tensor:
        """The batch's rows of an output over the slot range."""
        return out if self.dense else out[self.offsets]


def _rotate(x: torch.Tensor, rotation: torch.Tensor) -> torch.Tensor:
    """``x`` [rows, H, D] times ``rotation`` [rows or 1, H or 1, D, X]: [rows, H, X], in one GEMM when
    the rotation is shared (a broadcast matmul would copy it per row and head)."""
    rows, heads, dim = x.shape
    if rotation.shape[1] == 1:
        if rotation.shape[0] == 1:
            return (x.reshape(rows * heads, dim) @ rotation[0, 0]).view(rows, heads, -1)
        return torch.bmm(x, rotation[:, 0])
    return (x[:, :, None, :] @ rotation)[:, :, 0]  # per head (Ms-PoE)


def batch_shape(step: SegmentStep) -> tuple:
    """What sequences must share to decode in one batch: the parts' key copies and the rotations' shapes."""
    return (step.copies, tuple(step.query_rotation.shape), tuple(step.key_rotation.shape))


def _stack(matrices: list[torch.Tensor]) -> torch.Tensor:
    """[rows, H, D, X]; one shared [1, H, D, X] when every row has the same matrix object (one plan)."""
    if all(m is matrices[0] for m in matrices):
        return matrices[0][None]
    return torch.stack(matrices)


def decode_batches(
    steps: list[SegmentStep], slots: list[int], positions: list[int]
) -> list[tuple[list[int], DecodeBatch]]:
    """The rows of one pass grouped by :func:`batch_shape`: (row indices, their batch) per group."""
    groups: dict[tuple, list[int]] = {}
    for row, step in enumerate(steps):
        groups.setdefault(batch_shape(step), []).append(row)
    return [
        (rows, DecodeBatch([steps[r] for r in rows], [slots[r] for r in rows], [positions[r] for r in rows]))
        for rows in groups.values()
    ]
