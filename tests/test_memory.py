"""The memory estimate (lampe_eval/memory.py) against what the code allocates, and the run's refusal of a
batch that cannot fit, before any model loads."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from typer.testing import CliRunner

from lampe_eval.attention.counts import peak_memory
from lampe_eval.backends.hf import chunked_nll_rows
from lampe_eval.backends.hf.patch import apply_method, new_cache
from lampe_eval.backends.rope_config import rope_base
from lampe_eval.cli import app
from lampe_eval.memory import GIB, KeyRows, ModelShape, count_parameters, estimate, hf_key_rows
from lampe_eval.methods.resolve import resolve_method
from lampe_eval.testing import tiny_family, tiny_llama

WINDOW = 512
LENGTH = 2048  # 4 windows: every segment of every method is active


@pytest.fixture(scope="module")
def model():
    # wide enough heads that the estimate's parts, not allocator crumbs, make the peak
    return tiny_llama(layers=4, heads=4, kv_heads=2, head_dim=64, window=WINDOW, vocab=512)


def generate(model, ids: torch.Tensor, total: int, new: int) -> torch.Tensor:
    cache = new_cache(model, total)
    return model.generate(
        ids, attention_mask=torch.ones_like(ids), past_key_values=cache, max_new_tokens=new,
        min_new_tokens=new, do_sample=False, pad_token_id=0,
    )  # fmt: skip


def test_peak_memory_sees_what_children_held_before_a_parent_freed_it():
    """cross_entropy's log-softmax output lives inside the op and is freed by it: an op's net memory says 0,
    the allocator's running total says logits + log-softmax."""
    block = 1024 * 8192 * 4

    def loss() -> torch.Tensor:
        logits = torch.randn(1024, 8192)
        return F.cross_entropy(logits, torch.zeros(1024, dtype=torch.long), reduction="none").sum()

    _, peak = peak_memory(loss)
    assert 2 * block <= peak < 2.1 * block


@pytest.mark.parametrize("name", ["rope", "lampe", "selfextend", "dca"])
def test_estimate_is_within_15_percent_of_the_allocator_peak(model, name):
    """A generation (prompt + 4 new tokens) and a loss pass over LENGTH tokens: the estimate less the
    weights against torch.profiler's peak (allocated after the model loaded)."""
    method = resolve_method(name, WINDOW, LENGTH).method
    shape = ModelShape.from_config("tiny", model.config)
    guess = estimate(shape, LENGTH, dtype_bytes=4, keys=hf_key_rows(method, rope_base(model, WINDOW), LENGTH))
    ids = torch.randint(0, 512, (1, LENGTH), generator=torch.Generator().manual_seed(0))
    with apply_method(model, method, window=WINDOW):
        _, generation = peak_memory(generate, model, ids[:, : LENGTH - 4], LENGTH, 4)
        _, loss = peak_memory(chunked_nll_rows, model, ids, chunk=1024)
    assert guess.generation - guess.weights == pytest.approx(generation, rel=0.15)
    assert guess.scoring - guess.weights == pytest.approx(loss, rel=0.15)


@pytest.mark.parametrize("name", ["rope", "lampe"])
def test_a_soft_capped_model_counts_its_eager_scores(name):
    """Gemma 2 loads with eager attention (SDPA would drop its cap): the local layers, and the unpatched
    model's every layer, hold n x n scores; the estimate counts them (without them: 27 MiB for 178)."""
    shape_args = {"heads": 4, "kv_heads": 2, "head_dim": 64, "window": WINDOW, "vocab": 512}
    model = tiny_family("gemma2", vary_norms=False, **shape_args)
    assert model.config._attn_implementation == "eager"
    method = resolve_method(name, WINDOW, LENGTH).method
    shape = ModelShape.from_config("tiny", model.config)
    keys = hf_key_rows(method, rope_base(model, WINDOW), LENGTH)
    guess = estimate(shape, LENGTH, dtype_bytes=4, keys=keys, eager_attention=shape.soft_capped)
    ids = torch.randint(0, 512, (1, LENGTH), generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), apply_method(model, method, window=WINDOW):
        _, generation = peak_memory(generate, model, ids[:, : LENGTH - 4], LENGTH, 4)
        _, loss = peak_memory(chunked_nll_rows, model, ids, chunk=1024)
    assert shape.soft_capped
    assert guess.generation - guess.weights == pytest.approx(generation, rel=0.15)
    assert guess.scoring - guess.weights == pytest.approx(loss, rel=0.15)


@pytest.mark.parametrize("name", ["rope", "lampe", "selfextend", "yarn"])
def test_key_rows_are_what_the_cache_holds_after_a_generation(model, name):
    """The estimate's key rows: the primary copy's keys plus every side copy's buffer, as allocated."""
    method = resolve_method(name, WINDOW, LENGTH).method
    ids = torch.randint(0, 512, (1, LENGTH - 1), generator=torch.Generator().manual_seed(1))
    with apply_method(model, method, window=WINDOW):
        cache = new_cache(model, LENGTH)
        model(input_ids=ids, past_key_values=cache, use_cache=True)
    layer = cache.layers[0]
    side = getattr(layer, "side", None)
    buffered = sum(b.data.shape[2] for b in side.buffers.values()) if side is not None else 0
    assert hf_key_rows(method, rope_base(model, WINDOW), LENGTH - 1).rows == layer.keys.shape[2] + buffered


@pytest.mark.parametrize("name", ["rope", "lampe"])
def test_sliding_window_layers_hold_one_window_of_keys(name):
    """Gemma 3's local layers (no method changes them) keep transformers' sliding cache: a window of keys
    and values at most; the estimate's KV cache is what the cache holds after a prompt (every layer
    counted at full length: 2.6x as much here)."""
    from lampe_eval.backends.hf.patch import kv_cache_bytes

    shape_args = {"heads": 4, "kv_heads": 2, "head_dim": 64, "window": WINDOW, "vocab": 512}
    model = tiny_family("gemma3_text", vary_norms=False, **shape_args)
    shape = ModelShape.from_config("tiny", model.config)
    assert (shape.layers, shape.local_layers, shape.local_window) == (3, 2, 16)
    method = resolve_method(name, WINDOW, LENGTH).method
    guess = estimate(shape, LENGTH, dtype_bytes=4, keys=hf_key_rows(method, rope_base(model, WINDOW), LENGTH))
    ids = torch.randint(0, 512, (1, LENGTH), generator=torch.Generator().manual_seed(2))
    with torch.no_grad(), apply_method(model, method, window=WINDOW):
        cache = new_cache(model, LENGTH)
        model(input_ids=ids, past_key_values=cache, use_cache=True)
    assert guess.kv_cache == pytest.approx(kv_cache_bytes(cache), rel=0.02)


def test_vllm_sizes_sliding_window_layers_by_their_window():
    """A sequence's bytes in vLLM's cache: every token's key copies and value in the global layers, a
    window's worth in the local ones (vLLM's sliding-window spec frees the blocks behind the window)."""
    from lampe_eval.memory import kv_bytes_per_token, sequence_kv_bytes

    shape = ModelShape("m", 6, 2, 64, 1e6, local_layers=5, local_window=512)
    assert kv_bytes_per_token(shape, 2) == 1 * 128 * 3 * 2
    assert sequence_kv_bytes(shape, 2, 8192) == 128 * 3 * 2 * 8192 + 5 * 128 * 2 * 512 * 2
    assert sequence_kv_bytes(shape, 1, 100) == 6 * 128 * 2 * 100 * 2


def test_parameters_are_counted_without_weights(model):
    assert count_parameters(model.config) == sum(p.numel() for p in model.parameters())


def test_vllm_keeps_every_copy_for_every_token():
    from lampe_eval.backends.vllm import VLLMBackend
    from lampe_eval.memory import kv_bytes_per_token
    from lampe_eval.settings import RunSettings

    settings = RunSettings(device="cpu", dtype="float32")
    method = resolve_method("lampe", 8192, 32768).method
    guess = VLLMBackend.memory_estimate("smollm2-135m", method, 32768, settings)
    if guess is None:
        pytest.skip("the embedded model's config is not readable here")
    shape = ModelShape.from_config("smollm2", _smollm2_config())
    assert guess.kv_cache == kv_bytes_per_token(shape, 2, 4) * 32768
    assert guess.key_copies == 2


def _smollm2_config():
    from lampe_eval.models import known_config

    return known_config("smollm2-135m")


def test_batch_and_length_scale_the_estimate():
    shape = ModelShape("m", 32, 8, 128, 8e9, heads=32, hidden=4096, intermediate=14336, vocab=128256)
    one = estimate(shape, 32768, keys=KeyRows(2 * 32768, 2, 5))
    two = estimate(shape, 32768, batch=2, keys=KeyRows(2 * 32768, 2, 5))
    assert two.weights == one.weights and two.kv_cache == 2 * one.kv_cache and two.prefill == 2 * one.prefill
    assert one.kv_cache == 32 * 1024 * 3 * 32768 * 2  # values + two key copies, bf16


def test_run_refuses_a_batch_the_device_cannot_hold(monkeypatch):
    """The refusal is one line before any model loads, naming what to change."""
    import lampe_eval.backends.hf.backend as hf

    if _smollm2_config() is None:
        pytest.skip("the embedded model's config is not readable here")
    monkeypatch.setattr(hf, "device_memory", lambda device, count=1: 4 * GIB)
    monkeypatch.setattr(hf, "load_model", lambda *a, **k: pytest.fail("a model loaded"), raising=False)
    args = ["run", "--method", "lampe", "--bench", "pg19", "--len", "64k", "--batch-size", "4", "--dry-run"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    message = result.output.strip()
    assert len(message.splitlines()) == 1, message
    assert "needs about" in message and "cpu's 4.00 GiB" in message and "lower --batch-size" in message


def test_dry_run_prints_the_estimate():
    if _smollm2_config() is None:
        pytest.skip("the embedded model's config is not readable here")
    args = ["run", "--method", "rope,selfextend", "--bench", "pg19", "--len", "16k", "--dry-run"]
    args += ["--opt", "pg19_source=offline"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "memory at the peak (hf" in result.output
    assert "smollm2-135m | selfextend | 16k: " in result.output and "+ a loss pass " in result.output


def test_docs_table_is_what_the_code_prints():
    from pathlib import Path

    from lampe_eval.memory import estimate_table

    docs = (Path(__file__).resolve().parents[1] / "docs" / "memory.md").read_text()
    assert estimate_table() in docs
    assert "| Llama-3-8B | lampe | 128K | 2 |" in estimate_table()


def test_the_refusal_holds_the_estimate_against_the_worker_device(monkeypatch):
    import lampe_eval.backends.hf.backend as hf
    from lampe_eval.settings import RunSettings

    need = estimate(ModelShape("m", 2, 2, 64, 1e6, vocab=100), 1 << 20, dtype_bytes=4)
    monkeypatch.setattr(hf, "device_memory", lambda device, count=1: need.total - 1)
    assert "needs about" in hf.HFBackend.memory_refusal(need, False, RunSettings(device="cpu"))
    assert hf.HFBackend.memory_refusal(need, True, RunSettings(device="cpu")) is None  # a loss pass fits
    assert hf.HFBackend.memory_refusal(need, False, RunSettings(ray=True)) is None  # devices elsewhere
