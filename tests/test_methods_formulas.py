"""Relative-position matrices and frequencies against the papers' formulas."""

import math
import random

import pytest
import torch

from lampe_eval.attention.reference import relative_positions
from lampe_eval.errors import LampeEvalError
from lampe_eval.methods import create_method
from lampe_eval.methods.lampe import LaMPE, lampe_segments, mapping_length
from lampe_eval.methods.selfextend import default_group_size

from .helpers.methods import base


def pe_matrix(method, length: int, window: int = 96) -> torch.Tensor:
    plan = method.plan(base(window), length, length)
    pe, owner = relative_positions(plan, 0, length, length)
    assert (owner >= 0).sum() == length * (length + 1) // 2
    return pe


def distances(length: int) -> torch.Tensor:
    idx = torch.arange(length)
    return (idx[:, None] - idx[None, :]).double()


# --- LaMPE (paper Sec. 3.2, Appendix B) ----------------------------------------------------------


def lampe_pe(length: int, m: int, s1: int, s2: int) -> torch.Tensor:
    from lampe_eval.attention import AttentionPlan

    plan = AttentionPlan(lampe_segments(length, m, s1, s2), torch.ones(1))
    return relative_positions(plan, 0, length, length)[0]


def test_lampe_matrix_follows_the_paper_within_the_floor_slack():
    rng = random.Random(0)
    for _ in range(40):
        length = rng.randint(20, 300)
        s1, s2 = rng.randint(0, length // 4), rng.randint(1, length // 4)
        m = rng.randint(s1 + s2 + 1, length - 1)
        pe, d = lampe_pe(length, m, s1, s2), distances(length)
        causal = d >= 0
        head = causal & (d <= s1)
        tail = causal & (d >= length - s2)
        middle = causal & ~head & ~tail
        assert torch.equal(pe[head], d[head])
        assert torch.equal(pe[tail], (m - length + d)[tail])
        k = (m - s1 - s2) / (length - s1 - s2)
        paper = torch.floor(k * (d - s1) + s1)
        assert (pe[middle] - paper[middle]).abs().max() <= 1  # floor(x) - floor(y) vs floor(x - y)
        assert pe[causal].max() == m - 1  # the mapping length is the largest position + 1


def test_lampe_is_monotone_along_each_row_appendix_b():
    rng = random.Random(1)
    for _ in range(200):
        length = rng.randint(4, 200)
        s1 = rng.randint(0, length // 3)
        s2 = rng.randint(1, max(1, length // 3))
        if s1 + s2 + 1 >= length:
            continue
        m = rng.randint(s1 + s2 + 1, length)
        pe = lampe_pe(length, m, s1, s2)
        for i in range(length):
            row = pe[i, : i + 1]
            assert (row[:-1] >= row[1:]).all(), (length, m, s1, s2, i)


@pytest.mark.parametrize("window", [4096, 8192, 131072])
def test_lampe_positions_never_exceed_the_window(window):
    method = LaMPE.build(window, None)
    for factor in (1.01, 1.5, 2, 4, 8, 16, 64):
        length = int(window * factor)
        m = method.mapping_length_for(length, window)
        # the official fit's U (<= 0.76 W) plus the head and the snapped tail
        assert method.s1 + method.s2 + 1 <= m <= 0.85 * window
        assert m - 1 < window  # the largest relative position in prefill
        assert m - 1 == method.largest_position(base(window), length)


def test_lampe_default_converts_the_official_fit_from_U_to_m():
    """Issue 17: without a config the defaults are the official Llama-3 fit, which outputs the code's U:
    at W = 8192, l = 32768 that is U = 4501 and m = the official largest position + 1 (5118 with the
    official s2 = 200), not the 4457 the fit gives when read as m."""
    from lampe_eval.methods.lampe import m_from_U

    default = LaMPE.build(8192, None)
    assert default.use_length_for(32768) == 4501
    assert default.mapping_length_for(32768, 8192) == m_from_U(32768, 4501, 512, 128) == 5056
    assert LaMPE.build(8192, None, s2=200).mapping_length_for(32768, 8192) == 5118
    official = LaMPE.build(8192, None, variant="official")
    assert official.largest_position(base(8192), 32768) == default.largest_position(base(8192), 32768)


def test_lampe_mapping_sources_and_their_conversions():
    from lampe_eval.methods.lampe import U_from_m, m_from_U

    kw = {"s1": 64, "s2": 16, "identity_within_window": False}
    for length, U in [(1000, 300), (5000, 1234), (20000, 3000)]:
        m = m_from_U(length, U, 64, 16)
        assert LaMPE.build(96, None, U=U, **kw).mapping_length_for(length, 96) == m
        assert m_from_U(length, U_from_m(length, m, 64, 16), 64, 16) == m  # the round trip keeps m
        official = LaMPE.build(96, None, m=m, variant="official", **kw)
        assert m_from_U(length, official.use_length_for(length), 64, 16) == m
    fixed = LaMPE.build(96, None, m=500, U=100, L=3000, a=0.001, b=-1, **kw)
    assert fixed.mapping_length_for(2000, 96) == 500  # m wins over U, U over the sigmoids
    sigmoid = LaMPE.build(96, None, L=3000, a=0.001, b=-1, **kw)
    assert sigmoid.mapping_length_for(2000, 96) == mapping_length(2000, 3000, 0.001, -1, 64, 16)


def test_lampe_checks_the_sigmoid_bound_only_when_the_sigmoid_is_used():
    """Issue 17: s1 + s2 < L was enforced even with a fixed m, where L is unused."""
    assert LaMPE.build(96, None, s1=8, s2=4, m=40, L=10).m == 40
    assert LaMPE.build(96, None, s1=8, s2=4, U=30, L=10).U == 30
    with pytest.raises(LampeEvalError, match="must exceed"):
        LaMPE.build(96, None, s1=8, s2=4, L=10, a=0.1, b=0)


def test_lampe_sigmoid_and_clamp():
    assert mapping_length(10_000, 6000, 0.001, -5, 10, 10) == math.floor(6000 / (1 + math.exp(-5)))
    assert mapping_length(100, 6000, 0.001, 5, 10, 10) == 100  # clamped to l
    assert mapping_length(10_000, 15, 0.0, 0.0, 10, 10) == 21  # clamped to s1 + s2 + 1
    within = LaMPE.build(8192, None)
    assert within.mapping_length_for(8000, 8192) == 8000  # inputs within the window: plain positions
    # ... unless the generation will take them past it (the budget: prompt + new tokens)
    assert within.mapping_length_for(8000, 8192, total_length=8300) < 8000


def test_lampe_within_window_decision_uses_the_generation_budget(caplog):
    """Issue 17: window 64, prompt 60, 10 new tokens: with the budget known the prompt is remapped and
    decode row 69 stays inside the window; unknown (model.generate called directly) it keeps plain
    positions, as before, and warns once when decoding passes the window."""
    import logging

    from lampe_eval.attention.reference import segment_pairs

    def last_row_largest(method, total_length, prompt=60, kv=70):
        plan = method.plan_with_budget(base(64), prompt, kv, total_length)
        return max(float(pe[mask].max()) for mask, pe in segment_pairs(plan, kv - 1, 1, kv) if mask.any())

    for variant in ("paper", "official"):
        method = LaMPE.build(64, 70, variant=variant)
        assert last_row_largest(method, 70) < 64
        with caplog.at_level(logging.WARNING, logger="lampe_eval.methods.lampe"):
            assert last_row_largest(method, None) == 69
            assert last_row_largest(method, None) == 69
        warnings = [r for r in caplog.records if "passed it" in r.getMessage()]
        assert len(warnings) == 1
        caplog.clear()
        # a budget inside the window: plain positions, no warning
        assert last_row_largest(method, 64, prompt=50, kv=64) == 63
        assert not caplog.records


def test_lampe_fixed_mapping_and_remap_each_step():
    frozen = create_method("lampe", 96, None, m=40, s1=8, s2=4, identity_within_window=False)
    moving = create_method(
        "lampe", 96, None, m=40, s1=8, s2=4, identity_within_window=False, remap_each_step=True
    )
    # prompt of 150 tokens, cache now 160: frozen keeps l = 150, moving uses l = 160
    frozen_pe, _ = relative_positions(frozen.plan(base(), 150, 160), 0, 160, 160)
    moving_pe, _ = relative_positions(moving.plan(base(), 150, 160), 0, 160, 160)
    assert moving_pe[159, 0] == 39  # m - 1 at the current length
    assert frozen_pe[159, 0] == 40 - 150 + 159  # the tail extends the frozen map: m - l + d


# --- SelfExtend, ReRoPE, STRING, DCA ----------------------------------------------------------------


def test_selfextend_matrix_and_reach():
    g, w, length = 4, 16, 120
    pe, d = (
        pe_matrix(create_method("selfextend", 96, None, group_size=g, window=w), length),
        distances(length),
    )
    i, j = torch.meshgrid(torch.arange(length), torch.arange(length), indexing="ij")
    causal = d >= 0
    near = causal & (d < w)
    assert torch.equal(pe[near], d[near])
    grouped = (
        torch.div(i, g, rounding_mode="floor") - torch.div(j, g, rounding_mode="floor") + w - w // g
    ).double()
    assert torch.equal(pe[causal & ~near], grouped[causal & ~near])
    # the README's reach: a model with window W handles (W - w) * G + w tokens without unseen positions
    window = 64
    reach = (window - w) * g + w
    pe = pe_matrix(create_method("selfextend", window, None, group_size=g, window=w), reach, window)
    assert pe.max() == window - 1


def test_selfextend_default_group_size_is_the_smallest_meeting_the_readme_rule():
    """(2/3) W > w + (N - w) / G, strictly (issue 17: W = 96, w = 24, N = 104 gave G = 2, an equality)."""
    assert default_group_size(96, 24, 104) == 3
    for window in (96, 4096, 8192):
        w = window // 4
        for target in range(window + 1, 40 * window, window // 3 + 7):
            g = default_group_size(window, w, target)
            assert 2 * window / 3 > w + (target - w) / g, (window, target, g)
            assert g == 2 or not 2 * window / 3 > w + (target - w) / (g - 1), (window, target, g)
    assert default_group_size(8192, 2048, 32768) == 10  # 9 meets it with equality


def test_string_default_local_window():
    """The README's W = 128, smaller for windows under 1K tokens (W must stay below S)."""
    assert create_method("string", 8192, None).local == 128
    assert create_method("string", 96, None).local == 12


@pytest.mark.parametrize("leaky_k", [0.0, 8.0])
def test_rerope_clamps_or_leaks_beyond_the_window(leaky_k):
    w, length = 20, 90
    pe = pe_matrix(create_method("rerope", 96, None, window=w, leaky_k=leaky_k), length)
    d = distances(length)
    causal = d >= 0
    expected = torch.where(d < w, d, w + (d - w) / leaky_k if leaky_k else torch.full_like(d, w))
    assert torch.allclose(pe[causal], expected[causal], atol=1e-4)


def test_string_shift_formula():
    shift, local, length = 30, 5, 100
    pe, d = pe_matrix(create_method("string", 96, None, shift=shift, local=local), length), distances(length)
    causal = d >= 0
    expected = torch.where(d < shift, d, d - shift + local)
    assert torch.equal(pe[causal], expected[causal])
    assert pe[causal].max() == length - 1 - shift + local


def test_dca_positions_follow_the_paper():
    s, w, cap, length = 24, 6, 31, 100
    pe = pe_matrix(create_method("dca", 96, None, chunk_size=s, local_window=w, max_position=cap), length)
    for i in range(length):
        for j in range(i + 1):
            ci, cj = i // s, j // s
            if ci == cj:
                expected = i - j
            elif ci - cj == 1:
                expected = (s + i % s if i % s < w else cap) - j % s
            else:
                expected = cap - j % s
            assert pe[i, j] == expected, (i, j)
    assert pe.max() <= cap


# --- frequency methods -------------------------------------------------------------------------------


def test_linear_and_ntk_frequencies():
    b = base()
    linear, factor = create_method("linear", 96, None, factor=4.0).frequencies(b, 10)
    assert torch.allclose(linear, b.inv_freq / 4) and factor == 1.0
    ntk, _ = create_method("ntk", 96, None, factor=4.0).frequencies(b, 10)
    theta = 10000 * 4 ** (16 / 14)  # YaRN paper eq. 16
    assert torch.allclose(ntk, 1.0 / theta ** (torch.arange(0, 16, 2).float() / 16))


def test_yarn_frequencies_and_temperature_match_the_paper():
    window, s, dim = 96, 4.0, 16
    inv, attention = create_method("yarn", window, None, factor=s).frequencies(base(window), 10)
    assert attention == pytest.approx(0.1 * math.log(s) + 1)
    theta = 1.0 / 10000 ** (torch.arange(0, dim, 2).double() / dim)

    def correction_dim(rotations: float) -> float:
        return dim * math.log(window / (rotations * 2 * math.pi)) / (2 * math.log(10000))

    low, high = max(math.floor(correction_dim(32)), 0), min(math.ceil(correction_dim(1)), dim - 1)
    ramp = ((torch.arange(dim // 2).double() - low) / max(high - low, 0.001)).clamp(0, 1)
    expected = theta / s * ramp + theta * (1 - ramp)
    assert torch.allclose(inv.double(), expected, rtol=1e-5)


def test_dynamic_ntk_follows_the_current_length():
    window, s, dim = 96, 2.0, 16
    method = create_method("dynamic_ntk", window, None, factor=s)
    same, _ = method.frequencies(base(window), window)
    assert torch.equal(same, base(window).inv_freq)
    grown, _ = method.frequencies(base(window), 300)
    theta = 10000 * ((s * 300 / window) - (s - 1)) ** (dim / (dim - 2))
    assert torch.allclose(grown, 1.0 / theta ** (torch.arange(0, dim, 2).float() / dim), rtol=1e-5)


# --- DPE (arXiv 2504.18857: SelfExtend-style grouping per group of RoPE dimensions) -----------------------


def test_dpe_matrix_is_a_grouped_position_per_dimension_group():
    rng = random.Random(11)
    for _ in range(10):
        length, w = rng.randint(20, 200), rng.randint(1, 40)
        factors = [rng.randint(1, 9) for _ in range(4)]
        method = create_method("dpe", 96, None, window=w, scale_factors=factors)
        pe = pe_matrix(method, length)  # [n, n, 1, F]
        d = distances(length)
        i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
        causal = d >= 0
        for f in range(8):  # D = 16: 8 frequencies, groups of 2
            s = factors[f // 2]
            far = torch.div(i, s, rounding_mode="floor") - torch.div(j, s, rounding_mode="floor") + w - w // s
            expected = torch.where(d < w, d, far.double())
            assert torch.equal(pe[..., 0, f][causal], expected[causal]), (w, factors, f)
        # factor 1 everywhere is plain RoPE
        plain = pe_matrix(create_method("dpe", 96, None, window=w, scale_factors=[1]), length)
        assert torch.equal(plain[..., 0, 0][causal], d[causal])


def test_dpe_rejects_groups_that_do_not_fit():
    with pytest.raises(LampeEvalError, match="dimension_groups"):
        create_method("dpe", 96, None, scale_factors=[2, 4], dimension_groups=[0, 8])
    with pytest.raises(LampeEvalError, match="integers"):
        create_method("dpe", 96, None, scale_factors="2,x")
    method = create_method("dpe", 96, None, scale_factors=[2, 4], dimension_groups=[0, 32, 64])
    with pytest.raises(LampeEvalError, match="64"):
        method.plan(base(), 10, 10)  # the test model has 8 frequencies


# --- Ms-PoE (a compression ratio per head, min_ratio + (max_ratio - min_ratio) * k / H) -------------------


def test_ms_poe_matrix_is_the_distance_over_each_heads_ratio():
    length = 60
    method = create_method("ms_poe", 96, None, min_ratio=1.2, max_ratio=2.0, head_order="index")
    pe = pe_matrix(method, length)  # [n, n, H=4, F]
    d = distances(length)
    causal = d >= 0
    ratios = torch.tensor([1.2 + 0.8 * k / 4 for k in range(4)], dtype=torch.float32)
    for h in range(4):  # two query heads per key head: the keys take the ratio of the group's first head
        key_ratio = ratios[(h // 2) * 2]
        i, j = torch.arange(length)[:, None].float(), torch.arange(length)[None, :].float()
        expected = (i / ratios[h]).double() - (j / key_ratio).double()
        assert torch.allclose(pe[..., h, 0][causal], expected[causal], atol=1e-5)
        if h % 2 == 0:  # the paper's d / r_h for the heads that share their key's ratio
            assert torch.allclose(pe[..., h, 3][causal], (d / ratios[h].double())[causal], atol=1e-4)
    normal = create_method("ms_poe", 96, None, min_ratio=1.2, max_ratio=2.0)
    assert torch.allclose(normal.head_ratios(4), ratios.flip(0))  # head_type "normal": reversed
    with pytest.raises(LampeEvalError, match="outlier"):
        create_method("ms_poe", 96, None, head_order="outlier")
