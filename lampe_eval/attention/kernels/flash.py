"""Kernels for one dense piece of a segment: attention output *and* the softmax log-sum-exp (LSE).

The engine (``engine.py``, ``tiles.py``) cuts every segment into a few unmasked rectangles ("full"), causal
squares ("causal", bottom-right), sliding windows ("window") and reversed causal squares ("anticausal":
row r sees keys r.. of a piece with one key fewer than rows), and merges them by their LSE in fp32; the
portable path gets masked blocks ("mask"). This module runs one piece on the best kernel for the tensors
at hand. Backends (``LAMPE_EVAL_KERNEL``, default ``auto``):

- ``flash_attn``: ``flash_attn.flash_attn_func(..., return_attn_probs=True)`` (the optional ``gpu``
  extra; CUDA, fp16/bf16). Layout [B, S, H, D], GQA native, causal aligned bottom-right, anticausal as
  ``window_size=(0, -1)``; an empty row gives LSE +inf (mapped to -inf here).
- ``torch``: PyTorch's own copy of the same FlashAttention-2 kernel, ``aten._flash_attention_forward``
  (CUDA, fp16/bf16): the same contract without the extra wheel.
- ``cudnn``: ``torch``, but causal squares and unmasked rectangles of 128 rows or more go to cuDNN's fused
  attention (``aten._scaled_dot_product_cudnn_attention``, [B, H, S, D], log-sum-exp [B, H, S, 1]): the
  kernel PyTorch's ``scaled_dot_product_attention`` picks for the unpatched model on Hopper GPUs.
- ``cpu``: ``aten._scaled_dot_product_flash_attention_for_cpu`` ([B, H, S, D], top-left causal, additive
  masks; an empty row gives LSE 0, masked out here).
- ``portable``: exact fp32 matmuls that materialise the piece's scores (any device, any mask).

``auto``: ``cpu`` on CPU; on CUDA with fp16/bf16 ``cudnn`` on Hopper or newer, else ``flash_attn`` when
installed, else ``torch``; else ``portable``. The engine gives the FlashAttention backends bands as
bottom-right windows, the CPU kernel causal squares, rectangles and reversed squares only (``tiles.py``);
``portable`` gets masked blocks.
The kernel contracts, with their sources, are in ``docs/gpu.md``; ``tests/test_kernels.py`` checks
every dispatch decision on CPU against emulations of those contracts.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ..errors import LampeEvalError

ENV = "LAMPE_EVAL_KERNEL"
BACKENDS = ("auto", "flash_attn", "torch", "cudnn", "cpu", "portable")
CUDNN_MIN_ROWS = 128  # fewer query rows (decoding) stay on FlashAttention
HALF = (torch.float16, torch.bfloat16)
NEG_INF = float("-inf")

Piece = tuple[torch.Tensor, torch.Tensor]  # (out [B, Hq, n, D] fp32, lse [B, Hq, n] fp32, -inf if empty)
# the FlashAttention-2 contract: (q, k, v [B, S, H, D], scale, causal, (left, right))
# -> (out [B, Sq, H, D], lse [B, H, Sq])
FlashCall = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, float, bool, tuple[int, int]], Piece]


def setting() -> str:
    """The backend asked for by ``LAMPE_EVAL_KERNEL`` (default ``auto``)."""
    name = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if name not in BACKENDS:
        raise LampeEvalError(f"{ENV}={name!r}: choose one of {', '.join(BACKENDS)}")
    return name


@functools.cache
def flash_attn_installed() -> bool:
    return importlib.util.find_spec("flash_attn") is not None


def choose(
    device_type: str, dtype: torch.dtype, name: str = "auto", flash_attn: bool = False, cudnn: bool = False
) -> str:
    """The backend for pieces on ``device_type`` in ``dtype``, given the setting ``name``, whether the
    flash-attn wheel is installed and whether the GPU is one where cuDNN's attention is the fastest."""
    if name != "auto":
        return name
    if device_type == "cpu":
        return "cpu"
    if device_type == "cuda" and dtype in HALF:
        return "cudnn" if cudnn else "flash_attn" if flash_attn else "torch"
    return "portable"


@functools.cache
def cudnn_preferred(device_index: int) -> bool:
    """Hopper or newer with cuDNN: where PyTorch's own ``scaled_dot_product_attention`` picks cuDNN for the
    unpatched model (measured on an H100: 242 ms against FlashAttention-2's 418 ms, one 8B-shaped causal
    layer at 128K; ``docs/gpu-performance.md``)."""
    cudnn_9 = torch.backends.cudnn.is_available() and (torch.backends.cudnn.version() or 0) >= 90000
    return cudnn_9 and torch.cuda.get_device_capability(device_index) >= (9, 0)


def backend_for(q: torch.Tensor, force_portable: bool = False) -> str:
    """The backend that runs pieces of ``q``'s device and dtype."""
    if force_portable:
        return "portable"
    name = setting()
    auto = name == "auto" and q.device.type == "cuda"
    cudnn = auto and cudnn_preferred(
        q.device.index if q.device.index is not None else torch.cuda.current_device()
    )
    return choose(q.device.type, q.dtype, name, auto and flash_attn_installed(), cudnn)


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    kind: str,
    mask: torch.Tensor | None,
    backend: str,
    window: int = 0,
) -> Piece:
    """One piece: ``q`` [B, Hq, n, D] over ``k``, ``v`` [B, Hkv, m, D] (Hq a multiple of Hkv). ``kind``:
    "full", "causal" (a square, n == m), "anticausal" (m == n - 1), "mask" (``mask`` [n, m]) or, on the
    FlashAttention backends, "window" (row r sees the ``window`` keys ending at key m - n + r).
    Returns fp32 (out, lse); a row with no key gets out 0 and lse -inf."""
    if backend in FLASH_CALLS and kind != "mask":
        return _flash_piece(q, k, v, scale, kind, FLASH_CALLS[backend](), window)
    if kind == "anticausal":  # reversing rows and keys turns it into a causal square (minus the last row)
        out, lse = attend(q[:, :, :-1].flip(2), k.flip(2), v.flip(2), scale, "causal", None, backend)
        return _empty_last_row(out.flip(2), lse.flip(2))
    if backend == "cpu":
        return _cpu_piece(q, k, v, scale, kind, mask)
    return attend_math(q, k, v, scale, kind, mask)


def _empty_last_row(out: torch.Tensor, lse: torch.Tensor) -> Piece:
    return F.pad(out, (0, 0, 0, 1)), F.pad(lse, (0, 1), value=NEG_INF)


def _flash_piece(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    kind: str,
    call: FlashCall,
    width: int = 0,
) -> Piece:
    """A piece on a FlashAttention-2 kernel: [B, H, S, D] views transposed to its [B, S, H, D] (no copy:
    only the last dimension must be contiguous), causal squares (bottom-right = top-left when n == m),
    anticausal pieces as the window (0, unbounded) over all rows but the last, bands as the window
    (width - 1, 0) aligned bottom-right."""
    window = (-1, -1)
    if kind == "anticausal":
        q, window = q[:, :, :-1], (0, -1)
    elif kind == "window":
        window = (width - 1, 0)
    out, lse = call(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale, kind == "causal", window)
    out, lse = out.transpose(1, 2).float(), lse.float()
    lse = lse.masked_fill(lse == float("inf"), NEG_INF)  # FA2 reports +inf for a row with no key
    if kind == "anticausal":
        return _empty_last_row(out, lse)
    return out, lse


def _flash_attn_call() -> FlashCall:
    from flash_attn import flash_attn_func  # the optional ``gpu`` extra

    def call(q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool, window: tuple[int, int]) -> Piece:
        out, lse, _ = flash_attn_func(
            q, k, v, softmax_scale=scale, causal=causal, window_size=window, return_attn_probs=True
        )
        return out, lse

    return call


def _torch_flash_call() -> FlashCall:
    def call(q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool, window: tuple[int, int]) -> Piece:
        out, lse, *_ = torch.ops.aten._flash_attention_forward(
            q,
            k,
            v,
            None,
            None,
            q.shape[1],
            k.shape[1],
            0.0,
            causal,
            False,
            scale=scale,
            window_size_left=window[0],
            window_size_right=window[1],
        )
        return out, lse

    return call


def _cudnn_attention(q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool) -> Piece:
    """cuDNN's fused attention on [B, H, S, D]: (out [B, H, Sq, D], lse [B, H, Sq, 1] fp32)."""
    out, lse, *_ = torch.ops.aten._scaled_dot_product_cudnn_attention(
        q, k, v, None, True, 0.0, causal, False, scale=scale
    )
    return out, lse


@functools.cache
def cudnn_takes_gqa(device: torch.device, dtype: torch.dtype, dim: int) -> bool:
    """Whether this build's cuDNN attention takes fewer KV heads than query heads (one tiny call; the H100
    run's PyTorch 2.11 did, at the speed of repeated heads)."""
    q = torch.zeros(1, 2, CUDNN_MIN_ROWS, dim, device=device, dtype=dtype)
    try:
        _cudnn_attention(q, q[:, :1], q[:, :1], 1.0, True)
    except RuntimeError:
        return False
    return True


def _cudnn_call() -> FlashCall:
    flash = _torch_flash_call()

    def call(q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool, window: tuple[int, int]) -> Piece:
        # cuDNN aligns its causal mask top-left, FlashAttention bottom-right: only squares agree
        square = q.shape[1] == k.shape[1]
        if window != (-1, -1) or q.shape[1] < CUDNN_MIN_ROWS or (causal and not square):
            return flash(q, k, v, scale, causal, window)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, H, S, D] views
        group = q.shape[1] // k.shape[1]
        if group > 1 and not cudnn_takes_gqa(q.device, q.dtype, q.shape[-1]):
            k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        out, lse = _cudnn_attention(q, k, v, scale, causal)
        return out.transpose(1, 2), lse.squeeze(-1)

    return call


# factories, looked up at call time (tests put contract emulations here)
FLASH_CALLS: dict[str, Callable[[], FlashCall]] = {
    "flash_attn": _flash_attn_call,
    "torch": _torch_flash_call,
    "cudnn": _cudnn_call,
}


def _cpu_piece(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, kind: str, mask: torch.Tensor | None
) -> Piece:
    if q.shape[0] > 1 and q.shape[2] == 1:
        # one query row: the CPU kernel splits the keys over threads by batch size, so a sequence's sums
        # would depend on its batch; one call per sequence keeps --batch-size N equal to 1 bit for bit
        pieces = [
            _cpu_piece(q[b : b + 1], k[b : b + 1], v[b : b + 1], scale, kind, mask) for b in range(q.shape[0])
        ]
        return torch.cat([p[0] for p in pieces]), torch.cat([p[1] for p in pieces])
    additive = None
    if mask is not None:
        additive = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill_(~mask, NEG_INF)
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, v, 0.0, kind == "causal", attn_mask=additive, scale=scale
    )
    if mask is not None:  # the CPU kernel reports lse 0 (not -inf) for rows with no visible key
        lse = lse.masked_fill(~mask.any(dim=1), NEG_INF)
    return out.float(), lse.float()


def attend_math(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    kind: str,
    mask: torch.Tensor | None,
    softcap: float | None = None,
) -> Piece:
    """Portable exact path. GQA: queries are grouped per KV head, keys are broadcast, not copied.
    ``softcap``: logits soft-capped as ``softcap * tanh(logit / softcap)`` before the mask (Gemma 2)."""
    batch, hq, n, dim = q.shape
    hkv = k.shape[1]
    group = hq // hkv
    qg = q.reshape(batch, hkv, group, n, dim).float()
    scores = torch.matmul(qg, k.float()[:, :, None].transpose(-1, -2)) * scale  # [B, Hkv, G, n, kv]
    if softcap:
        scores = torch.tanh(scores / softcap) * softcap
    if kind == "causal":
        mask = torch.ones(n, k.shape[2], dtype=torch.bool, device=q.device).tril()
    if mask is not None:
        scores = scores.masked_fill(~mask, NEG_INF)
    lse = torch.logsumexp(scores, dim=-1)
    probs = torch.exp(scores - lse[..., None].masked_fill(~torch.isfinite(lse[..., None]), 0.0))
    out = torch.matmul(probs, v.float()[:, :, None])
    return out.reshape(batch, hq, n, dim), lse.reshape(batch, hq, n)


def describe(device: Any = None, dtype: torch.dtype = torch.bfloat16) -> str:
    """Which backend pieces on ``device`` in ``dtype`` run on (for reports)."""
    return backend_for(torch.empty(0, device=device or "cpu", dtype=dtype))
