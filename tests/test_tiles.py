"""Compiled prefills (``attention/tiles.py``): every region's tiles cover its pairs exactly once, a prefill
costs a few kernel calls whatever the length, and no tensor is read back on the host."""

import random

import pytest
import torch

from lampe_eval.attention import (
    AttentionPlan,
    Band,
    ChunkRelation,
    Segment,
    kernels,
    segmented_attention,
    tiles,
)
from lampe_eval.attention.counts import CountOps, count
from lampe_eval.attention.reference import oracle_attention
from lampe_eval.attention.regions import FirstKeys
from lampe_eval.backends.hf.patch import apply_method
from lampe_eval.methods import METHODS, RopeBase, create_method
from lampe_eval.testing import tiny_llama

POSITION_METHODS = [m for m in METHODS.names() if METHODS.get(m).kind != "baseline"]


def random_region(rng: random.Random):
    kind = rng.choice("bfc")
    if kind == "b":
        lo = rng.randint(0, 40)
        return Band(lo, rng.choice([None, lo + rng.randint(0, 40)]))
    if kind == "f":
        return FirstKeys(rng.randint(1, 20), rng.randint(1, 30))
    return ChunkRelation(rng.randint(1, 20), rng.randint(0, 2))


def covered(region, first: int, n: int, flash: bool) -> torch.Tensor:
    """How often each (query row, key) pair is attended by the region's tiles, checking each tile's shape
    against what its kernel takes."""
    cover = torch.zeros(n, first + n, dtype=torch.int32)
    for tile in tiles.tiles(region, 0, first, n, flash):
        assert tile.kind in (
            ("full", "causal", "window", "anticausal") if flash else ("full", "causal", "anticausal", "mask")
        )
        if tile.kind == "causal" and not flash:
            assert tile.keys == tile.rows, "the CPU kernel's causal mask is top-left: squares only"
        if tile.kind == "anticausal":
            assert tile.keys == tile.rows - 1
        start, stop = tile.visible(torch.arange(tile.rows))
        for block in range(tile.blocks):
            k0 = tile.k0 + block * tile.step
            assert k0 >= 0 and k0 + tile.keys <= first + n, tile
            for r in range(tile.rows):
                cover[tile.r0 + block * tile.rows + r, k0 + int(start[r]) : k0 + int(stop[r])] += 1
    return cover


@pytest.mark.parametrize("flash", [True, False])
@pytest.mark.parametrize("masked_edge", [tiles.MASKED_EDGE, 0])
def test_tiles_cover_each_pair_of_the_region_once(flash, masked_edge, monkeypatch):
    monkeypatch.setattr(tiles, "MASKED_EDGE", masked_edge)
    rng = random.Random(f"{flash}{masked_edge}")
    for _ in range(150):
        region, n = random_region(rng), rng.randint(2, 90)
        first = rng.choice([0, rng.randint(0, 60)])  # a prefill continued from `first`
        expected = region.dense_mask(torch.arange(first, first + n), first + n).int()
        assert torch.equal(covered(region, first, n, flash), expected), (region, first, n)


def test_the_three_tile_edge_runs_exactly(monkeypatch):
    """A band's partial block too wide to mask (left edge, rectangle, right edge) through the engine."""
    monkeypatch.setattr(tiles, "MASKED_EDGE", 0)
    inv_freq = 1.0 / (10000 ** (torch.arange(0, 16, 2).float() / 16))
    plan = AttentionPlan(
        [Segment("near", Band(0, 40)), Segment("far", Band(41), lambda i: i.float() / 4)], inv_freq
    )
    q, k, v = torch.randn(1, 4, 230, 16), torch.randn(1, 2, 230, 16), torch.randn(1, 2, 230, 16)
    ref = oracle_attention(q, k, v, plan, 0, 0.3)
    assert (segmented_attention(q, k, v, plan, 0, 0.3) - ref).abs().max() < 1e-4


SHAPES = {"llama-3-8b": (8192, 500000.0, 32, 8), "qwen2-7b": (32768, 1000000.0, 28, 4)}


def test_kernel_calls_per_layer_stay_few_at_32k_and_128k(monkeypatch):
    """Schedule only: the FlashAttention call replaced by a stub that counts (and computes nothing); the
    models' windows, bases and heads, head dimension 8 (the tiles depend on lengths, not on the dimension)."""
    calls: list[tuple] = []

    def stub():
        def call(q, k, v, scale, causal, window):
            calls.append((q.shape, k.shape, causal, window))
            return torch.zeros_like(q), q.new_zeros(q.shape[0], q.shape[2], q.shape[1])

        return call

    monkeypatch.setitem(kernels.FLASH_CALLS, "torch", stub)
    for shape, (window, theta, heads, kv_heads) in SHAPES.items():
        base = RopeBase.plain(window, heads, kv_heads, 8, theta)
        for length in (32768, 131072):
            # on the meta device nothing is computed (and a host read would raise)
            q, k = (
                torch.zeros(1, heads, length, 8, device="meta"),
                torch.zeros(1, kv_heads, length, 8, device="meta"),
            )
            v = k
            for name in POSITION_METHODS:
                extra = {"identity_within_window": False} if name == "lampe" else {}
                plan = create_method(name, window, length, **extra).plan(base, length, length)
                calls.clear()
                _, counts = count(segmented_attention, q, k, v, plan, 0, 0.1, kernel="torch")
                label = f"{name} {shape} {length}"
                assert len(calls) <= 2 * len(plan.segments) + 2, label
                assert counts.syncs == 0, label
                if name == "lampe":
                    assert len(calls) <= 4, label  # head, middle (causal rows + cut rows), tail


def test_a_patched_prefill_reads_nothing_back_on_the_host():
    """Whole-model forwards on the CPU kernel: no tensor-to-Python conversion once the plan is made (the
    unpatched model has none either), at most 8 attention kernels per layer."""
    model = tiny_llama(layers=2, heads=4, kv_heads=2, head_dim=16, window=256, vocab=128)
    ids = torch.randint(0, 128, (1, 1024), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        for name in POSITION_METHODS:
            with apply_method(model, create_method(name, 256, 1024)):
                model(ids)  # the plan is made (LaMPE's mapping reads a few numbers)
                with CountOps() as counts:
                    model(ids)
            assert counts.syncs == 0, name
            assert counts.attention <= 8 * 2, name


@pytest.mark.parametrize("portable", [False, True])
def test_a_batch_of_sequences_equals_each_alone(portable):
    """Blocks stacked as a batch (windowed bands on the CPU kernel, DCA's whole chunks) keep each sequence
    of a batch apart: a batch of 3 gives each sequence's own output."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0, 16, 2).float() / 16))
    near_far = [Segment("near", Band(0, 20)), Segment("far", Band(21), lambda i: i.float() / 4)]
    chunks = [
        Segment(f"gap{g}", ChunkRelation(30, g), lambda i: (i % 30).float(), lambda j: (j % 30).float())
        for g in range(3)
    ]
    for segments in (near_far, chunks):
        plan = AttentionPlan(segments, inv_freq)
        assert any(
            t.blocks > 1 for s, seg in enumerate(segments) for t in tiles.tiles(seg.region, s, 0, 200, False)
        )
        q, k, v = torch.randn(3, 4, 200, 16), torch.randn(3, 2, 200, 16), torch.randn(3, 2, 200, 16)
        kernel = "portable" if portable else None
        together = segmented_attention(q, k, v, plan, 0, 0.25, kernel=kernel)
        for b in range(3):
            alone = segmented_attention(
                q[b : b + 1], k[b : b + 1], v[b : b + 1], plan, 0, 0.25, kernel=kernel
            )
            assert (together[b : b + 1] - alone).abs().max() < 1e-5
            ref = oracle_attention(q[b : b + 1], k[b : b + 1], v[b : b + 1], plan, 0, 0.25)
            assert (alone - ref).abs().max() < 1e-4
