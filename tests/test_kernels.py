"""The CUDA kernel dispatch, checked on CPU against emulations of the kernels' contracts.

``tests/kernel_contracts.py`` emulates flash-attn's ``flash_attn_func`` and PyTorch's
``aten._flash_attention_forward`` (both FlashAttention-2); the first tests check the emulation against
the contract's documented examples (``docs/gpu.md``), the others run the engine through it.
"""

import random
import re
import sys
import zlib

import pytest
import torch

from lampe_eval.attention import kernels, segmented_attention
from lampe_eval.attention.kernels import flash as flash_kernels
from lampe_eval.attention.reference import oracle_attention
from lampe_eval.errors import LampeEvalError
from lampe_eval.methods import create_method

from .helpers.methods import POSITION_METHODS, WINDOW, base, random_params
from .kernel_contracts import (
    ContractError,
    CudnnEmulator,
    FlashAttnEmulator,
    TorchFlashEmulator,
    fa2_forward,
    fa2_visible,
    fake_flash_attn,
)

D = 16


# ------------------------------------------------------------------ the emulation against the contract
def test_emulated_mask_reproduces_the_documented_causal_examples():
    # flash_attn_interface.py (v2.8.3), flash_attn_func docstring: seqlen_q = 2, seqlen_k = 5 and 5, 2
    assert fa2_visible(2, 5, True, (-1, -1)).int().tolist() == [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]
    expected = [[0, 0], [0, 0], [0, 0], [1, 0], [1, 1]]
    assert fa2_visible(5, 2, True, (-1, -1)).int().tolist() == expected
    # a square causal mask is the usual lower triangle; one query sees every key (causal dropped)
    assert torch.equal(fa2_visible(4, 4, True, (-1, -1)), torch.ones(4, 4, dtype=torch.bool).tril())
    assert fa2_visible(1, 6, True, (-1, -1)).all()


def test_emulated_window_follows_flash_api_where_the_docstring_is_silent():
    # 7 queries, 2 keys, window (0, -1): right becomes seqlen_k = 2, so query 0 sees keys <= 0 - 5 + 2
    assert not fa2_visible(7, 2, False, (0, -1))[:3].any()
    assert fa2_visible(7, 2, False, (0, -1))[5:].any()


@pytest.mark.parametrize(("sq", "sk"), [(5, 5), (3, 8), (1, 4), (4, 3)])
@pytest.mark.parametrize("window", [(0, -1), (2, 0), (1, 1), (-1, 2), (0, 0), (9, -1)])
def test_emulated_window_is_the_documented_interval(sq, sk, window):
    """Flash-attn's docstring: "Query at position i will only attend to keys between
    [i + seqlen_k - seqlen_q - window_size[0], i + seqlen_k - seqlen_q + window_size[1]] inclusive"
    (-1: unbounded on that side). flash_api.cpp replaces a -1 opposite a bounded side by seqlen_k, which
    is unbounded in effect only when seqlen_q <= seqlen_k + 1 (true here, and for the engine's squares)."""
    left, right = window
    keep = fa2_visible(sq, sk, False, window)
    for i in range(sq):
        lo = -(10**9) if left < 0 else i + sk - sq - left
        hi = 10**9 if right < 0 else i + sk - sq + right
        assert keep[i].tolist() == [lo <= j <= hi for j in range(sk)], (i, window)


def test_emulated_outputs_lse_units_gqa_and_empty_rows():
    q = torch.randn(2, 5, 6, D)  # [B, Sq, H, D]
    k, v = torch.randn(2, 2, 3, D), torch.randn(2, 2, 3, D)  # 3 KV heads: query heads 0-1 read KV head 0
    out, lse = fa2_forward(q, k, v, 0.3, True, (-1, -1), half_only=False)
    assert out.shape == q.shape and lse.shape == (2, 6, 5) and lse.dtype == torch.float32
    # rows 0-2 see no key (bottom-right alignment of 5 queries on 2 keys): out 0, lse +inf
    assert (out[:, :3] == 0).all() and torch.isinf(lse[..., :3]).all() and (lse[..., :3] > 0).all()
    for h in range(6):
        g = h // 2
        scores = torch.einsum("bd,bkd->bk", q[:, 4, h], k[:, :, g]) * 0.3  # the last row sees both keys
        assert torch.allclose(lse[:, h, 4], torch.logsumexp(scores, dim=-1), atol=1e-5)  # natural log
        ref = torch.einsum("bk,bkd->bd", torch.softmax(scores, dim=-1), v[:, :, g])
        assert torch.allclose(out[:, 4, h], ref, atol=1e-5)


def test_emulation_agrees_with_pytorch_on_a_square_causal_piece():
    q, k, v = torch.randn(1, 7, 4, D), torch.randn(1, 7, 2, D), torch.randn(1, 7, 2, D)
    out, lse = fa2_forward(q, k, v, 0.25, True, (-1, -1), half_only=False)
    ref, ref_lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q.transpose(1, 2),
        k.transpose(1, 2).repeat_interleave(2, 1),
        v.transpose(1, 2).repeat_interleave(2, 1),
        0.0,
        True,
        scale=0.25,
    )[:2]
    assert torch.allclose(out, ref.transpose(1, 2), atol=1e-5) and torch.allclose(lse, ref_lse, atol=1e-5)


def test_emulation_refuses_what_the_kernel_refuses():
    q, k = torch.randn(1, 4, 4, D), torch.randn(1, 4, 3, D)
    with pytest.raises(ContractError, match="divide"):
        fa2_forward(q, k, k, 1.0, False, (-1, -1), half_only=False)
    with pytest.raises(ContractError, match="fp16 and bf16"):
        fa2_forward(q, q, q, 1.0, False, (-1, -1))
    with pytest.raises(ContractError, match="contiguous last"):
        strided = torch.randn(1, 4, 4, D, 2)[..., 0]  # right shape, last dimension not contiguous
        fa2_forward(strided, q, q, 1.0, False, (-1, -1), half_only=False)


# ------------------------------------------------------------------------------------- dispatch
def installed(flash_attn: bool = False, triton: bool = False, cudnn: bool = False) -> kernels.Installed:
    return kernels.Installed(flash_attn=flash_attn, triton=triton, cudnn_preferred=cudnn)


def test_prefill_choices():
    half, full = torch.bfloat16, torch.float32
    select = kernels.select
    assert select("cpu", full, installed=installed()).prefill == "cpu"
    assert select("cpu", half, installed=installed()).prefill == "cpu"
    assert select("cuda", half, installed=installed(flash_attn=True)).prefill == "flash_attn"
    assert select("cuda", torch.float16, installed=installed()).prefill == "torch"
    assert (
        select("cuda", half, installed=installed(True, cudnn=True)).prefill == "cudnn"
    )  # Hopper: SDPA's own
    assert select("cuda", full, installed=installed(cudnn=True)).prefill == "portable"
    assert select("cuda", full, installed=installed(flash_attn=True)).prefill == "portable"  # FA: fp16/bf16
    assert select("mps", half, installed=installed()).prefill == "portable"
    assert select("cuda", half, override="portable", installed=installed(True)).prefill == "portable"
    softcap = kernels.Features(softcap=True)  # Gemma 2: no fused kernel here caps logits
    assert select("cuda", half, softcap, installed=installed(True, cudnn=True)).prefill == "portable"


def test_decode_choices_and_labels():
    half = torch.bfloat16
    hf, paged = kernels.Features(), kernels.Features(paged=True, head_dim=128)
    assert kernels.select("cpu", half, hf, installed=installed()).label() == "cpu"  # the HF cache
    on_cpu = kernels.select("cpu", torch.float32, paged, installed=installed())
    assert (on_cpu.prefill, on_cpu.decode, on_cpu.label()) == ("cpu", "paged-engine", "cpu+paged-engine")
    gpu = installed(triton=True, cudnn=True)
    assert kernels.select("cuda", half, paged, installed=gpu).label() == "cudnn+paged-triton"
    odd = kernels.Features(paged=True, head_dim=80)  # Phi-2: the Triton kernel takes powers of two
    assert kernels.select("cuda", half, odd, installed=gpu).label() == "cudnn+paged-torch"
    assert kernels.select("cuda", half, paged, installed=installed()).label() == "torch+paged-torch"
    chosen = kernels.select("cuda", half, paged, "auto+paged-torch", gpu)
    assert chosen.label() == "cudnn+paged-torch"  # one side overridden, the other automatic
    assert kernels.select("cuda", half, paged, chosen.label(), gpu) == chosen  # a label is an override
    # the paged decode asked for is vLLM's: the HF cache, in the same run, decodes on its prefill kernel
    assert kernels.select("cpu", half, hf, "auto+paged-torch", installed()).label() == "cpu"


@pytest.mark.parametrize(
    "override, device, features, says",
    [
        ("flash", "cpu", kernels.Features(), "LAMPE_EVAL_KERNEL='flash': choose auto, a prefill kernel"),
        ("cpu+triton", "cpu", kernels.Features(), "PREFILL+DECODE with a decode path (prefill-kernel, paged"),
        ("torch", "cpu", kernels.Features(), "the torch kernel runs on CUDA in float16 or bfloat16, not cpu"),
        ("cpu", "cuda", kernels.Features(), "the cpu kernel runs on CPU, not cuda"),
        ("cudnn", "cuda", kernels.Features(softcap=True), "soft-capped logits run on the portable prefill"),
        ("cpu+prefill-kernel", "cpu", kernels.Features(paged=True, head_dim=64), "not prefill-kernel"),
        ("auto+paged-triton", "cpu", kernels.Features(paged=True, head_dim=64), "runs on CUDA with Triton"),
        ("auto+paged-engine", "cuda", kernels.Features(paged=True, head_dim=64), "vLLM's CPU kernel"),
    ],
)
def test_a_choice_the_layers_cannot_run_is_refused_in_one_line(override, device, features, says):
    with pytest.raises(LampeEvalError, match=re.escape(says)) as refused:
        kernels.select(device, torch.bfloat16, features, override, installed(triton=True))
    assert "\n" not in str(refused.value)


def test_the_override_is_read_from_one_variable(monkeypatch):
    monkeypatch.setenv(kernels.ENV, "portable")
    assert kernels.override() == "portable"
    assert kernels.describe("cpu", torch.float32) == "portable"
    monkeypatch.setenv(kernels.ENV, "flash")
    with pytest.raises(LampeEvalError, match="LAMPE_EVAL_KERNEL='flash'"):
        kernels.override()
    monkeypatch.delenv(kernels.ENV)
    assert kernels.override() == "auto" and kernels.describe("cpu", torch.float32) == "cpu"


Emulator = FlashAttnEmulator | TorchFlashEmulator | CudnnEmulator


def emulate(backend: str, monkeypatch, gqa: bool = True) -> Emulator:
    """The engine on one FlashAttention-2 backend, its kernel replaced by the contract's emulation
    (fp32 allowed, so the comparison with the oracle is tight; ``half_only`` is tested apart). ``cudnn``:
    every causal square and rectangle on the emulated cuDNN kernel (``gqa``: whether it takes fewer KV
    heads), the rest on the emulated FlashAttention."""
    if backend == "cudnn":
        monkeypatch.setattr(torch.ops.aten, "_flash_attention_forward", TorchFlashEmulator(half_only=False))
        cudnn = CudnnEmulator(gqa=gqa, half_only=False)
        monkeypatch.setattr(torch.ops.aten, "_scaled_dot_product_cudnn_attention", cudnn)
        monkeypatch.setattr(flash_kernels, "CUDNN_MIN_ROWS", 1)
        flash_kernels.cudnn_takes_gqa.cache_clear()
        return cudnn
    if backend == "flash_attn":
        emulator: Emulator = FlashAttnEmulator(half_only=False)
        monkeypatch.setitem(sys.modules, "flash_attn", fake_flash_attn(emulator))
    else:
        emulator = TorchFlashEmulator(half_only=False)
        monkeypatch.setattr(torch.ops.aten, "_flash_attention_forward", emulator)
    return emulator


@pytest.fixture(params=["flash_attn", "torch"])
def emulated(request, monkeypatch):
    emulator = emulate(request.param, monkeypatch)
    emulator.kernel = request.param  # the kernel the engine is given
    return emulator


@pytest.mark.parametrize("name", POSITION_METHODS)
def test_engine_through_emulated_kernels_equals_the_oracle(name, monkeypatch):
    rng = random.Random(zlib.crc32(f"kernels-{name}".encode()))
    length = 130
    method = create_method(name, WINDOW, 4 * WINDOW, **random_params(name, rng))
    plan = method.plan(base(), length - 1, length)
    q = torch.randn(1, 4, length, D)  # the heads of base(): Ms-PoE is per head
    k, v = torch.randn(1, 2, length, D), torch.randn(1, 2, length, D)
    ref = oracle_attention(q, k, v, plan, 0, D**-0.5)
    for backend in ("flash_attn", "torch", "cudnn"):
        emulator = emulate(backend, monkeypatch)
        fast = segmented_attention(q, k, v, plan, 0, D**-0.5, kernel=backend)
        assert (fast - ref).abs().max() <= 1e-4, f"{backend} {method.label()}"
        for first in (37, 101):  # a continued prefill: tiles starting mid-band and mid-chunk
            part = segmented_attention(q[:, :, first:], k, v, plan, first, D**-0.5, kernel=backend)
            assert (part - ref[:, :, first:]).abs().max() <= 1e-4, f"{backend} {method.label()} from {first}"
        step = segmented_attention(q[:, :, -1:], k, v, plan, length - 1, D**-0.5, kernel=backend)  # decode
        assert (step - ref[:, :, -1:]).abs().max() <= 1e-4, f"{backend} {method.label()} decode"
        assert emulator.calls, f"the emulated {backend} kernel was never called"


@pytest.mark.parametrize("gqa", [True, False])
def test_cudnn_takes_causal_squares_and_rectangles_only(gqa, monkeypatch):
    """On ``cudnn`` the causal squares and unmasked rectangles of a prefill go to cuDNN (KV heads repeated
    where the build refuses fewer), bands and reversed squares to FlashAttention; decode rows (fewer than
    ``CUDNN_MIN_ROWS``) stay on FlashAttention; the output equals the oracle's either way."""
    cudnn = emulate("cudnn", monkeypatch, gqa)
    monkeypatch.setattr(flash_kernels, "CUDNN_MIN_ROWS", 8)
    flash = torch.ops.aten._flash_attention_forward
    q, k, v = torch.randn(1, 4, 160, D), torch.randn(1, 2, 160, D), torch.randn(1, 2, 160, D)
    plan = create_method("selfextend", WINDOW, 4 * WINDOW, group_size=3, window=70).plan(base(), 160, 160)
    out = segmented_attention(q, k, v, plan, 0, 0.25, kernel="cudnn")
    assert (out - oracle_attention(q, k, v, plan, 0, 0.25)).abs().max() <= 1e-4
    assert [(c["sq"], c["causal"]) for c in cudnn.calls[-1:]] == [(90, True)]  # the groups' causal square
    assert cudnn.calls[-1]["heads"] == ((4, 2) if gqa else (4, 4))
    assert [c["window"] for c in flash.calls] == [(69, 0)]  # the neighbours' band
    step = segmented_attention(q[:, :, -1:], k, v, plan, 159, 0.25, kernel="cudnn")  # decode: FlashAttention
    assert (step - oracle_attention(q, k, v, plan, 0, 0.25)[:, :, -1:]).abs().max() <= 1e-4
    assert len(cudnn.calls) == (2 if gqa else 1)  # the GQA probe (a tiny call) + the square


def test_a_band_is_one_kernel_call(emulated):
    """On FlashAttention a band is one call: causal where no row reaches its upper edge, else the window
    (width - 1, 0); a chunk relation is one batched call over its whole chunks plus its partial chunk."""
    q, k, v = torch.randn(1, 4, 160, D), torch.randn(1, 2, 160, D), torch.randn(1, 2, 160, D)
    plan = create_method("selfextend", WINDOW, 4 * WINDOW, group_size=3, window=70).plan(base(), 160, 160)
    out = segmented_attention(q, k, v, plan, 0, 0.25, kernel=emulated.kernel)
    assert (out - oracle_attention(q, k, v, plan, 0, 0.25)).abs().max() <= 1e-4
    calls = [(c["sq"], c["sk"], c["causal"], tuple(c["window"])) for c in emulated.calls]
    assert calls == [(160, 160, False, (69, 0)), (90, 90, True, (-1, -1))]  # neighbours, then groups
    emulated.calls.clear()
    plan = create_method("dca", WINDOW, 4 * WINDOW, chunk_size=48, local_window=16).plan(base(), 160, 160)
    out = segmented_attention(q, k, v, plan, 0, 0.25, kernel=emulated.kernel)
    assert (out - oracle_attention(q, k, v, plan, 0, 0.25)).abs().max() <= 1e-4
    assert len(emulated.calls) <= 2 * len(plan.segments) + 2


def test_bf16_through_the_strict_emulation(monkeypatch):
    """bf16 inputs, the emulation refusing anything but fp16/bf16: within bf16 rounding of the oracle."""
    emulator = FlashAttnEmulator(half_only=True)
    monkeypatch.setitem(sys.modules, "flash_attn", fake_flash_attn(emulator))
    method = create_method("lampe", WINDOW, 4 * WINDOW)
    plan = method.plan(base(), 160, 160)
    q, k, v = torch.randn(1, 4, 160, D), torch.randn(1, 2, 160, D), torch.randn(1, 2, 160, D)
    ref = oracle_attention(q, k, v, plan, 0, 0.25)
    out = segmented_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), plan, 0, 0.25, kernel="flash_attn")
    assert out.dtype == torch.bfloat16 and emulator.calls
    assert (out.float() - ref).abs().max() < 0.05


def test_fp32_on_cuda_is_told_before_loading(caplog, monkeypatch):
    """fp32 on CUDA would take the portable path (FlashAttention is fp16/bf16 only): one warning naming the
    alternative, from the settings check (no model loaded); none for bf16 or on CPU."""
    from lampe_eval.backends.hf import HFBackend
    from lampe_eval.settings import RunSettings

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for settings, warned in [
        (RunSettings(dtype="float32"), True),
        (RunSettings(dtype="fp32", device="cuda"), True),
        (RunSettings(dtype="bf16"), False),
        (RunSettings(dtype="float32", device="cpu"), False),
    ]:
        caplog.clear()
        HFBackend.check_settings(settings)
        messages = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert bool(messages) == warned, settings
        if warned:
            assert "portable fp32 path" in messages[0] and "--dtype bfloat16" in messages[0]


# ------------------------------------------------------------------------------ what records name
def _kernels_run(monkeypatch) -> list[str]:
    """The prefill kernel of every piece the engine runs from now on."""
    seen: list[str] = []
    original = kernels.run_piece

    def spy(q, k, v, scale, kind, mask, kernel, window=0):
        seen.append(kernel)
        return original(q, k, v, scale, kind, mask, kernel, window)

    monkeypatch.setattr(kernels, "run_piece", spy)
    return seen


@pytest.mark.parametrize(
    "family, override, label",
    [("llama", None, "cpu"), ("llama", "portable", "portable"), ("gemma2", None, "portable")],
)
def test_the_hf_backend_records_the_kernel_its_layers_run(family, override, label, monkeypatch):
    """The HF backend's record names the kernel it hands its patched layers, and every piece of a prefill
    and of a cached decode runs on it: the CPU kernel by default, the portable path when asked for or where
    logits are soft-capped (Gemma 2), whose pieces are the portable path's own matmuls."""
    from lampe_eval.backends.hf import HFBackend
    from lampe_eval.models import LoadedModel
    from lampe_eval.testing import tiny_family

    if override:
        monkeypatch.setenv(kernels.ENV, override)
    net = tiny_family(family, heads=4, kv_heads=2, head_dim=16, window=64, vocab=64)
    backend = HFBackend(LoadedModel("tiny", net, None, 64, False))
    assert backend.describe()["kernel"] == label
    seen = _kernels_run(monkeypatch)
    with torch.no_grad(), backend.install(create_method("selfextend", 64, 256, group_size=2, window=16)):
        net.generate(torch.randint(0, 64, (1, 100)), max_new_tokens=3, do_sample=False)
    assert set(seen) <= {label}  # the portable path does not go through pieces at all
    assert seen or label == "portable"


def test_records_of_the_automatic_choice_made_before_it_was_spelled_out_are_reused(monkeypatch):
    """A vLLM record that named its kernel ``vllm-lampe`` (before the engine's choice was recorded) is
    reused by a run of the automatic choice, not by a run with an override."""
    from lampe_eval.records import engine_identity
    from lampe_eval.runner.worker import accepted_engines

    engine = {
        "backend": "vllm",
        "backend_version": "0.32.0",
        "dtype": "float32",
        "device": "cpu",
        "kernel": "cpu+paged-engine",
        "settings": "eager",
    }
    before = engine_identity({**engine, "kernel": "vllm-lampe"})
    assert before in accepted_engines(engine, None)
    monkeypatch.setenv(kernels.ENV, "cpu+paged-torch")
    assert accepted_engines({**engine, "kernel": "cpu+paged-torch"}, None) == {
        engine_identity({**engine, "kernel": "cpu+paged-torch"})
    }
    hf = {**engine, "backend": "hf", "kernel": "cpu"}
    monkeypatch.delenv(kernels.ENV)
    assert engine_identity({**hf, "kernel": "vllm-lampe"}) not in accepted_engines(hf, None)
