"""The paged cache (what the vLLM backend runs for position methods, its keys inside vLLM's blocks) gives
what the Hugging Face backend's patched attention gives each sequence alone, for every attention-path
method: prompts prefilled whole or in chunks, blocks scattered through the cache, then decode steps."""

import os
import random
import subprocess
import sys

import pytest
import torch

from lampe_eval.attention.kv_cache import RotatedKeyCache
from lampe_eval.attention.paged import (
    EngineKernel,
    PagedCache,
    PagedDecode,
    attend_paged,
    decode_shape,
    key_copies,
)
from lampe_eval.backends.hf.patch import PatchState, attend_patched
from lampe_eval.backends.plans import method_key_copies
from lampe_eval.methods import create_method
from tests.helpers.methods import POSITION_METHODS, WINDOW, base, random_params

D, HQ, HKV, SCALE = 16, 4, 2, 0.25
BLOCK = 8
STEPS = 3


def _tokens(n: int, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
    """Query [1, HQ, n, D], key and value [1, HKV, n, D]."""
    return (
        torch.randn(1, HQ, n, D, generator=generator),
        torch.randn(1, HKV, n, D, generator=generator),
        torch.randn(1, HKV, n, D, generator=generator),
    )


def _tokens_first(x: torch.Tensor) -> torch.Tensor:
    return x[0].transpose(0, 1)  # [n, H, D], the engine's layout


def _chunks(n: int, rng: random.Random, chunked: bool) -> list[tuple[int, int]]:
    if not chunked:
        return [(0, n)]
    cuts = sorted(rng.sample(range(1, n), min(3, n - 1)))
    edges = [0, *cuts, n]
    return list(zip(edges, edges[1:], strict=False))


def _gap(
    method, prompt: int, chunked: bool, seed: int, softcap: float | None = None, key_columns: bool = False
) -> float:
    """Prefill one prompt (whole or in chunks) and decode STEPS tokens through a paged cache with scattered
    blocks; the largest gap to the Hugging Face path (one RotatedKeyCache); ``softcap``: logits soft-capped
    on both; ``key_columns``: the keys stored as vLLM's CPU attention stores them."""
    rng, generator = random.Random(seed), torch.Generator().manual_seed(seed)
    budget = prompt + STEPS
    copies = method_key_copies(method, base())
    blocks_needed = -(-budget // BLOCK)
    cache_tensor = torch.full((blocks_needed + 5, HKV, BLOCK, (copies + 1) * D), float("nan"))
    cache = PagedCache.view(cache_tensor, copies, D, key_columns)
    table = torch.tensor(rng.sample(range(blocks_needed + 5), blocks_needed))
    oracle_state, state = PatchState(method, base(), softcap=softcap), PatchState(method, base(), max_plans=8)
    oracle_cache = RotatedKeyCache(total_length=budget)
    rotated = method.fixed_key_positions()
    q, k, v = _tokens(prompt, generator)
    want = attend_patched(oracle_state, 0, SCALE, q, k, v, oracle_cache)
    plan = state.plan(prompt, prompt, budget)
    gap = 0.0
    for a, b in _chunks(prompt, rng, chunked):
        slots = table[torch.arange(a, b) // BLOCK] * BLOCK + torch.arange(a, b) % BLOCK
        chunk = (_tokens_first(t[:, :, a:b]) for t in (q, k, v))
        got = attend_paged(cache, plan, SCALE, *chunk, slots, table, a, rotated, softcap)
        gap = max(gap, float((_tokens_first(want[:, :, a:b]) - got).abs().max()))
    for step in range(STEPS):
        position = prompt + step
        q, k, v = _tokens(1, generator)
        want = attend_patched(oracle_state, 0, SCALE, q, k, v, oracle_cache)
        plan = state.plan(prompt, position + 1, budget)
        slot = table[position // BLOCK] * BLOCK + position % BLOCK
        new = (_tokens_first(t) for t in (q, k, v))
        got = attend_paged(cache, plan, SCALE, *new, slot[None], table, position, rotated, softcap)
        gap = max(gap, float((_tokens_first(want) - got).abs().max()))
    assert key_copies(plan) <= copies
    return gap


@pytest.mark.parametrize("name", [*POSITION_METHODS, "dynamic_ntk"])
def test_paged_cache_equals_each_sequence_alone(name):
    rng = random.Random(11)
    for trial in range(3):
        method = create_method(name, WINDOW, 4 * WINDOW, **random_params(name, rng))
        for prompt in (WINDOW // 2 + 3, 3 * WINDOW + 5):
            for chunked in (False, True):
                columns = trial == 1  # keys as rows or as columns (vLLM's CPU layout)
                gap = _gap(method, prompt, chunked, seed=trial * 7 + prompt, key_columns=columns)
                assert gap < 2e-5, (name, trial, prompt, chunked, gap)


@pytest.mark.parametrize("name", ["lampe", "selfextend", "dca", "dynamic_ntk"])
def test_soft_capped_logits_on_the_paged_path_equal_the_hf_paths(name):
    """Gemma 2's cap (2: these logits reach about 3) in a chunked prefill and the decode steps after it."""
    method = create_method(name, WINDOW, 4 * WINDOW)
    assert _gap(method, 3 * WINDOW + 5, True, seed=3, softcap=2.0) < 2e-5
    assert _gap(method, 3 * WINDOW + 5, True, seed=3, softcap=None) < 2e-5


def test_a_plan_with_more_copies_than_the_cache_is_refused():
    cache = PagedCache.view(torch.zeros(2, HKV, BLOCK, 2 * D), 1, D)
    with pytest.raises(ValueError, match="2 key copies"):
        cache.write(torch.tensor([0]), [torch.zeros(1, HKV, D)] * 2, torch.zeros(1, HKV, D))


def test_a_cache_row_of_the_wrong_width_is_refused():
    with pytest.raises(ValueError, match="no 2 key copies"):
        PagedCache.view(torch.zeros(2, HKV, BLOCK, 2 * D), 2, D)


def _batched_decode_gap(
    method,
    prompts: list[int],
    seed: int,
    softcap: float | None = None,
    key_columns: bool = False,
    kernel: EngineKernel | None = None,
    triton: bool = False,
) -> float:
    """Prefill each prompt (its own blocks, scattered through one cache), then decode STEPS tokens for all
    of them as batches of one plan shape (:class:`PagedDecode`); the largest gap to the Hugging Face path
    (each sequence alone); ``softcap``: logits soft-capped on both; ``key_columns``: keys stored as vLLM's
    CPU attention stores them; ``kernel``: an engine kernel for batches of one causal run per row; ``triton``:
    the tiles on the Triton kernel (the ``paged-triton`` decode)."""
    rng, generator = random.Random(seed), torch.Generator().manual_seed(seed)
    budgets = [n + STEPS for n in prompts]
    copies = method_key_copies(method, base())
    needed = [-(-b // BLOCK) for b in budgets]
    width = max(needed)
    order = rng.sample(range(sum(needed) + 3), sum(needed))
    tables = torch.zeros(len(prompts), width, dtype=torch.long)
    at = 0
    for row, count in enumerate(needed):
        tables[row, :count] = torch.tensor(order[at : at + count])
        at += count
    cache = PagedCache.view(
        torch.full((sum(needed) + 3, HKV, BLOCK, (copies + 1) * D), float("nan")), copies, D, key_columns
    )
    oracle_state = PatchState(method, base(), softcap=softcap)
    state = PatchState(method, base(), max_plans=64)
    oracles = [RotatedKeyCache(total_length=b) for b in budgets]
    for row, n in enumerate(prompts):
        q, k, v = _tokens(n, generator)
        attend_patched(oracle_state, 0, SCALE, q, k, v, oracles[row])
        slots = tables[row, torch.arange(n) // BLOCK] * BLOCK + torch.arange(n) % BLOCK
        plan = state.plan(n, n, budgets[row])
        prompt = (_tokens_first(t) for t in (q, k, v))
        attend_paged(cache, plan, SCALE, *prompt, slots, tables[row], 0, softcap=softcap)
    gap = 0.0
    for step in range(STEPS):
        new = [_tokens(1, generator) for _ in prompts]
        positions = [n + step for n in prompts]
        want = [
            attend_patched(oracle_state, 0, SCALE, *new[r], oracles[r])[0, :, 0] for r in range(len(prompts))
        ]
        plans = [state.plan(n, p + 1, b) for n, p, b in zip(prompts, positions, budgets, strict=True)]
        steps = [
            plan.segment_step(p, torch.float32, torch.device("cpu"))
            for plan, p in zip(plans, positions, strict=True)
        ]
        groups: dict[tuple, list[int]] = {}
        for row, one in enumerate(steps):
            groups.setdefault(decode_shape(one), []).append(row)
        for rows in groups.values():
            index = torch.tensor(rows)
            slots = torch.tensor(
                [int(tables[r, positions[r] // BLOCK]) * BLOCK + positions[r] % BLOCK for r in rows]
            )
            batch = PagedDecode([steps[r] for r in rows], slots, tables[index], kernel, triton)
            q, k, v = (torch.cat([new[r][i][:, :, 0] for r in rows]) for i in range(3))
            for r, out in zip(rows, batch.attend(cache, SCALE, q, k, v, softcap), strict=True):
                gap = max(gap, float((want[r] - out).abs().max()))
    return gap


@pytest.mark.parametrize("name", POSITION_METHODS)
def test_a_batched_decode_equals_each_sequence_alone(name):
    rng = random.Random(5)
    for trial in range(2):
        method = create_method(name, WINDOW, 4 * WINDOW, **random_params(name, rng))
        if not method.fixed_key_positions():
            continue  # positions that move every step: the per-sequence path
        prompts = [WINDOW // 2 + 3, 3 * WINDOW + 5, 3 * WINDOW + 5, WINDOW + 1]
        gap = _batched_decode_gap(method, prompts, seed=trial, key_columns=trial == 1)
        assert gap < 2e-5, (name, trial, gap)


@pytest.mark.parametrize("name", ["lampe", "dca"])
def test_a_batched_decode_with_soft_capped_logits_equals_each_sequence_alone(name):
    method = create_method(name, WINDOW, 4 * WINDOW)
    prompts = [WINDOW // 2 + 3, 3 * WINDOW + 5, WINDOW + 1]
    assert _batched_decode_gap(method, prompts, seed=4, softcap=2.0) < 2e-5


@pytest.mark.parametrize("name", [*POSITION_METHODS, "ms_poe"])
@pytest.mark.parametrize(("ranks", "rank"), [(2, 0), (2, 1), (4, 3)])
def test_a_plan_for_a_shard_of_the_heads_gives_those_heads_outputs(name: str, ranks: int, rank: int) -> None:
    """A tensor-parallel rank's plan (:meth:`AttentionPlan.for_heads`, the heads vLLM gives it; 4 query and
    2 key heads, so 4 ranks replicate a key head) over its heads' queries and keys gives the rows of the
    whole plan's output for those heads: Ms-PoE's per-head positions are cut, shared ones kept."""
    from lampe_eval.attention.engine import segmented_attention
    from lampe_eval.backends.vllm.worker import shard_heads

    n = 3 * WINDOW
    method = create_method(name, WINDOW, n, **random_params(name, random.Random(7)))
    plan = method.plan_with_budget(base(), n, n, n)
    generator = torch.Generator().manual_seed(1)
    q = torch.randn(1, 4, n, 16, generator=generator, dtype=torch.float64)
    k, v = (torch.randn(1, 2, n, 16, generator=generator, dtype=torch.float64) for _ in range(2))
    whole = segmented_attention(q, k, v, plan, 0, 0.25)
    queries, keys = shard_heads(rank, ranks, 4, 2)
    shard = segmented_attention(q[:, queries], k[:, keys], v[:, keys], plan.for_heads(queries, keys), 0, 0.25)
    assert key_copies(plan.for_heads(queries, keys)) == key_copies(plan)
    assert (shard - whole[:, queries]).abs().max().item() < 1e-6  # fp32 tables, per-call summation order


def test_the_triton_decode_kernel_equals_each_sequence_alone(monkeypatch):
    """The batched decode's Triton kernel (``paged_triton_kernel.py``, its own code) run by Triton's
    interpreter on CPU tensors gives each sequence's attention alone. The interpreter replaces Triton's
    language only when ``TRITON_INTERPRET=1`` is set before Triton is imported: a fresh process runs it."""
    pytest.importorskip("triton")
    if os.environ.get("TRITON_INTERPRET") != "1":
        test = f"{__file__}::test_the_triton_decode_kernel_equals_each_sequence_alone"
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test],
            env={**os.environ, "TRITON_INTERPRET": "1"},
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert result.returncode == 0 and " passed" in result.stdout, (
            result.stdout[-3000:] + result.stderr[-2000:]
        )
        return
    from lampe_eval.attention.kernels import paged_triton

    launches = []
    original = paged_triton.tile_statistics
    monkeypatch.setattr(
        paged_triton,
        "tile_statistics",
        lambda *args, **kwargs: launches.append(1) or original(*args, **kwargs),
    )
    for name in ("lampe", "dca", "string", "selfextend"):
        method = create_method(name, WINDOW, 4 * WINDOW, **random_params(name, random.Random(3)))
        gap = _batched_decode_gap(method, [WINDOW // 2 + 3, 3 * WINDOW + 5, WINDOW + 1], seed=4, triton=True)
        assert gap < 2e-5, (name, gap)
    assert launches, "the kernel ran"


def _one_run_decodes(method, dim: int, lengths: list[int]) -> list:
    """Each row's decode step at ``lengths`` (its keys so far) under ``method`` with heads of ``dim``."""
    from lampe_eval.methods.base import RopeBase

    rope = RopeBase.plain(WINDOW, 4, 2, dim)
    return [
        method.plan_with_budget(rope, n, n + 1, n + 4).segment_step(n, torch.float32, torch.device("cpu"))
        for n in lengths
    ]


@pytest.mark.parametrize(("name", "softcap"), [("ms_poe", None), ("yarn_infoscale", None), ("ms_poe", 2.0)])
def test_the_engine_kernel_decodes_one_run_rows_as_the_tiles_do(name, softcap):
    """vLLM's CPU paged attention (keys stored as columns, which it reads) on a batch whose rows each see
    one causal run of keys gives the tiles' outputs: Ms-PoE (per-head positions), YaRN with InfoScale
    (one segment, a query scale), and Ms-PoE with Gemma 2's soft cap."""
    pytest.importorskip("vllm")
    from lampe_eval.backends.vllm.cpu_decode import cpu_decode_kernel

    dim, block = 64, 16
    kernel = cpu_decode_kernel(torch.float32, block, dim)
    assert kernel is not None, "vLLM's CPU kernel reads keys stored as columns at this shape"
    params = {"infoscale": True} if name == "yarn_infoscale" else {}
    method = create_method(name.removesuffix("_infoscale"), WINDOW, 4 * WINDOW, **params)
    lengths = [WINDOW // 2 + 3, 3 * WINDOW + 5, WINDOW + 1, 1 + block]
    steps = _one_run_decodes(method, dim, lengths)
    generator = torch.Generator().manual_seed(0)
    width = -(-(max(lengths) + 1) // block)  # every row's table as wide as the longest; blocks not shared
    tables = torch.randperm(len(lengths) * width + 2, generator=generator)[: len(lengths) * width]
    tables = tables.view(len(lengths), width)
    copies = 1 + max(steps[0].copies)
    tensor = torch.randn(len(lengths) * width + 2, HKV, block, (copies + 1) * dim, generator=generator)
    slots = torch.tensor([int(tables[r, n // block]) * block + n % block for r, n in enumerate(lengths)])
    q = torch.randn(len(lengths), HQ, dim, generator=generator)
    k, v = (torch.randn(len(lengths), HKV, dim, generator=generator) for _ in range(2))
    outs = []
    for engine in (kernel, None):
        cache = PagedCache.view(tensor.clone(), copies, dim, key_columns=True)
        batch = PagedDecode(steps, slots, tables, engine)
        assert (batch.engine is not None) == (engine is not None)
        outs.append(batch.attend(cache, 0.125, q, k, v, softcap))
    assert (outs[0] - outs[1]).abs().max().item() < 1e-5


def test_the_engine_kernel_is_not_used_where_it_reads_another_key_layout(monkeypatch):
    """The check that vLLM's CPU kernel reads lampe-eval's keys fails when the keys are stored as rows: a
    layout the kernel reads differently leaves the decode to the tiles."""
    pytest.importorskip("vllm")
    from lampe_eval.backends.vllm import cpu_decode as vllm_cpu_decode

    kernel = vllm_cpu_decode.cpu_decode_kernel(torch.float32, 16, 64)
    assert kernel is not None and vllm_cpu_decode._reads_key_columns(kernel, 16, 64)

    class Rows(PagedCache):
        @classmethod
        def view(cls, cache, copies, head_dim, key_columns=False):
            return PagedCache.view(cache, copies, head_dim, key_columns=False)

    monkeypatch.setattr(vllm_cpu_decode, "PagedCache", Rows)
    assert not vllm_cpu_decode._reads_key_columns(kernel, 16, 64)
