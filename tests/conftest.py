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
    from transformers import AutoTokenizer

    from lampe_eval.models import _embedded_cache, embedded_gguf_path

    cached = _embedded_cache()
    if (cached / "tokenizer_config.json").is_file():
        return AutoTokenizer.from_pretrained(cached)
    gguf = embedded_gguf_path()
    return AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)


@pytest.fixture(scope="session")
def lm(smollm2_tokenizer: Any) -> LoadedModel:
    """SmolLM2's tokenizer in a LoadedModel without weights: prompt building and scoring tests."""
    return LoadedModel("smollm2-135m", None, smollm2_tokenizer, 8192, True)
