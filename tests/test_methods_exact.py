"""Every position-remapping method: fast path == dense oracle, each kept pair covered exactly once (the
dropped ones by none), decode == prefill row."""

import random
import zlib

import pytest
import torch

from lampe_eval.attention import segmented_attention
from lampe_eval.attention.reference import check_coverage, oracle_attention, segment_pairs
from lampe_eval.methods import METHODS, PositionMethod, create_method
from lampe_eval.methods.base import beyond_window_warning
from tests.helpers.methods import FREQUENCY_METHODS, POSITION_METHODS, WINDOW, D, base, random_params


def expected_kept_pairs(method, n: int) -> torch.Tensor:
    """Which (query, key) pairs a method attends, written from the papers / official code, not from the
    segments: [n, n] bool for a prefill of n tokens."""
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    d = i - j
    causal = d >= 0
    if method.name == "lm_infinite":
        # models/lambda_attention.py: local keys d <= n_local - 1, plus the global keys j < n_global
        return causal & ((d < method.n_local) | (j < method.n_global))
    if method.name == "streamingllm":
        # kv_cache.py: after each token the cache keeps the first `sinks` and the last `recent` keys, so
        # token i sees those of the cache after token i - 1, plus itself
        return causal & ((d <= method.recent) | (j < method.sinks))
    return causal


def pair_counts(method, context: int, kv: int, q_start: int = 0) -> torch.Tensor:
    """The method's declared multiplicity per pair: 1 per kept causal pair (methods that drop pairs keep
    those of :func:`expected_kept_pairs`) unless an official variant doubles a diagonal."""
    queries = torch.arange(q_start, kv)
    kept = expected_kept_pairs(method, kv)[q_start:].long()
    if isinstance(method, PositionMethod):
        return method.pair_counts(base(), context, kv, queries, kv) * kept
    return kept


ALL_METHODS = METHODS.names()


def test_every_registered_method_is_covered():
    assert set(POSITION_METHODS) <= set(ALL_METHODS)
    assert {m for m in ALL_METHODS if METHODS.get(m).kind == "position"} == set(POSITION_METHODS)
    assert {m for m in ALL_METHODS if METHODS.get(m).kind == "frequency"} == set(FREQUENCY_METHODS)


@pytest.mark.parametrize("name", POSITION_METHODS)
@pytest.mark.parametrize("length", [5, 37, 150, 260])
def test_fast_path_equals_oracle_with_gqa(name, length, monkeypatch):
    rng = random.Random(zlib.crc32(f"{name}{length}".encode()))
    for trial in range(3):
        method = create_method(name, WINDOW, 4 * WINDOW, **random_params(name, rng))
        plan = method.plan(base(), length, length)
        q = torch.randn(1, 4, length, D)
        k, v = torch.randn(1, 2, length, D), torch.randn(1, 2, length, D)
        block = rng.choice([16, 64, 1024])
        # the CPU kernel's tiles, the portable path's masked blocks, a prefill continued mid-way
        kernel = "portable" if trial == 1 else None
        first = rng.randrange(length) if trial == 2 else 0
        fast = segmented_attention(q[:, :, first:], k, v, plan, first, D**-0.5, block=block, kernel=kernel)
        ref = oracle_attention(q, k, v, plan, 0, D**-0.5, counts=pair_counts(method, length, length))
        err = (fast - ref[:, :, first:]).abs().max().item()
        assert err <= 1e-4, f"{method.label()} trial {trial}: {err}"


@pytest.mark.parametrize("name", [*POSITION_METHODS, "rope", *FREQUENCY_METHODS])
@pytest.mark.parametrize("length", [3, 64, 200])
def test_segments_cover_each_kept_pair_exactly_once(name, length):
    """Every causal pair once; for StreamingLLM and LM-Infinite exactly the pairs they keep."""
    rng = random.Random(length)
    for _ in range(3):
        method = create_method(name, WINDOW, 4 * WINDOW, **random_params(name, rng))
        plan = method.plan(base(), length, length)
        # every causal pair once, except the diagonals an official variant declares doubled
        check_coverage(plan, 0, length, length, pair_counts(method, length, length))


@pytest.mark.parametrize("name", ["lm_infinite", "streamingllm"])
def test_the_dropped_pairs_are_never_attended(name):
    """A value placed only at dropped keys must not reach the output (engine and oracle alike)."""
    rng = random.Random(zlib.crc32(name.encode()))
    length = 150
    for _ in range(3):
        method = create_method(name, WINDOW, 4 * WINDOW, **random_params(name, rng))
        plan = method.plan(base(), length, length)
        dropped_keys = ~expected_kept_pairs(method, length)[-1]
        assert dropped_keys.any()
        q, k = torch.randn(1, 2, length, D), torch.randn(1, 2, length, D)
        v = torch.zeros(1, 2, length, D)
        v[:, :, dropped_keys] = 1e3
        last = q[:, :, -1:]
        for out in (
            segmented_attention(q, k, v, plan, 0, D**-0.5)[:, :, -1:],  # prefill
            segmented_attention(last, k, v, plan, length - 1, D**-0.5),  # decode
            oracle_attention(last, k, v, plan, length - 1, D**-0.5),
        ):
            assert out.abs().max() == 0, method.label()


@pytest.mark.parametrize("name", POSITION_METHODS + ["dynamic_ntk"])
def test_decode_step_equals_last_row_of_prefill(name):
    """One decode step (q_len 1, cached keys) == last row of the full prefill with the same mapping."""
    rng = random.Random(7)
    length = 180
    for _ in range(3):
        method = create_method(name, WINDOW, 4 * WINDOW, **random_params(name, rng))
        plan = method.plan(base(), length - 1, length)  # prompt of length-1 tokens, one generated
        q = torch.randn(1, 4, length, D)
        k, v = torch.randn(1, 2, length, D), torch.randn(1, 2, length, D)
        full = segmented_attention(q, k, v, plan, 0, 0.25)
        step = segmented_attention(q[:, :, -1:], k, v, plan, length - 1, 0.25)
        assert (step - full[:, :, -1:]).abs().max() < 1e-5, method.label()


@pytest.mark.parametrize("name", POSITION_METHODS)
def test_largest_position_is_the_maximum_of_the_oracle_matrix(name):
    """The window check reads only the last query row: that row must hold the PE maximum."""
    rng = random.Random(zlib.crc32(f"largest-{name}".encode()))
    for length in (5, 37, 150, 260):
        for _ in range(4):
            method = create_method(name, WINDOW, length, **random_params(name, rng))
            pairs = segment_pairs(method.plan(base(), length, length), 0, length, length)
            largest = max(int(pe[mask].max()) for mask, pe in pairs if mask.any())
            assert method.largest_position(base(), length) == largest, method.label()


def test_a_warning_when_a_method_shows_positions_past_the_window():
    b = base()
    string = create_method("string", WINDOW, 2 * WINDOW)
    assert beyond_window_warning(string, b, WINDOW) is None  # STRING is meant for inputs within W
    message = beyond_window_warning(string, b, 2 * WINDOW)
    assert message and message.startswith("string at 192 tokens") and "extrapolates" in message
    for name in ("lampe", "selfextend", "dca", "rerope"):  # the defaults fit 2x and 4x inputs
        for length in (2 * WINDOW, 4 * WINDOW):
            assert beyond_window_warning(create_method(name, WINDOW, length), b, length) is None, name
    small_group = create_method("selfextend", WINDOW, 4 * WINDOW, group_size=2)
    assert "selfextend" in (beyond_window_warning(small_group, b, 4 * WINDOW) or "")
    assert beyond_window_warning(create_method("ntk", WINDOW, 4 * WINDOW), b, 4 * WINDOW) is None
    # StreamingLLM's defaults keep every position below the window; LM-Infinite's official ceiling
    # (limit_distance = window) puts its global keys at distance W, one past the trained W - 1
    assert beyond_window_warning(create_method("streamingllm", WINDOW, 4 * WINDOW), b, 4 * WINDOW) is None
    assert beyond_window_warning(create_method("lm_infinite", WINDOW, 4 * WINDOW), b, WINDOW) is None
    lm_infinite = beyond_window_warning(create_method("lm_infinite", WINDOW, 4 * WINDOW), b, 4 * WINDOW)
    assert lm_infinite and f"relative position {WINDOW} >=" in lm_infinite
