"""lampe-eval's vLLM attention backend (vLLM's ``CUSTOM`` backend, registered by
:func:`lampe_eval.backends.vllm.plugin.register`): the platform's own (CPU attention, or FlashAttention on
CUDA), except in the layers a position method patches (:mod:`.worker` installs it), where
lampe-eval's engine runs over vLLM's own paged cache (:mod:`lampe_eval.attention.paged`).

* **Key copies inside vLLM's budget.** The engine is started for a number of rotated key copies
  (:data:`KEY_COPIES`, set by the main process from the method, :func:`customize_spec`): the layers' KV
  cache spec then holds ``copies`` keys and one value per token (``head_size`` = copies x head dim,
  ``head_size_v`` = head dim), so vLLM's memory profiler, block manager, preemption and capacity count them.
* **Plans from the request itself.** :class:`RequestPlans` reads each row's request in the model runner (its
  prompt length, and its budget: prompt + ``max_tokens`` of its sampling parameters, or
  ``extra_args["lampe_budget"]``), so requests arrive in any order, a chunked prefill's chunks share the
  plan of the whole prompt, and a preempted sequence is computed again with its own plan.
* :class:`LampeMetadataBuilder` sorts each forward pass's rows once, in ``build`` (:class:`Pass`), into the
  metadata every layer reads, with the kernels the engine chose once (:func:`engine_kernels`: the main
  process records the same choice).

Each patched ``Attention`` layer carries a :class:`PatchedLayer` (:func:`patched_layer`): what puts its
module's own rotation back at uninstall; on the attention path an :class:`EngineLayer`, which adds the
:class:`RequestPlans` all patched layers share.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from ...attention import AttentionPlan, kernels
from ...attention.paged import EngineKernel, PagedCache, PagedDecode, attend_paged, decode_shape
from ...errors import LampeEvalError
from ...model_facts import ModelFacts
from ..plans import PlanCache
from .constants import BUDGET, KEY_COPIES
from .engine import engine_kernels

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.attention.backend import CommonAttentionMetadata
    from vllm.v1.kv_cache_interface import AttentionSpec

_PATCHED = "lampe"  # the attribute of a patched vLLM Attention layer that holds its PatchedLayer
_log = logging.getLogger("vllm.lampe_eval")  # under vLLM's logger: its handlers (a run's engine.log)


def engine_key_copies() -> int:
    """The rotated key copies per token this engine's paged cache was sized for (1: vLLM's own layout)."""
    return int(os.environ.get(KEY_COPIES, "1") or 1)


def customize_spec(spec: AttentionSpec) -> AttentionSpec:
    """A layer's KV cache spec widened to the engine's key copies (keys ``copies`` x head dim wide, values
    one head dim), so vLLM sizes, allocates and schedules the cache with them."""
    copies = engine_key_copies()
    if copies == 1 or getattr(spec, "sliding_window", None) is not None:  # a local layer: never patched
        return spec
    return dataclasses.replace(spec, head_size=spec.head_size_v * copies, head_size_v=spec.head_size_v)


@dataclass(frozen=True)
class _Row:
    """One sequence's tokens in a forward pass: rows ``first..stop-1``, from position ``q_start``."""

    first: int
    stop: int
    q_start: int
    plan: AttentionPlan
    table_row: int  # its row of the block table


@dataclass
class Pass:
    """One forward pass's sequences, each with its plan, and where their tokens go in the paged cache."""

    rows: list[_Row]  # sequences attended one by one (prefills, chunks, methods that re-rotate)
    slots: torch.Tensor  # each token's slot (block * block size + offset)
    block_table: torch.Tensor  # [sequences, blocks]
    kernels: kernels.KernelChoice
    decodes: list[tuple[torch.Tensor, PagedDecode]] = field(default_factory=list)  # token rows, batch


def request_budget(prompt_length: int, sampling: Any) -> int | None:
    """A request's budget from its sampling parameters: ``extra_args["lampe_budget"]`` when given (None: a
    prompt scored alone), else the prompt and its ``max_tokens``."""
    extra = getattr(sampling, "extra_args", None) or {}
    if BUDGET in extra:
        return None if extra[BUDGET] is None else int(extra[BUDGET])
    return prompt_length + int(getattr(sampling, "max_tokens", None) or 1)


@dataclass
class RequestPlans:
    """The installed method's plans, each sequence's from its own request in the model runner (vLLM's V1
    runner: ``input_batch.req_ids`` gives each row's request, ``requests`` its prompt and parameters)."""

    state: PlanCache
    runner: Any
    prefilled: set[str] = field(default_factory=set)  # requests in flight whose prefill began
    recomputed: int = 0  # prefills begun again (a preempted sequence computed again)

    def prepare(
        self,
        common: CommonAttentionMetadata,
        dtype: torch.dtype,
        device: torch.device,
        choice: kernels.KernelChoice,
        kernel: EngineKernel | None = None,
    ) -> Pass:
        """The rows of the forward pass ``common`` describes, each sequence's plan settled; decode rows of
        a method with fixed key positions batched by plan shape; ``choice``: the engine's kernels
        (``kernel``: the engine's own attention for a batch whose rows each see one causal run of keys, on
        the ``paged-engine`` decode)."""
        starts = common.query_start_loc_cpu.tolist()
        seq_lens = common.seq_lens.tolist()
        batched = self.state.method.fixed_key_positions()
        rows: list[_Row] = []
        decodes: list[_Row] = []
        for row in range(common.num_reqs):
            first, stop = starts[row], starts[row + 1]
            if stop <= first:
                continue
            request_id = self.runner.input_batch.req_ids[row]
            prompt_length, budget = self._request(request_id)
            kv_len = seq_lens[row]
            if kv_len == stop - first:
                self._count_prefill(request_id)
            # a prompt's chunks all use the plan of the whole prompt: what one prefill of it uses
            plan = self.state.plan(prompt_length, max(kv_len, prompt_length), budget)
            one = _Row(first, stop, kv_len - (stop - first), plan, row)
            (decodes if batched and stop - first == 1 and one.q_start > 0 else rows).append(one)
        step = Pass(rows, common.slot_mapping, common.block_table_tensor, choice)
        step.decodes = _decode_batches(decodes, step, dtype, device, kernel)
        return step

    def _count_prefill(self, request_id: str) -> None:
        if request_id in self.prefilled:
            self.recomputed += 1
        self.prefilled.add(request_id)
        if len(self.prefilled) > 2 * len(self.runner.requests) + 64:  # forget finished requests
            self.prefilled &= set(self.runner.requests)

    def _request(self, request_id: str) -> tuple[int, int | None]:
        """The prompt length and budget of request ``request_id``."""
        request = self.runner.requests[request_id]
        prompt_length = len(request.prompt_token_ids or ())
        return prompt_length, request_budget(prompt_length, request.sampling_params)


@dataclass
class PatchedLayer:
    """What a patched vLLM ``Attention`` layer carries: the attention module (its parent) whose rotation
    the method replaced, and what puts the module's own back (its rotary embedding, or, in vLLM's
    Transformers backend, the removal of the hook that hands it unrotated position embeddings)."""

    module: torch.nn.Module
    restore: Callable[[], None]


@dataclass
class EngineLayer(PatchedLayer):
    """A patched layer whose attention lampe-eval's engine runs: the method's plans, shared by all patched
    layers."""

    plans: RequestPlans


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
    decodes: list[_Row], step: Pass, dtype: torch.dtype, device: torch.device, kernel: EngineKernel | None
) -> list[tuple[torch.Tensor, PagedDecode]]:
    """The pass's decode rows as batches of one plan shape: (their token rows, their batch); ``kernel``: the
    engine's own paged attention for batches whose rows each see one causal run of keys."""
    steps = [row.plan.segment_step(row.q_start, dtype, device) for row in decodes]
    groups: dict[tuple, list[int]] = {}
    for index, one in enumerate(steps):
        groups.setdefault(decode_shape(one), []).append(index)
    batches = []
    for members in groups.values():
        tokens = torch.tensor([decodes[i].first for i in members], device=step.slots.device)
        tables = step.block_table[torch.tensor([decodes[i].table_row for i in members], device=device)]
        triton = step.kernels.decode == "paged-triton"
        batch = PagedDecode([steps[i] for i in members], step.slots[tokens], tables, kernel, triton)
        batches.append((tokens, batch))
    return batches


def installed_plans(layers: Iterable[torch.nn.Module]) -> RequestPlans | None:
    """The installed method's plans (shared by its patched layers), if it runs lampe-eval's attention in
    one of ``layers`` (vLLM ``Attention`` layers)."""
    for layer in layers:
        patched = patched_layer(layer)
        if isinstance(patched, EngineLayer):
            return patched.plans
    return None


def attend(
    layer: EngineLayer,
    step: Pass,
    scale: float,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    kv_cache: torch.Tensor,
    output: torch.Tensor,
    softcap: float | None = None,
) -> None:
    """A patched layer's attention for the pass ``step``: each sequence's new keys (rotated per key copy)
    and values into the layer's paged cache ``kv_cache``, each sequence's queries over its own keys,
    written into ``output``; ``softcap``: the layer's logit soft cap (Gemma 2), if any."""
    # keys as columns where vLLM's CPU kernel reads them (the paged-engine decode), else as rows
    columns = step.kernels.decode == "paged-engine"
    cache = PagedCache.view(kv_cache, engine_key_copies(), query.shape[-1], columns)
    rotated = layer.plans.state.method.fixed_key_positions()
    order = layer.plans.state.head_order(query.device)
    if order is not None:  # a partial rotary head runs as a whole one (attention/partial.py)
        query, key = query[..., order], key[..., order]
    for row in step.rows:
        rows = slice(row.first, row.stop)
        out = attend_paged(
            cache,
            row.plan,
            scale,
            query[rows],
            key[rows],
            value[rows],
            step.slots[rows],
            step.block_table[row.table_row],
            row.q_start,
            rotated,
            softcap,
            step.kernels.prefill,
        )
        output[rows] = out.reshape(output[rows].shape).to(output.dtype)
    for tokens, batch in step.decodes:
        out = batch.attend(cache, scale, query[tokens], key[tokens], value[tokens], softcap)
        output[tokens] = out.reshape(out.shape[0], *output.shape[1:]).to(output.dtype)


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
        # the platform's builder sizes its kernels' scratch for one key per token
        own = dataclasses.replace(kv_cache_spec, head_size=kv_cache_spec.head_size_v)
        super().__init__(own, layer_names, vllm_config, device)
        from vllm.config import get_layers_from_vllm_config
        from vllm.model_executor.layers.attention import Attention

        self._layers = list(get_layers_from_vllm_config(vllm_config, Attention, layer_names).values())
        self._dtype = vllm_config.model_config.dtype
        soft_capped = ModelFacts.from_config(vllm_config.model_config.hf_config).soft_capped
        self._kernels = engine_kernels(device, self._dtype, kv_cache_spec.head_size_v, soft_capped)
        _log.info("lampe-eval's attention runs on the kernels %s", self._kernels.label())
        self._kernel: EngineKernel | None = None
        if self._kernels.decode == "paged-engine":  # vLLM's CPU attention reads the keys of a one-run batch
            from .cpu_decode import cpu_decode_kernel

            self._kernel = cpu_decode_kernel(self._dtype, kv_cache_spec.block_size, kv_cache_spec.head_size_v)

    def build(
        self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata, fast_build: bool = False
    ) -> LampeAttentionMetadata:
        metadata = super().build(common_prefix_len, common_attn_metadata, fast_build)
        fields = {f.name: getattr(metadata, f.name) for f in dataclasses.fields(metadata) if f.init}
        plans = self._plans()
        step = (
            None
            if plans is None
            else plans.prepare(common_attn_metadata, self._dtype, self.device, self._kernels, self._kernel)
        )
        return LampeAttentionMetadata(**fields, lampe=step)

    def _plans(self) -> RequestPlans | None:
        return installed_plans(self._layers)


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
        softcap = getattr(self, "logits_soft_cap", None) or None  # the platform's impl keeps it (0: none)
        attend(patched, attn_metadata.lampe, self.scale, query, key, value, kv_cache, output, softcap)
        return output

    def do_kv_cache_update(
        self,
        layer: torch.nn.Module,
        key: torch.Tensor,
        value: torch.Tensor,
        kv_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
    ) -> None:
        """vLLM's paged cache write, except in the patched layers: their attention writes its keys, rotated
        per key copy, and values itself."""
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

    @classmethod
    def customize_spec(cls, spec: AttentionSpec) -> AttentionSpec:
        return customize_spec(super().customize_spec(spec))
