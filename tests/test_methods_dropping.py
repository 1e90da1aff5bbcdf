"""StreamingLLM and LM-Infinite against literal re-implementations of their official arithmetic.

* StreamingLLM: a token-by-token loop over a tiny model, as ``examples/eval_long_ppl.py`` runs it: one
  token per forward, keys cached un-rotated and rotated at their slot in the cache, the query at the
  cache length (``pos_shift/modify_llama.py``), the cache trimmed to sinks + recent after every token
  (``kv_cache.py``). Our single prefill pass must give the same logits for every token.
* LM-Infinite: one layer's scores as ``models/llama.py`` builds them (local scores from rotated queries
  and keys, global scores from the query rotated at the limit against the un-rotated key, one softmax).
"""

import random
import types

import pytest
import torch

from lampe_eval.attention import segmented_attention
from lampe_eval.attention.reference import relative_positions
from lampe_eval.attention.rope import apply_rope, rope_cos_sin
from lampe_eval.backends.hf.patch import apply_method
from lampe_eval.methods import create_method
from lampe_eval.testing import tiny_llama

from .helpers.methods import WINDOW, D, base

# --- StreamingLLM: the literal token-by-token loop ------------------------------------------------


def _pos_shift_forward(
    self, hidden_states, position_embeddings=None, attention_mask=None, past_key_values=None, **_
):
    """One decode step of ``llama_pos_shift_attention_forward``: un-rotated key cache, keys rotated at
    their cache slot, the query at its position id, plain softmax over the whole (trimmed) cache."""
    batch, n, _ = hidden_states.shape
    assert n == 1
    shape = (batch, n, -1, self.head_dim)
    query = self.q_proj(hidden_states).view(shape).transpose(1, 2)
    key = self.k_proj(hidden_states).view(shape).transpose(1, 2)
    value = self.v_proj(hidden_states).view(shape).transpose(1, 2)
    key, value = past_key_values.update(key, value, self.layer_idx)
    inv_freq = self._test_inv_freq
    slots = torch.arange(key.shape[2])
    query = apply_rope(query, torch.tensor([float(self._test_query_position)]), inv_freq)
    key = apply_rope(key, slots, inv_freq)
    key = key.repeat_interleave(query.shape[1] // key.shape[1], dim=1)
    value = value.repeat_interleave(query.shape[1] // value.shape[1], dim=1)
    probs = torch.softmax((query @ key.transpose(-1, -2)) * self.scaling, dim=-1)
    out = (probs @ value).transpose(1, 2).reshape(batch, n, -1)
    return self.o_proj(out), None


@torch.no_grad()
def streaming_reference_logits(model, ids: torch.Tensor, sinks: int, recent: int) -> torch.Tensor:
    from transformers import DynamicCache

    layers = [layer.self_attn for layer in model.model.layers]
    inv_freq = model.model.rotary_emb.inv_freq.float()
    for attn in layers:
        attn.forward = types.MethodType(_pos_shift_forward, attn)
        attn._test_inv_freq = inv_freq
    cache = DynamicCache(config=model.config)
    rows = []
    try:
        for idx in range(ids.shape[1]):
            position = cache.get_seq_length()  # HF: past_key_values_length, the trimmed cache length
            for attn in layers:
                attn._test_query_position = position
            out = model(ids[:, idx : idx + 1], past_key_values=cache, use_cache=True)
            rows.append(out.logits[:, -1])
            for layer in cache.layers:  # StartRecentKVCache.__call__
                if layer.keys.shape[2] > sinks + recent:
                    keep = lambda t: torch.cat([t[:, :, :sinks], t[:, :, t.shape[2] - recent :]], dim=2)  # noqa: E731
                    layer.keys, layer.values = keep(layer.keys), keep(layer.values)
    finally:
        for attn in layers:
            del attn.forward, attn._test_inv_freq, attn._test_query_position
    return torch.stack(rows, dim=1)


@pytest.fixture(scope="module")
def model():
    return tiny_llama(window=WINDOW, layers=2, heads=4, kv_heads=2, head_dim=16, seed=3)


@pytest.mark.parametrize("sinks,recent", [(4, 20), (1, 7), (0, 12), (3, 0)])
@torch.no_grad()
def test_streamingllm_prefill_equals_the_official_token_by_token_loop(model, sinks, recent):
    torch.manual_seed(sinks * 100 + recent)
    ids = torch.randint(0, 128, (1, 70))
    reference = streaming_reference_logits(model, ids, sinks, recent)
    with apply_method(model, create_method("streamingllm", WINDOW, None, sinks=sinks, recent=recent)):
        ours = model(ids).logits
        # and generation continues the same rule: decode the last token on a cache of the others
        past = model(ids[:, :-1], use_cache=True).past_key_values
        step = model(ids[:, -1:], past_key_values=past, use_cache=True).logits[:, -1]
    assert (ours - reference).abs().max() < 1e-4
    assert (step - reference[:, -1]).abs().max() < 1e-4


def test_streamingllm_positions_follow_the_cache_slots():
    """PE = min(i, S + R) - j for sinks past the window of recent keys, the true distance otherwise."""
    sinks, recent, length = 3, 10, 40
    method = create_method("streamingllm", WINDOW, None, sinks=sinks, recent=recent)
    pe, owner = relative_positions(method.plan(base(), length, length), 0, length, length)
    for i in range(length):
        for j in range(i + 1):
            if i - j <= recent:
                assert pe[i, j] == i - j
            elif j < sinks:
                assert pe[i, j] == min(i, sinks + recent) - j
            else:
                assert owner[i, j] == -1  # evicted
    assert pe[owner >= 0].max() == sinks + recent  # the largest position: the window's last slot


# --- LM-Infinite: the official Λ-shaped scores ----------------------------------------------------


def lm_infinite_reference(q, k, v, n_local, n_global, limit, inv_freq, scale):
    """``limited_distance_forward`` with ``use_lambda_mask``: rotated local scores for d < n_local,
    stationary global scores (query rotated at the limit, key un-rotated) for j < n_global beyond."""
    n = q.shape[2]
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    positions = torch.arange(n).float()
    rot = (apply_rope(q, positions, inv_freq) @ apply_rope(k, positions, inv_freq).transpose(-1, -2)) * scale
    cos, sin = rope_cos_sin(torch.tensor([float(limit)]), inv_freq, 1.0, q.dtype)
    stationary_q = q * cos + torch.cat((-q[..., D // 2 :], q[..., : D // 2]), dim=-1) * sin
    stationary = (stationary_q @ k.transpose(-1, -2)) * scale
    d = torch.arange(n)[:, None] - torch.arange(n)[None, :]
    local = (d >= 0) & (d <= n_local - 1)
    glob = (d >= n_local) & (torch.arange(n)[None, :] < n_global)
    scores = torch.where(local, rot, torch.where(glob, stationary, torch.tensor(float("-inf"))))
    return torch.softmax(scores, dim=-1) @ v


def test_lm_infinite_equals_the_official_lambda_attention():
    rng = random.Random(5)
    b = base()
    for length in (30, 150, 260):
        for _ in range(3):
            n_local = rng.randint(1, 80)
            n_global, limit = rng.randint(0, 20), rng.randint(1, n_local)
            method = create_method(
                "lm_infinite", WINDOW, None, n_local=n_local, n_global=n_global, limit_distance=limit
            )
            q = torch.randn(1, 6, length, D)
            k, v = torch.randn(1, 2, length, D), torch.randn(1, 2, length, D)
            ours = segmented_attention(q, k, v, method.plan(b, length, length), 0, D**-0.5)
            ref = lm_infinite_reference(q, k, v, n_local, n_global, limit, b.inv_freq, D**-0.5)
            assert (ours - ref).abs().max() < 1e-4, method.label()


def test_lm_infinite_defaults_follow_the_official_settings():
    method = create_method("lm_infinite", 4096, 32768)
    # README: --local_branch 4096 --global_branch 10 --limit_distance 4096 for Llama-2 (4K window)
    assert (method.n_local, method.n_global, method.limit_distance) == (4096, 10, 4096)
