"""Starting vLLM's engine for the vLLM backend: its arguments (the offline engine's and ``lampe-eval
serve``'s), the environment its processes read as they start (the plugin on, the key copies the paged cache
holds, the CPU's KV cache and cores), where its log lines and its processes' output go, and its length.

The engine (``vllm.LLM``) is sized for the longest request seen: ``max_model_len`` is that length rounded
up to :data:`LENGTH_STEP` (:func:`model_length`). Greedy, eager (no CUDA graphs, no compilation), chunked
prefill on, prefix caching off (a position method's keys depend on the whole prompt's length, so equal
prefixes of different prompts do not have equal keys).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from ...attention import kernels
from ...errors import LampeEvalError
from ...processes import environment
from .constants import (
    DEFAULT_KV_CACHE_GIB,
    ENABLE,
    IN_PROCESS_CORE,
    KEY_COPIES,
    KV_SPACE,
    THREADS_BIND,
    WORKER_EXTENSION,
)

MIN_MODEL_LEN = 4096
LENGTH_STEP = 256  # max_model_len granularity: a multiple of every platform's block size (16 CUDA, 128 CPU)


def model_length(longest: int) -> int:
    """The engine's ``max_model_len`` for sequences of up to ``longest`` tokens: rounded up to
    :data:`LENGTH_STEP` (a 128K prompt and its generation stay near 128K, not 256K), at least
    :data:`MIN_MODEL_LEN`."""
    return max(MIN_MODEL_LEN, -(-longest // LENGTH_STEP) * LENGTH_STEP)


@dataclass(frozen=True)
class EngineSetup:
    """What an engine of one backend is started with, besides its length and key copies."""

    source: str  # the model directory (weights and tokenizer)
    dtype: str
    device: str
    max_num_seqs: int  # the batch size
    max_batched_tokens: int | None  # tokens per step (prefill chunks); None: vLLM's
    kv_cache_bytes: int | None  # the engine's KV cache; None: vLLM's sizing
    gpu_memory_utilization: float | None  # None: vLLM's default (0.9)
    log_file: str | None  # vLLM's log lines, every process's (None: its own, on stderr)
    one_process: bool  # the engine core and its worker in this process (tests and notebooks)
    tensor_parallel: int  # ranks the model's heads are split over (its worker's GPUs)
    config_positions: int  # the config's own max_position_embeddings (0: none)

    def arguments(self, model_len: int) -> dict[str, Any]:
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
            "max_num_seqs": self.max_num_seqs,
            "tensor_parallel_size": self.tensor_parallel,
            # the ranks are this worker's processes, on its GPUs (never Ray's placement, even inside Ray)
            **({"distributed_executor_backend": "mp"} if self.tensor_parallel > 1 else {}),
            "enforce_eager": True,
            "enable_chunked_prefill": True,
            "enable_prefix_caching": False,
            "attention_backend": "CUSTOM",
            "worker_extension_cls": WORKER_EXTENSION,
            # positions past the config's own length are the methods' business, not an error
            "hf_overrides": {"max_position_embeddings": max(model_len, self.config_positions)},
            "seed": 0,
        }

    def environment(self, copies: int) -> None:
        """The environment vLLM's processes read as they start: the plugin on, the key copies the cache
        holds, the model runner the worker reads, the CPU's KV cache and cores."""
        if self.kv_cache_bytes is None:
            os.environ.setdefault(KV_SPACE, DEFAULT_KV_CACHE_GIB)
        else:  # vLLM's CPU platform lets its environment variable win over the engine argument
            os.environ.pop(KV_SPACE, None)
        # vLLM on CPUs keeps one core away from its worker for the engine's own loop; an offline evaluation
        # gives the worker every core (on 2 cores: 1.8x the LongBench-shaped throughput, docs/vllm.md)
        os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
        os.environ[ENABLE] = "1"  # the plugin acts in this engine's processes
        os.environ[KEY_COPIES] = str(copies)  # the cache spec the engine's layers declare
        # the worker reads each row's request from the V1 model runner's structures (attention.py)
        os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "0"

    def start(self, model_len: int, copies: int) -> Any:
        """A new offline engine (``vllm.LLM``) for sequences of up to ``model_len`` tokens and ``copies``
        key copies per token; one line naming its log when it does not start."""
        kept = os.environ.get(KV_SPACE)
        self.environment(copies)
        logging_config = log_to_file(self.log_file) if self.log_file else None
        if logging_config is None:
            os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # its info lines: VLLM_LOGGING_LEVEL=INFO
        try:
            with output_to(self.log_file):
                return self._llm(model_len)
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

    def _llm(self, model_len: int) -> Any:
        from vllm import LLM

        arguments = self.arguments(model_len)
        starting: dict[str, str] = {}  # read as the engine starts, by it and the processes it spawns
        if self.one_process:
            starting[IN_PROCESS_CORE] = "0"  # its core runs here
            if self.tensor_parallel == 1:
                arguments["distributed_executor_backend"] = "uni"  # and its worker (ranks need processes)
        if self.device == "cpu" and self.tensor_parallel > 1 and THREADS_BIND not in os.environ:
            starting[THREADS_BIND] = cpu_binding(self.tensor_parallel)
        with environment(starting):
            return LLM(**arguments)


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


def engine_kernels(
    device: torch.device | str, dtype: torch.dtype, head_dim: int, softcap: bool
) -> kernels.KernelChoice:
    """The kernels of the patched layers over the paged cache (the same call in the main process, which
    records it, and in the engine, which runs it)."""
    features = kernels.Features(softcap=softcap, paged=True, head_dim=head_dim)
    return kernels.select(device, dtype, features, kernels.override())
