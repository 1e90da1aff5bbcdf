from __future__ import annotations

from typing import Any

import pytest
import torch

from lampe_eval.models import LoadedModel


@pytest.fixture(autouse=True)
def _deterministic() -> None:
    torch.manual_seed(0)


@pytest.fixture(scope="session")
def smollm2():
    """The real embedded model (de-quantised once into the cache, then reused)."""
    from lampe_eval.models import load_model

    return load_model("smollm2-135m", device="cpu")


@pytest.fixture(scope="session")
def smollm2_tokenizer() -> Any:
    """SmolLM2's tokenizer alone: from the fp32 cache when a model load made it, else from the GGUF."""
    from lampe_eval.models import load_tokenizer

    return load_tokenizer("smollm2-135m").tokenizer


@pytest.fixture(scope="session")
def lm(smollm2_tokenizer: Any) -> LoadedModel:
    """SmolLM2's tokenizer in a LoadedModel without weights: prompt building and scoring tests."""
    return LoadedModel("smollm2-135m", None, smollm2_tokenizer, 8192, True)


def save_random_model(
    where: str, tokenizer: Any, window: int, model_type: str = "llama", seed: int = 3, **extra: Any
) -> str:
    """A random model of 2 layers, 4 query / 2 key heads of dim 64 (vLLM's CPU attention takes 64 and up)
    with ``tokenizer``'s vocabulary, saved with it in ``where``; weights and norms drawn so that no token
    is a near tie."""
    from lampe_eval.models import save_random_checkpoint, tiny_llama

    net = tiny_llama(window=window, head_dim=64, vocab=len(tokenizer), model_type=model_type, **extra)
    return save_random_checkpoint(net, where, tokenizer, seed)
