"""ModelFacts: what a config says, read in one place (heads, head and rotary dimensions, window, layers,
RoPE, the per-rank share), for a plain config, a grouped one, a partial rotary one, a multimodal one and
one with local layers."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from transformers import AutoConfig

from lampe_eval.backends.rope_config import rope_base_from_config
from lampe_eval.memory import ModelShape
from lampe_eval.methods import RopeBase, create_method
from lampe_eval.methods.frequency import ntk_theta, plain_frequencies
from lampe_eval.model_facts import ModelFacts
from lampe_eval.testing import FAMILY_EXAMPLES, shaped_config

SHAPE = {
    "layers": 3,
    "heads": 8,
    "kv_heads": 2,
    "head_dim": 16,
    "window": 512,
    "rope_theta": 5e5,
    "vocab": 64,
}


def test_a_llama_configs_facts():
    facts = ModelFacts.from_config(shaped_config(**SHAPE))
    assert (facts.model_type, facts.layers, facts.heads, facts.kv_heads) == ("llama", 3, 8, 2)
    assert (facts.head_dim, facts.rotary_dim, facts.hidden, facts.intermediate) == (16, 16, 128, 256)
    assert (facts.window, facts.rope_theta, facts.rope_type, facts.vocab) == (512, 5e5, "default", 64)
    assert facts.full_attention_layers == (0, 1, 2) and facts.local_layers == 0 and not facts.partial_rotary
    assert not facts.soft_capped


def test_the_per_rank_share_of_the_key_heads():
    facts = ModelFacts.from_config(shaped_config(**SHAPE))  # 2 key heads
    assert [facts.rank_share(ranks) for ranks in (1, 2, 4)] == [1.0, 0.5, 0.5]  # 4 ranks: one replicated


def test_a_config_that_says_nothing_gives_zeros_and_ungrouped_keys():
    facts = ModelFacts.from_config(SimpleNamespace(num_attention_heads=4))
    assert (facts.heads, facts.kv_heads, facts.layers, facts.window, facts.head_dim) == (4, 4, 0, 0, 0)
    assert ModelFacts.from_config(SimpleNamespace()).rank_share(2) == 1.0


def test_partial_rotary_from_the_rope_parameters_or_the_config():
    stablelm = {**SHAPE, "model_type": "stablelm", **FAMILY_EXAMPLES["stablelm"]}
    assert ModelFacts.from_config(shaped_config(**stablelm)).rotary_dim == 4  # a quarter of 16
    phi4_mini = ModelFacts.from_config(shaped_config(**{**SHAPE, **FAMILY_EXAMPLES["phi4_mini"]}))
    assert phi4_mini.rotary_dim == 12 and phi4_mini.partial_rotary


def test_local_layers_and_the_global_layers_rope():
    gemma3 = shaped_config(**{**SHAPE, "model_type": "gemma3_text", **FAMILY_EXAMPLES["gemma3_text"]})
    facts = ModelFacts.from_config(gemma3)
    assert facts.full_attention_layers == (1,) and facts.local_layers == 2 and facts.sliding_window == 16
    assert facts.rope_theta == 10000.0  # the full-attention layers' base, not the local layers' 500
    gemma2 = ModelFacts.from_config(
        shaped_config(**{**SHAPE, "model_type": "gemma2", **FAMILY_EXAMPLES["gemma2"]})
    )
    assert gemma2.soft_capped and ModelShape.from_config("g2", gemma2.text, parameters=0.0).soft_capped


def test_a_multimodal_configs_facts_are_its_text_models():
    text = shaped_config(**{**SHAPE, "model_type": "gemma3_text", **FAMILY_EXAMPLES["gemma3_text"]})
    wrapped = AutoConfig.for_model("gemma3", text_config=text.to_dict())
    facts = ModelFacts.from_config(wrapped)
    assert facts.model_type == "gemma3_text" and (facts.heads, facts.kv_heads, facts.layers) == (8, 2, 3)


def test_the_rope_base_carries_the_heads_the_methods_read():
    base = rope_base_from_config(shaped_config(**SHAPE))
    assert (base.heads, base.kv_heads, base.head_dim, base.window) == (8, 2, 16, 512)


def test_the_rope_base_carries_the_global_layers_rope_the_frequency_methods_read():
    """Gemma 3's RopeBase: the full-attention layers' RoPE parameters (base 10000, not the local layers'
    500) from ModelFacts; its config stays the model's own (one set per layer type), and a frequency method
    computes from the facts."""
    gemma3 = shaped_config(**{**SHAPE, "model_type": "gemma3_text", **FAMILY_EXAMPLES["gemma3_text"]})
    base = rope_base_from_config(gemma3)
    assert dict(base.rope_parameters) == {"rope_type": "default", "rope_theta": 10000.0}
    assert (base.theta, base.rope_type) == (10000.0, "default")
    assert set(base.config.rope_parameters) == {"full_attention", "sliding_attention"}
    inv_freq, attention = create_method("ntk", 512, None, factor=2.0).frequencies(base, 100)
    assert torch.equal(inv_freq, plain_frequencies(ntk_theta(10000.0, 2.0, 16), 16)) and attention == 1.0
    # YaRN through transformers' own function: the same as on a one-RoPE model of base 10000
    yarn = create_method("yarn", 512, 1024)
    plain = RopeBase.plain(512, heads=8, kv_heads=2, head_dim=16, theta=10000.0)
    assert torch.equal(yarn.frequencies(base, 100)[0], yarn.frequencies(plain, 100)[0])
