"""The methods of 2026 against their sources: MrRoPE's frequencies (arXiv 2601.22181, Sec. 3, and the
authors' ``mattian7/mrRoPE`` code) and SELF's positions (``selfextend`` ``variant=logistic``, arXiv
2505.17296, the official ``alexeipc/SELF-LLM`` CUDA arithmetic re-written as plain loops); outputs against
the dense oracle and inside a real model."""

import copy
import math
import random

import pytest
import torch

from lampe_eval.attention import segmented_attention
from lampe_eval.attention.reference import oracle_attention, relative_positions
from lampe_eval.backends.hf.patch import apply_method
from lampe_eval.backends.rope_config import rope_base
from lampe_eval.errors import LampeEvalError
from lampe_eval.methods import RopeBase, create_method
from lampe_eval.methods.longrope import yarn_ramp
from lampe_eval.methods.mrrope import correction_range
from lampe_eval.methods.selfextend import logistic_key_groups
from lampe_eval.testing import tiny_llama

# --- MrRoPE ------------------------------------------------------------------------------------------


def yarn_band(dim: int, theta: float, window: int, fast: float = 32, slow: float = 1) -> tuple[int, int]:
    """YaRN's correction range, as the YaRN code (and transformers' ``find_correction_range``) computes it."""

    def dim_of(rotations: float) -> float:
        return (dim * math.log(window / (rotations * 2 * math.pi))) / (2 * math.log(theta))

    return max(math.floor(dim_of(fast)), 0), min(math.ceil(dim_of(slow)), dim - 1)


def paper_inv_freq(dim: int, theta: float, window: int, s: float, variant: str) -> list[float]:
    """The paper's mixed-radix angle, literally: frequency j (1..D_r) is b^(-(j-1)/D_r) / prod_{d<j} lambda_d,
    lambda_d = 1 outside d_l <= d < d_h, S^(1/(d_h-d_l)) (Uni) or S^(2(1+d-d_l)/((1+d_h-d_l)(d_h-d_l)))
    (Pro) inside; d_l, d_h are YaRN's band numbered from 1."""
    low, high = yarn_band(dim, theta, window)
    d_l, d_h, d_r = low + 1, high + 1, dim // 2

    def lam(d: int) -> float:
        if not d_l <= d < d_h:
            return 1.0
        if variant == "uni":
            return s ** (1 / (d_h - d_l))
        return s ** (2 * (1 + d - d_l) / ((1 + d_h - d_l) * (d_h - d_l)))

    out = []
    for j in range(1, d_r + 1):
        product = 1.0
        for d in range(1, j):
            product *= lam(d)
        out.append(theta ** (-(j - 1) / d_r) / product)
    return out


def authors_inv_freq(dim: int, theta: float, window: int, s: float, variant: str) -> list[float]:
    """``mattian7/mrRoPE`` ``scaled_rope/LlamaYaRNRadix.py``: ``yarn_radix`` (uniform) and ``yarn_radix3``
    (progressive) as loops over the 0-indexed frequencies."""
    low, high = yarn_band(dim, theta, window)
    out = []
    for i in range(dim // 2):
        inv = 1.0 / theta ** (2 * i / dim)
        if i < low + 1:
            value = 1.0
        elif i > high - 1:
            value = s
        elif variant == "uni":
            value = (s ** (1.0 / (high - low))) ** (i - low)
        else:
            value = (s ** (1.0 / ((high - low) * (high - low + 1)))) ** ((i + 1 - low) * (i - low))
        out.append(inv / value)
    return out


def plain_base(window: int, dim: int, theta: float) -> RopeBase:
    return RopeBase.plain(window, 2, 1, dim, theta)


SETTINGS = [  # (head dim, theta, window, factor)
    (128, 500000.0, 8192, 16.0),  # Llama-3-8B to 128K (the paper's RULER setting)
    (128, 10000.0, 4096, 8.0),  # Llama-2-7B
    (128, 1000000.0, 32768, 4.0),  # Qwen2.5-3B to 128K
    (16, 10000.0, 96, 4.0),  # the tests' tiny heads
]


@pytest.mark.parametrize("variant", ["uni", "pro"])
@pytest.mark.parametrize("dim, theta, window, s", SETTINGS)
def test_mrrope_frequencies_are_the_papers_mixed_radix_angles(dim, theta, window, s, variant):
    method = create_method("mrrope", window, None, factor=s, variant=variant)
    inv, attention = method.frequencies(plain_base(window, dim, theta), 10)
    for reference in (paper_inv_freq, authors_inv_freq):
        expected = torch.tensor(reference(dim, theta, window, s, variant), dtype=torch.float64)
        assert torch.allclose(inv.double(), expected, rtol=2e-6, atol=0), reference.__name__
    assert attention == pytest.approx(0.1 * math.log(s) + 1)  # YaRN's temperature


def test_mrrope_hand_computed_bands_and_exponents():
    # Llama-3-8B: 128 * ln(8192 / (32 * 2 pi)) / (2 ln 500000) = 18.6 -> 18; ... / (1 * 2 pi) -> 34.6 -> 35
    assert correction_range(128, 500000.0, 8192, 32, 1) == (18, 35)
    # Llama-2-7B: 128 * ln(4096 / (64 pi)) / (2 ln 10^4) = 20.9 -> 20; 128 * ln(4096 / 2 pi) / ... -> 46
    assert correction_range(128, 10000.0, 4096, 32, 1) == (20, 46)
    base = plain_base(8192, 128, 500000.0)
    pro = create_method("mrrope", 8192, None, factor=4.0).exponents(base)
    assert pro[:19].eq(0).all() and pro[35:].eq(1).all() and pro.numel() == 64
    steps = pro.diff()
    assert steps[18] == pytest.approx(2 / (17 * 18))  # n = 17: the first increment 2 / (n (n + 1))
    assert steps[34] == pytest.approx(1 / 9)  # the last, 2 n / (n (n + 1)) = 2 / 18
    assert pro[19:35].sum() == pytest.approx(16 / 3)  # sum_{q=1}^{16} q (q + 1) / 306
    assert (steps[18:35].diff() > 0).all()  # progressive: lambda_j < lambda_{j+1} in the band
    uni = create_method("mrrope", 8192, None, factor=4.0, variant="uni").exponents(base)
    assert torch.allclose(uni[18:36].diff(), torch.full((17,), 1 / 17, dtype=torch.float64))


def test_mrrope_uni_is_yarns_ramp_in_the_exponent_and_pro_interpolates_less():
    """Uni's exponent is YaRN's ramp (frequency x S^-ramp, YaRN blends linearly); Pro's q(q+1)/(n(n+1))
    <= q/n keeps every middle frequency at least as high as Uni."""
    dim, theta, window = 128, 500000.0, 8192
    base = plain_base(window, dim, theta)
    uni = create_method("mrrope", window, None, factor=16.0, variant="uni")
    pro = create_method("mrrope", window, None, factor=16.0)
    assert torch.allclose(uni.exponents(base).float(), yarn_ramp(dim, theta, window))
    assert (pro.frequencies(base, 1)[0] >= uni.frequencies(base, 1)[0] * (1 - 1e-6)).all()


def test_mrrope_defaults_overrides_and_bad_values():
    method = create_method("mrrope", 4096, 16384)
    assert (method.factor, method.variant, method.beta_fast, method.beta_slow) == (4.0, "pro", 32.0, 1.0)
    assert create_method("mrrope", 4096, 16384, attention_factor=1.3).frequencies(
        plain_base(4096, 64, 10000.0), 1
    )[1] == pytest.approx(1.3)
    assert create_method("mrrope", 4096, 2048).frequencies(plain_base(4096, 64, 10000.0), 1) == (
        pytest.approx(plain_base(4096, 64, 10000.0).inv_freq),
        1.0,
    )  # factor 1: RoPE itself
    for bad in ({"variant": "paper"}, {"factor": 0.5}, {"beta_fast": 1.0}, {"attention_factor": -1.0}):
        with pytest.raises(LampeEvalError) as err:
            create_method("mrrope", 4096, 16384, **bad)
        assert "\n" not in str(err.value)


@torch.no_grad()
@pytest.mark.parametrize("variant", ["uni", "pro"])
def test_mrrope_patched_model_equals_transformers_with_its_frequencies(variant):
    """The patched tiny Llama = the unpatched one whose rotary embedding carries MrRoPE's inv_freq and
    cos/sin factor (transformers' own attention), prefill and cached decoding."""
    window = 32
    model = tiny_llama(window=window, layers=2, heads=4, kv_heads=2, head_dim=16, seed=3)
    method = create_method("mrrope", window, 4 * window, variant=variant)
    inv, factor = method.frequencies(rope_base(model), 4 * window)
    twin = copy.deepcopy(model)
    twin.model.rotary_emb.inv_freq.copy_(inv)
    twin.model.rotary_emb.original_inv_freq = inv.clone()
    twin.model.rotary_emb.attention_scaling = factor
    ids = torch.randint(0, 128, (1, 3 * window), generator=torch.Generator().manual_seed(5))
    expected = twin(ids).logits
    with apply_method(model, method):
        got = model(ids).logits
        generated = model.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False
        )
    assert (got - expected).abs().max() < 1e-4
    assert (model(ids).logits - expected).abs().max() > 1e-3  # unpatched: plain RoPE, another answer
    reference = twin.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False)
    assert torch.equal(generated, reference)


def test_mrrope_with_infoscale_keeps_its_frequencies_and_adds_the_query_scale():
    base = plain_base(96, 16, 10000.0)
    plain = create_method("mrrope", 96, 384).attention_plan(base, 300, 300, None)
    scaled = create_method("mrrope", 96, 384, infoscale=True).attention_plan(base, 300, 300, None)
    assert torch.equal(plain.inv_freq, scaled.inv_freq) and plain.rope_scaling == scaled.rope_scaling
    assert plain.query_scale is None and scaled.query_scale is not None
    factors = scaled.query_scale(torch.arange(300))
    assert torch.equal(factors[:96], torch.ones(96)) and (factors[96:] > 1).all()


# --- SELF: selfextend variant=logistic --------------------------------------------------------------


def official_key_positions(n: int, capacity: int, rate: float) -> list[int]:
    """``self_extend_patch/attn_method/logistic.cu`` ``async_generator`` (prefill), as loops: freq_group's
    table (zeroed by cudaMemset, threads 1 .. capacity - 2), then one gpu_key_group_id launch per group
    size in order, each thread writing res[id] under the kernel's own conditions; a later launch
    overwrites an earlier one."""

    def inverse(y: int) -> float:  # gs_inverse_generating_function
        return (math.log(y * capacity - y) - math.log(capacity - y)) / rate

    first = [0] * (capacity + 1)
    last = [0] * (capacity + 1)
    for i in range(capacity - 1):  # freq_group<<<1, capacity - 1>>>
        if 1 <= i < capacity - 1:
            lower, upper = inverse(i), inverse(i + 1)
            first[i], last[i] = math.ceil(lower), math.floor(upper)
            if upper == math.floor(upper):
                last[i] -= 1
    last[0] = -1
    res = [0] * n
    presum = 0
    for i in range(1, capacity):
        group_size = last[i] - first[i] + 1
        next_group_size = last[i + 1] - first[i + 1] + 1
        if group_size <= 0 or next_group_size <= 0:
            continue
        last_group_size = i - 1
        for tid in range(n):  # every thread of the grid
            index = presum + tid
            if index >= n:
                break
            size = last_group_size + 1
            group_id = last[last_group_size] + (index - presum + size - 1) // size
            max_n = presum + size * (last[last_group_size + 1] - first[last_group_size + 1] + 1)
            if index > max_n and size != capacity - 1:
                continue
            if n - index >= 0 and n >= group_id and n - index < n:
                res[index] = group_id
        presum = presum + i * group_size
    return res


def official_self_row(i: int, w: int, key_positions: list[int]) -> list[float]:
    """``Llama.py`` ``self_extend_forward``, prefill: neighbour (tril minus the group tril shifted by w) at
    i - j, group elsewhere at group_query_position[i] - group_key_position[j], with
    group_query_position[i] = w for i < w, else w + group_key_position[i - w] (gpu_query_group_id)."""
    query = w if i < w else w + key_positions[i - w]
    return [float(i - j) if i - j < w else float(query - key_positions[j]) for j in range(i + 1)]


@pytest.mark.parametrize(
    "capacity, rate, n",
    [(33, 0.02, 2000), (9, 0.02, 700), (2, 0.02, 50), (3, 0.3, 300), (9, 1.0, 300), (16, 0.5, 500)],
)
def test_logistic_key_groups_are_the_official_kernels(capacity, rate, n):
    expected = torch.tensor(official_key_positions(n, capacity, rate), dtype=torch.float32)
    assert torch.equal(logistic_key_groups(capacity, rate)(torch.arange(n)), expected)


def test_logistic_key_groups_by_hand():
    """c = 33, rate 0.02: x(2) = ln(2 * 32 / 31) / 0.02 = 36.25, so size 1 spans group ids 0..36; id 0 is
    never written (both ids 0 and 1 in group 0); the size-2 launch starts at id 37 after group 36."""
    gk = logistic_key_groups(33, 0.02)(torch.arange(42)).long().tolist()
    assert gk[:4] == [0, 0, 1, 2] and gk[36:42] == [35, 36, 37, 37, 38, 38]
    # capacity 2: one launch of size 1 (the zeroed entries), ids 1.. at id - 1
    assert logistic_key_groups(2, 0.02)(torch.arange(5)).long().tolist() == [0, 0, 1, 2, 3]
    # a fast rate: sizes 2 and 3 span no id together (x(3) = ln 4 = 1.39, x(4) = ln 6.4 = 1.86), so the
    # host loop skips both and the size-4 launch continues from the same presum
    assert official_key_positions(12, 9, 1.0) == logistic_key_groups(9, 1.0)(torch.arange(12)).long().tolist()


@pytest.mark.parametrize("capacity, w, rate", [(33, 24, 0.02), (5, 10, 0.02), (9, 7, 1.0), (2, 3, 0.3)])
def test_logistic_position_matrix_is_the_official_prefill(capacity, w, rate):
    length = 300
    method = create_method(
        "selfextend", 96, None, variant="logistic", group_size=capacity, window=w, rate=rate
    )
    pe, owner = relative_positions(
        method.plan(RopeBase.plain(96, 4, 2, 16), length, length), 0, length, length
    )
    assert (owner >= 0).sum() == length * (length + 1) // 2  # every causal pair, once
    keys = official_key_positions(length, capacity, rate)
    for i in range(length):
        assert pe[i, : i + 1].tolist() == official_self_row(i, w, keys), i
    assert method.largest_position(RopeBase.plain(96, 4, 2, 16), length) == int(
        pe[torch.tril(owner >= 0)].max()
    )


@pytest.mark.parametrize("length", [7, 130, 333])
def test_logistic_fast_path_equals_the_oracle_and_decode_the_prefill(length):
    rng = random.Random(length)
    base = RopeBase.plain(96, 4, 2, 16)
    for _ in range(3):
        params = {
            "group_size": rng.randint(2, 40),
            "window": rng.randint(1, 60),
            "rate": rng.choice([0.02, 0.4]),
        }
        method = create_method(
            "selfextend", 96, 4 * 96, variant="logistic", scale_base=rng.choice([-1, 64]), **params
        )
        q, k, v = torch.randn(1, 4, length, 16), torch.randn(1, 2, length, 16), torch.randn(1, 2, length, 16)
        plan = method.plan(base, length, length)
        fast = segmented_attention(q, k, v, plan, 0, 0.25, block=rng.choice([16, 64]))
        assert (fast - oracle_attention(q, k, v, plan, 0, 0.25)).abs().max() <= 1e-4, method.label()
        step_plan = method.plan(base, length - 1, length)
        step = segmented_attention(q[:, :, -1:], k, v, step_plan, length - 1, 0.25)
        assert (step - fast[:, :, -1:]).abs().max() < 1e-5, method.label()


def test_logistic_params_defaults_and_errors():
    paper = create_method("selfextend", 4096, 16384)
    assert "rate" not in paper.params() and "rate" not in paper.label()  # older runs keep their identity
    logistic = create_method("selfextend", 4096, 16384, variant="logistic")
    assert logistic.params()["rate"] == 0.02 and logistic.window == 1024
    assert (
        logistic.largest_position(RopeBase.plain(4096, 4, 2, 16), 16384) < 4096
    )  # the default capacity fits
    assert create_method("selfextend", 4096, 16384, variant="logistic", group_size=33).group_size == 33
    for bad, needle in (
        ({"variant": "logistc"}, "logistic"),
        ({"variant": "logistic", "group_size": 1}, "capacity"),
        ({"variant": "logistic", "rate": 0.0}, "rate"),
    ):
        with pytest.raises(LampeEvalError, match=needle) as err:
            create_method("selfextend", 4096, 16384, **bad)
        assert "\n" not in str(err.value)


@torch.no_grad()
def test_logistic_generates_with_a_cache_as_without():
    window = 32
    model = tiny_llama(window=window, layers=2, heads=4, kv_heads=2, head_dim=16)
    ids = torch.randint(0, 128, (1, 100), generator=torch.Generator().manual_seed(1))
    method = create_method(
        "selfextend", window, 4 * window, variant="logistic", group_size=6, window=8, rate=0.3
    )
    with apply_method(model, method):
        kwargs = {"attention_mask": torch.ones_like(ids), "max_new_tokens": 8, "do_sample": False}
        assert torch.equal(
            model.generate(ids, use_cache=True, **kwargs), model.generate(ids, use_cache=False, **kwargs)
        )
