"""How to run (:class:`RunSettings`): below both the runner, which reads them, and the backends, which check
the ones they cannot honour before any model loads."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

# The backend a run uses unless told otherwise; records of schema 1 predate backends and were made by it.
DEFAULT_BACKEND = "hf"
# ``lampe-eval serve --gen-room``'s default: new tokens a prompt of --len tokens may still ask for (kept here,
# not in the server's module, so the command's --help imports no engine)
SERVE_GEN_ROOM = 64


@dataclass(frozen=True)
class RunSettings:
    """How to run: never part of a result. ``load`` replaces the model loader (tests, notebooks): then
    model names are not checked and the worker runs in this process unless workers/GPUs are asked for
    (it must then be a module-level function: it is pickled)."""

    device: str | None = None
    dtype: str | None = None
    workers: int | None = None
    gpus: tuple[str, ...] | None = None
    # >1: each worker spreads its model over that many GPUs (device_map auto; vLLM: tensor parallel)
    gpus_per_worker: int = 1
    device_map: str | None = None  # "auto": accelerate places the model over the worker's visible GPUs
    batch_size: int = 1  # requests the backend runs together (the results of batch size 1)
    backend: str = DEFAULT_BACKEND  # the inference backend (lampe_eval.backends.BACKENDS)
    # an engine that sizes its own KV cache (vLLM): its size in GiB, or the share of the GPU it may take
    kv_cache_gib: float | None = None
    gpu_memory_utilization: float | None = None
    # where such an engine writes its own log lines (``run``: OUT/engine.log); None: its default (stderr)
    engine_log: str | None = None
    # such an engine runs in its worker's process, not in processes it spawns (each importing the engine
    # again: ~20 s each on 2 cores; tensor-parallel ranks keep theirs): tests and notebooks
    engine_in_process: bool = False
    endpoints: tuple[str, ...] = ()  # OpenAI-compatible servers of the model (``--backend openai``)
    ray: bool = False
    ray_address: str | None = None
    ray_init: Mapping[str, Any] | None = field(default=None, hash=False, compare=False)
    load: Callable[[str], Any] | None = field(default=None, hash=False, compare=False)
