from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _deterministic() -> None:
    torch.manual_seed(0)


@pytest.fixture(scope="session")
def smollm2():
    """The real embedded model (de-quantised once into the cache, then reused)."""
    from lampe_eval.models import load_model

    return load_model("smollm2-135m", device="cpu")
