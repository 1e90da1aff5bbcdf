"""What runs inside vLLM's worker process besides the attention backend (:mod:`.attention`): the
functions that install a method into the loaded model, called by the main process through
``LLM.collective_rpc`` (:class:`LampeWorkerExtension`).

* ``rope``: nothing changes.
* a **frequency method** with fixed frequencies (linear, ntk, yarn, llama3, longrope, ntk_by_parts): the
  patched layers get a copy of their rotary embedding whose cos/sin table is the method's (its inverse
  frequencies and attention factor): vLLM's own rotary kernel and attention run unchanged.
* every **other method** (the position methods, dynamic NTK, any method with ``infoscale``, any method on
  a partial rotary model: vLLM's rotary code scales only the turning dimensions by an attention factor,
  the engine the whole logit, as the YaRN paper defines the temperature and the HF backend does; any
  method on a model vLLM runs through its Transformers backend, whose layers have no rotary module of
  their own): the patched layers' rotary embedding lets the query and key through un-rotated (in the
  Transformers backend: their position embeddings made cos 1, sin 0 by a hook), and their attention runs
  lampe-eval's engine over vLLM's paged cache, its keys rotated once per key copy
  (:mod:`.attention`, the Hugging Face backend's arithmetic). Each sequence has its own plan, from
  its own request (LaMPE's mapping follows its prompt length). The engine must have been started for the
  method's key copies (:func:`.attention.engine_key_copies`): install refuses otherwise.

What a method installs is kept on vLLM's ``Attention`` layers (:func:`.attention.patched_layer`):
uninstall puts back what they record.
"""

from __future__ import annotations

import copy
import inspect
import json
import types
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import torch

from ...errors import LampeEvalError
from ...families import family_of_config
from ...methods import METHODS
from ...methods.base import FrequencyMethod, Method, RopeBase
from ..plans import PlanCache, method_key_copies
from ..rope_config import rope_base_from_config
from .attention import (
    EngineLayer,
    LampeAttentionImpl,
    PatchedLayer,
    RequestPlans,
    engine_key_copies,
    installed_plans,
    patch_layer,
    patched_layer,
)

if TYPE_CHECKING:
    from vllm.v1.worker.worker_base import WorkerBase


class _Unrotated(torch.nn.Module):
    """A rotary embedding that leaves query and key as they are (the method rotates them)."""

    def forward(
        self,
        positions: torch.Tensor,
        query: torch.Tensor,
        key: torch.Tensor | None = None,
        *args: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        return query, key


def _takes_position_embeddings(module: torch.nn.Module) -> bool:
    """Whether ``module`` is a transformers attention module (vLLM's Transformers backend runs them): its
    decoder hands it the cos/sin of the positions (``position_embeddings``) instead of a rotary module."""
    try:
        return "position_embeddings" in inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        return False


def _attention_modules(model: torch.nn.Module) -> dict[int, torch.nn.Module]:
    """The model's attention modules by layer index: those holding an ``attn`` (vLLM's ``Attention``
    layer) and a rotary embedding (vLLM's own model classes) or taking position embeddings (transformers'
    modules in vLLM's Transformers backend: OLMo 2, Phi, GPT-NeoX in vLLM 0.32)."""
    from vllm.model_executor.layers.attention import Attention
    from vllm.model_executor.models.utils import extract_layer_index

    found = {}
    for name, module in model.named_modules():
        # a decoder's attention (a vision encoder's is vLLM's MMEncoderAttention, not Attention)
        decoder = isinstance(getattr(module, "attn", None), Attention)
        if decoder and (hasattr(module, "rotary_emb") or _takes_position_embeddings(module)):
            try:
                found[extract_layer_index(name)] = module
            except (AssertionError, IndexError) as error:  # no single layer number in the name
                raise LampeEvalError(
                    f"vllm: cannot tell the layer index of attention layer {name!r}"
                ) from error
    if not found:
        raise LampeEvalError(f"vllm: no rotary attention modules in {type(model).__name__}")
    return found


def _attention_layers(worker: WorkerBase) -> Iterator[torch.nn.Module]:
    """vLLM's ``Attention`` layers of the worker's model (where vLLM keeps them: the static forward
    context)."""
    from vllm.config import get_layers_from_vllm_config
    from vllm.model_executor.layers.attention import Attention

    yield from get_layers_from_vllm_config(worker.vllm_config, Attention).values()


def _max_sequences(worker: WorkerBase) -> int:
    """The engine's ``max_num_seqs``: how many sequences one forward pass may hold."""
    scheduler = getattr(getattr(worker, "vllm_config", None), "scheduler_config", None)
    return int(getattr(scheduler, "max_num_seqs", 0) or 256)


def _model(worker: WorkerBase) -> torch.nn.Module:
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


def _with_table(rotary: torch.nn.Module, table: torch.Tensor) -> torch.nn.Module:
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


def install(worker: WorkerBase, method: Method, base: RopeBase) -> str:
    """Install ``method`` in this worker's model; returns how: ``none``, ``frequencies`` or
    ``attention``."""
    uninstall(worker)
    if method.kind == "baseline":
        return "none"
    modules = _attention_modules(_model(worker))
    family = family_of_config(base.config)
    applied = method.patched_layers(len(modules))
    changed = family.changed_layers(base.config, applied) if family else list(applied)
    patched = [i for i in changed if i in modules]
    # see the module docstring (a Transformers backend module has no rotary embedding to give a table)
    native = all(hasattr(modules[i], "rotary_emb") for i in patched)
    own_rotary = native and not method.infoscale and base.rotary_dim == base.head_dim
    if isinstance(method, FrequencyMethod) and method.fixed_key_positions() and own_rotary:
        _install_frequencies([modules[i] for i in patched], method, base)
        return "frequencies"
    check_key_copies(method, base)
    # plans shared by the sequences of one forward pass that have one (prompt length, length, budget)
    state = PlanCache(method, base, _max_sequences(worker), rank_heads(worker, base))
    plans = RequestPlans(state, worker.model_runner)
    for index in patched:
        check_lampe_attention(modules[index].attn)
    for index in patched:
        module = modules[index]
        patch_layer(module.attn, EngineLayer(module, _unrotate(module), plans))
    return "attention"


def _unrotate(module: torch.nn.Module) -> Callable[[], None]:
    """Let query and key through ``module`` unrotated (the method rotates them); returns what undoes it."""
    own = getattr(module, "rotary_emb", None)
    if own is not None:
        module.rotary_emb = _Unrotated()
        return _restorer(module, own)
    return module.register_forward_pre_hook(_no_turn, with_kwargs=True).remove


def _restorer(module: torch.nn.Module, rotary: torch.nn.Module) -> Callable[[], None]:
    """What gives ``module`` its rotary embedding ``rotary`` back."""

    def restore() -> None:
        module.rotary_emb = rotary

    return restore


def _no_turn(module: torch.nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """A transformers attention module's position embeddings made cos = 1, sin = 0: its RoPE call turns
    nothing (the turning part of a partial head too)."""
    if "position_embeddings" not in kwargs:
        raise LampeEvalError(
            f"vllm: {type(module).__name__} got its position embeddings positionally; lampe-eval cannot "
            "hand it unrotated ones (use --backend hf)"
        )
    cos, sin = kwargs["position_embeddings"]
    kwargs["position_embeddings"] = (torch.ones_like(cos), torch.zeros_like(sin))
    return args, kwargs


def rank_heads(worker: WorkerBase, base: RopeBase) -> tuple[slice, slice] | None:
    """The query and key heads this worker's tensor-parallel rank holds (None without tensor
    parallelism): vLLM gives rank r of N the r-th N-th of the query heads, and of the key heads, or, with
    more ranks than key heads, key head r // (N / key heads) (replicated)."""
    parallel = getattr(getattr(worker, "vllm_config", None), "parallel_config", None)
    ranks = int(getattr(parallel, "tensor_parallel_size", 1) or 1)
    if ranks == 1:
        return None
    from vllm.distributed import get_tensor_model_parallel_rank

    rank = get_tensor_model_parallel_rank()
    return shard_heads(rank, ranks, base.heads, base.kv_heads)


def shard_heads(rank: int, ranks: int, heads: int, kv_heads: int) -> tuple[slice, slice]:
    """(query heads, key heads) of tensor-parallel rank ``rank`` of ``ranks``."""
    per_rank = heads // ranks
    queries = slice(rank * per_rank, (rank + 1) * per_rank)
    if ranks <= kv_heads:
        per_rank_kv = kv_heads // ranks
        return queries, slice(rank * per_rank_kv, (rank + 1) * per_rank_kv)
    replicas = ranks // kv_heads
    return queries, slice(rank // replicas, rank // replicas + 1)


def check_lampe_attention(layer: torch.nn.Module) -> None:
    """Refuse a layer whose attention is not lampe-eval's (vLLM selected a stock backend): the method
    would silently not run there."""
    impl = getattr(layer, "impl", None)
    if not isinstance(impl, LampeAttentionImpl):
        raise LampeEvalError(
            f"vllm: layer {getattr(layer, 'layer_name', '?')} runs {type(impl).__name__}, not lampe-eval's "
            "attention (is the engine started with attention_backend='CUSTOM' and the lampe_eval plugin?)"
        )


def check_key_copies(method: Method, base: RopeBase) -> None:
    """Refuse a method that keeps more key copies than the engine's cache was started for."""
    needed, held = method_key_copies(method, base), engine_key_copies()
    if needed > held:
        raise LampeEvalError(
            f"vllm: {method.name} keeps {needed} rotated key copies per token; this engine's cache holds "
            f"{held} (start the engine with {needed})"
        )


def _install_frequencies(modules: list[torch.nn.Module], method: FrequencyMethod, base: RopeBase) -> None:
    """Give each of ``modules`` a copy of its rotary embedding with the method's cos/sin table."""
    replaced: dict[
        int, torch.nn.Module
    ] = {}  # one copy per rotary module (layers share one: get_rope's cache)
    for module in modules:
        own = module.rotary_emb
        if id(own) not in replaced:
            positions, dtype = own.cos_sin_cache.shape[0], own.cos_sin_cache.dtype
            replaced[id(own)] = _with_table(own, frequency_table(method, base, positions, dtype))
        patch_layer(module.attn, PatchedLayer(module, _restorer(module, own)))
        module.rotary_emb = replaced[id(own)]


def uninstall(worker: WorkerBase) -> None:
    """Give the model back its own rotary embeddings and attention."""
    for layer in _attention_layers(worker):
        patched = patched_layer(layer)
        if patched is not None:
            patched.restore()
            patch_layer(layer, None)


def recomputed(worker: WorkerBase) -> int:
    """Prefills the installed method's plans saw begin again (0 without one on the attention path)."""
    plans = installed_plans(_attention_layers(worker))
    return 0 if plans is None else plans.recomputed


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
        uninstall(self)

    def lampe_recomputed(self) -> int:
        """Prefills begun again since the method was installed (preempted sequences computed again)."""
        return recomputed(self)
