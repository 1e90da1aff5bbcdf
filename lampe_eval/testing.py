"""Tiny random models for tests and the ``perf/`` scripts: no weights to download, every family's config
fields (:data:`FAMILY_EXAMPLES`), checkpoints both backends load (:func:`save_random_checkpoint`)."""

from __future__ import annotations

from typing import Any

import torch

from .models import attention_implementation


def tiny_llama(
    *,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    head_dim: int = 16,
    window: int = 256,
    rope_theta: float = 10000.0,
    vocab: int = 128,
    seed: int = 0,
    model_type: str = "llama",
    **extra: Any,
) -> Any:
    """A tiny random model of the Llama family (or any family with Llama's config fields: Mistral, Qwen2,
    Qwen3, OLMo 2, Phi-3, Gemma 3) for unit tests; ``extra``: more config fields (or other values)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    config = shaped_config(
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        window=window,
        rope_theta=rope_theta,
        vocab=vocab,
        model_type=model_type,
        **extra,
    )
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.config._attn_implementation = attention_implementation(config)
    return model.eval()


# One small example of each family beyond Llama: the config fields it needs on top of shaped_config's
# (tests/test_families.py and `make gpu-check` build their random models from these).
FAMILY_EXAMPLES: dict[str, dict[str, Any]] = {
    "qwen3": {},
    "olmo2": {},
    "phi3": {"pad_token_id": 0},
    # a local layer (its own RoPE base and window) then a global one; a scale that is not 1/sqrt(D)
    "gemma3_text": {
        "layers": 3,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
        "sliding_window": 16,
        "query_pre_attn_scalar": 24,
        "rope_parameters": {
            "full_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 500.0},
        },
    },
    # partial rotary (attention/partial.py): StableLM's default quarter with per-head LayerNorms; Phi-4-mini's
    # three quarters
    "stablelm": {
        "qk_layernorm": True,
        "use_qkv_bias": True,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
    },
    "phi4_mini": {"model_type": "phi3", "pad_token_id": 0, "partial_rotary_factor": 0.75},
    # Phi-2's layout: biases, a dense output, half of each head turning, per-head LayerNorms (Phi's option)
    "phi": {
        "qk_layernorm": True,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
    },
    # local and global layers alternating, soft-capped logits (small enough to bend random logits), a scale
    # that is not 1/sqrt(D)
    "gemma2": {
        "layers": 3,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
        "sliding_window": 16,
        "query_pre_attn_scalar": 24,
        "attn_logit_softcapping": 5.0,
        "final_logit_softcapping": None,
        "initializer_range": 0.1,  # logits large enough for positions and the cap to matter
    },
    # Qwen2 with use_sliding_window: layer 0 full, the layers from max_window_layers on slide (left alone)
    "qwen2_sliding": {
        "model_type": "qwen2",
        "layers": 3,
        "use_sliding_window": True,
        "sliding_window": 16,
        "max_window_layers": 1,
    },
    # mixture-of-experts MLPs beside Qwen3's, Mistral's and Qwen2's attention (Qwen2's query/key/value
    # biases); each token goes through all 4 experts, by the router's weights: a top-2 choice flips between
    # bf16 and fp32 on random weights, which `make gpu-check` (h) compares (tests/test_moe_families.py
    # runs vLLM with 2 of 4)
    "qwen3_moe": {"num_experts": 4, "num_experts_per_tok": 4, "moe_intermediate_size": 32},
    "mixtral": {"num_local_experts": 4, "num_experts_per_tok": 4},
    "qwen2_moe": {
        "num_experts": 4,
        "num_experts_per_tok": 4,
        "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 64,
    },
    # one fused query_key_value (head after head), a quarter of each head turning, no grouped keys
    "gpt_neox": {
        "num_key_value_heads": None,
        "attention_bias": True,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
    },
}


def tiny_family(name: str, *, vary_norms: bool = True, **shape: Any) -> Any:
    """A random 2-layer model of ``FAMILY_EXAMPLES[name]`` (or of model type ``name`` with Llama's fields;
    ``shape``: :func:`tiny_llama`'s arguments), its norms' weights drawn away from 1 (``vary_norms``) so
    that a misplaced norm shows."""
    net = tiny_llama(**{"layers": 2, "model_type": name, **shape, **FAMILY_EXAMPLES.get(name, {})})
    if not vary_norms:
        return net
    generator = torch.Generator().manual_seed(3)
    for parameter_name, parameter in net.named_parameters():
        if "norm" in parameter_name:
            parameter.data = torch.rand(parameter.shape, generator=generator) + 0.5
    return net


def save_random_checkpoint(net: Any, where: str, tokenizer: Any, seed: int = 3) -> str:
    """``net`` (a tiny random model) saved with ``tokenizer`` in ``where`` as a checkpoint both backends
    load, its weights drawn so that no token is a near tie (norms' weights in [0.5, 1.5), the others normal
    with deviation 0.2) and its special token ids inside the vocabulary (vLLM checks them)."""
    generator = torch.Generator().manual_seed(seed)
    for name, parameter in net.named_parameters():
        if "norm" in name:
            parameter.data = torch.rand(parameter.shape, generator=generator) + 0.5
        else:
            parameter.data = torch.randn(parameter.shape, generator=generator) * 0.2
    vocab = net.config.vocab_size
    for config in (net.config, getattr(net, "generation_config", None)):
        for field_name in ("bos_token_id", "eos_token_id", "pad_token_id"):
            value = getattr(config, field_name, None)
            if isinstance(value, int) and value >= vocab:
                setattr(config, field_name, 0)
    if getattr(net.config, "num_key_value_heads", 0) is None:  # as GPT-NeoX's configs: no such field
        del net.config.num_key_value_heads
    net.save_pretrained(where)
    tokenizer.save_pretrained(where)
    return where


def shaped_config(
    *,
    layers: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    window: int,
    rope_theta: float,
    vocab: int,
    model_type: str = "llama",
    **extra: Any,
) -> Any:
    """A config of ``model_type`` with these shapes (no weights): the intermediate size 2 x hidden unless
    ``extra`` says otherwise (``intermediate_size=14336``: Llama-3-8B's), untied embeddings, plain RoPE."""
    from transformers import AutoConfig

    fields: dict[str, Any] = {
        "vocab_size": vocab,
        "hidden_size": heads * head_dim,
        "intermediate_size": 2 * heads * head_dim,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "max_position_embeddings": window,
        "rope_parameters": {"rope_type": "default", "rope_theta": rope_theta},
        "tie_word_embeddings": False,
        **({"sliding_window": None} if model_type == "mistral" else {}),
    }
    return AutoConfig.for_model(model_type, **{**fields, **extra})
