"""Generation with rotated keys cached once per key map: same logits as re-rotating every key at every
step, bounded side copies, no state shared between generations."""

import pytest
import torch
from transformers import DynamicCache

from lampe_eval.attention import kv_cache
from lampe_eval.errors import LampeEvalError
from lampe_eval.methods import METHODS, apply_method, create_method
from lampe_eval.methods.patch import _GENERATIONS, kv_cache_bytes
from lampe_eval.models import tiny_llama

WINDOW = 64
PROMPT = 100
STEPS = 24  # decoding rows 100..123

# Small windows so that 24 decoding steps cross every boundary: every step moves one key out of each
# distance band (SelfExtend's neighbour band into the group region, LaMPE's head into the middle and the
# middle into the tail, ReRoPE's window, STRING's diagonal); DCA's chunks of 12 start at rows 108 and 120,
# and its successive queries switch at i mod 12 = 5; its cos/sin factor grows with the length (> window).
PARAMS = {
    "lampe": {"s1": 8, "s2": 6, "m": 40, "identity_within_window": False},
    "selfextend": {"window": 10, "group_size": 3, "scale_base": 16},
    "dca": {"chunk_size": 12, "local_window": 5, "max_position": 20, "mscale_coef": 0.1},
    "rerope": {"window": 10},
    "rerope-leaky": {"window": 10, "leaky_k": 4.0},
    "string": {"shift": 20, "local": 5},
    # official variants: overlapping prefill passes, and LaMPE's decode branch (pinned middle query)
    "lampe-official": {"s1": 8, "s2": 6, "U": 40, "identity_within_window": False, "variant": "official"},
    "selfextend-official": {"window": 10, "group_size": 3, "variant": "official"},
    "dca-official": {"chunk_size": 12, "local_window": 5, "max_position": 16, "variant": "official"},
    "string-official": {"shift": 20, "local": 5, "variant": "official"},
}
OFFICIAL = [name for name in PARAMS if name.endswith("-official")]
CACHED_METHODS = [
    name
    for name in METHODS.names()
    if METHODS.get(name).kind != "baseline" and create_method(name, WINDOW, 2 * PROMPT).fixed_key_positions()
]


@pytest.fixture(scope="module")
def model():
    return tiny_llama(window=WINDOW, layers=2, heads=4, kv_heads=2, head_dim=16)


def make(name: str):
    return create_method(name.split("-")[0], WINDOW, 2 * PROMPT, **PARAMS.get(name, {}))


@torch.no_grad()
def decode(model, method, steps: int = STEPS, rotated: bool = True, ids=None):
    """Prefill a fixed prompt, then greedy-decode ``steps`` tokens one at a time: (logits per step, cache)."""
    if not rotated:
        method.fixed_key_positions = lambda: False  # the exact re-rotation path
    torch.manual_seed(3)
    ids = torch.randint(0, 128, (1, PROMPT)) if ids is None else ids
    cache = DynamicCache()
    steps_logits = []
    with apply_method(model, method):
        logits = model(ids, past_key_values=cache, use_cache=True).logits[:, -1]
        for _ in range(steps):
            steps_logits.append(logits)
            token = logits.argmax(-1, keepdim=True)
            logits = model(token, past_key_values=cache, use_cache=True).logits[:, -1]
    return torch.stack(steps_logits), cache


def test_every_method_with_fixed_positions_is_covered():
    assert {"lampe", "selfextend", "dca", "rerope", "string", "ntk", "yarn", "linear"} <= set(CACHED_METHODS)
    assert "dynamic_ntk" not in CACHED_METHODS
    assert not create_method("lampe", WINDOW, None, remap_each_step=True).fixed_key_positions()


@pytest.mark.parametrize("name", CACHED_METHODS + ["rerope-leaky"] + OFFICIAL)
def test_rotated_cache_equals_rerotating_every_step(model, name):
    cached, cache = decode(model, make(name))
    exact, plain_cache = decode(model, make(name), rotated=False)
    assert (cached - exact).abs().max() < 1e-5, name
    assert kv_cache_bytes(cache) <= 2 * kv_cache_bytes(plain_cache), name  # plain: un-rotated keys + values


@pytest.mark.parametrize("name", ["selfextend", "rerope", "string", "lampe"])
def test_side_copies_hold_only_the_keys_still_reachable(model, name, monkeypatch):
    monkeypatch.setattr(kv_cache, "MIN_SPARE", 4)
    method = make(name)
    _, cache = decode(model, method, steps=40)
    plain = kv_cache_bytes(cache) - _GENERATIONS[cache][1].side_bytes()
    row = 2 * 16 * 4  # kv heads x head_dim x fp32 bytes: one key of one layer
    for layer in _GENERATIONS[cache][1].layers.values():
        for buffer in layer.buffers.values():
            live = buffer.end - buffer.first
            assert buffer.end == PROMPT + 40  # every key fed in so far
            # bounded bands keep their width; LaMPE's middle copy keeps the keys from the middle band on
            width = {"selfextend": 9, "rerope": 9, "string": 19, "lampe": PROMPT - 6 - 1}[name]
            assert live == width
            assert buffer.nbytes <= row * (2 * live + 2 * 4 + 1) + row * (live // 8)
    assert kv_cache_bytes(cache) <= 2 * plain


def test_side_copy_memory_does_not_grow_with_the_generated_length(model, monkeypatch):
    monkeypatch.setattr(kv_cache, "MIN_SPARE", 4)
    sizes = [_GENERATIONS[decode(model, make("selfextend"), steps=s)[1]][1].side_bytes() for s in (15, 60)]
    assert sizes[1] <= sizes[0] * 1.5


@torch.no_grad()
def test_a_new_cache_or_a_new_prompt_starts_a_new_generation(model):
    method = make("lampe")
    first, _ = decode(model, method, steps=4)
    torch.manual_seed(11)
    other_ids = torch.randint(0, 128, (1, PROMPT + 30))
    decode(model, method, steps=4, ids=other_ids)  # a longer prompt: another l, m
    again, _ = decode(model, method, steps=4)
    assert torch.equal(first, again)
    with apply_method(model, method) as handle:  # one cache object reused after reset
        cache = DynamicCache()
        model(other_ids, past_key_values=cache, use_cache=True)
        cache.reset()
        torch.manual_seed(3)
        ids = torch.randint(0, 128, (1, PROMPT))
        logits = model(ids, past_key_values=cache, use_cache=True).logits[:, -1]
        assert handle.state.context_length == PROMPT
    assert (logits - first[0]).abs().max() < 1e-6


@torch.no_grad()
def test_a_cache_filled_without_the_patch_is_refused(model):
    ids = torch.randint(0, 128, (1, 20))
    cache = DynamicCache()
    model(ids, past_key_values=cache, use_cache=True)
    with apply_method(model, make("string")), pytest.raises(LampeEvalError, match="without the string patch"):
        model(ids[:, :1], past_key_values=cache, use_cache=True)


@torch.no_grad()
@pytest.mark.parametrize("name", ["selfextend", "lampe", "dca"])
def test_cropped_cache_and_beam_search_rebuild_the_side_copies(model, name):
    """A cache changed outside the patched attention (crop, beam reordering) gives the same result as the
    exact path: the side copies are rebuilt from the primary one."""
    torch.manual_seed(5)
    ids = torch.randint(0, 128, (1, PROMPT))
    results = []
    for rotated in (True, False):
        method = make(name)
        if not rotated:
            method.fixed_key_positions = lambda: False
        with apply_method(model, method):
            cache = DynamicCache()
            model(ids, past_key_values=cache, use_cache=True)
            for token in (5, 6, 7, 8):
                model(torch.tensor([[token]]), past_key_values=cache, use_cache=True)
            cache.crop(-3)
            step = model(torch.tensor([[9]]), past_key_values=cache, use_cache=True).logits
            beams = model.generate(
                ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, num_beams=3, do_sample=False
            )
        results.append((step, beams))
    assert (results[0][0] - results[1][0]).abs().max() < 1e-5
    assert torch.equal(results[0][1], results[1][1])


@pytest.mark.parametrize("name", CACHED_METHODS + ["rerope-leaky"])
def test_plans_keep_their_positions_while_generating(name):
    """What the rotated cache relies on: for a method with fixed_key_positions(), the plan at any later
    length has the same segments, regions and positions as at the prompt (only the cos/sin factor may
    change, and it is applied to the queries)."""
    from lampe_eval.methods.patch import rope_base

    base = rope_base(tiny_llama(window=WINDOW, layers=1, heads=4, kv_heads=2, head_dim=16))
    method = make(name)
    for prompt_length in (WINDOW // 2, PROMPT):  # a prompt within the window, and one beyond it
        prompt = method.plan(base, prompt_length, prompt_length)
        idx = torch.arange(4 * WINDOW)
        for kv_len in (prompt_length + 1, prompt_length + STEPS, 4 * WINDOW):
            later = method.plan(base, prompt_length, kv_len)
            assert torch.equal(later.inv_freq, prompt.inv_freq)
            assert later.key_groups() == prompt.key_groups()
            assert len(later.segments) == len(prompt.segments)
            for a, b in zip(prompt.segments, later.segments, strict=True):
                assert torch.equal(a.q_pos(idx), b.q_pos(idx)) and torch.equal(a.k_pos(idx), b.k_pos(idx))
                bounds = zip(a.region.bounds(idx), b.region.bounds(idx), strict=True)
                assert all(torch.equal(x, y) for x, y in bounds)
