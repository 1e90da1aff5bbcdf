"""The engine against the dense oracle, on hand-made segment layouts."""

import pytest
import torch

from lampe_eval.attention import (
    AttentionPlan,
    Band,
    ChunkRelation,
    Segment,
    kernels,
    segmented_attention,
    tile_run,
    tiles,
)
from lampe_eval.attention.reference import oracle_attention, relative_positions
from lampe_eval.attention.rope import apply_rope

D = 16
INV_FREQ = 1.0 / (10000 ** (torch.arange(0, D, 2).float() / D))


def qkv(n: int, hq: int = 6, hkv: int = 2, kv: int | None = None):
    kv = kv or n
    return torch.randn(1, hq, n, D), torch.randn(1, hkv, kv, D), torch.randn(1, hkv, kv, D)


@pytest.mark.parametrize("block", [7, 64, 1024])
def test_single_causal_segment_equals_sdpa_with_rotated_inputs(block):
    q, k, v = qkv(150)
    plan = AttentionPlan([Segment("all", Band(0))], INV_FREQ)
    out = segmented_attention(q, k, v, plan, 0, 0.25, block=block)
    pos = torch.arange(150)
    ref = torch.nn.functional.scaled_dot_product_attention(
        apply_rope(q, pos, INV_FREQ),
        apply_rope(k, pos, INV_FREQ),
        v,
        is_causal=True,
        enable_gqa=True,
        scale=0.25,
    )
    assert (out - ref).abs().max() < 1e-5


def test_oracle_matches_sdpa_so_it_is_a_real_reference():
    q, k, v = qkv(40)
    plan = AttentionPlan([Segment("all", Band(0))], INV_FREQ, rope_scaling=1.3)
    pos = torch.arange(40)
    ref = torch.nn.functional.scaled_dot_product_attention(
        apply_rope(q, pos, INV_FREQ, 1.3),
        apply_rope(k, pos, INV_FREQ, 1.3),
        v,
        is_causal=True,
        enable_gqa=True,
        scale=0.25,
    )
    assert (oracle_attention(q, k, v, plan, 0, 0.25) - ref).abs().max() < 1e-5


def shifted_plan() -> AttentionPlan:
    return AttentionPlan(
        [
            Segment("near", Band(0, 40)),
            Segment("far", Band(41), lambda i: (i // 4).float() + 30, lambda j: (j // 4).float()),
        ],
        INV_FREQ,
    )


def chunk_plan(size: int = 50) -> AttentionPlan:
    return AttentionPlan(
        [
            Segment(
                f"gap{g}",
                ChunkRelation(size, g),
                lambda i, g=g: (i % size).float() + 50 * min(g, 1),
                lambda j: (j % size).float(),
            )
            for g in range(3)
        ],
        INV_FREQ,
    )


@pytest.mark.parametrize("plan_fn", [shifted_plan, chunk_plan])
@pytest.mark.parametrize("block", [16, 33, 512])
def test_engine_matches_oracle_prefill_and_decode_rows(plan_fn, block):
    q, k, v = qkv(230)
    plan = plan_fn()
    ref = oracle_attention(q, k, v, plan, 0, 0.3)
    assert (segmented_attention(q, k, v, plan, 0, 0.3, block=block) - ref).abs().max() < 1e-4
    # the last rows alone, as a decode / chunked-prefill step sees them
    tail = segmented_attention(q[:, :, -5:], k, v, plan, 225, 0.3, block=block)
    assert (tail - ref[:, :, -5:]).abs().max() < 1e-4


def test_rows_without_keys_in_a_segment_get_zero_weight():
    # the "far" band is empty for the first 41 rows: they must equal plain local attention
    q, k, v = qkv(60)
    out = segmented_attention(q, k, v, shifted_plan(), 0, 0.3, block=8)
    near_only = AttentionPlan([Segment("near", Band(0, 40))], INV_FREQ)
    assert (out[:, :, :41] - segmented_attention(q, k, v, near_only, 0, 0.3)[:, :, :41]).abs().max() < 1e-6


def test_overlapping_segments_are_detected():
    plan = AttentionPlan([Segment("a", Band(0, 10)), Segment("b", Band(10))], INV_FREQ)
    with pytest.raises(AssertionError, match="overlaps"):
        relative_positions(plan, 0, 20, 20)


def test_memory_stays_linear(monkeypatch):
    """No call materialises an L x L tensor: the CPU kernel's masks (a band's last partial block) stay under
    ``tiles.MASKED_EDGE`` elements, the portable path's ``block`` x ``PORTABLE_MAX_KEYS``, whatever the length
    (O(L * block), not O(L^2))."""
    masks: list[int] = []
    original = kernels.attend_math

    def spy(q, k, v, scale, kind, mask, softcap=None):
        masks.append(0 if mask is None else mask.numel())
        return original(q, k, v, scale, kind, mask, softcap)

    monkeypatch.setattr(kernels, "attend_math", spy)
    cpu_masks: list[object] = []
    cpu_attend = kernels.run_piece

    def cpu_spy(q, k, v, scale, kind, mask, kernel, window=0):
        cpu_masks.append(mask)
        return cpu_attend(q, k, v, scale, kind, mask, kernel, window)

    monkeypatch.setattr(kernels, "run_piece", cpu_spy)
    monkeypatch.setattr(tiles, "MASKED_EDGE", 64 * 64)
    for plan in (shifted_plan(), chunk_plan()):
        q, k, v = qkv(1024, 3, 1)
        ref = oracle_attention(q, k, v, plan, 0, 0.3)
        assert (segmented_attention(q, k, v, plan, 0, 0.3) - ref).abs().max() < 1e-4
    assert cpu_masks and all(mask is None or mask.numel() <= 64 * 64 for mask in cpu_masks)
    monkeypatch.setattr(tile_run, "PORTABLE_MAX_KEYS", 96)
    largest = {}
    for n in (512, 1024):
        masks.clear()
        q, k, v = qkv(n, 3, 1)
        segmented_attention(q, k, v, shifted_plan(), 0, 0.3, block=64, kernel="portable")
        largest[n] = max(masks)
        assert largest[n] <= 64 * 96
    assert largest[1024] == largest[512]


def test_portable_path_with_key_slicing_matches_the_oracle(monkeypatch):
    """The non-CPU path (materialised scores, GQA by broadcasting, wide rectangles cut into slices)."""
    monkeypatch.setattr(tile_run, "PORTABLE_MAX_KEYS", 37)
    q, k, v = qkv(230)
    for plan in (shifted_plan(), chunk_plan()):
        ref = oracle_attention(q, k, v, plan, 0, 0.3)
        out = segmented_attention(q, k, v, plan, 0, 0.3, block=64, kernel="portable")
        assert (out - ref).abs().max() < 1e-4
        step = segmented_attention(q[:, :, -1:], k, v, plan, 229, 0.3, kernel="portable")
        assert (step - ref[:, :, -1:]).abs().max() < 1e-4
