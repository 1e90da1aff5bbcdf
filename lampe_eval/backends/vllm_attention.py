"""lampe-eval's vLLM attention backend (vLLM's ``CUSTOM`` backend, registered by
:func:`lampe_eval.backends.vllm_plugin.register`): the platform's own (CPU attention, or FlashAttention on
CUDA), except in the layers a position method patches (:mod:`.vllm_worker` installs it), where
lampe-eval's engine runs over :class:`~lampe_eval.attention.slots.SlotPool` s.

The state lives on vLLM's objects:

* each patched ``Attention`` layer carries a :class:`PatchedLayer` (:func:`patched_layer`): its module's
  own rotary embedding, put back by uninstall; on the attention path an :class:`EngineLayer`, which adds
  the layer's slot pool (every sequence's keys, rotated once per key map, and values) and the
  :class:`Sequences` all patched layers share (the method, its plans, the sequences in flight);
* :class:`LampeMetadataBuilder` sorts each forward pass's rows once, in ``build`` (:class:`Pass`: prefill
  calls of one plan and prompt length, decode batches of one plan shape), into the metadata every layer
  reads (:class:`LampeAttentionMetadata`).

A sequence is known by the first block of its block table; its plan is fixed by its prefill, which must
hold its whole prompt (chunked prefill and prefix caching are switched off by the backend, and a prefill
of a length the batch did not announce, e.g. a preempted sequence computed again, fails loudly). The
patched layers' paged cache is allocated but neither written nor read: their keys and values live in the
pools (memory: see docs/vllm.md).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from ..attention import AttentionPlan
from ..attention.slots import DecodeBatch, SlotPool, attend_sequence, decode_batches
from ..errors import LampeEvalError
from .plans import PlanCache

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.attention.backend import CommonAttentionMetadata
    from vllm.v1.kv_cache_interface import AttentionSpec

_PATCHED = "lampe"  # the attribute of a patched vLLM Attention layer that holds its PatchedLayer


@dataclass
class _Sequence:
    """A sequence in flight: its slot in the pools, its prompt length l (the plan's), budget and length."""

    slot: int
    context_length: int
    budget: int | None
    length: int = 0


@dataclass
class _Call:
    """Sequences attended in one engine call: prefills of one plan and length, or one sequence's rows."""

    rows: list[tuple[int, int]]  # each sequence's [first, stop) rows of the pass's tokens
    slots: list[int]
    plan: AttentionPlan
    q_start: int


@dataclass
class Pass:
    """One forward pass's rows, sorted once for every patched layer: engine calls (prefills) and batches
    of decode rows."""

    calls: list[_Call]
    decodes: list[tuple[slice | torch.Tensor, DecodeBatch]]


@dataclass
class Sequences:
    """The installed method's state shared by its patched layers: its plans and the sequences in flight."""

    state: PlanCache
    slots: int  # sequences a forward pass may hold (max_num_seqs): the pools' slots
    budgets: dict[int, int | None] = field(default_factory=dict)  # prompt length -> budget, this batch
    capacity: int = 0  # tokens a sequence of this batch may reach
    sequences: dict[int, _Sequence] = field(default_factory=dict)  # by first block id

    def begin(self, budgets: dict[int, int | None], capacity: int) -> None:
        self.budgets, self.capacity = budgets, capacity
        self.sequences.clear()

    def prepare(self, common: CommonAttentionMetadata, dtype: torch.dtype, device: torch.device) -> Pass:
        """The rows of the forward pass ``common`` describes, each sequence's slot and plan settled."""
        starts = common.query_start_loc_cpu.tolist()
        seq_lens = common.seq_lens.tolist()
        first_blocks = common.block_table_tensor[:, 0].tolist()
        live = set(first_blocks[: len(seq_lens)])
        calls: dict[tuple, _Call] = {}
        decodes: list[tuple[int, int, AttentionPlan, int]] = []  # (row, slot, plan, position)
        for row, kv_len in enumerate(seq_lens):
            a, b = starts[row], starts[row + 1]
            if b <= a:
                continue
            q_start = kv_len - (b - a)
            sequence = self._sequence(first_blocks[row], q_start, kv_len, live)
            plan = self.state.plan(sequence.context_length, kv_len, sequence.budget)
            sequence.length = kv_len
            if b - a == 1 and q_start > 0 and self.state.method.fixed_key_positions():
                decodes.append((a, sequence.slot, plan, q_start))
            else:  # prefills of one plan and length share a call
                group = (id(plan), b - a) if q_start == 0 else (row,)
                call = calls.setdefault(group, _Call([], [], plan, q_start))
                call.rows.append((a, b))
                call.slots.append(sequence.slot)
        return Pass(list(calls.values()), _decode_batches(decodes, dtype, device))

    def _sequence(self, first_block: int, q_start: int, kv_len: int, live: set[int]) -> _Sequence:
        """The sequence whose block table starts with ``first_block``; a pass from position 0 starts a new
        one (its budget from the lengths the batch announced) in a free slot."""
        if q_start == 0:
            if kv_len not in self.budgets:
                raise LampeEvalError(
                    f"vllm: a prefill of {kv_len} tokens that no request of this batch has (chunked prefill "
                    "or a preempted sequence computed again): give the engine more KV cache "
                    "(VLLM_CPU_KVCACHE_SPACE) or a smaller --batch-size"
                )
            ended = self.sequences.pop(first_block, None)  # its blocks are free: that sequence is done
            slot = ended.slot if ended is not None else self._free_slot(live)
            self.sequences[first_block] = _Sequence(slot, kv_len, self.budgets[kv_len])
            return self.sequences[first_block]
        sequence = self.sequences.get(first_block)
        if sequence is None or sequence.length != q_start:
            raise LampeEvalError(
                f"vllm: a sequence continues at position {q_start} but its slot holds "
                f"{0 if sequence is None else sequence.length} tokens (prefix caching, chunked "
                "prefill or preemption changed it); these are switched off by lampe-eval's vLLM backend"
            )
        return sequence

    def _free_slot(self, live: set[int]) -> int:
        """The lowest free slot; sequences absent from this pass have finished (every running sequence
        is in every pass: no chunked prefill) and give theirs back."""
        for first_block in [b for b in self.sequences if b not in live]:
            del self.sequences[first_block]
        taken = {s.slot for s in self.sequences.values()}
        free = next((slot for slot in range(self.slots) if slot not in taken), None)
        if free is None:
            raise LampeEvalError(f"vllm: more sequences in flight than max_num_seqs ({self.slots})")
        return free


@dataclass
class PatchedLayer:
    """What a patched vLLM ``Attention`` layer carries: the attention module (its parent) whose rotary
    embedding the method replaced, and that module's own one."""

    module: torch.nn.Module
    rotary: torch.nn.Module


@dataclass
class EngineLayer(PatchedLayer):
    """A patched layer whose attention lampe-eval's engine runs: the method's shared state and this
    layer's slot pool (replaced, empty, at each batch)."""

    sequences: Sequences
    pool: SlotPool


def patched_layer(layer: torch.nn.Module) -> PatchedLayer | None:
    """What the method installed in ``layer`` (a vLLM ``Attention``), if any."""
    return getattr(layer, _PATCHED, None)


def patch_layer(layer: torch.nn.Module, patched: PatchedLayer | None) -> None:
    """Set (``None``: remove) what the method installed in ``layer``."""
    if patched is None:
        if hasattr(layer, _PATCHED):
            delattr(layer, _PATCHED)
        return
    setattr(layer, _PATCHED, patched)


def _decode_batches(
    decodes: list[tuple[int, int, AttentionPlan, int]], dtype: torch.dtype, device: torch.device
) -> list[tuple[slice | torch.Tensor, DecodeBatch]]:
    """The pass's decode rows (row, slot, plan, position) as batches of one plan shape, with their rows."""
    steps = [plan.segment_step(position, dtype, device) for _, _, plan, position in decodes]
    batches = decode_batches(steps, [d[1] for d in decodes], [d[3] for d in decodes])
    return [(_rows([decodes[r][0] for r in group], device), batch) for group, batch in batches]


def _rows(rows: list[int], device: torch.device) -> slice | torch.Tensor:
    """Token rows as a slice when consecutive (vLLM puts decode rows first): views, not gathers."""
    if rows == list(range(rows[0], rows[0] + len(rows))):
        return slice(rows[0], rows[0] + len(rows))
    return torch.tensor(rows, device=device)


def attend(
    layer: EngineLayer,
    step: Pass,
    scale: float,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    output: torch.Tensor,
) -> None:
    """A patched layer's attention over its pool for the pass ``step``, written into ``output``."""
    rotated = layer.sequences.state.method.fixed_key_positions()
    for call in step.calls:
        heads_first = [(query[a:b], key[a:b], value[a:b]) for a, b in call.rows]
        q, k, v = (torch.stack(t).transpose(1, 2) for t in zip(*heads_first, strict=True))  # [B, H, n, D]
        out = attend_sequence(layer.pool, call.slots, call.plan, scale, q, k, v, call.q_start, rotated)
        for (a, b), each in zip(call.rows, out, strict=True):
            output[a:b].copy_(each.transpose(0, 1).reshape(output[a:b].shape))
    for rows, batch in step.decodes:
        out = batch.attend(layer.pool, scale, query[rows], key[rows], value[rows])
        output[rows] = out.reshape(out.shape[0], *output.shape[1:]).to(output.dtype)


def _platform_backend() -> tuple[type, type, type, type]:
    """The platform's attention backend, its implementation, metadata builder and metadata classes."""
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        from vllm.v1.attention.backends import cpu_attn as cpu

        return (
            cpu.CPUAttentionBackend,
            cpu.CPUAttentionBackendImpl,
            cpu.CPUAttentionMetadataBuilder,
            cpu.CPUAttentionMetadata,
        )
    from vllm.v1.attention.backends import flash_attn as flash

    return (
        flash.FlashAttentionBackend,
        flash.FlashAttentionImpl,
        flash.FlashAttentionMetadataBuilder,
        flash.FlashAttentionMetadata,
    )


_Base, _BaseImpl, _BaseBuilder, _BaseMetadata = _platform_backend()


@dataclass
class LampeAttentionMetadata(_BaseMetadata):  # type: ignore[misc, valid-type]
    """The platform's metadata and the pass's rows sorted for the patched layers (None: no method runs
    lampe-eval's attention)."""

    lampe: Pass | None = None


class LampeMetadataBuilder(_BaseBuilder):  # type: ignore[misc, valid-type]
    """The platform's metadata builder; when a method is installed in its layers, it also prepares each
    forward pass's rows for them, once per step."""

    def __init__(
        self,
        kv_cache_spec: AttentionSpec,
        layer_names: list[str],
        vllm_config: VllmConfig,
        device: torch.device,
    ) -> None:
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        from vllm.config import get_layers_from_vllm_config
        from vllm.model_executor.layers.attention import Attention

        self._layers = list(get_layers_from_vllm_config(vllm_config, Attention, layer_names).values())
        self._dtype = vllm_config.model_config.dtype

    def build(
        self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata, fast_build: bool = False
    ) -> LampeAttentionMetadata:
        metadata = super().build(common_prefix_len, common_attn_metadata, fast_build)
        fields = {f.name: getattr(metadata, f.name) for f in dataclasses.fields(metadata) if f.init}
        sequences = self._sequences()
        step = (
            None if sequences is None else sequences.prepare(common_attn_metadata, self._dtype, self.device)
        )
        return LampeAttentionMetadata(**fields, lampe=step)

    def _sequences(self) -> Sequences | None:
        """The installed method's shared state, if it runs lampe-eval's attention in one of the layers."""
        for layer in self._layers:
            patched = patched_layer(layer)
            if isinstance(patched, EngineLayer):
                return patched.sequences
        return None


class LampeAttentionImpl(_BaseImpl):  # type: ignore[misc, valid-type]
    """The platform's attention, except in the layers a method patches: there, the method's attention
    over each sequence's own rotated-key cache."""

    def forward(
        self,
        layer: torch.nn.Module,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        kv_cache: torch.Tensor,
        attn_metadata: LampeAttentionMetadata | None,
        output: torch.Tensor,
        *args: torch.Tensor | None,
        **kwargs: torch.Tensor | None,
    ) -> torch.Tensor:
        patched = patched_layer(layer)
        if attn_metadata is None or not isinstance(patched, EngineLayer):
            return super().forward(layer, query, key, value, kv_cache, attn_metadata, output, *args, **kwargs)
        if attn_metadata.lampe is None:
            raise LampeEvalError("vllm: a patched layer ran in a pass its metadata builder did not prepare")
        attend(patched, attn_metadata.lampe, self.scale, query, key, value, output)
        return output

    def do_kv_cache_update(
        self,
        layer: torch.nn.Module,
        key: torch.Tensor,
        value: torch.Tensor,
        kv_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
    ) -> None:
        """vLLM's paged cache write, except in the patched layers: their keys and values are in the
        pools (the paged cache is not read there)."""
        if isinstance(patched_layer(layer), EngineLayer):
            return
        super().do_kv_cache_update(layer, key, value, kv_cache, slot_mapping)


class LampeAttentionBackend(_Base):  # type: ignore[misc, valid-type]
    """The platform's backend with :class:`LampeAttentionImpl` and :class:`LampeMetadataBuilder` (its name
    stays the platform's)."""

    @staticmethod
    def get_impl_cls() -> type:
        return LampeAttentionImpl

    @staticmethod
    def get_builder_cls() -> type:
        return LampeMetadataBuilder
