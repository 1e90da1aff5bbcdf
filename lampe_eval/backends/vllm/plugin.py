"""The ``vllm.general_plugins`` entry point (pyproject.toml): vLLM calls :func:`register` in each of its
processes. It acts only in the engines lampe-eval's vLLM backend starts (``LAMPE_EVAL_VLLM=1``, set by
:class:`lampe_eval.backends.vllm.VLLMBackend` and inherited by vLLM's processes): any other vLLM use of
this environment is left alone. Light on purpose: vLLM resolves the class path
(:data:`.constants.ATTENTION_BACKEND`) only when it builds the model.
"""

from __future__ import annotations

import os

from ...processes import die_with_parent
from .constants import ATTENTION_BACKEND, ENABLE


def register() -> None:
    """Make lampe-eval's attention backend the one vLLM picks: the CUSTOM backend (what the engine asks
    for), and on CPUs, where vLLM always picks its CPU backend, that one's replacement."""
    if os.environ.get(ENABLE) != "1":
        return
    import multiprocessing

    parent = multiprocessing.parent_process()
    if parent is not None:  # a process the engine spawned (its core, a worker): killed with its parent, not
        die_with_parent()  # left holding memory (a GPU's) when the process that started the engine dies
        if os.getppid() != parent.pid:  # it died before the signal was armed
            os._exit(1)
    from vllm.platforms import current_platform
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    register_backend(AttentionBackendEnum.CUSTOM, ATTENTION_BACKEND)
    if current_platform.is_cpu():
        register_backend(AttentionBackendEnum.CPU_ATTN, ATTENTION_BACKEND)
