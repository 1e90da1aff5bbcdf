"""The KV cache that appends in place (``attention/kv_cache.py``: GrowingLayer, GrowingCache): the same keys,
values and tokens as transformers' DynamicCache, which appends with torch.cat; a decoding step writes its
own rows into buffers made once (no copy of the cache); crops, batch selection, beam search, resets,
copies and autograd keep working."""

import copy

import pytest
import torch
from transformers import DynamicCache

from lampe_eval.attention.kv_cache import GrowingCache, GrowingLayer, RotatedKeyCache
from lampe_eval.backends.hf.patch import apply_method, kv_cache_bytes, new_cache
from lampe_eval.methods import create_method
from lampe_eval.testing import tiny_family, tiny_llama

PROMPT, STEPS = 40, 12


@pytest.fixture(scope="module")
def model():
    return tiny_llama(window=32, layers=2, heads=4, kv_heads=2, head_dim=16)


@torch.no_grad()
def greedy(model, cache, ids, steps=STEPS):
    """Prefill, then ``steps`` one-token steps: (logits of each step, the cache)."""
    logits = model(ids, past_key_values=cache, use_cache=True).logits[:, -1:]
    out = [logits]
    for _ in range(steps):
        logits = model(logits.argmax(-1), past_key_values=cache, use_cache=True).logits[:, -1:]
        out.append(logits)
    return torch.cat(out, dim=1)


def prompt(batch=1):
    return torch.randint(0, 128, (batch, PROMPT), generator=torch.Generator().manual_seed(4))


def layer_tensors(cache):
    return [(layer.keys, layer.values) for layer in cache.layers]


@pytest.mark.parametrize("reserve", [PROMPT + STEPS + 1, None, PROMPT + 3])  # known, unknown, too small
def test_the_same_logits_keys_and_values_as_dynamic_cache(model, reserve):
    cache = GrowingCache(model.config, reserve)
    reference = DynamicCache(config=model.config)
    assert torch.equal(greedy(model, cache, prompt()), greedy(model, reference, prompt()))
    for (k, v), (rk, rv) in zip(layer_tensors(cache), layer_tensors(reference), strict=True):
        assert torch.equal(k, rk) and torch.equal(v, rv)
    assert all(isinstance(layer, GrowingLayer) for layer in cache.layers)


def test_a_decoding_step_writes_into_buffers_made_once(model):
    cache = GrowingCache(model.config, PROMPT + STEPS + 1)
    greedy(model, cache, prompt(), steps=1)
    buffers = [layer.buffers for layer in cache.layers]
    greedy(model, cache, prompt()[:, -1:], steps=STEPS - 1)  # continue the same cache
    assert all(layer.buffers is made for layer, made in zip(cache.layers, buffers, strict=True))
    for layer in cache.layers:  # the keys and values are views of the buffers' first rows
        assert layer.keys.data_ptr() == layer.buffers[0].data_ptr()
        assert layer.keys.shape[2] == PROMPT + STEPS + 1 == layer.buffers[0].shape[2]
    assert kv_cache_bytes(cache) == sum(b.nbytes for layer in cache.layers for b in layer.buffers)


def test_an_unknown_budget_grows_the_buffers_now_and_then(model):
    layer = GrowingLayer()
    capacities = []  # a new buffer each time one fills (an address can be reused: compare sizes)
    for _ in range(600):
        layer.update(torch.randn(1, 2, 1, 16), torch.randn(1, 2, 1, 16))
        if not capacities or capacities[-1] != layer.buffers[0].shape[2]:
            capacities.append(layer.buffers[0].shape[2])
    assert layer.get_seq_length() == 600
    assert capacities == [GrowingLayer.capacity(1), GrowingLayer.capacity(258), GrowingLayer.capacity(515)]


def test_crop_batch_selection_reset_and_copies(model):
    ids = prompt(batch=3)
    cache, reference = GrowingCache(model.config, 80), DynamicCache(config=model.config)
    for c in (cache, reference):
        greedy(model, c, ids, steps=4)
        c.crop(-3)  # a crop keeps the views; the next step writes over the dropped rows
        c.batch_select_indices(torch.tensor([2, 0]))  # a new tensor: adopted into new buffers
    assert torch.equal(greedy(model, cache, ids[[2, 0], -1:]), greedy(model, reference, ids[[2, 0], -1:]))
    twin = copy.deepcopy(cache)  # a copied cache continues on its own buffers
    step = torch.tensor([[5], [6]])
    assert torch.equal(greedy(model, twin, step, steps=2), greedy(model, reference, step, steps=2))
    assert twin.layers[0].keys.data_ptr() != cache.layers[0].keys.data_ptr()
    cache.reset()
    assert cache.get_seq_length() == 0
    fresh = DynamicCache(config=model.config)
    assert torch.equal(greedy(model, cache, ids[:1]), greedy(model, fresh, ids[:1]))


def test_beam_search_and_sampling_generate_the_same_tokens(model):
    kwargs = {"max_new_tokens": 6, "num_beams": 3, "do_sample": False, "num_return_sequences": 2}
    ids = prompt()
    with torch.no_grad():
        ours = model.generate(ids, past_key_values=GrowingCache(model.config, PROMPT + 6), **kwargs)
        theirs = model.generate(ids, **kwargs)
    assert torch.equal(ours, theirs)


def test_inference_mode_buffers_are_copied_outside_it(model):
    layer = GrowingLayer(reserve=8)
    with torch.inference_mode():
        layer.update(torch.randn(1, 2, 3, 16), torch.randn(1, 2, 3, 16))
    keys, _ = layer.update(torch.ones(1, 2, 1, 16), torch.ones(1, 2, 1, 16))  # not writable here: adopted
    assert keys.shape[2] == 4 and torch.equal(keys[:, :, 3], torch.ones(1, 2, 16))


def test_autograd_falls_back_to_concatenation():
    layer = GrowingLayer(reserve=8)
    first = torch.randn(1, 2, 3, 16, requires_grad=True)
    layer.update(first, first * 2)
    keys, values = layer.update(torch.randn(1, 2, 1, 16), torch.randn(1, 2, 1, 16))
    (keys.sum() + values.sum()).backward()
    assert torch.equal(first.grad, torch.full_like(first, 3.0))


def test_sliding_window_layers_stay_transformers_own():
    net = tiny_family("gemma3_text", window=32, head_dim=16)
    cache = new_cache(net, 64)
    kinds = [type(layer).__name__ for layer in cache.layers]
    assert kinds == ["DynamicSlidingWindowLayer", "GrowingLayer", "DynamicSlidingWindowLayer"]
    ids = torch.randint(0, 128, (1, 40), generator=torch.Generator().manual_seed(1))
    reference = DynamicCache(config=net.config)
    assert torch.equal(greedy(net, cache, ids, steps=4), greedy(net, reference, ids, steps=4))


def test_a_patched_generation_holds_its_budget_once(model):
    with apply_method(model, create_method("lampe", 32, PROMPT + STEPS)):
        cache = new_cache(model, PROMPT + STEPS)
        greedy(model, cache, prompt())  # the prompt and STEPS tokens
    assert isinstance(cache, RotatedKeyCache)
    for layer in cache.layers:
        assert layer.buffers[0].shape[2] == PROMPT + STEPS == layer.get_seq_length()
