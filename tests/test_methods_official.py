"""``variant=official`` against the official codes' arithmetic, transcribed here independently.

Each ``official_*`` function below re-states, in numpy, the index computations of one official file
(read, not copied; the commit is the one read):

* LaMPE: ``scar-on/LaMPE`` @ 4e3c91f, ``llama_cache1.py`` (``map_ids``, ``find_chunk_last_index``,
  ``forward``: prefill's three flash passes, the decode branch, the ``prefill_len < 2*head`` fallback;
  ``remap_uselen`` for the fits). The file is unchanged since 34331cf.
* SelfExtend: ``datamllab/LongLM`` @ cdbbb06, ``self_extend_patch/Llama.py`` (``self_extend_forward``, the
  eager path ``SelfExtend.apply`` installs by default; prefill and the ``q_len == 1`` decode).
* STRING: ``HKUNLP/STRING`` @ 216cc2f, ``string_for_llama.py`` (``forward``, ``string_flash_forward``).
* DCA: ``HKUNLP/ChunkLlama`` @ 2add4d7, ``chunkllama_attn_replace.py`` (``ChunkLlamaRotaryEmbedding`` tables,
  ``forward``, ``replace_with_chunkllama``).

A query row is described as the multiset of (key, relative position) terms of its softmax: one per flash
pass (or score block) that covers the key. The method's segments must give the same multiset. flash-attn
``window_size=(left, right)`` with ``causal=True`` and equal query/key lengths lets row r see keys
[r - left, r]; a pass over "the last n queries and the first n keys" therefore covers d >= l - n.
"""

from __future__ import annotations

import math
import random
from functools import partial

import numpy as np
import pytest
import torch

from lampe_eval.attention import segmented_attention
from lampe_eval.attention.reference import check_coverage, oracle_attention, segment_pairs
from lampe_eval.errors import LampeEvalError
from lampe_eval.methods import create_method

from .helpers.methods import D, base

Terms = list[tuple[np.ndarray, np.ndarray]]  # per pass: (keys, relative positions) of one query row


# --- the official arithmetic ---------------------------------------------------------------------------


def official_map_ids(l: int, U: int, count: int | None = None) -> np.ndarray:
    """map_ids(position_ids, 0, U): floor(0 + (U - 0) / (x_max - x_min) * (X - x_min)). Torch evaluates
    ``U / tensor`` as ``tensor.reciprocal() * U`` (torch/_tensor.py ``__rdiv__``): all in float32."""
    count = l if count is None else count
    if l == 1:
        return np.zeros(count, dtype=np.int64)
    ratio = np.float32(1) / np.float32(l - 1) * np.float32(U)
    return np.floor(ratio * np.arange(count, dtype=np.float32)).astype(np.int64)


def official_tail(ids: np.ndarray, tail: int) -> int:
    """find_chunk_last_index(mapping_ids, tail)."""
    while tail + 1 < ids.shape[0] and ids[tail] == ids[tail + 1]:
        tail += 1
    return tail


def official_biases(l: int, U: int, head: int, tail: int) -> tuple[np.ndarray, int, int, int]:
    ids = official_map_ids(l, U)
    re_size_2 = official_tail(ids, tail)
    bias_1 = head - (ids[head] + 1) if l > head else 0
    bias_2 = (l - 1 - re_size_2) - ids[l - 1 - re_size_2] - bias_1 if l > head else 0
    return ids, re_size_2, int(bias_1), int(bias_2)


def official_lampe_prefill_row(i: int, l: int, U: int, head: int, tail: int) -> Terms:
    if l < 2 * head:  # "prefill_len < 2*head": one plain causal pass
        keys = np.arange(i + 1)
        return [(keys, i - keys)]
    ids, re_size_2, bias_1, bias_2 = official_biases(l, U, head, tail)
    terms: Terms = []
    keys = np.arange(max(0, i - head), i + 1)  # head pass: causal, window [head, 0]
    terms.append((keys, i - keys))
    front_pos = (
        l - head
    )  # map pass: last front_pos queries x first front_pos keys, window [front_pos - re_size_2, 0]
    if i >= head:
        r = i - head
        keys = np.arange(max(0, r - (front_pos - re_size_2)), r + 1)
        terms.append((keys, (ids[i] + bias_1) - ids[keys]))
    if i >= l - re_size_2:  # tail pass: last re_size_2 queries x first re_size_2 keys, causal
        keys = np.arange(i - (l - re_size_2) + 1)
        terms.append((keys, (i - bias_2) - keys))
    return terms


def official_lampe_decode_row(prefill_len: int, step: int, U: int, head: int, tail: int) -> Terms:
    """Decode step ``step`` >= 1: query i = prefill_len + step - 1 over prefill_len + step keys."""
    kv = prefill_len + step
    i = kv - 1
    if prefill_len < 2 * head:
        keys = np.arange(kv)
        return [(keys, i - keys)]
    ids, re_size_2, bias_1, bias_2 = official_biases(prefill_len, U, head, tail)
    decode_len = kv - prefill_len
    map_len = prefill_len - head - re_size_2
    head_keys = np.arange(kv - head, kv)
    map_keys = np.arange(re_size_2 + decode_len, re_size_2 + decode_len + map_len)
    assert map_keys[-1] < prefill_len, "past this step the official position table runs out"
    tail_keys = np.arange(decode_len + re_size_2)
    return [
        (head_keys, i - head_keys),
        (map_keys, (ids[prefill_len - 1] + bias_1) - ids[map_keys]),  # the query pinned at the last id
        (tail_keys, (i - bias_2) - tail_keys),
    ]


def official_remap_uselen(ctx_len: int, model_name: str) -> int:
    fits = {
        "llama2": (8.673006440952035e-05, -0.648012322406978, 2489.1055552214357),
        "llama3": (0.00010493097327094324, -2.466638011138158, 6204.409324666837),
        "llama3.1": (4.505261149632588e-05, -2.788576860718702, 82358.52413056031),
    }
    if model_name != "llama3.1" and ctx_len < 8192:
        return 1536
    a, b, L = fits[model_name]
    return int(L / (1 + np.exp(-(a * ctx_len + b))))


def official_selfextend_row(i: int, G: int, w: int) -> Terms:
    """Llama.py: neighbour where d < w (the tril minus the group tril shifted by w; in decode the last w
    keys), group elsewhere at q = i // G + w - w / G (a long tensor minus a Python float: float32),
    k = j // G."""
    keys = np.arange(i + 1)
    near = i - keys < w
    shift = 0 if i < w else w  # _re_group_size_2 (only rows with no group key have i < w)
    group_q = np.float32(i // G + shift) - np.float32(shift / G)
    return [
        (keys[near], (i - keys[near]).astype(np.float64)),
        (keys[~near], np.float64(group_q) - (keys[~near] // G)),
    ]


def official_string_row(i: int, kv: int, S: int, W: int, prefill: bool) -> Terms:
    if prefill:  # diag pass window [S, 0]; shifted pass: last l - S queries x first l - S keys, causal
        near = np.arange(max(0, i - S), i + 1)
        far = np.arange(i - S + 1) if i >= S else np.arange(0)
    else:  # flash decoding over the last S keys and over keys [0, kv - S)
        near = np.arange(kv - S, kv)
        far = np.arange(kv - S)
    return [(near, i - near), (far, (i - S + W) - far)]


def official_dca_row(i: int, pretraining_length: int, local_window_size: int | None = None) -> Terms:
    chunk_size = pretraining_length * 3 // 4  # replace_with_chunkllama(pretraining_length, local_window_size)
    local_window = local_window_size if local_window_size else pretraining_length // 8
    chunk_len = chunk_size - local_window
    q_t = np.arange(chunk_len)
    qc_t = np.minimum(np.arange(chunk_len) + chunk_len, chunk_size)
    begin = i // chunk_len * chunk_len
    pid = i % chunk_len
    intra = np.arange(begin, i + 1)
    terms = [(intra, q_t[pid] - intra % chunk_len)]
    if begin >= chunk_len:
        succ = np.arange(begin - chunk_len, begin)
        terms.append((succ, qc_t[pid] - succ % chunk_len))
    if begin - chunk_len > 0:
        inter = np.arange(begin - chunk_len)
        terms.append((inter, qc_t[chunk_len - 1] - inter % chunk_len))
    return terms


# --- comparing multisets of terms ------------------------------------------------------------------------


def as_table(terms: Terms, kv: int, width: int = 3) -> np.ndarray:
    """[kv, width]: the relative positions of each key's terms, sorted, NaN-padded."""
    table = np.full((kv, width), np.nan)
    filled = np.zeros(kv, dtype=np.int64)
    for keys, pe in terms:
        table[keys, filled[keys]] = pe
        filled[keys] += 1
    return np.sort(table, axis=1)


def method_row(method, context: int, kv: int, i: int) -> Terms:
    plan = method.plan(base(), context, kv)
    terms: Terms = []
    for mask, pe in segment_pairs(plan, i, 1, kv):
        keys = mask[0].nonzero()[:, 0].numpy()
        terms.append((keys, pe[0, keys].numpy()))
    return terms


def assert_same_rows(method, official, context: int, kv: int, rows) -> None:
    for i in rows:
        ours, theirs = as_table(method_row(method, context, kv, i), kv), as_table(official(i), kv)
        assert np.array_equal(ours, theirs, equal_nan=True), (method.label(), context, kv, i)


def lampe_official(window: int, **params):
    return create_method("lampe", window, None, variant="official", identity_within_window=False, **params)


# --- LaMPE ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("length", [37, 64, 200, 1000])
def test_lampe_official_prefill_matrix(length):
    rng = random.Random(length)
    for _ in range(4):
        s1 = rng.randint(1, length // 3)
        s2 = rng.randint(1, length // 4)
        U = rng.randint(s1 + 1, length + 20)
        method = lampe_official(96, s1=s1, s2=s2, U=U)
        try:
            official_biases(length, U, s1, s2)
            rows = range(length) if length <= 200 else sorted(rng.sample(range(length), 60))
            assert_same_rows(
                method,
                partial(official_lampe_prefill_row, l=length, U=U, head=s1, tail=s2),
                length,
                length,
                rows,
            )
        except LampeEvalError as err:  # a snapped tail past the head: the official merge is undefined
            assert "undefined" in str(err)


@pytest.mark.parametrize(
    "fit, window, s1, s2, lengths",
    [
        ("llama3", 8192, 512, 200, [8192, 16384, 32768, 65536]),
        ("llama2", 4096, 512, 200, [4096, 8192, 25600]),
        ("llama3.1", 131072, 8192, 1024, [131072]),
    ],
)
def test_lampe_official_rows_at_long_lengths_with_the_official_fits(fit, window, s1, s2, lengths):
    for length in lengths:
        U = official_remap_uselen(length, fit)
        method = lampe_official(window, s1=s1, s2=s2, U=U)
        _, tail, _, _ = official_biases(length, U, s1, s2)
        rows = [s1, s1 + 1, 2 * s1, length - tail - 1, length - tail, length - 2, length - 1]
        assert_same_rows(
            method, partial(official_lampe_prefill_row, l=length, U=U, head=s1, tail=s2), length, length, rows
        )


def test_lampe_official_fits_become_use_lengths_with_the_official_sigmoid():
    from lampe_eval.method_configs import load_method_params
    from lampe_eval.methods.lampe import LLAMA3_U_FIT

    method = create_method("lampe", 8192, None, variant="official", s1=512, s2=200)
    assert (method.U_L, method.U_a, method.U_b) == (LLAMA3_U_FIT["L"], LLAMA3_U_FIT["a"], LLAMA3_U_FIT["b"])
    for length in (8192, 16384, 24576, 32768, 40960, 65536):
        assert method.use_length_for(length) == official_remap_uselen(length, "llama3")
    for model, fit in [
        ("llama2-7b-chat", "llama2"),
        ("llama3-8b-instruct", "llama3"),
        ("llama3.1-8b-instruct", "llama3.1"),
    ]:
        params = load_method_params("lampe", model, None, "pg19")  # the configs carry the official fits
        method = create_method("lampe", 8192, None, variant="official", **params)
        for length in (4096, 8191, 8192, 12000, 25600, 65536, 131072):
            assert method.use_length_for(length) == official_remap_uselen(length, fit), (model, length)


def test_lampe_official_facts_of_the_independent_check():
    """Issue 17: at 32K (U = 4501) the tail 200 snaps to 203; the largest position + 1 is 1663 at 8K
    (U = 1036) and 5118 at 32K, where the old config's m was 1658 and 5115."""
    from lampe_eval.methods.lampe import OfficialLayout, m_from_U

    assert OfficialLayout.build(32768, 4501, 512, 200).tail == 203
    assert m_from_U(8192, 1036, 512, 200) == 1663
    assert m_from_U(32768, 4501, 512, 200) == 5118
    for length, U in [(8192, 1036), (32768, 4501), (65536, 6129)]:
        largest = max(pe.max() for _, pe in official_lampe_prefill_row(length - 1, length, U, 512, 200))
        assert m_from_U(length, U, 512, 200) == largest + 1


def test_lampe_official_decode_rows():
    for prompt, U, s1, s2 in [(150, 40, 12, 5), (300, 77, 20, 9), (9000, 1036, 512, 200)]:
        method = lampe_official(96, s1=s1, s2=s2, U=U)
        for step in (1, 2, s1 // 2, s1):  # the official table covers up to s1 generated tokens
            kv = prompt + step
            official = official_lampe_decode_row(prompt, step, U, s1, s2)
            assert_same_rows(method, lambda _row, terms=official: terms, prompt, kv, [kv - 1])
        # past s1 new tokens the official code's table runs out; we extend mapping_ids by its formula
        kv = prompt + s1 + 3
        (keys, pe), ids = method_row(method, prompt, kv, kv - 1)[1], official_map_ids(prompt, U, kv)
        _, _, bias_1, _ = official_biases(prompt, U, s1, s2)
        assert np.array_equal(pe, (ids[prompt - 1] + bias_1) - ids[keys])


def test_lampe_official_falls_back_to_plain_attention_below_twice_the_head():
    method = lampe_official(96, s1=60, s2=4, U=30)
    assert_same_rows(
        method, partial(official_lampe_prefill_row, l=110, U=30, head=60, tail=4), 110, 110, range(110)
    )
    assert_same_rows(method, lambda i: official_lampe_decode_row(110, 3, 30, 60, 4), 110, 113, [112])


# --- SelfExtend, STRING, DCA ------------------------------------------------------------------------


@pytest.mark.parametrize("G, w", [(3, 10), (7, 24), (4, 16), (21, 2048)])
def test_selfextend_official_float_offset(G, w):
    method = create_method("selfextend", 96, None, variant="official", group_size=G, window=w)
    length = 200 if w < 100 else 9000
    rows = range(length) if length <= 200 else [w - 1, w, w + 1, 4000, length - 1]
    official = partial(official_selfextend_row, G=G, w=w)
    assert_same_rows(method, official, length, length, rows)
    assert_same_rows(method, official, length - 1, length, [length - 1])  # decode: the same formula


@pytest.mark.parametrize("length", [37, 150, 8192])
def test_string_official_counts_the_shift_diagonal_twice_in_prefill(length):
    S, W = (30, 6) if length < 1000 else (2703, 128)
    method = create_method("string", 8192, None, variant="official", shift=S, local=W)
    rows = range(length) if length < 1000 else [S - 1, S, S + 1, length - 1]
    official = partial(official_string_row, kv=length, S=S, W=W, prefill=True)
    assert_same_rows(method, official, length, length, rows)
    if length > S:  # decode partitions exactly (below S keys its slice of the cache is not defined)
        official = partial(official_string_row, kv=length, S=S, W=W, prefill=False)
        assert_same_rows(method, official, length - 1, length, [length - 1])


@pytest.mark.parametrize("window, length", [(96, 300), (64, 150), (8192, 20000)])
def test_dca_official_tables(window, length):
    method = create_method("dca", window, None, variant="official")
    rows = range(length) if length <= 300 else [0, 5119, 5120, 10239, 10240, 15000, length - 1]
    official = partial(official_dca_row, pretraining_length=window)
    assert_same_rows(method, official, length, length, rows)
    assert_same_rows(method, official, length - 1, length, [length - 1])


def test_dca_official_inter_chunk_query_reads_the_successive_table():
    """With a wide local window (CS > 2 (CS - LW) - 1) the official inter-chunk query sits at
    qc_t[chunk_len - 1] = 2 chunk_len - 1, below CS."""
    method = create_method(
        "dca", 96, None, variant="official", chunk_size=32, local_window=41, max_position=72
    )
    official = partial(official_dca_row, pretraining_length=96, local_window_size=40)
    assert_same_rows(method, official, 200, 200, range(200))
    paper = create_method("dca", 96, None, chunk_size=32, local_window=32, max_position=72)
    assert paper.largest_position(base(), 200) == 72 > method.largest_position(base(), 200) == 63


def test_dca_official_defaults_and_its_constraint():
    method = create_method("dca", 8192, None, variant="official")
    assert (method.chunk_size, method.local_window, method.max_position) == (5120, 1025, 6144)
    # one size given: the others follow the tables' tie max_position = chunk_size + local_window - 1
    alone = create_method("dca", 8192, None, variant="official", max_position=7000)
    assert (alone.chunk_size, alone.local_window, alone.max_position) == (5976, 1025, 7000)
    with pytest.raises(LampeEvalError, match="variant=official"):
        create_method(
            "dca", 8192, None, variant="official", chunk_size=5120, local_window=1025, max_position=7000
        )
    with pytest.raises(LampeEvalError, match="variant must be one of"):
        create_method("string", 8192, None, variant="offical")


class OfficialChunkLlama:
    """``chunkllama_attn_replace.py``'s ``forward`` for a tiny Llama, densely, with its own KV cache:
    ``ChunkLlamaRotaryEmbedding`` rebuilds its tables (x get_mscale(kv / L)) whenever the cached length
    passes the longest seen so far, the keys are rotated with the current table and cached rotated (so a
    key keeps the factor of the step that cached it), the queries use the current table. Prefill: the
    intra / successive / inter passes merged in fp32 (one softmax over their disjoint terms); decode: one
    softmax over the three score blocks. ``keys_keep_their_scale=False``: every key at the current factor
    (what this package did before), to show that the comparison can fail."""

    def __init__(self, model, window: int, cs: int, lw: int, keys_keep_their_scale: bool = True):
        self.window, self.cs, self.lw = window, cs, lw
        self.keep = keys_keep_their_scale
        self.max_seq_len = window  # max_position_embeddings: the first tables have scale 1
        self.scale = 1.0
        self.cache: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        self.inv_freq = model.model.rotary_emb.inv_freq.float()

    def tables(self, kv: int) -> float:
        if kv > self.max_seq_len:  # _set_cos_sin_cache(seq_len=kv): get_mscale(kv / L)
            ratio = kv / self.window
            self.scale = 0.05 * math.log(ratio) + 1.0 if ratio > 1 else 1.0
            self.max_seq_len = kv
        return self.scale

    def rotate(self, x: torch.Tensor, positions: torch.Tensor, scale: float) -> torch.Tensor:
        freqs = torch.outer(positions.float(), self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos() * scale, emb.sin() * scale
        half = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin

    def forward(self, layer, hidden_states, *args, **kwargs):
        bsz, n, _ = hidden_states.shape
        shape = (bsz, n, -1, layer.head_dim)
        q = layer.q_proj(hidden_states).view(shape).transpose(1, 2)
        k = layer.k_proj(hidden_states).view(shape).transpose(1, 2)
        v = layer.v_proj(hidden_states).view(shape).transpose(1, 2)
        past = self.cache.get(layer.layer_idx)
        start = 0 if past is None else past[0].shape[2]
        kv = start + n
        if layer.layer_idx == 0:
            self.tables(kv)
        scale, cl = self.scale, self.cs - self.lw
        idx, keys = torch.arange(start, kv), torch.arange(kv)
        k = self.rotate(k, idx % cl, scale)  # k_t = j mod chunk_len, rotated before caching
        raw = k if past is None else torch.cat([past[0], k], dim=2)
        key_scales = (
            torch.full((n,), scale) if past is None else torch.cat([past[2], torch.full((n,), scale)])
        )
        v = v if past is None else torch.cat([past[1], v], dim=2)
        self.cache[layer.layer_idx] = (raw, v, key_scales)
        k_all = raw if self.keep else raw / key_scales[:, None] * scale
        q_t = torch.arange(cl)
        qc_t = (torch.arange(cl) + cl).clamp(max=self.cs)
        pid = idx % cl
        group = layer.num_key_value_groups
        k_all, v_all = k_all.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        scores = []
        for positions in (q_t[pid], qc_t[pid], qc_t[cl - 1].expand(n)):
            q_rot = self.rotate(q, positions, scale)
            scores.append(q_rot @ k_all.transpose(2, 3) / math.sqrt(layer.head_dim))
        chunk_q, chunk_k = (idx // cl)[:, None], (keys // cl)[None, :]
        intra = (chunk_q == chunk_k) & (keys[None, :] <= idx[:, None])
        succ, inter = chunk_k == chunk_q - 1, chunk_k < chunk_q - 1
        logits = torch.full_like(scores[0], float("-inf"))
        for mask, score in zip((intra, succ, inter), scores, strict=True):
            logits = torch.where(mask, score, logits)
        out = torch.softmax(logits.float(), dim=-1) @ v_all
        return layer.o_proj(out.transpose(1, 2).reshape(bsz, n, -1)), None


@torch.no_grad()
def official_chunkllama_logits(model, tokens: torch.Tensor, prompt: int, **kwargs) -> torch.Tensor:
    """The official code's logits for a prefill of ``tokens[:, :prompt]`` and then one token per step."""
    import types

    from lampe_eval.backends.hf.patch import attention_layers

    official = OfficialChunkLlama(model, **kwargs)
    layers = attention_layers(model)
    for layer in layers:
        layer.forward = types.MethodType(official.forward, layer)
    try:
        logits = [model(tokens[:, :prompt], use_cache=False).logits[:, -1]]
        for step in range(prompt, tokens.shape[1] - 1):
            logits.append(model(tokens[:, step : step + 1], use_cache=False).logits[:, -1])
    finally:
        for layer in layers:
            del layer.forward
    return torch.stack(logits)


def test_dca_official_decode_keeps_each_cached_key_at_the_factor_of_its_step():
    """variant=official generates as chunkllama_attn_replace.py does: prompt 100 tokens past a 64-token
    window, then 24 steps, each caching its key at its own factor 0.05 ln(kv / 64) + 1."""
    from lampe_eval.backends.hf.patch import apply_method, attention_layers, new_cache
    from lampe_eval.testing import tiny_llama

    window, prompt, steps = 64, 100, 24
    cs, lw = 48, 8  # replace_with_chunkllama(64): CS = 3/4 x 64, LW = 64 // 8
    model = tiny_llama(window=window, layers=2, heads=4, kv_heads=2, head_dim=16)
    with torch.no_grad():  # sharper attention: the factors' effect well above float32 noise
        for layer in attention_layers(model):
            layer.q_proj.weight.mul_(4.0)
    method = create_method("dca", window, None, variant="official")
    assert (method.chunk_size, method.local_window, method.max_position) == (cs - lw, lw + 1, cs)
    torch.manual_seed(5)
    tokens = torch.randint(0, 128, (1, prompt))
    ours = []
    with torch.no_grad(), apply_method(model, method):
        cache = new_cache(model, prompt + steps)
        logits = model(tokens, past_key_values=cache, use_cache=True).logits[:, -1]
        for _ in range(steps):
            ours.append(logits)
            token = logits.argmax(-1, keepdim=True)
            tokens = torch.cat([tokens, token], dim=1)
            logits = model(token, past_key_values=cache, use_cache=True).logits[:, -1]
    ours_logits = torch.stack(ours)
    official = official_chunkllama_logits(model, tokens, prompt, window=window, cs=cs, lw=lw)
    assert (ours_logits - official).abs().max() < 1e-5
    same_factor = official_chunkllama_logits(
        model, tokens, prompt, window=window, cs=cs, lw=lw, keys_keep_their_scale=False
    )
    assert (ours_logits[0] - same_factor[0]).abs().max() < 1e-5  # the prefill: one factor for all
    assert (ours_logits - same_factor).abs().max() > 5e-5  # the decode: the factors differ


# --- DPE -----------------------------------------------------------------------------------------------


def official_dpe_pe(i: int, kv: int, w: int, factors, groups, prefill: bool) -> tuple[np.ndarray, np.ndarray]:
    """dpe_for_llama.py: (keys, PE [keys, F]) of query i. Prefill (``atten_merge_forward``): a flash pass
    with window [w - 1, 0] at true positions, and one of the last kv - w queries over the first kv - w
    keys (causal) at query positions i // s + w - w / s (a long tensor minus a Python float: float32) and
    key positions j // s, per dimension group (``concat_tensors``). Decode: keys rotated by minus their
    relative position, i // s - j // s + (w - w // s) for all but the last w keys, true for those."""
    per_freq = np.concatenate(
        [np.full(b - a, f) for f, a, b in zip(factors, groups, groups[1:], strict=False)]
    )
    keys = np.arange(i + 1)
    d = (i - keys).astype(np.float64)
    pe = np.repeat(d[:, None], per_freq.size, axis=1)
    far = keys[: max(0, kv - w)] if not prefill else keys[: max(0, i - w + 1)]
    if far.size:
        if prefill:
            q = (np.float32(1) * (i // per_freq + w)).astype(np.float32) - (w / per_freq).astype(np.float32)
        else:
            q = (i // per_freq + (w - w // per_freq)).astype(np.float64)
        pe[far] = q[None, :].astype(np.float64) - (far[:, None] // per_freq)
    return keys, pe


@pytest.mark.parametrize(
    "w, factors, groups", [(10, (3, 4), (0, 5, 8)), (16, (2, 8, 2, 8), None), (7, (1, 5), (0, 1, 8))]
)
def test_dpe_official_positions(w, factors, groups):
    method = create_method(
        "dpe", 96, None, variant="official", window=w, scale_factors=factors, dimension_groups=groups or ()
    )
    groups = groups or tuple(range(0, 9, 8 // len(factors)))
    length = 150
    for context, kv, rows, prefill in [
        (length, length, range(length), True),
        (length - 1, length, [length - 1], False),
    ]:
        pairs = segment_pairs(method.plan(base(), context, kv), rows[0], len(rows), kv)
        for r, i in enumerate(rows):
            keys, pe = official_dpe_pe(i, kv, w, factors, groups, prefill)
            ours = np.zeros((kv, 8))
            covered = np.zeros(kv, dtype=np.int64)
            for mask, rel in pairs:
                m = mask[r].numpy()
                covered += m
                ours[m] = (
                    rel[r].numpy().reshape(kv, -1, 8)[m, 0] if rel.dim() > 2 else rel[r].numpy()[m, None]
                )
            assert (covered[keys] == 1).all() and covered[i + 1 :].sum() == 0
            assert np.array_equal(ours[keys], pe), (i, prefill)


# --- Ms-PoE ----------------------------------------------------------------------------------------------


@torch.no_grad()
def test_ms_poe_generates_as_the_official_attention():
    """utils/modify_arch/llama.py (MsPoELlamaAttention, head_type "normal") transcribed densely: per-head
    cos/sin tables of t / r_k, reordered by head_order, the keys of key head g at the ratio of query head
    g x groups (sample_rotary_emb), keys cached rotated; layers 0 and 1 of 3 left alone (apply_layers)."""
    import types

    from lampe_eval.backends.hf.patch import apply_method, attention_layers, new_cache
    from lampe_eval.testing import tiny_llama

    model = tiny_llama(window=64, layers=3, heads=4, kv_heads=2, head_dim=16)
    for layer in attention_layers(model):
        layer.q_proj.weight.mul_(4.0)
    method = create_method("ms_poe", 64, None, min_ratio=1.2, max_ratio=1.8)
    torch.manual_seed(2)
    tokens = torch.randint(0, 128, (1, 40))
    ours = []
    with apply_method(model, method):
        cache = new_cache(model, 60)
        logits = model(tokens, past_key_values=cache, use_cache=True).logits[:, -1]
        for _ in range(20):
            ours.append(logits)
            tokens = torch.cat([tokens, logits.argmax(-1, keepdim=True)], dim=1)
            logits = model(tokens[:, -1:], past_key_values=cache, use_cache=True).logits[:, -1]
    inv_freq = model.model.rotary_emb.inv_freq.float()
    heads, groups = 4, 2
    ratio = 1.2 + (1.8 - 1.2) * (torch.arange(heads, dtype=torch.float32) / heads)
    order = heads - torch.arange(heads) - 1  # _calculate_outlier with head_type "normal"
    store: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def rotate(x, positions, ratios):  # x [1, h, n, D]; cos_cached[head_order][:, position_ids]
        t = positions.float()[None, :] / ratios[:, None]
        freqs = torch.einsum("ki,j->kij", t, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        half = x.shape[-1] // 2
        return x * emb.cos() + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * emb.sin()

    def official(layer, hidden_states, *args, **kwargs):
        bsz, n, _ = hidden_states.shape
        shape = (bsz, n, -1, layer.head_dim)
        q = layer.q_proj(hidden_states).view(shape).transpose(1, 2)
        k = layer.k_proj(hidden_states).view(shape).transpose(1, 2)
        v = layer.v_proj(hidden_states).view(shape).transpose(1, 2)
        past = store.get(layer.layer_idx)
        start = 0 if past is None else past[0].shape[2]
        idx = torch.arange(start, start + n)
        q_ratio = ratio[order]
        q = rotate(q, idx, q_ratio)
        k = rotate(k, idx, q_ratio[::groups])
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        store[layer.layer_idx] = (k, v)
        scores = q @ k.repeat_interleave(groups, 1).transpose(2, 3) / math.sqrt(layer.head_dim)
        mask = torch.arange(start + n)[None, :] > idx[:, None]
        probs = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
        out = probs @ v.repeat_interleave(groups, 1)
        return layer.o_proj(out.transpose(1, 2).reshape(bsz, n, -1)), None

    layers = attention_layers(model)
    plain = [model(tokens[:, :40]).logits[:, -1]]  # layers 0, 1 at plain RoPE: the model's own
    for layer in layers[2:]:
        layer.forward = types.MethodType(official, layer)
    try:
        cache = new_cache(model, 60)
        theirs = [model(tokens[:, :40], past_key_values=cache, use_cache=True).logits[:, -1]]
        for step in range(40, 59):
            theirs.append(
                model(tokens[:, step : step + 1], past_key_values=cache, use_cache=True).logits[:, -1]
            )
    finally:
        for layer in layers[2:]:
            del layer.forward
    assert (torch.stack(ours) - torch.stack(theirs)).abs().max() < 1e-5
    assert (ours[0] - plain[0]).abs().max() > 1e-3  # the patched layer changes the output


# --- the engine and the oracle with declared overlaps ----------------------------------------------------


def official_methods(rng: random.Random):
    s1, s2 = rng.randint(1, 20), rng.randint(1, 12)
    yield create_method(
        "lampe", 96, None, variant="official", s1=s1, s2=s2, U=rng.randint(s1 + 2, 90),
        identity_within_window=False, mscale=rng.choice([1.0, 1.0693]),
    )  # fmt: skip
    yield create_method("selfextend", 96, None, variant="official", group_size=rng.randint(2, 9), window=17)
    shift = rng.randint(2, 70)
    yield create_method("string", 96, None, variant="official", shift=shift, local=rng.randint(0, shift - 1))


@pytest.mark.parametrize("length", [5, 90, 260])
def test_official_variants_fast_path_equals_the_oracle_counting_doubled_pairs_twice(length):
    rng = random.Random(length)
    b = base()
    for method in official_methods(rng):
        for context, q_start in [(length, 0), (length - 1, length - 1)]:  # prefill, one decode step
            plan = method.plan(b, context, length)
            counts = method.pair_counts(b, context, length, torch.arange(q_start, length), length)
            check_coverage(plan, q_start, length - q_start, length, counts)
            q = torch.randn(1, 6, length - q_start, D)
            k, v = torch.randn(1, 2, length, D), torch.randn(1, 2, length, D)
            fast = segmented_attention(q, k, v, plan, q_start, D**-0.5, block=64)
            ref = oracle_attention(q, k, v, plan, q_start, D**-0.5, counts=counts)
            assert (fast - ref).abs().max() <= 1e-4, method.label()


def test_the_oracle_refuses_an_undeclared_or_miscounted_overlap():
    method = create_method("string", 96, None, variant="official", shift=10, local=3)
    plan = method.plan(base(), 40, 40)
    q, k = torch.randn(1, 2, 40, D), torch.randn(1, 2, 40, D)
    with pytest.raises(AssertionError, match="no overlap was declared"):
        oracle_attention(q, k, k, plan, 0, 0.25)
    wrong = torch.ones(40, 40).tril().long()
    with pytest.raises(AssertionError, match="declared 1"):
        oracle_attention(q, k, k, plan, 0, 0.25, counts=wrong)


def test_a_pair_counted_twice_is_two_softmax_terms():
    """One query, two keys, the second covered by two segments at different positions: the oracle and the
    engine weigh it exp(s1) + exp(s2) against the first key's exp(s0)."""
    from lampe_eval.attention import AttentionPlan, Band, Segment

    plan = AttentionPlan(
        [Segment("near", Band(0, 1)), Segment("far", Band(1), lambda i: (i + 5).float())], base().inv_freq
    )
    q, k, v = torch.randn(1, 1, 2, D), torch.randn(1, 1, 2, D), torch.randn(1, 1, 2, D)
    counts = torch.tensor([[1, 0], [2, 1]])
    ref = oracle_attention(q, k, v, plan, 0, 0.5, counts=counts)
    from lampe_eval.attention.rope import apply_rope

    def score(pos: float, j: int) -> torch.Tensor:
        return (apply_rope(q[0, 0, 1:2], torch.tensor([pos]), base().inv_freq) * k[0, 0, j]).sum() * 0.5

    s = torch.stack([score(0, 1), score(1, 0), score(6, 0)])  # key 1 at d=0; key 0 at d=1 and at d=6
    w = torch.softmax(s, 0)
    expected = w[0] * v[0, 0, 1] + (w[1] + w[2]) * v[0, 0, 0]
    assert torch.allclose(ref[0, 0, 1], expected, atol=1e-5)
    assert torch.allclose(segmented_attention(q, k, v, plan, 0, 0.5), ref, atol=1e-5)


# --- how much the variants differ -----------------------------------------------------------------------


def test_paper_and_official_lampe_share_the_largest_position_and_differ_by_a_few_positions():
    """With the same U the paper variant's m is the official largest position + 1; the rest of the
    matrix differs by a few positions (the snapped tail, bias_1 on early rows, float32 ids)."""
    from lampe_eval.attention.reference import relative_positions

    length, s1, s2, U = 1000, 64, 25, 300
    paper = create_method("lampe", 96, None, s1=s1, s2=s2, U=U, identity_within_window=False)
    official = lampe_official(96, s1=s1, s2=s2, U=U)
    assert paper.largest_position(base(), length) == official.largest_position(base(), length)
    pe, _ = relative_positions(paper.plan(base(), length, length), 0, length, length)
    theirs = as_table(official_lampe_prefill_row(length - 1, length, U, s1, s2), length)
    gap = np.nanmax(np.abs(theirs - pe[length - 1].numpy()[:, None]))
    assert 0 < gap <= 3
    assert math.isfinite(gap)


# --- method_configs -----------------------------------------------------------------------------------


def test_lampe_configs_state_the_mapping_they_produce():
    """Every "<N>K U <U> -> m <m>" in a LaMPE config's comments is what the config gives: the official U at
    that length (for some benchmark) and the paper variant's m converted from it."""
    import re
    from pathlib import Path

    from lampe_eval.method_configs import config_dir, load_method_params

    checked = 0
    for path in sorted(Path(config_dir()).glob("lampe-*.yaml")):
        model = path.stem.removeprefix("lampe-")
        comments = " ".join(line.split("#", 1)[1] for line in path.read_text().splitlines() if "#" in line)
        for size, U, m in re.findall(r"(\d+)K U (\d+) -> m (\d+)", " ".join(comments.split())):
            length = int(size) * 1024
            found = []
            for bench in (None, "pg19", "ruler", "infinitebench", "longbench", "leval"):
                params = load_method_params("lampe", model, length, bench)
                official = create_method("lampe", 8192, length, variant="official", **params)
                if official.use_length_for(length) == int(U):
                    paper = create_method("lampe", 8192, length, **params)
                    found.append(paper.mapping_length_for(length, 8192))
            assert found and int(m) in found, (path.name, size, U, m, found)
            checked += 1
    assert checked >= 19


@pytest.mark.parametrize("variant", ["paper", "official"])
def test_every_config_builds_for_both_variants(variant):
    from pathlib import Path

    from lampe_eval.method_configs import config_dir, load_method_params

    for path in sorted(Path(config_dir()).glob("*.yaml")):
        name, model = path.stem.split("-", 1)
        if name not in ("lampe", "selfextend", "string", "dca"):
            continue
        for length in (4096, 8192, 16384, 32768, 65536, 131072):
            for bench in (None, "pg19", "ruler", "infinitebench", "longbench", "leval"):
                params = {**load_method_params(name, model, length, bench), "variant": variant}
                method = create_method(name, 8192, length, **params)
                assert method.variant == variant
