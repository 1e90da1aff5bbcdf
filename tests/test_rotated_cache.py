"""Generation with rotated keys cached once per key map: same logits as re-rotating every key at every
step, bounded side copies, no state shared between generations. Both ways to hold them: the
RotatedKeyCache (``new_cache``, primary) and a cache made elsewhere (transformers' DynamicCache, fallback)."""

import pytest
import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from lampe_eval.attention import kv_cache
from lampe_eval.attention.kv_cache import GrowingCache, RotatedKeyCache
from lampe_eval.backends.hf.patch import (
    _GENERATIONS,
    apply_method,
    generation_budget,
    kv_cache_bytes,
    new_cache,
)
from lampe_eval.errors import LampeEvalError
from lampe_eval.methods import METHODS, create_method
from lampe_eval.testing import tiny_llama

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
    "ms_poe": {"skip_layers": 1, "min_ratio": 1.5, "max_ratio": 3.0},  # layer 0 keeps its own attention
    "rerope-leaky": {"window": 10, "leaky_k": 4.0},
    "string": {"shift": 20, "local": 5},
    "dpe": {"window": 10, "scale_factors": (2, 3, 4, 5)},  # a group size per pair of the 8 frequencies
    # official variants: overlapping prefill passes, and LaMPE's decode branch (pinned middle query)
    "lampe-official": {"s1": 8, "s2": 6, "U": 40, "identity_within_window": False, "variant": "official"},
    "selfextend-official": {"window": 10, "group_size": 3, "variant": "official"},
    "dca-official": {"chunk_size": 12, "local_window": 5, "max_position": 16, "variant": "official"},
    "string-official": {"shift": 20, "local": 5, "variant": "official"},
    # DPE's float prefill offset w - w / s and integer decode offset w - w // s (3 does not divide 10)
    "dpe-official": {
        "window": 10,
        "scale_factors": (3, 4),
        "dimension_groups": (0, 5, 8),
        "variant": "official",
    },
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
def decode(model, method, steps: int = STEPS, rotated: bool = True, ids=None, rotated_key_cache=False):
    """Prefill a fixed prompt, then greedy-decode ``steps`` tokens one at a time: (logits per step, cache).
    The cache: transformers' DynamicCache (the fallback), or ``rotated_key_cache``: new_cache's."""
    if not rotated:
        method.fixed_key_positions = lambda: False  # the exact re-rotation path
    torch.manual_seed(3)
    ids = torch.randint(0, 128, (1, PROMPT)) if ids is None else ids
    steps_logits = []
    with apply_method(model, method):
        cache = new_cache(model, PROMPT + steps) if rotated_key_cache else DynamicCache()
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


@pytest.mark.parametrize("name", CACHED_METHODS + ["rerope-leaky", "dca-official"])
def test_plans_keep_their_positions_while_generating(name):
    """What the rotated cache relies on: for a method with fixed_key_positions(), the plan at any later
    length has the same segments, regions and positions as at the prompt (only the cos/sin factor may
    change, and it is applied to the queries)."""
    from lampe_eval.backends.rope_config import rope_base

    base = rope_base(tiny_llama(window=WINDOW, layers=1, heads=4, kv_heads=2, head_dim=16))
    method = make(name)
    for prompt_length in (WINDOW // 2, PROMPT):  # a prompt within the window, and one beyond it
        prompt = method.plan(base, prompt_length, prompt_length)
        idx = torch.arange(4 * WINDOW)
        for kv_len in (prompt_length + 1, prompt_length + STEPS, 4 * WINDOW):
            later = method.plan(base, prompt_length, kv_len)
            assert torch.equal(later.inv_freq, prompt.inv_freq)
            if prompt.key_scale is not None:  # a factor rotated into the cached keys must not move
                assert later.key_scale is not None and torch.equal(
                    later.key_scale(idx), prompt.key_scale(idx)
                )
            assert later.key_groups() == prompt.key_groups()
            assert len(later.segments) == len(prompt.segments)
            for a, b in zip(prompt.segments, later.segments, strict=True):
                assert torch.equal(a.q_pos(idx), b.q_pos(idx)) and torch.equal(a.k_pos(idx), b.k_pos(idx))
                bounds = zip(a.region.bounds(idx), b.region.bounds(idx), strict=True)
                assert all(torch.equal(x, y) for x, y in bounds)


# --- the RotatedKeyCache (new_cache): side copies and generation state carried by the cache ---------------


def no_rebuilds(monkeypatch):
    """Fail on any side copy recomputed from the primary copy (what the fallback does after a change)."""

    def refuse(*args, **kwargs):
        raise AssertionError("a side copy was rebuilt")

    monkeypatch.setattr(kv_cache, "rope_cos_sin", refuse)  # only SideCopies.rebuild rotates by a difference


def exact(name: str):
    """``name`` re-rotating every key at every step: the reference every cached path must equal."""
    method = make(name)
    method.fixed_key_positions = lambda: False
    return method


def test_new_cache_is_a_rotated_key_cache_only_for_a_patched_model(model):
    assert type(new_cache(model, 10)) is GrowingCache and new_cache(model, 10).total_length == 10
    with apply_method(model, create_method("rope", WINDOW, None)):  # the baseline patches nothing
        assert type(new_cache(model)) is GrowingCache
    with apply_method(model, make("lampe")):
        cache = new_cache(model, 123)
        assert isinstance(cache, RotatedKeyCache) and isinstance(cache, DynamicCache)
        assert cache.total_length == 123 and cache.generation is None
        assert new_cache(model).total_length is None


@pytest.mark.parametrize(
    "name", ["lampe", "selfextend", "dca", "rerope-leaky", "string", "yarn", "lampe-official", "dpe-official"]
)
def test_rotated_key_cache_equals_rerotating_every_step(model, name, monkeypatch):
    no_rebuilds(monkeypatch)  # and no per-step rebuild either
    cached, cache = decode(model, make(name), rotated_key_cache=True)
    reference, plain_cache = decode(model, make(name), rotated=False)
    assert (cached - reference).abs().max() < 1e-5, name
    assert isinstance(cache, RotatedKeyCache) and cache not in _GENERATIONS  # no module-global state
    assert cache.generation is not None and cache.generation.context_length == PROMPT
    assert cache.generation.total_length == PROMPT + STEPS
    plain = sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)
    assert kv_cache_bytes(cache) == plain + cache.side_bytes()
    assert kv_cache_bytes(cache) <= 2 * kv_cache_bytes(plain_cache), name


@pytest.mark.parametrize("name", ["selfextend", "rerope"])
def test_rotated_key_cache_keeps_only_the_reachable_keys_beside_the_cache(model, name, monkeypatch):
    monkeypatch.setattr(kv_cache, "MIN_SPARE", 4)
    _, cache = decode(model, make(name), steps=40, rotated_key_cache=True)
    width = {"selfextend": 9, "rerope": 9}[name]
    for layer in cache.layers:
        assert layer.side.buffers and not layer.side.fresh
        for buffer in layer.side.buffers.values():
            assert (buffer.first, buffer.end) == (PROMPT + 40 - width, PROMPT + 40)


@torch.no_grad()
@pytest.mark.parametrize("name", ["selfextend", "lampe", "dca", "rerope"])
@pytest.mark.parametrize("remove", [1, 3, 7])
def test_rotated_key_cache_crop(model, name, remove):
    """Cropping drops the side copies' keys past the new length; a band that reached further back than its
    copy still holds (SelfExtend's neighbours, ReRoPE's window) is rebuilt from the primary copy."""
    torch.manual_seed(5)
    ids = torch.randint(0, 128, (1, PROMPT))
    results = []
    for method in (make(name), exact(name)):
        with apply_method(model, method):
            cache = new_cache(model, PROMPT + 8)
            model(ids, past_key_values=cache, use_cache=True)
            for token in (5, 6, 7, 8):
                model(torch.tensor([[token]]), past_key_values=cache, use_cache=True)
            cache.crop(-remove)
            assert cache.get_seq_length() == PROMPT + 4 - remove
            for layer in cache.layers:
                assert all(b.end <= PROMPT + 4 - remove for b in layer.side.buffers.values())
            steps = [
                model(torch.tensor([[t]]), past_key_values=cache, use_cache=True).logits for t in (9, 10)
            ]
        results.append(torch.cat(steps))
    assert (results[0] - results[1]).abs().max() < 1e-5


def test_a_crop_within_what_the_side_copies_hold_needs_no_rebuild(model, monkeypatch):
    """LaMPE's side copies reach back to the prompt's middle: a crop of a few tokens only drops their
    tails, so the next step rotates one key per copy, as any step."""
    no_rebuilds(monkeypatch)
    torch.manual_seed(5)
    with torch.no_grad(), apply_method(model, make("lampe")):
        cache = new_cache(model, PROMPT + 8)
        model(torch.randint(0, 128, (1, PROMPT)), past_key_values=cache, use_cache=True)
        for token in (5, 6, 7):
            model(torch.tensor([[token]]), past_key_values=cache, use_cache=True)
        cache.crop(-2)
        model(torch.tensor([[9]]), past_key_values=cache, use_cache=True)
    assert cache.get_seq_length() == PROMPT + 2


@torch.no_grad()
@pytest.mark.parametrize("name", ["selfextend", "lampe", "dca"])
def test_rotated_key_cache_beam_search(model, name, monkeypatch):
    """generate's beam search reorders the cache with ``Cache.reorder_cache`` at every step: the side copies
    are reordered with it (never rebuilt), and the beams and their scores equal re-rotating every step."""
    torch.manual_seed(5)
    ids = torch.randint(0, 128, (1, PROMPT))
    results = []
    for method in (make(name), exact(name)):
        with apply_method(model, method), monkeypatch.context() as patch:
            no_rebuilds(patch)
            out = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                past_key_values=new_cache(model, PROMPT + 8),
                max_new_tokens=8,
                num_beams=2,
                num_return_sequences=2,
                do_sample=False,
                output_scores=True,
                return_dict_in_generate=True,
            )
        results.append(out)
    assert torch.equal(results[0].sequences, results[1].sequences)
    assert (results[0].sequences_scores - results[1].sequences_scores).abs().max() < 1e-5


@torch.no_grad()
@pytest.mark.parametrize("name", ["selfextend", "lampe", "rerope"])
def test_rotated_key_cache_batch_repeat_select_and_reorder(model, name, monkeypatch):
    """``batch_repeat_interleave``, ``batch_select_indices`` and ``reorder_cache`` keep the side copies in
    step with the keys and values: every row then decodes as re-rotating every step."""
    no_rebuilds(monkeypatch)
    torch.manual_seed(7)
    ids = torch.randint(0, 128, (1, PROMPT))
    results = []
    for method in (make(name), exact(name)):
        with apply_method(model, method):
            cache = new_cache(model, PROMPT + 8)
            model(ids, past_key_values=cache, use_cache=True)
            model(torch.tensor([[3]]), past_key_values=cache, use_cache=True)
            cache.batch_repeat_interleave(3)
            logits = [model(torch.tensor([[4], [5], [6]]), past_key_values=cache, use_cache=True).logits]
            cache.batch_select_indices(torch.tensor([2, 0]))
            logits.append(model(torch.tensor([[7], [8]]), past_key_values=cache, use_cache=True).logits)
            cache.reorder_cache(torch.tensor([1, 1]))
            logits.append(model(torch.tensor([[9], [10]]), past_key_values=cache, use_cache=True).logits)
            for layer in cache.layers:
                assert layer.keys.shape[0] == 2
                assert all(b.data.shape[0] == 2 for b in layer.side.buffers.values())
        results.append(logits)
    for cached, reference in zip(*results, strict=True):
        assert (cached - reference).abs().max() < 1e-5


@torch.no_grad()
def test_rotated_key_cache_generates_a_batch_of_equal_length_rows(model):
    torch.manual_seed(9)
    ids = torch.randint(0, 128, (3, PROMPT))
    results = []
    for method in (make("selfextend"), exact("selfextend")):
        with apply_method(model, method):
            out = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                past_key_values=new_cache(model, PROMPT + 10),
                max_new_tokens=10,
                do_sample=False,
                output_logits=True,
                return_dict_in_generate=True,
            )
        results.append(out)
    assert torch.equal(results[0].sequences, results[1].sequences)
    assert (torch.stack(results[0].logits) - torch.stack(results[1].logits)).abs().max() < 1e-5


@torch.no_grad()
def test_a_reset_rotated_key_cache_starts_a_new_generation(model):
    first, _ = decode(model, make("selfextend"), steps=4, rotated_key_cache=True)
    torch.manual_seed(11)
    other_ids = torch.randint(0, 128, (1, PROMPT + 30))
    with apply_method(model, make("selfextend")):
        cache = new_cache(model)
        model(other_ids, past_key_values=cache, use_cache=True)
        model(torch.tensor([[1]]), past_key_values=cache, use_cache=True)
        cache.reset()
        assert cache.generation is None and cache.side_bytes() == 0
        torch.manual_seed(3)
        logits = model(torch.randint(0, 128, (1, PROMPT)), past_key_values=cache, use_cache=True).logits
    assert (logits[:, -1] - first[0]).abs().max() < 1e-6


def _spy_budgets(monkeypatch):
    from lampe_eval.methods.lampe import LaMPE

    seen = []
    original = LaMPE.plan_with_budget

    def spy(self, base, context_length, kv_len, total_length):
        plan = original(self, base, context_length, kv_len, total_length)
        seen.append((context_length, total_length, len(plan.segments)))
        return plan

    monkeypatch.setattr(LaMPE, "plan_with_budget", spy)
    return seen


@torch.no_grad()
def test_the_budget_travels_on_the_cache(model, monkeypatch):
    """LaMPE with identity_within_window: a 60-token prompt fits the window (64), but 60 + 10 new tokens do
    not. The budget given to new_cache reaches plan_with_budget, so the prompt is remapped; no model
    attribute is involved (the fallback's budget is unset)."""
    seen = _spy_budgets(monkeypatch)
    ids = torch.randint(0, 128, (1, 60))
    method = create_method("lampe", WINDOW, 70, identity_within_window=True)
    with apply_method(model, method) as handle:
        model.generate(ids, past_key_values=new_cache(model, 70), max_new_tokens=10, do_sample=False)
        assert handle.state.total_length is None
        assert {(c, t) for c, t, _ in seen} == {(60, 70)}
        assert all(n > 1 for _, _, n in seen)  # remapped: LaMPE's head, middle and tail
        seen.clear()
        model.generate(ids, past_key_values=new_cache(model, 60), max_new_tokens=4, do_sample=False)
        assert {(c, t, n) for c, t, n in seen} == {(60, 60, 1)}  # fits: plain positions
        seen.clear()
        with generation_budget(model, 60):  # the cache's own budget wins over the fallback's
            model.generate(ids, past_key_values=new_cache(model, 70), max_new_tokens=1, do_sample=False)
        assert {t for _, t, _ in seen} == {70}


@torch.no_grad()
def test_the_fallback_still_learns_the_budget_from_generation_budget(model, monkeypatch, caplog):
    seen = _spy_budgets(monkeypatch)
    ids = torch.randint(0, 128, (1, 60))
    method = create_method("lampe", WINDOW, 70, identity_within_window=True)
    with apply_method(model, method):
        with generation_budget(model, 70):  # generate makes its own DynamicCache
            model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=10, do_sample=False)
        assert {(c, t) for c, t, _ in seen} == {(60, 70)}
        seen.clear()
        with caplog.at_level("WARNING"):  # no budget at all: plain positions, one warning past the window
            model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=10, do_sample=False)
            model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=10, do_sample=False)
        assert {(c, t, n) for c, t, n in seen} == {(60, None, 1)}
    assert sum("passed it: the model extrapolates" in r.getMessage() for r in caplog.records) == 1


@torch.no_grad()
def test_a_rotated_key_cache_filled_without_the_patch_is_refused(model):
    ids = torch.randint(0, 128, (1, 20))
    cache = RotatedKeyCache(total_length=30)
    model(ids, past_key_values=cache, use_cache=True)
    with apply_method(model, make("string")), pytest.raises(LampeEvalError) as refused:
        model(ids[:, :1], past_key_values=cache, use_cache=True)
    assert "without the string patch" in str(refused.value) and "\n" not in str(refused.value)
    with apply_method(model, make("selfextend")):  # filled by another method: refused as well
        cache = new_cache(model)
        model(ids, past_key_values=cache, use_cache=True)
    with apply_method(model, make("string")), pytest.raises(LampeEvalError, match="without the string patch"):
        model(ids[:, :1], past_key_values=cache, use_cache=True)


@torch.no_grad()
def test_a_copied_rotated_key_cache_continues_the_same_generation(model):
    """A prompt's cache copied for each continuation (``copy.deepcopy``, transformers' prompt-reuse
    recipe): each copy continues as the original would."""
    import copy

    torch.manual_seed(3)
    ids = torch.randint(0, 128, (1, PROMPT))
    with apply_method(model, make("selfextend")):
        cache = new_cache(model, PROMPT + 4)
        model(ids, past_key_values=cache, use_cache=True)
        copied = copy.deepcopy(cache)
        steps = [
            model(torch.tensor([[t]]), past_key_values=c, use_cache=True).logits
            for c in (cache, copied)
            for t in (4, 5)
        ]
    assert copied.generation is not cache.generation and copied.generation.owner is cache.generation.owner
    assert torch.equal(steps[0], steps[2]) and torch.equal(steps[1], steps[3])


@pytest.mark.parametrize("name", CACHED_METHODS)
def test_a_decode_step_appends_contiguous_keys_to_a_foreign_cache(model, name, monkeypatch):
    """transformers' own cache appends with torch.cat, whose CUDA kernel copies the whole cache on a slow
    path when an input is strided (measured on an H100 at 128K: 0.82 ms a step and layer against 0.19)."""
    appended = []
    update = DynamicLayer.update

    def recording(self, keys, values, *args, **kwargs):
        if self.is_initialized:
            appended.append(keys.is_contiguous() and values.is_contiguous())
        return update(self, keys, values, *args, **kwargs)

    monkeypatch.setattr(DynamicLayer, "update", recording)
    decode(model, make(name), steps=3)  # the fallback: a DynamicCache made elsewhere
    assert appended and all(appended), name
