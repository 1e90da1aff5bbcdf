"""The vLLM worker's state lives on vLLM's ``Attention`` layers (no engine: a stand-in model and worker):
install puts it there, a batch starts with empty pools, uninstall leaves the layers as they were, and the
metadata builder's preparation of a pass groups prefills and decode rows as the patched layers run them.
Skipped where vLLM is not installed."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("vllm")

from vllm.model_executor.layers.attention import Attention  # noqa: E402

from lampe_eval.backends.plans import PlanCache  # noqa: E402
from lampe_eval.backends.vllm_attention import EngineLayer, PatchedLayer, Sequences, patched_layer  # noqa: E402
from lampe_eval.backends.vllm_worker import begin_batch, install, uninstall  # noqa: E402
from lampe_eval.methods import create_method  # noqa: E402
from tests.test_methods_exact import WINDOW, base  # noqa: E402

LAYERS, SLOTS = 3, 4


class _Layer(Attention):
    """vLLM's Attention class without its engine (the worker only keeps state on it)."""

    def __init__(self) -> None:
        torch.nn.Module.__init__(self)


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
        model_runner=SimpleNamespace(get_model=lambda: model),
        vllm_config=SimpleNamespace(
            compilation_config=SimpleNamespace(static_forward_context=context),
            scheduler_config=SimpleNamespace(max_num_seqs=SLOTS),
        ),
        blocks=blocks,
        rotary=rotary,
    )


def test_an_attention_method_lives_on_the_layers_and_uninstall_removes_it() -> None:
    worker = _worker()
    method = create_method("lampe", WINDOW, 4 * WINDOW, s1=8, s2=4, m=60, identity_within_window=False)
    assert install(worker, method, base()) == "attention"
    states = [patched_layer(b.self_attn.attn) for b in worker.blocks]
    assert all(isinstance(s, EngineLayer) for s in states)
    engine = [s for s in states if isinstance(s, EngineLayer)]
    assert len({id(s.sequences) for s in engine}) == 1  # one state shared by every patched layer
    assert engine[0].sequences.state.method is method and engine[0].sequences.slots == SLOTS
    assert all(s.rotary is worker.rotary for s in engine)
    assert all(b.self_attn.rotary_emb is not worker.rotary for b in worker.blocks)
    begin_batch(worker, {100: 120}, 120)
    assert engine[0].sequences.budgets == {100: 120}
    assert all(s.pool.capacity == 120 and s.pool.slots == SLOTS for s in engine)
    begin_batch(worker, {}, 0)
    assert all(s.pool.capacity == 0 for s in engine)
    uninstall(worker)
    assert all(patched_layer(b.self_attn.attn) is None for b in worker.blocks)
    assert all(b.self_attn.rotary_emb is worker.rotary for b in worker.blocks)


def test_a_frequency_method_gets_one_table_copy_and_uninstall_restores_it() -> None:
    worker = _worker()
    method = create_method("linear", WINDOW, 4 * WINDOW)
    assert install(worker, method, base()) == "frequencies"
    copies = {id(b.self_attn.rotary_emb) for b in worker.blocks}
    assert len(copies) == 1 and id(worker.rotary) not in copies  # one copy for the shared embedding
    states = [patched_layer(b.self_attn.attn) for b in worker.blocks]
    assert all(type(s) is PatchedLayer for s in states)
    assert float(worker.rotary.cos_sin_cache.abs().sum()) == 0  # the original's table is untouched
    begin_batch(worker, {10: None}, 10)  # no engine state: nothing to start
    assert install(worker, create_method("rope", WINDOW, 4 * WINDOW), base()) == "none"  # uninstalls
    assert all(patched_layer(b.self_attn.attn) is None for b in worker.blocks)
    assert all(b.self_attn.rotary_emb is worker.rotary for b in worker.blocks)


def _common(starts: list[int], seq_lens: list[int], first_blocks: list[int]) -> SimpleNamespace:
    """vLLM's CommonAttentionMetadata as the builder reads it."""
    return SimpleNamespace(
        query_start_loc_cpu=torch.tensor(starts),
        seq_lens=torch.tensor(seq_lens),
        block_table_tensor=torch.tensor(first_blocks)[:, None],
    )


def test_a_pass_groups_prefills_by_plan_and_length_and_batches_decode_rows() -> None:
    method = create_method("lampe", WINDOW, 4 * WINDOW, s1=8, s2=4, m=60, identity_within_window=False)
    sequences = Sequences(PlanCache(method, base(), max_plans=SLOTS), SLOTS)
    sequences.begin({130: 140, 150: 160}, 160)
    cpu = torch.device("cpu")
    # three prefills: two of 130 tokens (one call), one of 150
    prefill = sequences.prepare(_common([0, 130, 260, 410], [130, 130, 150], [7, 9, 11]), torch.float32, cpu)
    assert [(c.rows, c.slots, c.q_start) for c in prefill.calls] == [
        ([(0, 130), (130, 260)], [0, 1], 0),
        ([(260, 410)], [2], 0),
    ]
    assert prefill.decodes == []
    # the next pass: one decode row each, consecutive rows read as one slice
    decode = sequences.prepare(_common([0, 1, 2, 3], [131, 131, 151], [7, 9, 11]), torch.float32, cpu)
    assert decode.calls == []
    rows = [r for r, _ in decode.decodes]
    assert all(isinstance(r, slice) for r in rows)
    assert sorted(i for r in rows for i in range(3)[r]) == [0, 1, 2]
    assert sum(batch.rows for _, batch in decode.decodes) == 3
