"""The names lampe-eval's vLLM engine is wired by, in one place: the class paths vLLM resolves in its own
processes (the worker extension, the attention backend, the server's middleware), and the environment
variables and request field the main process and vLLM's processes share. Plain strings: reading them
imports nothing (the plugin reads them in every vLLM process).
"""

from __future__ import annotations

PACKAGE = __name__.rsplit(".", 1)[0]  # lampe_eval.backends.vllm

# class paths vLLM imports by name
WORKER_EXTENSION = f"{PACKAGE}.worker.LampeWorkerExtension"  # LLM(worker_extension_cls=...)
ATTENTION_BACKEND = f"{PACKAGE}.attention.LampeAttentionBackend"  # registered by the plugin
MIDDLEWARE = f"{PACKAGE}.serve.lampe_http"  # lampe-eval serve's --middleware

# the environment vLLM's processes inherit
ENABLE = "LAMPE_EVAL_VLLM"  # "1": the plugin acts in this engine's processes
KEY_COPIES = "LAMPE_EVAL_KEY_COPIES"  # rotated key copies per token the engine's paged cache holds
KV_SPACE = "VLLM_CPU_KVCACHE_SPACE"  # vLLM's CPU KV cache, whole GiB
DEFAULT_KV_CACHE_GIB = "4"  # VLLM_CPU_KVCACHE_SPACE when the user set none
IN_PROCESS_CORE = "VLLM_ENABLE_V1_MULTIPROCESSING"  # "0": the engine core runs in the caller's process
THREADS_BIND = "VLLM_CPU_OMP_THREADS_BIND"  # the CPU cores of each rank: "0-3|4-7"

BUDGET = "lampe_budget"  # SamplingParams.extra_args key: a request's budget (None: a prompt scored alone)
