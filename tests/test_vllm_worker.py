"""The vLLM worker's state lives on vLLM's ``Attention`` layers (no engine: a stand-in model and worker):
install puts it there, a batch starts with empty pools, uninstall leaves the layers as they were, and the
metadata builder's preparation of a pass groups prefills and decode rows as the patched layers run them.
Skipped where vLLM is not installed."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from lampe_eval.attention.kernels import KernelChoice

pytest.importorskip("vllm")

from vllm.model_executor.layers.attention import Attention  # noqa: E402

from lampe_eval.backends.plans import PlanCache  # noqa: E402
from lampe_eval.backends.vllm.attention import (  # noqa: E402
    EngineLayer,
    LampeAttentionImpl,
    PatchedLayer,
    RequestPlans,
    patched_layer,
    request_budget,
)
from lampe_eval.backends.vllm.constants import BUDGET, KEY_COPIES  # noqa: E402
from lampe_eval.backends.vllm.worker import install, uninstall  # noqa: E402
from lampe_eval.errors import LampeEvalError  # noqa: E402
from lampe_eval.methods import create_method  # noqa: E402
from tests.helpers.methods import WINDOW, base  # noqa: E402

LAYERS, SLOTS = 3, 4


class _Layer(Attention):
    """vLLM's Attention class without its engine (the worker only keeps state on it), its attention
    lampe-eval's (an instance made without vLLM's constructor)."""

    def __init__(self) -> None:
        torch.nn.Module.__init__(self)
        self.impl = LampeAttentionImpl.__new__(LampeAttentionImpl)
        self.layer_name = "layer"


class _Rotary(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("cos_sin_cache", torch.zeros(64, 16))


def _worker() -> SimpleNamespace:
    """A worker whose model has LAYERS rotary attention modules sharing one rotary embedding (as vLLM's
    get_rope cache makes them), their Attention layers in the static forward context."""
    rotary = _Rotary()
    blocks = torch.nn.ModuleList()
    for _ in range(LAYERS):
        block = torch.nn.Module()
        block.self_attn = torch.nn.Module()
        block.self_attn.rotary_emb = rotary
        block.self_attn.attn = _Layer()
        blocks.append(block)
    model = torch.nn.Module()
    model.model = torch.nn.Module()
    model.model.layers = blocks
    context = {f"model.layers.{i}.self_attn.attn": b.self_attn.attn for i, b in enumerate(blocks)}
    return SimpleNamespace(
        model_runner=SimpleNamespace(get_model=lambda: model, requests={}, input_batch=None),
        vllm_config=SimpleNamespace(
            compilation_config=SimpleNamespace(static_forward_context=context),
            scheduler_config=SimpleNamespace(max_num_seqs=SLOTS),
        ),
        blocks=blocks,
        rotary=rotary,
    )


def test_an_attention_method_lives_on_the_layers_and_uninstall_removes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(KEY_COPIES, "2")  # LaMPE's head and tail share a key map; its middle has another
    worker = _worker()
    method = create_method("lampe", WINDOW, 4 * WINDOW, s1=8, s2=4, m=60, identity_within_window=False)
    assert install(worker, method, base()) == "attention"
    states = [patched_layer(b.self_attn.attn) for b in worker.blocks]
    assert all(isinstance(s, EngineLayer) for s in states)
    engine = [s for s in states if isinstance(s, EngineLayer)]
    assert len({id(s.plans) for s in engine}) == 1  # one state shared by every patched layer
    assert engine[0].plans.state.method is method and engine[0].plans.runner is worker.model_runner
    assert all(b.self_attn.rotary_emb is not worker.rotary for b in worker.blocks)
    uninstall(worker)
    assert all(patched_layer(b.self_attn.attn) is None for b in worker.blocks)
    assert all(b.self_attn.rotary_emb is worker.rotary for b in worker.blocks)


def test_a_method_with_more_key_copies_than_the_engine_holds_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(KEY_COPIES, "1")
    method = create_method("lampe", WINDOW, 4 * WINDOW, s1=8, s2=4, m=60, identity_within_window=False)
    with pytest.raises(
        LampeEvalError, match="keeps 2 rotated key copies per token; this engine's cache holds 1"
    ):
        install(_worker(), method, base())


def test_a_layer_running_a_stock_attention_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_COPIES, "2")
    worker = _worker()
    worker.blocks[1].self_attn.attn.impl = object()  # vLLM picked another backend for this layer
    method = create_method("lampe", WINDOW, 4 * WINDOW, s1=8, s2=4, m=60, identity_within_window=False)
    with pytest.raises(LampeEvalError, match="runs object, not lampe-eval's attention"):
        install(worker, method, base())
    assert all(patched_layer(b.self_attn.attn) is None for b in worker.blocks)  # nothing half-installed


def test_a_frequency_method_gets_one_table_copy_and_uninstall_restores_it() -> None:
    worker = _worker()
    method = create_method("linear", WINDOW, 4 * WINDOW)
    assert install(worker, method, base()) == "frequencies"
    copies = {id(b.self_attn.rotary_emb) for b in worker.blocks}
    assert len(copies) == 1 and id(worker.rotary) not in copies  # one copy for the shared embedding
    states = [patched_layer(b.self_attn.attn) for b in worker.blocks]
    assert all(type(s) is PatchedLayer for s in states)
    assert float(worker.rotary.cos_sin_cache.abs().sum()) == 0  # the original's table is untouched
    assert install(worker, create_method("rope", WINDOW, 4 * WINDOW), base()) == "none"  # uninstalls
    assert all(patched_layer(b.self_attn.attn) is None for b in worker.blocks)
    assert all(b.self_attn.rotary_emb is worker.rotary for b in worker.blocks)


def _runner(requests: dict[str, tuple[int, SimpleNamespace]], order: list[str]) -> SimpleNamespace:
    """vLLM's V1 model runner as the plans read it: request states by id, the pass's rows in order."""
    return SimpleNamespace(
        requests={
            rid: SimpleNamespace(prompt_token_ids=[0] * n, sampling_params=sampling)
            for rid, (n, sampling) in requests.items()
        },
        input_batch=SimpleNamespace(req_ids=order),
    )


def _common(starts: list[int], seq_lens: list[int]) -> SimpleNamespace:
    """vLLM's CommonAttentionMetadata as the builder reads it."""
    return SimpleNamespace(
        query_start_loc_cpu=torch.tensor(starts),
        seq_lens=torch.tensor(seq_lens),
        num_reqs=len(seq_lens),
        slot_mapping=torch.arange(starts[-1]),
        block_table_tensor=torch.zeros(len(seq_lens), 4, dtype=torch.long),
    )


def test_each_rows_plan_comes_from_its_own_request_in_any_order() -> None:
    method = create_method("lampe", WINDOW, 4 * WINDOW, s1=8, s2=4, m=60, identity_within_window=False)
    cache = PlanCache(method, base(), max_plans=SLOTS)
    sampling = SimpleNamespace(max_tokens=10, extra_args=None)
    scored = SimpleNamespace(max_tokens=1, extra_args={BUDGET: None})
    runner = _runner({"a": (130, sampling), "b": (150, sampling), "c": (150, scored)}, ["c", "a", "b"])
    plans = RequestPlans(cache, runner)
    # c prefills its first chunk (60 of 150 tokens), a decodes, b prefills whole
    choice = KernelChoice("cpu", "paged-torch")
    step = plans.prepare(
        _common([0, 60, 61, 211], [60, 131, 150]), torch.float32, torch.device("cpu"), choice
    )
    assert [(r.first, r.stop, r.q_start, r.table_row) for r in step.rows] == [(0, 60, 0, 0), (61, 211, 0, 2)]
    # a chunk's plan is its whole prompt's; each request's budget is its own
    assert step.rows[0].plan is cache.plan(150, 150, None)
    assert step.rows[1].plan is cache.plan(150, 150, 160)
    # the decode row: one batch, its query's rotation that of its own plan at its position
    [(tokens, batch)] = step.decodes
    assert tokens.tolist() == [60] and batch.rows == 1
    own = cache.plan(130, 131, 140).segment_step(130, torch.float32, torch.device("cpu"))
    assert torch.equal(batch.query_rotation[0], own.query_rotation)


def test_a_requests_budget_is_its_prompt_and_max_tokens_unless_it_says() -> None:
    assert request_budget(100, SimpleNamespace(max_tokens=28, extra_args=None)) == 128
    assert request_budget(100, SimpleNamespace(max_tokens=1, extra_args={BUDGET: None})) is None
    assert request_budget(100, SimpleNamespace(max_tokens=1, extra_args={BUDGET: 300})) == 300
