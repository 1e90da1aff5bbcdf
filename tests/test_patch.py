"""Patching real transformers models: exactness, removal, decoding with a cache, clear errors."""

import pytest
import torch

from lampe_eval.backends.hf.patch import apply_method
from lampe_eval.errors import LampeEvalError, UnsupportedModelError
from lampe_eval.methods import METHODS, create_method
from lampe_eval.testing import tiny_llama

WINDOW = 64


@pytest.fixture(scope="module")
def model():
    return tiny_llama(window=WINDOW, layers=2, heads=4, kv_heads=2, head_dim=16)


@pytest.fixture(scope="module")
def ids():
    torch.manual_seed(1)
    return torch.randint(0, 128, (1, 150))


@torch.no_grad()
def logits(model, ids, **kwargs):
    return model(ids, **kwargs).logits


def test_rope_patch_is_bit_exact_and_removal_restores_the_model(model, ids):
    before = logits(model, ids)
    with apply_method(model, create_method("rope", WINDOW)):
        assert torch.equal(logits(model, ids), before)
    with apply_method(model, create_method("lampe", WINDOW, 150)):
        assert not torch.equal(logits(model, ids), before)
    assert torch.equal(logits(model, ids), before)  # patch removed exactly
    assert all("forward" not in vars(m) for m in model.modules())


@pytest.mark.parametrize("model_type", ["llama", "mistral", "qwen2"])
def test_identity_mappings_reproduce_the_unpatched_model(model_type, ids):
    """Methods whose mapping is the identity at this length must give transformers' own logits:
    this checks the patched forward (un-rotated cache, positions, GQA) against the library."""
    net = tiny_llama(window=WINDOW, model_type=model_type)
    reference = logits(net, ids)
    for name, params in [
        ("selfextend", {"window": 1000, "group_size": 4}),
        ("string", {"shift": 999, "mscale": 1.0}),
        ("rerope", {"window": 999, "logn": False}),
        ("lampe", {"mscale": 1.0, "m": 150}),
        ("linear", {"factor": 1.0}),
        ("dynamic_ntk", {"factor": 2.0}),
        ("lm_infinite", {"n_local": 999, "limit_distance": 999}),
        ("streamingllm", {"recent": 999}),
        ("llama3", {"factor": 1.0}),
        ("ntk_by_parts", {"factor": 1.0}),
        ("longrope", {"factor": 1.0, "long": False}),
    ]:
        method = create_method(name, 1000 if name == "dynamic_ntk" else WINDOW, None, **params)
        with apply_method(net, method, window=1000 if name == "dynamic_ntk" else None):
            assert (logits(net, ids) - reference).abs().max() < 2e-5, name


@torch.no_grad()
@pytest.mark.parametrize("name", METHODS.names())
def test_generate_with_cache_runs_for_every_method(model, ids, name):
    with apply_method(model, create_method(name, WINDOW, 256)):
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False)
    assert out.shape == (1, ids.shape[1] + 6)


LENGTH_FREE = [
    *("rope", "selfextend", "dca", "rerope", "string", "lm_infinite", "streamingllm"),
    *("ntk", "yarn", "linear", "dynamic_ntk", "ntk_by_parts", "llama3", "longrope", "mrrope"),
]


@torch.no_grad()
@pytest.mark.parametrize("name", [*LENGTH_FREE, "lampe-remap"])
def test_cached_greedy_generation_equals_generation_without_cache(model, ids, name):
    params = {"remap_each_step": True, "identity_within_window": False} if name == "lampe-remap" else {}
    method = create_method(name.split("-")[0], WINDOW, 256, **params)
    with apply_method(model, method):
        kwargs = {"attention_mask": torch.ones_like(ids), "max_new_tokens": 8, "do_sample": False}
        cached = model.generate(ids, use_cache=True, **kwargs)
        uncached = model.generate(ids, use_cache=False, **kwargs)
        assert torch.equal(cached, uncached)
        # and the cached step logits equal a full forward over the same tokens
        full = logits(model, cached)[:, -1]
        past = model(cached[:, :-1], use_cache=True).past_key_values
        step = model(cached[:, -1:], past_key_values=past, use_cache=True).logits[:, -1]
        assert (full - step).abs().max() < 1e-4


@torch.no_grad()
def test_lampe_freezes_the_mapping_at_the_prompt_length(model, ids):
    method = create_method("lampe", WINDOW, 256, identity_within_window=False)
    with apply_method(model, method) as handle:
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=5, do_sample=False)
        assert handle.state.context_length == ids.shape[1]
    assert out.shape[1] == ids.shape[1] + 5


def test_padded_batches_are_refused(model, ids):
    mask = torch.ones(2, ids.shape[1], dtype=torch.long)
    mask[1, :3] = 0
    with (
        apply_method(model, create_method("lampe", WINDOW, 150)),
        pytest.raises(LampeEvalError, match="padded"),
    ):
        model(ids.repeat(2, 1), attention_mask=mask)


def test_pre_allocated_caches_are_refused(model, ids):
    """A StaticCache hands back max_cache_len keys: the method would see the wrong length l."""
    from transformers import StaticCache

    cache = StaticCache(config=model.config, max_cache_len=400)
    with (
        apply_method(model, create_method("lampe", WINDOW, 150)),
        pytest.raises(LampeEvalError, match="dynamic KV cache"),
    ):
        model(ids, past_key_values=cache, use_cache=True)


def test_sliding_window_models_are_refused():
    mistral = tiny_llama(window=WINDOW, layers=1, heads=4, kv_heads=2, head_dim=16, model_type="mistral")
    mistral.config.sliding_window = 32
    with pytest.raises(UnsupportedModelError, match="sliding-window"):
        apply_method(mistral, create_method("lampe", WINDOW, 150))


def test_unsupported_architecture_is_a_clear_error():
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=50))
    with pytest.raises(UnsupportedModelError, match="unsupported architecture 'gpt2'"):
        apply_method(gpt2, create_method("lampe", 1024, 2048))


def test_double_patching_is_refused(model):
    with (
        apply_method(model, create_method("dca", WINDOW)),
        pytest.raises(LampeEvalError, match="already patched"),
    ):
        apply_method(model, create_method("string", WINDOW))


def test_unknown_parameter_is_a_clear_error():
    with pytest.raises(LampeEvalError, match="no parameter group"):
        create_method("lampe", WINDOW, None, group=3)


class _DigitTokenizer:
    """A stand-in tokenizer for the HF backend on the tiny model: one token per character code."""

    bos_token = None
    pad_token_id = eos_token_id = 0

    def __call__(self, text, return_tensors=None, add_special_tokens=True, verbose=False):
        from types import SimpleNamespace

        ids = torch.tensor([[1 + ord(c) % 120 for c in text]])
        return SimpleNamespace(input_ids=ids) if return_tensors else {"input_ids": ids[0].tolist()}

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(str(int(i)) for i in ids)


def test_the_backend_tells_lampe_the_budget(model, monkeypatch):
    """Issue 17: window 64, a 60-token prompt and 10 new tokens. The backend passes prompt + budget to the
    method, so LaMPE remaps the prompt and decode row 69 stays inside the window."""
    from lampe_eval.attention.reference import segment_pairs
    from lampe_eval.backends import GenerationRequest
    from lampe_eval.backends.hf import HFBackend
    from lampe_eval.methods.lampe import LaMPE
    from lampe_eval.models import LoadedModel

    seen = []
    original = LaMPE.plan_with_budget

    def spy(self, base, context_length, kv_len, total_length):
        plan = original(self, base, context_length, kv_len, total_length)
        seen.append((context_length, kv_len, total_length, plan))
        return plan

    monkeypatch.setattr(LaMPE, "plan_with_budget", spy)
    backend = HFBackend(LoadedModel("tiny", model, _DigitTokenizer(), WINDOW, False))
    with backend.install(create_method("lampe", WINDOW, 70)):
        (out,) = backend.generate([GenerationRequest("x" * 60, max_new_tokens=10)])
    assert out.prompt_tokens == 60 and out.new_tokens == 10
    assert {(c, t) for c, _, t, _ in seen} == {(60, 70)}
    _, kv, _, plan = seen[-1]
    assert kv == 69  # the last step: query 68 (the 10th token is sampled from its logits)
    largest = max(float(pe[mask].max()) for mask, pe in segment_pairs(plan, kv - 1, 1, kv) if mask.any())
    assert largest < WINDOW


@torch.no_grad()
@pytest.mark.parametrize("name", ["lampe", "selfextend", "string", "dca"])
def test_official_variants_generate_with_a_cache(model, ids, name):
    """Prefill with the official code's overlapping passes, then its decode; SelfExtend and DCA have no
    phase-dependent positions, so their cached generation equals generation without a cache."""
    params = {"identity_within_window": False, "s1": 8, "s2": 4, "U": 40} if name == "lampe" else {}
    params = {"group_size": 3, "window": 16} if name == "selfextend" else params
    with apply_method(model, create_method(name, WINDOW, 256, variant="official", **params)):
        kwargs = {"attention_mask": torch.ones_like(ids), "max_new_tokens": 6, "do_sample": False}
        cached = model.generate(ids, use_cache=True, **kwargs)
        assert cached.shape == (1, ids.shape[1] + 6)
        if name in ("selfextend", "dca"):
            assert torch.equal(cached, model.generate(ids, use_cache=False, **kwargs))
