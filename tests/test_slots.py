"""The slot pool and the batched decode step (what the vLLM backend runs for position methods) give what
the Hugging Face backend's patched attention gives each sequence alone, for every attention-path method."""

import random

import pytest
import torch

from lampe_eval.attention.kv_cache import RotatedKeyCache
from lampe_eval.attention.slots import DecodeBatch, SlotPool, attend_sequence, decode_batches
from lampe_eval.backends.hf_patch import PatchState, attend_patched
from lampe_eval.methods import create_method
from tests.test_methods_exact import POSITION_METHODS, WINDOW, base, random_params

D, HQ, HKV, SCALE = 16, 4, 2, 0.25
STEPS = 4


def _tokens(n: int, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
    return (
        torch.randn(1, HQ, n, D, generator=generator),
        torch.randn(1, HKV, n, D, generator=generator),
        torch.randn(1, HKV, n, D, generator=generator),
    )


def _run_both(method, prompts: list[int], slots: list[int], pool_slots: int, seed: int) -> float:
    """Prefill every prompt, then decode STEPS tokens for all of them; the largest gap between the pool
    (batched decode) and the Hugging Face path (one RotatedKeyCache per sequence)."""
    generator = torch.Generator().manual_seed(seed)
    budgets = [n + STEPS for n in prompts]
    oracle_state, state = PatchState(method, base()), PatchState(method, base(), max_plans=64)
    caches = [RotatedKeyCache(total_length=b) for b in budgets]
    pool = SlotPool(pool_slots, max(budgets))
    rotated = method.fixed_key_positions()
    gap = 0.0
    for n in dict.fromkeys(prompts):  # prompts of one length: one prefill call
        rows = [r for r, length in enumerate(prompts) if length == n]
        q, k, v = (torch.cat(t) for t in zip(*(_tokens(n, generator) for _ in rows), strict=True))
        want = torch.cat(
            [
                attend_patched(oracle_state, 0, SCALE, q[i : i + 1], k[i : i + 1], v[i : i + 1], caches[r])
                for i, r in enumerate(rows)
            ]
        )
        plan = state.plan(n, n, budgets[rows[0]])
        got = attend_sequence(pool, [slots[r] for r in rows], plan, SCALE, q, k, v, 0, rotated)
        gap = max(gap, float((want - got).abs().max()))
    for step in range(STEPS):
        new = [_tokens(1, generator) for _ in prompts]
        positions = [n + step for n in prompts]
        want = [
            attend_patched(oracle_state, 0, SCALE, *new[r], caches[r])[0, :, 0] for r in range(len(prompts))
        ]
        plans = [state.plan(n, p + 1, b) for n, p, b in zip(prompts, positions, budgets, strict=True)]
        if not rotated:  # keys re-rotated every step: the per-sequence path
            got = [
                attend_sequence(pool, [slots[r]], plans[r], SCALE, *new[r], positions[r], False)[0, :, 0]
                for r in range(len(prompts))
            ]
        else:
            got = [torch.empty(0)] * len(prompts)
            cpu = torch.device("cpu")
            steps = [
                plan.segment_step(p, torch.float32, cpu) for plan, p in zip(plans, positions, strict=True)
            ]
            for rows, batch in decode_batches(steps, slots, positions):
                q, k, v = (torch.cat([new[r][i][:, :, 0] for r in rows]) for i in range(3))
                for r, out in zip(rows, batch.attend(pool, SCALE, q, k, v), strict=True):
                    got[r] = out
        gap = max(gap, max(float((w - g).abs().max()) for w, g in zip(want, got, strict=True)))
    return gap


@pytest.mark.parametrize("name", [*POSITION_METHODS, "dynamic_ntk"])
def test_batched_decode_equals_each_sequence_alone(name):
    rng = random.Random(11)
    for trial in range(3):
        method = create_method(name, WINDOW, 4 * WINDOW, **random_params(name, rng))
        # lengths within and past the window, two prompts of one length prefilled in one call; slots out
        # of order with an idle one (slot 2) between
        gap = _run_both(method, [150, 97, 150, 40], [3, 0, 1, 5], 6, seed=trial)
        assert gap < 2e-5, f"{method.label()}: {gap}"


def test_dense_slots_and_one_shared_plan():
    """Rows in slots 0..n-1 with one plan: no placement, one shared rotation."""
    method = create_method("lampe", WINDOW, 4 * WINDOW, s1=8, s2=4, m=60, identity_within_window=False)
    assert _run_both(method, [130, 130, 130], [0, 1, 2], 3, seed=5) < 2e-5
    plan = PatchState(method, base()).plan(130, 131, None)
    step = plan.segment_step(130, torch.float32, torch.device("cpu"))
    batch = DecodeBatch([step, step], [0, 1], [130, 130])
    assert batch.dense and batch.query_rotation.shape[0] == 1
    assert batch.tiled  # head, middle and tail tile [0, 131): one matmul reads the values
    longer = (
        PatchState(method, base()).plan(150, 151, None).segment_step(150, torch.float32, torch.device("cpu"))
    )
    assert not DecodeBatch([step, longer], [0, 1], [130, 150]).tiled  # (the main test runs both kinds)


def test_a_slot_refuses_tokens_past_its_capacity():
    method = create_method("lampe", WINDOW, 4 * WINDOW, s1=8, s2=4, m=60, identity_within_window=False)
    pool = SlotPool(1, 10)
    q, k, v = _tokens(12, torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="holds 10"):
        attend_sequence(pool, [0], PatchState(method, base()).plan(12, 12, None), SCALE, q, k, v, 0)
