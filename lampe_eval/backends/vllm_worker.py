"""What runs inside vLLM's worker process: the attention backend that runs a lampe-eval method, and the
functions that install a method into the loaded model (called through ``LLM.collective_rpc``).

vLLM's ``CUSTOM`` attention backend is :class:`LampeAttentionBackend` (registered in every vLLM process by
the ``vllm.general_plugins`` entry point, :func:`lampe_eval.backends.vllm_plugin.register`).
The backend is the platform's own one (CPU attention, or FlashAttention on CUDA) until a method is
installed:

* ``rope``: nothing changes.
* a **frequency method** with fixed frequencies (linear, ntk, yarn, llama3, longrope, ntk_by_parts): the
  patched layers get a copy of their rotary embedding whose cos/sin table is the method's (its inverse
  frequencies and attention factor): vLLM's own rotary kernel and attention run unchanged.
* every **other method** (the position methods, dynamic NTK): the patched layers' rotary embedding lets
  the query and key through un-rotated, and their attention runs lampe-eval's engine over
  :class:`~lampe_eval.attention.slots.SlotPool` s (one per layer: every sequence's keys, rotated once per
  key map, and values, in a slot of its own). Each sequence has its own plan (LaMPE's mapping follows its
  prompt length). Prefills run one call per plan and prompt length
  (:func:`~lampe_eval.attention.slots.attend_sequence`, the Hugging Face backend's arithmetic); the
  decode rows of a pass run as one batch per plan shape
  (:class:`~lampe_eval.attention.slots.DecodeBatch`): a dozen PyTorch calls per layer for all of them.

A sequence is known by the first block of its block table; its plan is fixed by its prefill, which must
hold its whole prompt (chunked prefill and prefix caching are switched off by the backend, and a prefill
of a length the batch did not announce, e.g. a preempted sequence computed again, fails loudly). The
patched layers' paged cache is allocated but neither written nor read: their keys, one copy per key map,
and values live in the pools (memory: see docs/vllm.md).
"""

from __future__ import annotations

import copy
import functools
import json
import re
import types
from dataclasses import dataclass, field
from typing import Any

import torch

from ..attention import AttentionPlan
from ..attention.slots import DecodeBatch, SlotPool, attend_sequence, decode_batches
from ..errors import LampeEvalError
from ..methods import METHODS
from ..methods.base import FrequencyMethod, Method, RopeBase
from .plans import PlanCache as PatchState
from .rope_config import rope_base_from_config

_LAYER_INDEX = re.compile(r"layers\.(\d+)\.")


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
class _Pass:
    """One forward pass's rows, sorted once for every patched layer: engine calls (prefills) and batches
    of decode rows."""

    metadata: Any
    calls: list[_Call]
    decodes: list[tuple[slice | torch.Tensor, DecodeBatch]]


@dataclass
class Installed:
    """The method installed in this worker's model, and the state of the sequences in flight."""

    state: PatchState
    layers: frozenset[int]  # patched layer indices whose attention the backend runs
    slots: int  # sequences a forward pass may hold (max_num_seqs): the pools' slots
    budgets: dict[int, int | None] = field(default_factory=dict)  # prompt length -> budget, this batch
    capacity: int = 0  # tokens a sequence of this batch may reach
    sequences: dict[int, _Sequence] = field(default_factory=dict)  # by first block id
    pools: dict[int, SlotPool] = field(default_factory=dict)  # by layer
    current: _Pass | None = None

    def begin(self, budgets: dict[int, int | None], capacity: int) -> None:
        self.budgets, self.capacity = budgets, capacity
        self.sequences.clear()
        self.pools.clear()
        self.current = None

    def pool(self, layer: int) -> SlotPool:
        if layer not in self.pools:
            self.pools[layer] = SlotPool(self.slots, self.capacity)
        return self.pools[layer]

    def pass_for(self, metadata: Any, like: torch.Tensor) -> _Pass:
        """The rows of the forward pass ``metadata`` describes (sorted at its first patched layer)."""
        if self.current is not None and self.current.metadata is metadata:
            return self.current
        starts = metadata.query_start_loc.tolist()
        seq_lens = metadata.seq_lens.tolist()
        first_blocks = metadata.block_table[:, 0].tolist()
        live = set(first_blocks[: len(seq_lens)])
        calls: dict[tuple, _Call] = {}
        decodes = []
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
        steps = [plan.segment_step(q, like.dtype, like.device) for _, _, plan, q in decodes]
        batches = decode_batches(steps, [d[1] for d in decodes], [d[3] for d in decodes])
        rows = [(_rows([decodes[r][0] for r in group], like.device), batch) for group, batch in batches]
        self.current = _Pass(metadata, list(calls.values()), rows)
        return self.current

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


def _rows(rows: list[int], device: torch.device) -> slice | torch.Tensor:
    """Token rows as a slice when consecutive (vLLM puts decode rows first): views, not gathers."""
    if rows == list(range(rows[0], rows[0] + len(rows))):
        return slice(rows[0], rows[0] + len(rows))
    return torch.tensor(rows, device=device)


_INSTALLED: Installed | None = None


def _platform_backend() -> tuple[type, type]:
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend, CPUAttentionBackendImpl

        return CPUAttentionBackend, CPUAttentionBackendImpl
    from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend, FlashAttentionImpl

    return FlashAttentionBackend, FlashAttentionImpl


_Base, _BaseImpl = _platform_backend()


@functools.cache
def layer_index(name: str) -> int:
    found = _LAYER_INDEX.search(name)
    if found is None:
        raise LampeEvalError(f"vllm: cannot tell the layer index of attention layer {name!r}")
    return int(found.group(1))


class LampeAttentionImpl(_BaseImpl):  # type: ignore[misc, valid-type]
    """The platform's attention, except in the layers a method patches: there, the method's attention
    over each sequence's own rotated-key cache."""

    def forward(
        self,
        layer: Any,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        kv_cache: torch.Tensor,
        attn_metadata: Any,
        output: torch.Tensor,
        *args: Any,
        **kwargs: Any,
    ) -> torch.Tensor:
        installed = _INSTALLED
        index = layer_index(layer.layer_name)
        if attn_metadata is None or installed is None or index not in installed.layers:
            return super().forward(layer, query, key, value, kv_cache, attn_metadata, output, *args, **kwargs)
        current = installed.pass_for(attn_metadata, query)
        pool = installed.pool(index)
        rotated = installed.state.method.fixed_key_positions()
        for call in current.calls:
            heads_first = [(query[a:b], key[a:b], value[a:b]) for a, b in call.rows]
            q, k, v = (torch.stack(t).transpose(1, 2) for t in zip(*heads_first, strict=True))  # [B, H, n, D]
            out = attend_sequence(pool, call.slots, call.plan, self.scale, q, k, v, call.q_start, rotated)
            for (a, b), each in zip(call.rows, out, strict=True):
                output[a:b].copy_(each.transpose(0, 1).reshape(output[a:b].shape))
        for rows, batch in current.decodes:
            out = batch.attend(pool, self.scale, query[rows], key[rows], value[rows])
            output[rows] = out.reshape(out.shape[0], *output.shape[1:]).to(output.dtype)
        return output

    def do_kv_cache_update(
        self, layer: Any, key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: Any
    ) -> None:
        """vLLM's paged cache write, except in the patched layers: their keys and values are in the
        pools (the paged cache is not read there)."""
        installed = _INSTALLED
        if installed is not None and layer_index(layer.layer_name) in installed.layers:
            return
        super().do_kv_cache_update(layer, key, value, kv_cache, slot_mapping)


class LampeAttentionBackend(_Base):  # type: ignore[misc, valid-type]
    """The platform's backend with :class:`LampeAttentionImpl` (its name stays the platform's)."""

    @staticmethod
    def get_impl_cls() -> type:
        return LampeAttentionImpl


# ------------------------------------------------------------------ installation (through collective_rpc)
class _Unrotated(torch.nn.Module):
    """A rotary embedding that leaves query and key as they are (the method rotates them)."""

    def forward(self, positions: torch.Tensor, query: torch.Tensor, key: Any = None, *args: Any) -> Any:
        return query, key


_RESTORE: list[tuple[Any, Any]] = []  # (attention module, its own rotary embedding)


def _attention_modules(model: Any) -> dict[int, Any]:
    """The model's attention modules by layer index: those holding a rotary embedding and an ``attn``."""
    found = {}
    for name, module in model.named_modules():
        if hasattr(module, "rotary_emb") and hasattr(module, "attn"):
            found[layer_index(name + ".")] = module
    if not found:
        raise LampeEvalError(f"vllm: no rotary attention modules in {type(model).__name__}")
    return found


def _max_sequences(worker: Any) -> int:
    """The engine's ``max_num_seqs``: how many sequences one forward pass may hold."""
    scheduler = getattr(getattr(worker, "vllm_config", None), "scheduler_config", None)
    return int(getattr(scheduler, "max_num_seqs", 0) or 256)


def _model(worker: Any) -> Any:
    runner = worker.model_runner
    return runner.get_model() if hasattr(runner, "get_model") else runner.model


def frequency_table(
    method: FrequencyMethod, base: RopeBase, positions: int, dtype: torch.dtype
) -> torch.Tensor:
    """vLLM's cos/sin cache layout ([positions, rotary_dim]: cos of every frequency, then sin) for a
    frequency method with fixed frequencies, its attention factor multiplied in, with the arithmetic of
    transformers' rotary embedding (float32 products of position and inverse frequency)."""
    inv_freq, factor = method.frequencies(base, positions)
    freqs = torch.arange(positions, dtype=torch.float32)[:, None] * inv_freq.float()[None, :]
    return torch.cat((freqs.cos() * factor, freqs.sin() * factor), dim=-1).to(dtype)


def _with_table(rotary: Any, table: torch.Tensor) -> Any:
    """A copy of vLLM's rotary embedding module ``rotary`` with another cos/sin table. The original, which
    other layers and later methods use, is left as it is: a shallow copy would share its buffer dictionary
    and call the original's bound forward, so the copy gets its own of both."""
    clone = copy.copy(rotary)
    clone._buffers = dict(rotary._buffers)
    clone._buffers["cos_sin_cache"] = table.to(rotary.cos_sin_cache.device)
    for name, value in vars(rotary).items():  # vLLM's CustomOp keeps its forward as a bound method
        if isinstance(value, types.MethodType) and value.__self__ is rotary:
            setattr(clone, name, types.MethodType(value.__func__, clone))
    return clone


def install(worker: Any, method: Method, base: RopeBase) -> str:
    """Install ``method`` in this worker's model; returns how: ``none``, ``frequencies`` or
    ``attention``."""
    global _INSTALLED
    uninstall()
    if method.kind == "baseline":
        return "none"
    modules = _attention_modules(_model(worker))
    patched = frozenset(i for i in method.patched_layers(len(modules)) if i in modules)
    if isinstance(method, FrequencyMethod) and method.fixed_key_positions():
        replaced: dict[int, Any] = {}  # one copy per rotary module (layers share one: get_rope's cache)
        for index in sorted(patched):
            module = modules[index]
            own = module.rotary_emb
            if id(own) not in replaced:
                positions, dtype = own.cos_sin_cache.shape[0], own.cos_sin_cache.dtype
                replaced[id(own)] = _with_table(own, frequency_table(method, base, positions, dtype))
            _RESTORE.append((module, own))
            module.rotary_emb = replaced[id(own)]
        return "frequencies"
    for index in sorted(patched):
        _RESTORE.append((modules[index], modules[index].rotary_emb))
        modules[index].rotary_emb = _Unrotated()
    # plans shared by the sequences of one forward pass that have one (prompt length, length, budget)
    slots = _max_sequences(worker)
    state = PatchState(method=method, base=base, max_plans=slots)
    _INSTALLED = Installed(state, patched, slots)
    return "attention"


def uninstall() -> None:
    """Give the model back its own rotary embeddings and attention."""
    global _INSTALLED
    while _RESTORE:
        module, rotary = _RESTORE.pop()
        module.rotary_emb = rotary
    _INSTALLED = None


def method_from_json(name: str, params: str, window: int) -> Method:
    """The method the main process resolved, rebuilt from its resolved parameters."""
    cls = METHODS.get(name)
    return cls.build(window, None, **cls.typed_params(json.loads(params)))


def base_from_json(config: str, window: int) -> RopeBase:
    """The model's own RoPE from its config (as the main process read it, before vLLM's overrides)."""
    from transformers import AutoConfig

    values = json.loads(config)
    return rope_base_from_config(AutoConfig.for_model(values.pop("model_type"), **values), window)


class LampeWorkerExtension:
    """Mixed into vLLM's worker class (``LLM(worker_extension_cls=...)``): what the main process calls
    through ``collective_rpc`` (arguments in JSON: vLLM's messages carry no Python objects)."""

    def lampe_install(self, name: str, params: str, config: str, window: int) -> tuple[str, str]:
        """Install a method; returns how and its parameters as rebuilt here (the caller compares)."""
        method = method_from_json(name, params, window)
        how = install(self, method, base_from_json(config, window))
        return how, json.dumps(method.params(), sort_keys=True, default=str)

    def lampe_uninstall(self) -> None:
        uninstall()

    def lampe_begin_batch(self, budgets: list[tuple[int, int | None]], capacity: int) -> None:
        """Announce the next batch: (prompt length, budget: prompt + new tokens) of each prompt length, and
        the most tokens a sequence of it may reach."""
        if _INSTALLED is not None:
            _INSTALLED.begin({int(length): budget for length, budget in budgets}, int(capacity))

    def lampe_end_batch(self) -> None:
        """Free the pools of the batch that finished."""
        if _INSTALLED is not None:
            _INSTALLED.begin({}, 0)
