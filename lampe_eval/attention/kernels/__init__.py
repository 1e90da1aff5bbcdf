"""The kernels under the engine, one module per family, and the one place that chooses among them.

The engine (``engine.py``, ``tiles.py``) cuts every segment into a few unmasked rectangles ("full"), causal
squares ("causal", bottom-right), sliding windows ("window") and reversed causal squares ("anticausal":
row r sees keys r.. of a piece with one key fewer than rows), and merges them by their softmax log-sum-exp
(LSE) in fp32; the portable path gets masked blocks ("mask"). :func:`run_piece` runs one piece on the
chosen prefill kernel: ``flash.py`` (FlashAttention-2: flash-attn, PyTorch's copy, cuDNN), ``cpu.py``
(PyTorch's CPU flash kernel), ``portable.py`` (exact fp32 matmuls). ``paged_triton.py`` is the paged
decode's Triton kernel. ``choice.py`` picks them: :func:`select`, reported by :func:`describe` and in
every record (``KernelChoice.label``). The kernel contracts, with their sources, are in ``docs/gpu.md``;
``tests/test_kernels.py`` checks every dispatch decision on CPU against emulations of those contracts.
"""

from __future__ import annotations

import torch

from .choice import (
    DECODE_PATHS,
    ENV,
    PREFILL_KERNELS,
    Features,
    Installed,
    KernelChoice,
    describe,
    override,
    select,
)
from .cpu import cpu_piece
from .flash import FLASH_CALLS, Piece, empty_last_row, flash_piece
from .portable import attend_math


def run_piece(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    kind: str,
    mask: torch.Tensor | None,
    kernel: str,
    window: int = 0,
) -> Piece:
    """One piece on prefill kernel ``kernel``: ``q`` [B, Hq, n, D] over ``k``, ``v`` [B, Hkv, m, D] (Hq a
    multiple of Hkv). ``kind``: "full", "causal" (a square, n == m), "anticausal" (m == n - 1), "mask"
    (``mask`` [n, m]) or, on the FlashAttention kernels, "window" (row r sees the ``window`` keys ending at
    key m - n + r). Returns fp32 (out, lse); a row with no key gets out 0 and lse -inf."""
    if kernel in FLASH_CALLS and kind != "mask":
        return flash_piece(q, k, v, scale, kind, FLASH_CALLS[kernel](), window)
    if kind == "anticausal":  # reversing rows and keys turns it into a causal square (minus the last row)
        out, lse = run_piece(q[:, :, :-1].flip(2), k.flip(2), v.flip(2), scale, "causal", None, kernel)
        return empty_last_row(out.flip(2), lse.flip(2))
    if kernel == "cpu":
        return cpu_piece(q, k, v, scale, kind, mask)
    return attend_math(q, k, v, scale, kind, mask)


def layer_choice(query: torch.Tensor, softcap: float | None) -> KernelChoice:
    """The choice for a call made without one (the engine's functions called directly): this process's
    override for ``query``'s device and dtype."""
    return select(query.device, query.dtype, Features(softcap=bool(softcap)), override())


__all__ = [
    "DECODE_PATHS",
    "ENV",
    "PREFILL_KERNELS",
    "Features",
    "Installed",
    "KernelChoice",
    "Piece",
    "attend_math",
    "describe",
    "layer_choice",
    "override",
    "run_piece",
    "select",
]
