"""One compiled tile (``tiles.py``) run on the engine's prefill kernel: its blocks stacked as a batch for one
kernel call, or, on the portable path, cut into masked blocks of bounded size; and the exact merge of
partial results by their softmax log-sum-exp, in fp32."""

from __future__ import annotations

from typing import Any

import torch

from . import kernels
from .tiles import Tile

PORTABLE_MAX_KEYS = 8192  # widest key slice per call on the portable path
NEG_INF = float("-inf")


def run_tile(
    tile: Tile,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    kernel: str,
    block: int,
    softcap: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One tile: ``q`` its rows, ``k``/``v`` its keys (from the first block's first key). Returns fp32
    (out [B, H, rows, D], lse [B, H, rows])."""
    batch = q.shape[0]
    if tile.blocks > 1:  # blocks stacked as a batch: rows are consecutive, keys ``step`` apart
        q = _stack_rows(q, tile.blocks, tile.rows)
        k, v = (_stack_keys(x, tile.blocks, tile.keys, tile.step) for x in (k, v))
    if kernel == "portable":
        out, lse = _masked_blocks(tile, q, k, v, scale, block, softcap)
    elif tile.kind == "mask":
        out, lse = kernels.run_piece(
            q, k, v, scale, "mask", _tile_mask(tile, 0, tile.rows, 0, tile.keys, q.device), kernel
        )
    else:
        out, lse = kernels.run_piece(q, k, v, scale, tile.kind, None, kernel, tile.width)
    if tile.blocks > 1:
        out, lse = _unstack(out, batch), _unstack(lse, batch)
    return out, lse


def _stack_rows(x: torch.Tensor, blocks: int, rows: int) -> torch.Tensor:
    """[B, H, blocks * rows, D] -> [B * blocks, H, rows, D]."""
    b, h, _, d = x.shape
    return x.reshape(b, h, blocks, rows, d).transpose(1, 2).reshape(b * blocks, h, rows, d)


def _stack_keys(x: torch.Tensor, blocks: int, keys: int, step: int) -> torch.Tensor:
    """Key windows ``[b * step, b * step + keys)`` of [B, H, S, D] as [B * blocks, H, keys, D]."""
    b, h, _, d = x.shape
    windows = x[:, :, : (blocks - 1) * step + keys].unfold(2, keys, step)  # [B, H, blocks, D, keys]
    return windows.permute(0, 2, 1, 4, 3).reshape(b * blocks, h, keys, d)


def _unstack(x: torch.Tensor, batch: int) -> torch.Tensor:
    """[B * blocks, H, rows, ...] -> [B, H, blocks * rows, ...]."""
    blocks = x.shape[0] // batch
    stacked = x.reshape(batch, blocks, *x.shape[1:]).transpose(1, 2)
    return stacked.reshape(batch, x.shape[1], blocks * x.shape[2], *x.shape[3:])


def _tile_mask(tile: Tile, a: int, b: int, lo: int, hi: int, device: Any = None) -> torch.Tensor:
    """[b - a, hi - lo] boolean: which of local keys lo..hi-1 local rows a..b-1 of ``tile`` see."""
    start, stop = tile.visible(torch.arange(a, b, device=device))
    keys = torch.arange(lo, hi, device=device)
    return (keys[None, :] >= start[:, None]) & (keys[None, :] < stop[:, None])


def _masked_blocks(
    tile: Tile,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    block: int,
    softcap: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The portable path: a tile as blocks of at most ``block`` rows and ``PORTABLE_MAX_KEYS`` keys, each
    masked by the tile's geometry (built on the device: no host sync), merged exactly."""
    rows = q.shape[2]
    out = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    lse = torch.full(q.shape[:3], NEG_INF, dtype=torch.float32, device=q.device)
    for a in range(0, rows, block):
        b = min(a + block, rows)
        first, stop = tile.key_span(a, b)
        for lo in range(first, stop, PORTABLE_MAX_KEYS):
            hi = min(lo + PORTABLE_MAX_KEYS, stop)
            mask = _tile_mask(tile, a, b, lo, hi, q.device)
            o, l_ = kernels.attend_math(
                q[:, :, a:b], k[:, :, lo:hi], v[:, :, lo:hi], scale, "mask", mask, softcap
            )
            merge_into(out[:, :, a:b], lse[:, :, a:b], o, l_)
    return out, lse


def merge_into(acc_out: torch.Tensor, acc_lse: torch.Tensor, out: torch.Tensor, lse: torch.Tensor) -> None:
    """Exact LSE merge of a partial attention (out, lse) into the accumulators, in place, in fp32."""
    new_lse = torch.logaddexp(acc_lse, lse)
    weight = torch.exp(lse - new_lse).nan_to_num_(0.0)  # NaN where both are empty (-inf - -inf)
    acc_out.lerp_(out.float(), weight[..., None])  # acc (1 - w) + out w: the two weights sum to 1
    acc_lse.copy_(new_lse)
