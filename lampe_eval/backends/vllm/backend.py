"""The vLLM backend: the same requests as the Hugging Face backend, run by vLLM's engine (continuous
batching, paged KV cache), with every lampe-eval method installed in vLLM's worker by :mod:`.worker`
(frequency methods through vLLM's own rotary embedding, the others through lampe-eval's attention backend,
:mod:`.attention`). Outputs equal the Hugging Face backend's (``tests/test_vllm.py``).

:class:`VLLMBackend` holds the engine's lifecycle and the requests. The engine starts at the first request
(:mod:`.engine`), sized for the longest request seen (it starts again, larger, when a longer one comes),
and for the installed method's rotated key copies per token (a method that keeps another number starts it
again: its KV cache spec holds them, :mod:`.attention`). What it refuses and estimates before anything
starts is :mod:`.checks`. A method is installed and removed through ``collective_rpc``; each sequence's
plan comes from its own request in the worker, so nothing is announced per batch.
"""

from __future__ import annotations

import json
import time
from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from ...attention.kernels import KernelChoice
from ...errors import LampeEvalError, UnsupportedModelError
from ...memory import MemoryEstimate
from ...methods.base import Method, RopeBase
from ...model_facts import ModelFacts
from ...models import LoadedModel, default_device, parse_dtype
from ...prompts import prompt_ids
from ...settings import RunSettings
from ..base import (
    BACKENDS,
    Generation,
    GenerationRequest,
    NLLRequest,
    OwnWeightsBackend,
    Placement,
    Request,
    TokenNLL,
    nll_sums,
)
from ..plans import method_key_copies
from ..rope_config import rope_base_from_config
from ..text import directory_eos_ids, finish
from . import checks
from .checks import check_installed, check_vllm_installed, preset_kv_cache, vllm_version
from .constants import BUDGET
from .engine import EngineSetup, engine_kernels, model_length


@BACKENDS.register("vllm")
class VLLMBackend(OwnWeightsBackend):
    """vLLM's engine on one model (loaded by :func:`lampe_eval.models.load_for_engine`): one engine, started
    from the main process, that loads the weights and places itself."""

    placement = Placement.SELF_PLACED

    def __init__(
        self,
        lm: LoadedModel,
        batch_size: int = 1,
        dtype: str | None = None,
        max_batched_tokens: int | None = None,
        kv_cache_bytes: int | None = None,
        gpu_memory_utilization: float | None = None,
        log_file: str | None = None,
        one_process: bool = False,
        tensor_parallel: int = 1,
    ) -> None:
        check_vllm_installed()
        super().__init__(lm, batch_size)
        self.device = default_device()
        # the Hugging Face backend's default: fp32 on CPU, bf16 on CUDA
        self.dtype = str(parse_dtype(dtype, self.device)).removeprefix("torch.")
        self.source: str = lm.extra["source"]
        self.config: Any = lm.extra["config"]
        self.max_batched_tokens = max_batched_tokens  # tokens per step (prefill chunks); None: vLLM's
        self.kv_cache_bytes = kv_cache_bytes  # the engine's KV cache; None: vLLM's sizing
        self.gpu_memory_utilization = gpu_memory_utilization  # None: vLLM's default (0.9)
        self.log_file = log_file  # vLLM's log lines, every process's (None: its own, on stderr)
        # the engine core and its worker in this process (no processes spawned: each would import vLLM
        # again, ~20 s on 2 cores; tensor-parallel ranks still get theirs): tests and notebooks; runs use
        # vLLM's processes
        self.one_process = one_process
        self.tensor_parallel = tensor_parallel  # ranks the model's heads are split over (its worker's GPUs)
        self._llm: Any = None
        self._model_len = 0
        self._key_copies = 1  # what the running engine's cache holds
        self._method_copies: int | None = None  # what the installed method keeps (None: no method)
        self._method: Method | None = None
        self._eos = directory_eos_ids(self.source, lm.tokenizer)  # what the HF backend stops at

    # ------------------------------------------------------------------------- before loading
    @classmethod
    def check_settings(cls, settings: RunSettings) -> None:
        """One-line refusals of run settings vLLM cannot honour (:func:`.checks.check_settings`)."""
        checks.check_settings(settings)

    @classmethod
    def check_model(cls, name: str, methods: Sequence[str] = (), settings: RunSettings | None = None) -> None:
        """Refuse, before loading, a model vLLM cannot load or run, or split as asked
        (:func:`.checks.check_model`)."""
        checks.check_model(name, methods, settings)

    @classmethod
    def memory_estimate(
        cls, model: str, method: Method, length: int, settings: RunSettings
    ) -> MemoryEstimate | None:
        """Every key copy kept for every token, prefills chunked by vLLM (:func:`.checks.memory_estimate`)."""
        return checks.memory_estimate(model, method, length, settings)

    @classmethod
    def memory_refusal(cls, need: MemoryEstimate, loss_only: bool, settings: RunSettings) -> str | None:
        """One sequence's KV cache against the engine's, when it is set before the engine starts
        (:func:`.checks.memory_refusal`)."""
        return checks.memory_refusal(need, loss_only, settings)

    @classmethod
    def create(cls, lm: LoadedModel, settings: RunSettings) -> VLLMBackend:
        return cls(
            lm,
            batch_size=settings.batch_size,
            dtype=settings.dtype,
            kv_cache_bytes=checks.kv_bytes(settings),
            gpu_memory_utilization=settings.gpu_memory_utilization,
            log_file=settings.engine_log,
            tensor_parallel=settings.gpus_per_worker,
            one_process=settings.engine_in_process,
        )

    # ---------------------------------------------------------------------------------- engine
    def _engine(self, longest: int) -> Any:
        """The engine, started (again) when none holds ``longest`` tokens and the installed method's key
        copies."""
        copies = self._method_key_copies()
        if self._llm is not None and longest <= self._model_len and copies == self._key_copies:
            return self._llm
        self.close()
        model_len = model_length(longest)
        self.check_room(model_len, copies)
        self._llm = self.setup().start(model_len, copies)
        self._model_len, self._key_copies = model_len, copies
        if self._method is not None:
            self._install_in_engine(self._method)
        return self._llm

    def setup(self) -> EngineSetup:
        """What this backend's engines start with (:mod:`.engine`), besides their length and key copies."""
        return EngineSetup(
            source=self.source,
            dtype=self.dtype,
            device=self.device,
            max_num_seqs=self.batch_size,
            max_batched_tokens=self.max_batched_tokens,
            kv_cache_bytes=self.kv_cache_bytes,
            gpu_memory_utilization=self.gpu_memory_utilization,
            log_file=self.log_file,
            one_process=self.one_process,
            tensor_parallel=self.tensor_parallel,
            config_positions=int(getattr(self.config, "max_position_embeddings", 0) or 0),
        )

    def engine_arguments(self, model_len: int) -> dict[str, Any]:
        """vLLM's engine arguments for sequences of up to ``model_len`` tokens: the offline engine's and
        ``lampe-eval serve``'s (:meth:`.engine.EngineSetup.arguments`)."""
        return self.setup().arguments(model_len)

    def engine_environment(self, copies: int) -> None:
        """The environment vLLM's processes read as they start (:meth:`.engine.EngineSetup.environment`)."""
        self.setup().environment(copies)

    def install_arguments(self, method: Method) -> tuple[str, str, str, int]:
        """What the workers' ``install`` takes for ``method`` (and hands back as the method rebuilt)."""
        params = json.dumps(method.params(), sort_keys=True, default=str)
        return method.name, params, self.config.to_json_string(use_diff=False), self.lm.pretraining_window

    def check_room(self, model_len: int, copies: int) -> None:
        """One line, before the weights load, when the KV cache set for the engine (CPU: the bytes given, or
        ``VLLM_CPU_KVCACHE_SPACE``) cannot hold one sequence of ``model_len`` tokens."""
        preset = preset_kv_cache(self.kv_cache_bytes, self.device)
        method = self._method.name if self._method is not None else "rope"
        why = checks.room_refusal(
            self.source, self.config, self.dtype, preset, self.tensor_parallel, method, model_len, copies
        )
        if why:
            raise LampeEvalError(why)

    def _method_key_copies(self) -> int:
        """Rotated key copies per token the engine needs: the installed method's (without one, the running
        engine's will do)."""
        if self._method_copies is not None:
            return self._method_copies
        return self._key_copies if self._llm is not None else 1

    def close(self) -> None:
        """Stop the engine (its processes and memory)."""
        if self._llm is not None:
            engine = getattr(self._llm, "llm_engine", None)
            shutdown = getattr(engine, "shutdown", None)
            if callable(shutdown):
                shutdown()
            self._llm = None
            self._model_len = 0
            self._key_copies = 1
            if self.one_process:  # its weights and cache are this process's memory: free them now
                import gc

                gc.collect()

    def _rpc(self, name: str, *args: Any) -> list[Any]:
        """Call the worker extension's method ``lampe_<name>`` (:mod:`.worker`) in every worker."""
        return list(self._llm.collective_rpc(f"lampe_{name}", args=args))

    # ---------------------------------------------------------------------------------- setup
    def install(self, method: Method) -> Any:
        return self._installed(method)

    @contextmanager
    def _installed(self, method: Method) -> Iterator[None]:
        why = checks.method_refusal(self.source, self.config, method)
        if why:
            raise UnsupportedModelError(why)
        self._method = method
        self._method_copies = method_key_copies(method, self.rope_base())
        if self._llm is not None and self._method_copies != self._key_copies:
            self.close()  # its cache holds another number of key copies: the next request starts one
        if self._llm is not None:
            self._install_in_engine(method)
        try:
            yield
        finally:
            self._method, self._method_copies = None, None
            if self._llm is not None:
                self._rpc("uninstall")

    def _install_in_engine(self, method: Method) -> None:
        check_installed(method, self._rpc("install", *self.install_arguments(method)))

    def start(self, longest: int) -> None:
        """Start the engine (if none runs that fits) for sequences of up to ``longest`` tokens and the
        installed method's key copies: what the first request would do, timed apart by benchmarks."""
        self._engine(longest)

    def kv_capacity(self) -> int:
        """Tokens the running engine's KV cache holds, as vLLM counted them (0 before it starts)."""
        if self._llm is None:
            return 0
        cache = self._llm.llm_engine.vllm_config.cache_config
        return int(cache.num_gpu_blocks or 0) * int(cache.block_size)

    def recomputed_sequences(self) -> int:
        """Sequences prefilled again (preempted, then computed again) since the method was installed."""
        return 0 if self._llm is None else int(self._rpc("recomputed")[0])

    def rope_base(self) -> RopeBase:
        return rope_base_from_config(self.config, self.lm.pretraining_window)

    def kernels(self) -> KernelChoice:
        """The kernels the engine's patched layers run (the engine makes the same choice)."""
        facts = ModelFacts.from_config(self.config)
        dtype = parse_dtype(self.dtype, self.device)
        return engine_kernels(self.device, dtype, facts.head_dim, facts.soft_capped)

    def describe(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "backend_version": vllm_version() or "unknown",
            "dtype": self.dtype,
            "device": self.device,
            # vLLM's attention; in the layers a method patches, lampe-eval's on the kernels the engine chose
            "kernel": self.kernels().label(),
            "settings": "eager, chunked prefill, no prefix caching",
        }

    # -------------------------------------------------------------------------------- batching
    def batch_key(self, request: Request) -> Hashable:
        """vLLM batches requests of any lengths (each sequence has its own plan)."""
        return "nll" if isinstance(request, NLLRequest) else "generate"

    def _ids(self, request: GenerationRequest) -> list[int]:
        """The request's tokens (``batch_key`` needs none here, so each prompt is tokenized once)."""
        if request.input_ids is not None:
            return list(request.input_ids)
        return prompt_ids(self.lm.tokenizer, request.prompt)

    # ------------------------------------------------------------------------------ generation
    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        """Every request in one ``LLM.generate`` call: each sequence's plan follows its own prompt length
        and ``max_tokens`` in the worker."""
        ids = [self._ids(r) for r in requests]
        llm = self._engine(max(r.total_length(len(i)) for r, i in zip(requests, ids, strict=True)))
        from vllm import SamplingParams  # after the engine: vLLM's import prints go to its log

        params = [
            SamplingParams(
                temperature=0.0,
                max_tokens=max(1, r.max_new_tokens),
                min_tokens=r.min_new_tokens,
                ignore_eos=True,  # the end tokens are ours: the model's eos and the request's
                stop_token_ids=sorted(self._eos | set(r.stop_token_ids)),
                detokenize=False,
            )
            for r in requests
        ]
        start = time.perf_counter()
        outputs = llm.generate([{"prompt_token_ids": i} for i in ids], params, use_tqdm=False)
        seconds = (time.perf_counter() - start) / len(requests)
        return [
            self._generation(request, prompt, output, seconds)
            for request, prompt, output in zip(requests, ids, outputs, strict=True)
        ]

    def _generation(
        self, request: GenerationRequest, prompt: list[int], output: Any, seconds: float
    ) -> Generation:
        eos = self._eos | set(request.stop_token_ids)
        new = torch.tensor(list(output.outputs[0].token_ids), dtype=torch.long)
        tokens, text = finish(new, eos, request.stop, self.lm.tokenizer)
        return Generation(text, len(prompt), int(tokens.shape[0]), seconds, tuple(tokens.tolist()))

    # ------------------------------------------------------------------------------------ NLL
    def token_nll(self, requests: Sequence[NLLRequest]) -> list[TokenNLL]:
        """Each token's log-probability after the tokens before it (vLLM's ``prompt_logprobs``)."""
        results = []
        for request in requests:  # one prompt per call: prompt log-probabilities hold L x vocab logits
            start = time.perf_counter()
            logprobs = self.prompt_logprobs(request.input_ids)
            results.append(nll_sums(logprobs, request.tail_from, time.perf_counter() - start))
        return results

    def prompt_logprobs(self, input_ids: Sequence[int]) -> list[float]:
        """The log-probability of each token of ``input_ids`` after the first, given those before it."""
        ids = list(input_ids)
        llm = self._engine(len(ids) + 1)
        from vllm import SamplingParams  # after the engine: vLLM's import prints go to its log

        params = SamplingParams(
            temperature=0.0,
            max_tokens=1,
            prompt_logprobs=0,
            detokenize=False,
            extra_args={BUDGET: None},  # a prompt scored alone: its plan has no budget
        )
        outputs = llm.generate([{"prompt_token_ids": ids}], params, use_tqdm=False)
        found = outputs[0].prompt_logprobs
        return [float(found[i][ids[i]].logprob) for i in range(1, len(ids))]
