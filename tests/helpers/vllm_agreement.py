"""What the vLLM tests share to compare vLLM with the Hugging Face backend (from ``tests/test_vllm.py``
and ``tests/test_vllm_parallel.py``): the log-probability tolerance, the HF backend's prompt
log-probabilities, and the random models' window, prompt and generation lengths with a seeded prompt.

Importing it sets vLLM's CPU KV cache to 1 GiB unless set (as importing ``tests/test_vllm.py`` did for
the modules that took these from there)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from lampe_eval.backends.hf import HFBackend

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

# fp32 log-probabilities of 2K tokens: the kernels differ in their summation order (rope itself, no method
# on either side, differs by up to 5.4e-5; YaRN, whose attention factor scales the logits, up to 1.3e-4)
LOGPROB_TOLERANCE = 2e-4
# the random models' window, prompt and new tokens (test_vllm_parallel, test_vllm_families, test_moe_families)
WINDOW, PROMPT, NEW = 256, 400, 8  # every segment of every method active at 1.5 windows


def hf_prompt_logprobs(hf: HFBackend, ids: list[int]) -> torch.Tensor:
    """log p(token i | tokens < i), i = 1..L-1, from the (patched) Hugging Face model in one pass."""
    with torch.no_grad():
        logits = hf.lm.model(torch.tensor([ids])).logits[0, :-1].float()
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0]


def prompt(length: int, seed: int) -> tuple[int, ...]:
    return tuple(torch.randint(100, 40000, (length,), generator=torch.Generator().manual_seed(seed)).tolist())
