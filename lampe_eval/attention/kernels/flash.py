"""The FlashAttention-2 kernels for one piece (CUDA, fp16/bf16): the ``flash_attn`` wheel's
``flash_attn_func(..., return_attn_probs=True)`` (the optional ``gpu`` extra), PyTorch's own copy of the same
kernel (``aten._flash_attention_forward``: ``torch``) and cuDNN's fused attention for causal squares and
unmasked rectangles of 128 rows or more (``aten._scaled_dot_product_cudnn_attention``, [B, H, S, D],
log-sum-exp [B, H, S, 1]: ``cudnn``, with ``torch`` for the rest), the kernel PyTorch's
``scaled_dot_product_attention`` picks for the unpatched model on Hopper GPUs.

Layout [B, S, H, D], GQA native, causal aligned bottom-right, anticausal as ``window_size=(0, -1)``, bands
as ``(width - 1, 0)``; an empty row gives LSE +inf (mapped to -inf here). The contracts, with their sources,
are in ``docs/gpu.md``; ``tests/test_kernels.py`` runs them on CPU through emulations.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

CUDNN_MIN_ROWS = 128  # fewer query rows (decoding) stay on FlashAttention
NEG_INF = float("-inf")

Piece = tuple[torch.Tensor, torch.Tensor]  # (out [B, Hq, n, D] fp32, lse [B, Hq, n] fp32, -inf if empty)
# the FlashAttention-2 contract: (q, k, v [B, S, H, D], scale, causal, (left, right))
# -> (out [B, Sq, H, D], lse [B, H, Sq])
FlashCall = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, float, bool, tuple[int, int]], Piece]


@functools.cache
def flash_attn_installed() -> bool:
    return importlib.util.find_spec("flash_attn") is not None


@functools.cache
def cudnn_preferred(device_index: int) -> bool:
    """Hopper or newer with cuDNN: where PyTorch's own ``scaled_dot_product_attention`` picks cuDNN for the
    unpatched model (measured on an H100: 242 ms against FlashAttention-2's 418 ms, one 8B-shaped causal
    layer at 128K; ``docs/gpu-performance.md``)."""
    cudnn_9 = torch.backends.cudnn.is_available() and (torch.backends.cudnn.version() or 0) >= 90000
    return cudnn_9 and torch.cuda.get_device_capability(device_index) >= (9, 0)


def empty_last_row(out: torch.Tensor, lse: torch.Tensor) -> Piece:
    return F.pad(out, (0, 0, 0, 1)), F.pad(lse, (0, 1), value=NEG_INF)


def flash_piece(
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
        return empty_last_row(out, lse)
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
