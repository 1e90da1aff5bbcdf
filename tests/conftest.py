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
