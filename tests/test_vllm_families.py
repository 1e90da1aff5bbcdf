"""Model families beyond Llama on the vLLM backend (CPU): a random Gemma 3, whose sliding-window layers no
method changes, a random Gemma 2 (soft-capped logits in the method's layers too), a random
partial-rotary StableLM, and OLMo 2 and GPT-NeoX, which vLLM 0.32 runs through its Transformers backend
(transformers' own modules), give the Hugging Face backend's greedy tokens and prompt log-probabilities."""

from __future__ import annotations

from typing import Any

import pytest
import torch

pytest.importorskip("vllm")

from lampe_eval.backends.base import GenerationRequest  # noqa: E402
from lampe_eval.backends.hf import HFBackend  # noqa: E402
from lampe_eval.backends.vllm import VLLMBackend  # noqa: E402
from lampe_eval.methods.resolve import resolve_method  # noqa: E402
from lampe_eval.models import load_for_engine, load_model  # noqa: E402
from lampe_eval.testing import FAMILY_EXAMPLES  # noqa: E402
from tests.helpers.random_models import save_random_model  # noqa: E402
from tests.helpers.vllm_agreement import (  # noqa: E402
    LOGPROB_TOLERANCE,
    NEW,
    PROMPT,
    WINDOW,
    hf_prompt_logprobs,
    prompt,
)

pytestmark = pytest.mark.slow


def _hf_and_vllm_agree(
    where: str, name: str, rotary_dim: int | None = None, one_process: bool = True
) -> None:
    """Method ``name`` on the model saved in ``where``: vLLM's greedy tokens are the HF backend's, its
    prompt log-probabilities within LOGPROB_TOLERANCE, and the method changes them (so vLLM ran it)."""
    hf = HFBackend(load_model(where))
    if rotary_dim is not None:
        assert hf.rope_base().rotary_dim == rotary_dim
    method = resolve_method(name, WINDOW, PROMPT + NEW, base=hf.rope_base()).method
    request = GenerationRequest("", NEW, input_ids=prompt(PROMPT, 9))
    unpatched = hf_prompt_logprobs(hf, list(request.input_ids or ()))
    with hf.install(method):
        expected = hf.generate([request])[0].token_ids
        expected_logprobs = hf_prompt_logprobs(hf, list(request.input_ids or ()))
    assert (expected_logprobs - unpatched).abs().max().item() > 100 * LOGPROB_TOLERANCE
    backend = VLLMBackend(load_for_engine(where), batch_size=1, dtype="fp32", one_process=one_process)
    try:
        with backend.install(method):
            got = backend.generate([request])[0].token_ids
            logprobs = torch.tensor(backend.prompt_logprobs(list(request.input_ids or ())))
    finally:
        backend.close()
    assert got == expected
    assert (logprobs - expected_logprobs).abs().max().item() < LOGPROB_TOLERANCE


@pytest.fixture(scope="module")
def gemma3(tmp_path_factory, smollm2_tokenizer) -> str:
    """A random Gemma 3 text model: a sliding-window layer (window 64, its own RoPE base) then a global
    one, a query scale that is not 1/sqrt(D), per-head query and key norms."""
    example: dict[str, Any] = {**FAMILY_EXAMPLES["gemma3_text"], "sliding_window": 64}
    example.pop("layers")
    example["layer_types"] = ["sliding_attention", "full_attention"]
    where = str(tmp_path_factory.mktemp("gemma3"))
    return save_random_model(where, smollm2_tokenizer, WINDOW, "gemma3_text", 7, **example)


# LaMPE: the global layer's cache holds two key copies, the local layer's vLLM's own layout (pages of two
# sizes in one engine); its attention factor (mscale) would change a local layer's logits, so a patched
# local layer shows. YaRN: its cos/sin table in the global layer's rotary embedding alone.
@pytest.mark.parametrize("name", ["lampe", "yarn"])
def test_gemma3_runs_the_method_in_its_global_layers_alone(name: str, gemma3: str) -> None:
    _hf_and_vllm_agree(gemma3, name)


@pytest.fixture(scope="module")
def gemma2(tmp_path_factory, smollm2_tokenizer) -> str:
    """A random Gemma 2: a sliding-window layer then a global one, logits soft-capped at 5 (small enough to
    bend these logits), tied embeddings (vLLM's Gemma 2 has no separate output layer), scaled down so that
    greedy tokens follow the layers rather than repeat one token."""
    from lampe_eval.testing import tiny_family

    shape = {"heads": 4, "kv_heads": 2, "head_dim": 64, "window": WINDOW, "vocab": len(smollm2_tokenizer)}
    local_then_global = {"layer_types": ["sliding_attention", "full_attention"], "sliding_window": 64}
    net = tiny_family("gemma2", **shape, **local_then_global, tie_word_embeddings=True)
    net.model.embed_tokens.weight.data *= 0.05
    where = str(tmp_path_factory.mktemp("gemma2"))
    net.save_pretrained(where)
    smollm2_tokenizer.save_pretrained(where)
    return where


# LaMPE decodes through the batched paged decode, DCA (re-rotating no keys either) with one key copy; both
# fail (log-probabilities off by 15) when the patched layer leaves the cap out
@pytest.mark.parametrize("name", ["lampe", "dca"])
def test_gemma2s_soft_capped_logits_are_capped_in_the_methods_layers(name: str, gemma2: str) -> None:
    _hf_and_vllm_agree(gemma2, name)


@pytest.fixture(scope="module")
def through_transformers(tmp_path_factory, smollm2_tokenizer):
    """A random model of a family vLLM 0.32 runs through its Transformers backend, by family name."""
    from lampe_eval.testing import save_random_checkpoint, tiny_family

    def saved(name: str) -> str:
        net = tiny_family(name, vary_norms=False, head_dim=64, window=WINDOW, vocab=len(smollm2_tokenizer))
        return save_random_checkpoint(net, str(tmp_path_factory.mktemp(name)), smollm2_tokenizer, seed=7)

    return saved


# OLMo 2: norms over the whole query and key projections, LaMPE's two key copies; GPT-NeoX: one fused
# head-by-head projection, a quarter of each head turning, DCA. The engine runs in its own process: vLLM
# 0.32's Transformers backend decorates transformers' model class in place, and a second engine loading it
# in one process fails (`lampe-eval run` starts every engine in its own process).
@pytest.mark.parametrize(("family", "name"), [("olmo2", "lampe"), ("gpt_neox", "dca")])
def test_a_model_vllm_runs_with_transformers_modules_takes_the_method(
    family: str, name: str, through_transformers
) -> None:
    _hf_and_vllm_agree(through_transformers(family), name, one_process=False)


@pytest.fixture(scope="module")
def stablelm(tmp_path_factory, smollm2_tokenizer) -> str:
    """A random StableLM of 2 layers (head dim 64, a quarter of it turning: a partial rotary head)."""
    rope = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25}
    where = str(tmp_path_factory.mktemp("stablelm"))
    return save_random_model(
        where, smollm2_tokenizer, WINDOW, "stablelm", 7, rope_parameters=rope, use_qkv_bias=True
    )


# YaRN: an attention factor, through the engine (LaMPE, two key copies, gave the same agreement when run by
# hand: 5.7e-5; one engine start each, so one method here for CI time)
@pytest.mark.parametrize("name", ["yarn"])
def test_a_partial_rotary_model_gives_the_hf_backends_tokens_and_logprobs(name: str, stablelm: str) -> None:
    """Partial rotary heads run as whole heads through the engine on vLLM (attention/partial.py), every
    method (a frequency method too: vLLM's rotary code would scale only the turning dimensions by YaRN's
    attention factor, the HF backend scales the whole logit)."""
    _hf_and_vllm_agree(stablelm, name, rotary_dim=16)
