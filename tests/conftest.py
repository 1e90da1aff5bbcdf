from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import lampe_eval.models
from lampe_eval.models import LoadedModel
from tests.localhub import LocalHub


@pytest.fixture(autouse=True)
def _deterministic() -> None:
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _no_real_hub(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reaches the real hub: it is unreachable (lampe-eval reads the hub cache only) unless the test
    asks for the local one (``hub_env``)."""
    if "hub_env" not in request.fixturenames:
        monkeypatch.setattr("lampe_eval.data.hub.hub_reachable", lambda timeout=3.0: False)


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


@pytest.fixture
def no_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading a model is a failure: the error must come before."""

    def trap(*args, **kwargs):
        raise AssertionError("a model was loaded before the input was checked")

    monkeypatch.setattr(lampe_eval.models, "load_model", trap)


@pytest.fixture(scope="session")
def local_hub() -> Iterator[LocalHub]:
    """A local Hugging Face hub (tests/localhub.py) serving miniature copies of the repositories lampe-eval
    reads (tests/hub_repos.py); started once per session. Use it through ``hub_env``."""
    from tests.hub_repos import add_default_repos

    with LocalHub() as hub:
        add_default_repos(hub)
        yield hub


@pytest.fixture
def hub_env(local_hub: LocalHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalHub]:
    """``local_hub`` with this process's hub clients pointed at it (``HF_ENDPOINT``, a fresh ``HF_HOME`` under
    tmp_path, online, no token) and its request log emptied; the hub's settings are restored afterwards. The
    test fails if the server failed on a request or anything tried to reach a host other than 127.0.0.1."""
    from tests.localhub import clear_client_caches, hub_environment

    settings = (local_hub.token, local_hub.gated_metadata, local_hub.tree_page_size)
    local_hub.clear_log()
    hub_environment(local_hub, tmp_path / "hf", monkeypatch)
    yield local_hub
    clear_client_caches()
    local_hub.token, local_hub.gated_metadata, local_hub.tree_page_size = settings
    assert not local_hub.errors, "the local hub failed on requests:\n" + "\n".join(local_hub.errors)
    assert not local_hub.outside, f"tried to reach beyond 127.0.0.1: {local_hub.outside}"
