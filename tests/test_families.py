"""Model families beyond Llama (``lampe_eval/families``): Qwen3 (per-head query/key norms), OLMo 2 (norms
over the whole projection), Phi-3/4 (one fused projection). Every method's patched logits equal a dense
oracle run inside the family's *own* attention code (transformers' forward, with its RoPE call made a
no-op and its attention function replaced by ``oracle_attention`` applying the method's positions), so the
norms, scale and projections are the library's, not ours; identity mappings give the unpatched model's
logits; cached greedy decoding equals decoding without a cache; what a family cannot run exactly is
refused in one line."""

import dataclasses
import importlib
import pkgutil
import types

import pytest
import torch

from lampe_eval import families
from lampe_eval.backends.hf.patch import apply_method
from lampe_eval.backends.rope_config import rope_base
from lampe_eval.errors import UnknownNameError, UnsupportedModelError
from lampe_eval.families import AttentionFamily, family_of_config, llama, qwen3
from lampe_eval.methods import METHODS, create_method
from lampe_eval.testing import FAMILY_EXAMPLES, tiny_llama
from tests.helpers.families import LENGTH, WINDOW, logits, oracle_logits, tiny

FAMILIES = list(FAMILY_EXAMPLES)


@pytest.fixture(scope="module")
def ids():
    return torch.randint(0, 128, (1, LENGTH), generator=torch.Generator().manual_seed(1))


def test_the_registry_knows_each_family():
    for model_type in ["llama", "mistral", "qwen2", *FAMILIES]:
        assert family_of_config(tiny(model_type).config) is not None, model_type


def test_each_family_module_registers_its_families_on_import():
    """No list to edit: every ``AttentionFamily`` a module of ``lampe_eval/families`` defines is in the
    registry (the package imports its modules), and nothing else is."""
    defined = {}
    for info in pkgutil.iter_modules(families.__path__):
        module = importlib.import_module(f"{families.__name__}.{info.name}")
        defined.update({id(v): v for v in vars(module).values() if isinstance(v, AttentionFamily)})
    assert len(defined) == len(families.FAMILIES.names()) >= 9
    assert all(families.FAMILIES.get(family.name) is family for family in defined.values())


def test_the_family_registry_refuses_like_every_registry():
    """A name twice, a class or a model type another family claims (which family a layer belongs to never
    depends on the order of imports), something not a family: refused, nothing registered; an unknown name
    is one line with the closest known one."""
    registry, before = families.FAMILIES, families.FAMILIES.names()
    with pytest.raises(ValueError, match="model family 'llama' registered twice"):
        registry.add(llama.FAMILY)
    mixtral = dataclasses.replace(llama.FAMILY, name="x", classes=("MixtralAttention",), model_types=("x",))
    with pytest.raises(ValueError, match="claims MixtralAttention, which model family 'llama' claims"):
        registry.add(mixtral)
    qwen3_moe = dataclasses.replace(qwen3.FAMILY, name="x", classes=("X",), model_types=("qwen3_moe",))
    with pytest.raises(ValueError, match="claims qwen3_moe, which model family 'qwen3'"):
        registry.add(qwen3_moe)
    with pytest.raises(TypeError, match="a model family is a lampe_eval.families.AttentionFamily"):
        registry.add(types.SimpleNamespace(name="mine"))
    assert registry.names() == before
    with pytest.raises(UnknownNameError, match="unknown model family 'lama'; did you mean llama") as unknown:
        registry.get("lama")
    assert "\n" not in str(unknown.value)


@pytest.mark.parametrize("model_type", ["llama", *FAMILIES])
@pytest.mark.parametrize("name", [n for n in METHODS.names() if n != "rope"])
def test_patched_logits_equal_the_oracle_in_the_familys_own_code(model_type, name, ids, monkeypatch):
    net = tiny(model_type)
    extra = {"identity_within_window": False} if name == "lampe" else {}
    method = create_method(name, WINDOW, LENGTH, **extra)
    with apply_method(net, method):
        patched = logits(net, ids)
    reference = oracle_logits(net, method, ids, monkeypatch)
    assert (patched - reference).abs().max() <= 1e-4 * reference.abs().max(), (model_type, name)


@pytest.mark.parametrize("model_type", FAMILIES)
def test_identity_mappings_reproduce_the_unpatched_model(model_type, ids):
    net = tiny(model_type)
    reference = logits(net, ids)
    identities = [("lampe", {"mscale": 1.0}), ("selfextend", {"window": 1000}), ("linear", {"factor": 1.0})]
    for name, params in identities:
        with apply_method(net, create_method(name, 1000, None, **params), window=1000):
            assert (logits(net, ids) - reference).abs().max() < 2e-5, (model_type, name)


@torch.no_grad()
@pytest.mark.parametrize("model_type", FAMILIES)
@pytest.mark.parametrize("name", ["selfextend", "dca", "string"])  # positions that do not move with length
def test_cached_decoding_equals_a_forward_without_a_cache(model_type, name, ids):
    net = tiny(model_type)
    with apply_method(net, create_method(name, WINDOW, 256)):
        kwargs = {"attention_mask": torch.ones_like(ids), "max_new_tokens": 8, "do_sample": False}
        cached = net.generate(ids, use_cache=True, **kwargs)
        assert torch.equal(cached, net.generate(ids, use_cache=False, **kwargs)), (model_type, name)
        full = logits(net, cached)[:, -1]
        past = net(cached[:, :-1], use_cache=True).past_key_values
        step = net(cached[:, -1:], past_key_values=past, use_cache=True).logits[:, -1]
        # fp32 sums in another order: the tolerance follows the logits' size
        assert (full - step).abs().max() < 3e-4 * max(1.0, full.abs().max().item()), (model_type, name)


@pytest.mark.parametrize(
    ("model_type", "config", "said"),
    [
        (
            "phi3",
            {
                "rope_parameters": {
                    "rope_type": "longrope",
                    "rope_theta": 10000.0,
                    "short_factor": [1.0] * 8,
                    "long_factor": [2.0] * 8,
                    "original_max_position_embeddings": 16,
                }
            },
            "'longrope' RoPE scaling",
        ),
        ("qwen3", {"use_sliding_window": True, "sliding_window": 16}, "sliding-window"),
    ],
)
def test_what_a_family_cannot_run_exactly_is_refused_in_one_line(model_type, config, said):
    net = tiny(model_type)
    for key, value in config.items():
        setattr(net.config, key, value)
    if model_type == "qwen3":
        net.config.layer_types = ["sliding_attention"] * 2
    with pytest.raises(UnsupportedModelError, match=said) as refused:
        apply_method(net, create_method("lampe", WINDOW, LENGTH))
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("model_type", ["llama", "phi4_mini"])
def test_ms_poe_paper_gives_each_query_head_its_keys_at_its_own_ratio(model_type, ids, monkeypatch):
    """``variant=paper`` under grouped queries (4 query / 2 key heads): keys and values kept per query head,
    each head's keys at its own ratio; the oracle in the family's own code, as above; another model than
    ``official`` (whose keys take the ratio of their group's first query head); the same without grouping."""
    net = tiny(model_type)
    paper = create_method("ms_poe", WINDOW, WINDOW, variant="paper", skip_layers=0)
    official = create_method("ms_poe", WINDOW, WINDOW, skip_layers=0)
    with apply_method(net, paper):
        patched = logits(net, ids)
    with apply_method(net, official):
        other = logits(net, ids)
    reference = oracle_logits(net, paper, ids, monkeypatch)
    assert (patched - reference).abs().max() <= 1e-4 * reference.abs().max()
    assert (patched - other).abs().max() > 1e-3
    with apply_method(net, paper), torch.no_grad():  # the cache holds the keys per query head as well
        kwargs = {"attention_mask": torch.ones_like(ids[:, :24]), "max_new_tokens": 6, "do_sample": False}
        cached = net.generate(ids[:, :24], use_cache=True, **kwargs)
        assert torch.equal(cached, net.generate(ids[:, :24], use_cache=False, **kwargs))
    mha = tiny_llama(window=WINDOW, head_dim=16, layers=2, heads=4, kv_heads=4)
    with apply_method(mha, paper):
        same = logits(mha, ids)
    with apply_method(mha, official):
        assert torch.equal(same, logits(mha, ids))


def multimodal_gemma3(text_model, where) -> str:
    """Gemma 3's multimodal checkpoint layout (``Gemma3ForConditionalGeneration``: a tiny SigLIP vision tower
    and projector beside the text model, model type ``gemma3``) holding ``text_model``'s weights, saved in
    ``where``."""
    from transformers import AutoModelForCausalLM, Gemma3Config

    vision = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2}
    config = Gemma3Config(
        text_config=text_model.config.to_dict(),
        vision_config={**vision, "image_size": 32, "patch_size": 8},
        mm_tokens_per_image=4,
        image_token_index=125,
        boi_token_index=126,
        eoi_token_index=127,
        tie_word_embeddings=False,
    )
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    own = model.state_dict()
    with torch.no_grad():
        for (
            key,
            weight,
        ) in text_model.state_dict().items():  # model.layers... -> model.language_model.layers...
            own[key.replace("model.", "model.language_model.", 1) if key.startswith("model.") else key].copy_(
                weight
            )
    model.save_pretrained(where)
    return str(where)


@pytest.mark.parametrize("name", ["lampe", "yarn", "dca"])
def test_a_multimodal_gemma3_checkpoint_runs_the_method_in_its_text_model(name, ids, tmp_path):
    """Gemma-3-4B/12B/27B ship as ``Gemma3ForConditionalGeneration``: the method goes into its text model,
    with that model's config (local layers, global RoPE), and gives what the text model alone gives, in a
    forward pass and in cached greedy decoding."""
    from lampe_eval.backends.hf.patch import new_cache
    from lampe_eval.models import load_model

    text = tiny("gemma3_text")
    wrapped = load_model(multimodal_gemma3(text, tmp_path / "gemma3"), device="cpu", dtype="float32").model
    assert type(wrapped).__name__ == "Gemma3ForConditionalGeneration"
    assert torch.equal(rope_base(wrapped).inv_freq, rope_base(text).inv_freq)
    unpatched = logits(wrapped, ids)
    results = []
    for net in (text, wrapped):
        with apply_method(net, create_method(name, WINDOW, 256)):
            kwargs = {"attention_mask": torch.ones_like(ids), "max_new_tokens": 8, "do_sample": False}
            tokens = net.generate(ids, past_key_values=new_cache(net, LENGTH + 8), **kwargs)
            results.append((logits(net, ids), tokens))
    (text_logits, text_tokens), (wrapped_logits, wrapped_tokens) = results
    assert (text_logits - wrapped_logits).abs().max() < 1e-5
    assert torch.equal(text_tokens, wrapped_tokens)
    assert (wrapped_logits - unpatched).abs().max() > 1e-2  # the method changed the wrapped model
