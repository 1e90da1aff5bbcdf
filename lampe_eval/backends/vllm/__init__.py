"""The vLLM backend (``--backend vllm``): lampe-eval's requests run by vLLM's engine, every method
installed in its worker. One room, its modules by what they do:

* :mod:`.backend`: :class:`VLLMBackend`, the engine's lifecycle (start, install, close) and the requests;
* :mod:`.engine`: starting the engine (its arguments, the environment its processes read, its log);
* :mod:`.checks`: what is refused and estimated before anything starts (the docs' memory table too);
* :mod:`.constants`: the class paths vLLM resolves by name and the environment variables it inherits;
* in vLLM's processes: :mod:`.plugin` (the ``vllm.general_plugins`` entry point), :mod:`.attention` (the
  attention backend over vLLM's paged cache), :mod:`.cpu_decode` (vLLM's CPU decode kernel for it),
  :mod:`.worker` (the worker extension that installs a method);
* :mod:`.serve`: ``lampe-eval serve``, vLLM's OpenAI-compatible server with a method installed.

Importing this package registers the backend and imports neither vLLM nor the modules that run inside it.
"""

from __future__ import annotations

from .backend import VLLMBackend
from .checks import check_vllm_installed, tensor_parallel_refusal, vllm_model_refusal, vllm_version
from .engine import output_to

__all__ = [
    "VLLMBackend",
    "check_vllm_installed",
    "output_to",
    "tensor_parallel_refusal",
    "vllm_model_refusal",
    "vllm_version",
]
