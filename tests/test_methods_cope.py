"""CoPE (``cope``): its taper against the official ``LlamaRotaryEmbedding`` arithmetic (hrlics/CoPE
``modeling_cope.py``), read as a loop over the clipped frequencies; and a model patched with it against
transformers' own forward with those inverse frequencies in its rotary embedding, on plain RoPE and on a
model shipping Llama-3.1's scaling (the taper multiplies the model's own frequencies)."""

import copy
import math

import pytest
import torch

from lampe_eval.backends.hf.patch import apply_method
from lampe_eval.backends.rope_config import rope_base
from lampe_eval.errors import LampeEvalError
from lampe_eval.methods import create_method
from lampe_eval.methods.cope import tapered
from lampe_eval.methods.frequency import plain_frequencies

from .helpers.frequency import WINDOW, llama3_twin, logits, plain_llama


@pytest.fixture(scope="module")
def plain():
    return plain_llama()


@pytest.fixture(scope="module")
def llama3_model(plain):
    """A tiny model shipping Llama-3.1's scaling (window = max_position_embeddings = 1024)."""
    return llama3_twin(plain)


def official_taper(inv_freq: torch.Tensor, clip_low_n: int = 20, hard: bool = False) -> list[float]:
    """The official code's steps, one frequency at a time: ``clip = min(clip_low_n, freq_dim)``, the last
    ``clip`` frequencies times ``0.5 (1 + cos(theta_i))``, theta = ``linspace(0, pi, clip)``; HardClip 0."""
    values = inv_freq.tolist()
    clip = min(clip_low_n, len(values))
    start = len(values) - clip
    for i in range(clip):
        theta = math.pi * i / (clip - 1) if clip > 1 else 0.0
        values[start + i] = 0.0 if hard else values[start + i] * 0.5 * (1.0 + math.cos(theta))
    return values


@pytest.mark.parametrize("dim", [16, 64, 128])
@pytest.mark.parametrize("low", [0, 1, 20, 100])
@pytest.mark.parametrize("clip", ["cosine", "hard"])
def test_the_taper_is_the_official_codes(dim, low, clip):
    inv_freq = plain_frequencies(500000.0, dim)
    ours = tapered(inv_freq, low, clip)
    expected = torch.tensor(official_taper(inv_freq, low, clip == "hard"), dtype=torch.float64)
    # the official mask is float32 (linspace, cos): an error of ~1e-7 in the mask, times the frequency
    assert ((ours.double() - expected).abs() <= 2e-7 * inv_freq.double() + 1e-6 * expected.abs()).all()
    count = min(low, dim // 2)
    assert torch.equal(ours[: dim // 2 - count], inv_freq[: dim // 2 - count])  # the rest untouched
    if count > 1 or (count and clip == "hard"):
        assert ours[-1] <= 1e-7 * inv_freq[-1]  # the lowest frequency stops rotating
    if count > 1 and clip == "cosine":
        assert ours[-count] == inv_freq[-count]  # the first clipped one kept whole


def rotary_twin(model, inv_freq: torch.Tensor):
    """The same model, with ``inv_freq`` in its own rotary embedding (transformers' forward)."""
    other = copy.deepcopy(model)
    rotary = other.model.rotary_emb
    rotary.inv_freq = inv_freq.clone()
    rotary.original_inv_freq = inv_freq.clone()
    return other


@pytest.mark.parametrize("model_name", ["plain", "llama3_model"])
@pytest.mark.parametrize("clip", ["cosine", "hard"])
def test_logits_equal_transformers_forward_with_the_tapered_frequencies(request, model_name, clip):
    model = request.getfixturevalue(model_name)
    method = create_method("cope", WINDOW, 4 * WINDOW, low=5, clip=clip)
    base = rope_base(model)
    own = model.model.rotary_emb.inv_freq.float()
    inv_freq, attention = method.frequencies(base, 3 * WINDOW)
    assert torch.equal(inv_freq, tapered(own, 5, clip)) and attention == 1.0
    ids = torch.randint(0, 128, (1, 3 * WINDOW), generator=torch.Generator().manual_seed(7))
    with apply_method(model, method):
        ours = logits(model, ids)
    error, change = (ours - logits(rotary_twin(model, inv_freq), ids)), (ours - logits(model, ids))
    assert error.abs().max() <= 1e-6 and change.abs().max() > 1e-5  # equal, and not to the unpatched


def test_defaults_and_bad_parameters():
    defaults = {"low": 20, "clip": "cosine", "model_scaling": "keep"}
    assert create_method("cope", 8192, 32768).params() == defaults
    with pytest.raises(LampeEvalError, match="clip must be 'cosine' or 'hard'"):
        create_method("cope", 8192, 32768, clip="soft")
    with pytest.raises(LampeEvalError, match="low must be >= 0"):
        create_method("cope", 8192, 32768, low=-1)
