"""The Hugging Face backend: ``transformers`` generation and chunked NLL on a loaded model, with a
lampe-eval method patched into its attention layers.

Batches are requests of one token count and one generation setting (``batch_key``): patched attention
refuses padding, and greedy decoding of a row never reads the other rows, so each row of a batch gives
what it gives alone (``tests/test_batching.py``).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import logging
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

import torch
import torch.nn.functional as F

from ...attention import kernels
from ...errors import LampeEvalError
from ...memory import GIB, MemoryEstimate, device_memory, estimate, hf_key_rows
from ...methods.base import Method, RopeBase
from ...models import LoadedModel, default_device, parse_dtype
from ...prompts import prompt_ids
from ...settings import RunSettings
from ..base import (
    BACKENDS,
    BaseBackend,
    Generation,
    GenerationRequest,
    NLLRequest,
    Placement,
    Request,
    TokenNLL,
)
from ..rope_config import model_shape, rope_base
from ..text import eos_ids, finish
from .patch import (
    PatchHandle,
    apply_method,
    attention_family,
    attention_layers,
    model_kernels,
    new_cache,
    placement,
)

R = TypeVar("R", GenerationRequest, NLLRequest)
T = TypeVar("T", Generation, TokenNLL)

log = logging.getLogger(__name__)


@BACKENDS.register("hf")
class HFBackend(BaseBackend):
    """``transformers`` on one loaded model: one per worker, each worker on its device (or its group of
    GPUs, the model spread over them by accelerate)."""

    placement = Placement.PER_DEVICE

    def __init__(self, lm: LoadedModel, batch_size: int = 1) -> None:
        super().__init__(lm, batch_size)
        self._tokenized: dict[str, list[int]] = {}  # prompts tokenized for batch_key, reused to generate
        self._base: RopeBase | None = None  # the model's RoPE, read once (methods resolve and install on it)

    # ---------------------------------------------------------------------------------- setup
    @classmethod
    def check_settings(cls, settings: RunSettings) -> None:
        engine = {
            "--kv-cache-gib": settings.kv_cache_gib,
            "--gpu-memory-utilization": settings.gpu_memory_utilization,
        }
        if settings.endpoints:
            raise LampeEvalError("--endpoint is for --backend openai (a model served elsewhere): drop it")
        given = [flag for flag, value in engine.items() if value is not None]
        if given:
            raise LampeEvalError(
                f"{'/'.join(given)} sizes the vLLM engine's memory: drop it or use --backend vllm"
            )
        if settings.device_map not in (None, "auto"):
            raise LampeEvalError(
                f"--device-map {settings.device_map!r}: only 'auto' (accelerate) is supported"
            )
        if settings.device_map and settings.device not in (None, "cuda"):
            raise LampeEvalError(
                f"--device-map auto places the model on GPUs: drop --device {settings.device}"
            )
        if settings.dtype in ("fp32", "float32") and _on_cuda(settings):
            log.warning(
                "--dtype %s on CUDA: FlashAttention takes fp16/bf16 only, so a patched model's attention "
                "runs on the portable fp32 path (exact, but it computes scores block by block: several times "
                "slower from 32K); --dtype bfloat16 runs it on FlashAttention",
                settings.dtype,
            )

    @classmethod
    def memory_estimate(
        cls, model: str, method: Method, length: int, settings: RunSettings
    ) -> MemoryEstimate | None:
        """The whole sequence in one forward pass; the cache keeps every key copy's reachable rows."""
        shape_and_base = model_shape(model)
        if shape_and_base is None:
            return None
        shape, base = shape_and_base
        if shape.heads:  # keys and values per query head where a method keeps them so (all layers: a bound)
            shape = dataclasses.replace(shape, key_heads=method.key_heads(shape.heads, shape.key_heads))
        dtype = parse_dtype(settings.dtype, settings.device or default_device())
        keys = hf_key_rows(method, base, length)
        return estimate(
            shape,
            length,
            batch=settings.batch_size,
            dtype_bytes=dtype.itemsize,
            keys=keys,
            eager_attention=shape.soft_capped,  # models.load_model loads it with eager attention
        )

    @classmethod
    def memory_refusal(cls, need: MemoryEstimate, loss_only: bool, settings: RunSettings) -> str | None:
        """The peak against one worker's device: a GPU (or the GPUs accelerate spreads the model over), or
        this machine's memory. Ray's workers run on machines this process does not see: not checked."""
        if settings.ray or settings.ray_address:
            return None
        device = "cuda" if settings.device_map else settings.device or default_device()
        count = settings.gpus_per_worker
        if settings.device_map and count == 1 and torch.cuda.is_available() and not settings.gpus:
            count = torch.cuda.device_count()  # one worker: every visible GPU
        size = device_memory(device, count)
        if size is None or need.peak(loss_only) <= size:
            return None
        where = f"{count} x {device}" if count > 1 else device
        return (
            f"needs about {need.describe(loss_only)}; more than {where}'s {size / GIB:.2f} GiB: lower "
            "--batch-size, use shorter --len or spread the model over more GPUs (--gpus-per-worker)"
        )

    @classmethod
    def load(
        cls, model: str, settings: RunSettings, device: str | None, device_map: str | None
    ) -> LoadedModel:
        from ...models import load_model

        return load_model(model, device=device, dtype=settings.dtype, device_map=device_map)

    def install(self, method: Method) -> PatchHandle:
        """Patch ``method`` into the model's attention; leaving the ``with`` block (or ``remove()``)
        restores it."""
        base = self.rope_base() if method.kind != "baseline" else None  # rope patches nothing: needs none
        window = self.lm.pretraining_window
        return apply_method(self.lm.model, method, window=window, base=base, kernel=self.kernels().prefill)

    def new_cache(self, total_length: int | None) -> Any:
        """The KV cache of one generation that may reach ``total_length`` tokens (the method's budget)."""
        return new_cache(self.lm.model, total_length)

    def rope_base(self) -> RopeBase:
        if self._base is None:
            self._base = rope_base(self.lm.model, self.lm.pretraining_window)
        return self._base

    def kernels(self) -> kernels.KernelChoice:
        """The kernels the patched layers run (the patch is given this choice)."""
        return model_kernels(self.lm.model)

    def describe(self) -> dict[str, Any]:
        device, dtype = placement(self.lm.model)
        return {
            "backend": self.name,
            "backend_version": _version("transformers"),
            "dtype": str(dtype).removeprefix("torch."),
            "device": str(device),
            "kernel": self.kernels().label(),
        }

    # -------------------------------------------------------------------------------- batching
    def batch_key(self, request: Request) -> Hashable:
        if isinstance(request, NLLRequest):
            return ("nll", len(request.input_ids), request.tail_from, request.chunk)
        ids = self._ids(request)
        # a method may decide on prompt + budget (LaMPE's identity_within_window): one budget per batch
        return (
            "generate",
            len(ids),
            request.max_new_tokens,
            request.min_new_tokens,
            request.stop_token_ids,
            request.total_length(len(ids)),
        )

    def _ids(self, request: GenerationRequest) -> list[int]:
        if request.input_ids is not None:
            return list(request.input_ids)
        ids = self._tokenized.get(request.prompt)
        if ids is None:  # a long prompt is tokenized once for its key and its generation, not twice
            if len(self._tokenized) >= 4 * self.batch_size + 4:  # the requests waiting for a batch
                self._tokenized.clear()
            ids = self._tokenized[request.prompt] = prompt_ids(self.lm.tokenizer, request.prompt)
        return ids

    def _in_batches(self, requests: Sequence[R], run_batch: Callable[[list[R]], list[T]]) -> list[T]:
        """``run_batch`` over runnable batches of ``requests`` (equal keys, at most ``batch_size``), the
        results in the order of ``requests``."""
        groups: dict[Hashable, list[int]] = {}
        for index, request in enumerate(requests):
            groups.setdefault(self.batch_key(request), []).append(index)
        results: dict[int, T] = {}
        for indices in groups.values():
            for start in range(0, len(indices), self.batch_size):
                batch = indices[start : start + self.batch_size]
                results.update(zip(batch, run_batch([requests[i] for i in batch]), strict=True))
        return [results[i] for i in range(len(requests))]

    # ------------------------------------------------------------------------------ generation
    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        return self._in_batches(requests, self._generate_batch)

    @torch.inference_mode()
    def _generate_batch(self, requests: list[GenerationRequest]) -> list[Generation]:
        """Greedy decoding of requests with one ``batch_key``, together (no padding)."""
        first = requests[0]
        input_ids = torch.tensor([self._ids(r) for r in requests], dtype=torch.long, device=self.lm.device)
        prompt_tokens = int(input_ids.shape[1])
        eos = _eos_ids(self.lm.model, self.lm.tokenizer) | set(first.stop_token_ids)
        start = time.perf_counter()
        output = self.generate_ids(
            input_ids, first.total_length(prompt_tokens), first.max_new_tokens, first.min_new_tokens, eos
        )
        seconds = (time.perf_counter() - start) / len(requests)
        results = []
        for row, request in zip(output, requests, strict=True):
            tokens, text = finish(row[prompt_tokens:], eos, request.stop, self.lm.tokenizer)
            results.append(
                Generation(text, prompt_tokens, int(tokens.shape[0]), seconds, tuple(tokens.tolist()))
            )
        return results

    @torch.inference_mode()
    def generate_ids(
        self,
        input_ids: torch.Tensor,
        budget: int,
        max_new_tokens: int,
        min_new_tokens: int = 0,
        eos: set[int] | None = None,
        **extra: Any,
    ) -> Any:
        """The one ``model.generate`` call: greedy, no padding, a KV cache that carries the budget (prompt +
        new tokens) the method decides on. ``extra``: more ``generate`` arguments (``make bench``'s
        streamer)."""
        model, tokenizer = self.lm.model, self.lm.tokenizer
        eos = _eos_ids(model, tokenizer) if eos is None else eos
        return model.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            past_key_values=self.new_cache(budget),
            max_new_tokens=max(1, max_new_tokens),
            min_new_tokens=min_new_tokens or None,
            eos_token_id=sorted(eos) or None,
            do_sample=False,
            temperature=None,
            top_p=None,
            top_k=None,
            pad_token_id=tokenizer.pad_token_id
            if tokenizer.pad_token_id is not None
            else tokenizer.eos_token_id,
            **extra,
        )

    # ------------------------------------------------------------------------------------ NLL
    def token_nll(self, requests: Sequence[NLLRequest]) -> list[TokenNLL]:
        return self._in_batches(requests, self._nll_batch)

    @torch.no_grad()
    def _nll_batch(self, requests: list[NLLRequest]) -> list[TokenNLL]:
        ids = torch.tensor([list(r.input_ids) for r in requests], dtype=torch.long, device=self.lm.device)
        start = time.perf_counter()
        rows = chunked_nll_rows(self.lm.model, ids, chunk=requests[0].chunk, tail_from=requests[0].tail_from)
        seconds = (time.perf_counter() - start) / len(requests)
        return [TokenNLL(nll, n, tail, n_tail, seconds) for nll, n, tail, n_tail in rows]

    # --------------------------------------------------------------------------- attention inputs
    @torch.no_grad()
    def attention_inputs(
        self, input_ids: Sequence[int], visit: Callable[[int, torch.Tensor, torch.Tensor], None]
    ) -> float:
        """One forward pass over ``input_ids`` (no cache, no LM head); ``visit(layer, q, k)`` for every
        attention layer with its queries [L, heads, head_dim] and keys [L, kv_heads, head_dim] before
        RoPE (as the layer's family computes them: projections and any norm; DPE's dimension selection
        reads their norms). Returns the seconds the pass took."""
        model = self.lm.model
        family = attention_family(model)
        hooks = []

        def catcher(index: int) -> Callable[..., None]:
            def hook(module: Any, args: Any, kwargs: dict[str, Any]) -> None:
                hidden = args[0] if args else kwargs["hidden_states"]
                query, key, _ = family.project(module, hidden)
                visit(index, query[0].transpose(0, 1).float(), key[0].transpose(0, 1).float())

            return hook

        for index, layer in enumerate(attention_layers(model)):
            hooks.append(layer.register_forward_pre_hook(catcher(index), with_kwargs=True))
        ids = torch.tensor([list(input_ids)], dtype=torch.long, device=self.lm.device)
        start = time.perf_counter()
        try:
            getattr(model, model.base_model_prefix)(input_ids=ids, use_cache=False)
        finally:
            for hook in hooks:
                hook.remove()
        return time.perf_counter() - start


def _on_cuda(settings: RunSettings) -> bool:
    """Whether the model will load on CUDA (asked for, placed by accelerate, or the default device)."""
    if settings.device_map or settings.device == "cuda":
        return True
    return settings.device is None and default_device() == "cuda"


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _eos_ids(model: Any, tokenizer: Any) -> set[int]:
    return eos_ids(getattr(model, "generation_config", None), tokenizer)


@torch.no_grad()
def chunked_nll_rows(
    model: Any, input_ids: torch.Tensor, *, chunk: int = 1024, tail_from: int | None = None
) -> list[tuple[float, int, float, int]]:
    """Summed next-token NLL of each row of ``input_ids`` (N, L) with one forward pass, computing logits
    ``chunk`` positions at a time (O(L) memory: the decoder returns hidden states, never L x vocab logits).

    Returns per row (nll_sum, count, nll_sum_tail, count_tail); the tail counts the predicted tokens at
    positions >= ``tail_from`` (default: the last L // 4 tokens). fp32 loss, fp64 sums."""
    length = input_ids.shape[1]
    tail_from = length - length // 4 if tail_from is None else tail_from
    decoder = getattr(model, model.base_model_prefix)
    head = model.get_output_embeddings()
    hidden = decoder(input_ids=input_ids, use_cache=False).last_hidden_state  # (N, L, H)
    n_tail = max(0, length - max(tail_from, 1))
    out = []
    for row in range(input_ids.shape[0]):
        targets = input_ids[row, 1:]
        total: torch.Tensor | float = 0.0
        tail: torch.Tensor | float = 0.0
        for start in range(0, length - 1, chunk):
            stop = min(start + chunk, length - 1)
            nll = _chunk_nll(head, hidden[row, start:stop], targets[start:stop])
            total = total + nll.sum()
            tail = tail + nll[max(0, tail_from - 1 - start) :].sum()  # predicted positions >= tail_from
        out.append((float(total), length - 1, float(tail), n_tail))  # one host read per row
    return out


def _chunk_nll(head: Any, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """fp64 NLL of one chunk; its [chunk, vocab] logits are freed on return, before the next chunk's."""
    logits = head(hidden).float()
    # the LM head may sit on another GPU than the inputs (--device-map auto): the targets follow it
    return F.cross_entropy(logits, targets.to(logits.device), reduction="none").double()
