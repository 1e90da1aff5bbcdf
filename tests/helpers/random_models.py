"""Random checkpoints for the engine tests (vLLM, ``lampe-eval serve``), from ``tests/conftest.py``."""

from __future__ import annotations

from typing import Any


def save_random_model(
    where: str, tokenizer: Any, window: int, model_type: str = "llama", seed: int = 3, **extra: Any
) -> str:
    """A random model of 2 layers, 4 query / 2 key heads of dim 64 (vLLM's CPU attention takes 64 and up)
    with ``tokenizer``'s vocabulary, saved with it in ``where``; weights and norms drawn so that no token
    is a near tie."""
    from lampe_eval.testing import save_random_checkpoint, tiny_llama

    net = tiny_llama(window=window, head_dim=64, vocab=len(tokenizer), model_type=model_type, **extra)
    return save_random_checkpoint(net, where, tokenizer, seed)
