"""The frequency-method tests' tiny models (from ``tests/test_methods_frequency.py``, shared with
``tests/test_methods_cope.py``): a plain-RoPE Llama, the same weights under another rope config
(transformers' own implementation of it), one shipping Llama-3.1's scaling, and their logits. Each test
module wraps the models in its own module-scoped fixtures (``plain``, ``llama3_model``)."""

import copy

import torch
from transformers import LlamaForCausalLM

from lampe_eval.testing import tiny_llama

WINDOW, DIM, THETA = 64, 16, 10000.0
LLAMA3 = {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 256,
}


def twin(model, rope_parameters: dict, max_positions: int | None = None):
    """The same weights under another rope config: transformers' own implementation of it."""
    config = copy.deepcopy(model.config)
    config.rope_parameters = {"rope_theta": THETA, **rope_parameters}
    if max_positions:
        config.max_position_embeddings = max_positions
    other = LlamaForCausalLM(config)
    other.load_state_dict(model.state_dict())
    other.config._attn_implementation = "sdpa"
    return other.eval()


@torch.no_grad()
def logits(model, ids):
    return model(ids).logits


def plain_llama():
    """A tiny Llama of plain RoPE (the ``plain`` fixtures)."""
    return tiny_llama(window=WINDOW, layers=2, heads=4, kv_heads=2, head_dim=DIM, rope_theta=THETA, seed=4)


def llama3_twin(plain):
    """A tiny model shipping Llama-3.1's scaling (window = max_position_embeddings = 1024): ``plain``'s
    weights (the ``llama3_model`` fixtures)."""
    return twin(plain, {"rope_type": "llama3", **LLAMA3}, max_positions=1024)
