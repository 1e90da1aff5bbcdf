"""Mixture-of-experts checkpoints (``qwen3_moe``, ``mixtral``, ``qwen2_moe``): their attention is their
dense family's (Qwen3's per-head norms; Mistral's and Qwen2's plain projections, Qwen2's with biases), so a
method goes into it as into the dense model, and the experts (the MLP) are left alone. Every method against
the dense oracle runs in ``tests/test_families.py`` (the three are in ``FAMILY_EXAMPLES``); here: the same
with biases and norms drawn away from their initial values, a wrong projection caught by the oracle, and
vLLM's own MoE model classes taking the method (the HF backend's greedy tokens and log-probabilities)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from lampe_eval.backends.hf.patch import apply_method, attention_layers
from lampe_eval.families import base as family_base
from lampe_eval.families import family_of_config, llama, qwen3
from lampe_eval.methods import create_method
from tests.helpers.families import LENGTH, WINDOW, family_replaced, logits, oracle_logits, tiny

MOE = ["qwen3_moe", "mixtral", "qwen2_moe"]
DENSE_FAMILY = {"qwen3_moe": qwen3.FAMILY, "mixtral": llama.FAMILY, "qwen2_moe": llama.FAMILY}
EXPERTS = {
    "qwen3_moe": "Qwen3MoeSparseMoeBlock",
    "mixtral": "MixtralSparseMoeBlock",
    "qwen2_moe": "Qwen2MoeSparseMoeBlock",
}


@pytest.fixture(scope="module")
def ids() -> torch.Tensor:
    return torch.randint(0, 128, (1, LENGTH), generator=torch.Generator().manual_seed(1))


def moe(model_type: str):
    """The family's tiny MoE model (4 experts, 2 per token) with every bias drawn away from 0 (Qwen2-MoE's
    query/key/value biases: a projection that dropped them shows)."""
    net = tiny(model_type)
    generator = torch.Generator().manual_seed(5)
    for name, parameter in net.named_parameters():
        if name.endswith(".bias"):
            parameter.data = torch.randn(parameter.shape, generator=generator) * 0.5
    return net


@pytest.mark.parametrize("model_type", MOE)
def test_a_moe_checkpoint_is_its_dense_familys_attention_and_keeps_its_experts(model_type: str) -> None:
    net = moe(model_type)
    assert family_of_config(net.config) is DENSE_FAMILY[model_type]
    blocks = {type(layer.mlp).__name__ for layer in net.model.layers}
    assert blocks == {EXPERTS[model_type]}  # a mixture of experts indeed (not a dense MLP)
    with apply_method(net, create_method("lampe", WINDOW, LENGTH)):
        assert {type(layer.mlp).__name__ for layer in net.model.layers} == blocks  # the experts untouched
    if model_type == "qwen2_moe":
        assert all(layer.q_proj.bias.abs().max() > 0.1 for layer in attention_layers(net))


@pytest.mark.parametrize("model_type", MOE)
@pytest.mark.parametrize("name", ["lampe", "dca", "yarn"])
def test_moe_patched_logits_equal_the_oracle_with_biases(
    model_type: str, name: str, ids, monkeypatch
) -> None:
    net = moe(model_type)
    method = create_method(name, WINDOW, LENGTH)
    with apply_method(net, method):
        patched = logits(net, ids)
    reference = oracle_logits(net, method, ids, monkeypatch)
    assert (patched - reference).abs().max() <= 1e-4 * reference.abs().max(), (model_type, name)
    assert (patched - logits(net, ids)).abs().max() > 1e-3  # the method changed the model


def test_the_oracle_catches_a_qwen3_moe_patched_without_its_per_head_norms(ids, monkeypatch) -> None:
    """Qwen3-MoE patched as a Llama (its q_norm/k_norm left out) is far from the oracle: the test above
    can fail."""
    net = moe("qwen3_moe")
    method = create_method("dca", WINDOW, LENGTH)
    reference = oracle_logits(net, method, ids, monkeypatch)
    wrong = dataclasses.replace(qwen3.FAMILY, project=family_base.separate_projections)
    with family_replaced(wrong), apply_method(net, method):
        patched = logits(net, ids)
    assert (patched - reference).abs().max() > 1e-2 * reference.abs().max()


# ------------------------------------------------------------------------------------------------- vLLM


@pytest.fixture(scope="module")
def moe_checkpoint(tmp_path_factory, smollm2_tokenizer):
    """A random MoE checkpoint of the type, 2 layers, head dim 64 (vLLM's CPU attention), each token routed
    to 2 of its 4 experts (a sparse choice, as released: Qwen3-30B-A3B 8 of 128, Mixtral-8x7B 2 of 8)."""
    from lampe_eval.testing import FAMILY_EXAMPLES, save_random_checkpoint, tiny_llama

    def saved(model_type: str) -> str:
        shape = {"layers": 2, "head_dim": 64, "window": 256, "vocab": len(smollm2_tokenizer)}
        net = tiny_llama(
            model_type=model_type, **shape, **{**FAMILY_EXAMPLES[model_type], "num_experts_per_tok": 2}
        )
        return save_random_checkpoint(
            net, str(tmp_path_factory.mktemp(model_type)), smollm2_tokenizer, seed=7
        )

    return saved


# vLLM 0.32's own MoE model classes (Qwen3MoeForCausalLM, MixtralForCausalLM; their FusedMoE on the CPU's
# expert kernel) with LaMPE (two key copies) through the engine. vLLM's experts alone, unpatched, already
# give log-probabilities up to 2.0e-4 from transformers' on the random Mixtral (2.2e-4 with LaMPE): the
# method's deviation is held to that of the unpatched model plus the tolerance of the dense families' tests.
# Qwen2-MoE (Qwen2MoeForCausalLM) gave the same by hand (docs/model-families.md); one engine start each.
@pytest.mark.slow
@pytest.mark.parametrize("model_type", ["qwen3_moe", "mixtral"])
def test_vllm_runs_the_method_in_a_moe_model(model_type: str, moe_checkpoint) -> None:
    pytest.importorskip("vllm")
    from lampe_eval.backends.base import GenerationRequest
    from lampe_eval.backends.hf import HFBackend
    from lampe_eval.backends.vllm import VLLMBackend
    from lampe_eval.methods.resolve import resolve_method
    from lampe_eval.models import load_for_engine, load_model
    from tests.helpers.vllm_agreement import (
        LOGPROB_TOLERANCE,
        NEW,
        PROMPT,
        WINDOW,
        hf_prompt_logprobs,
        prompt,
    )

    where = moe_checkpoint(model_type)
    hf = HFBackend(load_model(where))
    request = GenerationRequest("", NEW, input_ids=prompt(PROMPT, 9))
    ids = list(request.input_ids or ())
    methods = {
        name: resolve_method(name, WINDOW, PROMPT + NEW, base=hf.rope_base()).method
        for name in ("rope", "lampe")
    }
    expected = {}
    for name, method in methods.items():
        with hf.install(method):
            expected[name] = (hf.generate([request])[0].token_ids, hf_prompt_logprobs(hf, ids))
    assert (expected["lampe"][1] - expected["rope"][1]).abs().max().item() > 100 * LOGPROB_TOLERANCE
    backend = VLLMBackend(load_for_engine(where), batch_size=1, dtype="fp32", one_process=False)
    got = {}
    try:
        for name, method in methods.items():
            with backend.install(method):
                got[name] = (
                    backend.generate([request])[0].token_ids,
                    torch.tensor(backend.prompt_logprobs(ids)),
                )
    finally:
        backend.close()
    experts = (got["rope"][1] - expected["rope"][1]).abs().max().item()  # vLLM's MoE alone
    assert got["lampe"][0] == expected["lampe"][0]
    assert (got["lampe"][1] - expected["lampe"][1]).abs().max().item() < experts + LOGPROB_TOLERANCE


def test_vllm_refuses_a_sliding_window_moe_model_it_would_run_without_its_window() -> None:
    """vLLM 0.32's MoE model classes read no ``sliding_window`` (they would attend to every key): such a
    checkpoint is refused on vLLM in one line, whatever the method; the released ones (no window) are not."""
    from transformers import MixtralConfig, Qwen2MoeConfig, Qwen3MoeConfig

    from lampe_eval.backends.vllm import vllm_model_refusal

    assert vllm_model_refusal(MixtralConfig(sliding_window=4096)) is not None
    refused = vllm_model_refusal(Qwen3MoeConfig(use_sliding_window=True, sliding_window=4096))
    assert refused is not None and "\n" not in refused and "--backend hf" in refused
    for config in (MixtralConfig(), Qwen2MoeConfig(), Qwen3MoeConfig(), Qwen2MoeConfig(sliding_window=4096)):
        assert vllm_model_refusal(config) is None, config.model_type
