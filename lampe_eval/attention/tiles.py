"""A segment's prefill as a few dense kernel calls ("tiles"), worked out once in plain Python ints.

Every region a method uses is a distance band (``Band``), the first keys (``FirstKeys``) or a DCA chunk
relation (``ChunkRelation``); each is covered exactly, pair for pair, by a handful of tiles:

- on a FlashAttention backend (``flash=True``: bottom-right causal squares and rectangles, sliding windows)
  a band is **one** call (``q[first:]`` over ``k[:end - lo]``, causal, windowed when it has an upper edge);
- on the CPU flash kernel (``flash=False``: no window, causal only as a square) a windowed band is its
  rows before the window fills (one causal call), then blocks of ``width`` rows stacked as one batch (one
  reversed-causal call for their left edges, one causal call for their right edges) and the last partial
  block (one masked call while its mask is small, else three calls);
- a chunk relation is one batched call over its whole chunks (same chunk: causal; the previous chunk:
  full; older chunks: a band plus one batched reversed-causal call), plus its partial chunks.

A tile never needs a tensor to be read back on the host: the engine (``engine.py``) runs the list as is.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .regions import Band, ChunkRelation, FirstKeys, Region

MASKED_EDGE = 1 << 22  # largest [rows x keys] mask of a partial block on the CPU kernel (16 MiB in fp32)


@dataclass(frozen=True)
class Tile:
    """One kernel call over ``blocks`` equal blocks stacked as a batch. Block b holds query rows
    ``r0 + b * rows ..`` (relative to the call's first query) and keys ``k0 + b * step ..`` (absolute).
    Local row r of a block sees local keys (``visible``): all ("full"); up to ``keys - rows + r``
    ("causal", bottom-right aligned); the last ``width`` of those ("window"); from r on ("anticausal",
    ``keys == rows - 1``: the last row sees nothing); ``r..r + width - 1`` ("mask": a band's partial block
    on the CPU kernel, which has no windows, run with a small mask)."""

    segment: int
    r0: int
    rows: int
    k0: int
    keys: int
    kind: str
    width: int = 0
    blocks: int = 1
    step: int = 0

    def visible(self, r: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Local key interval [start, stop) of local rows ``r`` (a tensor: no host sync)."""
        if self.kind == "full":
            return torch.zeros_like(r), torch.full_like(r, self.keys)
        if self.kind == "anticausal":
            return r, torch.full_like(r, self.keys)
        if self.kind == "mask":
            return r, r + self.width
        stop = r + (self.keys - self.rows + 1)
        start = (stop - self.width).clamp(min=0) if self.kind == "window" else torch.zeros_like(r)
        return start, stop

    def key_span(self, a: int, b: int) -> tuple[int, int]:
        """The local keys any of local rows a..b-1 sees (Python ints)."""
        if self.kind == "full":
            return 0, self.keys
        if self.kind == "anticausal":
            return a, self.keys
        if self.kind == "mask":
            return a, b - 1 + self.width
        shift = self.keys - self.rows + 1
        start = max(0, a + shift - self.width) if self.kind == "window" else 0
        return start, b - 1 + shift

    @property
    def row_end(self) -> int:
        return self.r0 + self.blocks * self.rows

    @property
    def key_end(self) -> int:
        """One past the last key any block reads (absolute)."""
        return self.k0 + (self.blocks - 1) * self.step + self.keys


def tiles(region: Region, segment: int, first: int, n: int, flash: bool) -> list[Tile]:
    """The tiles covering ``region`` for queries ``first..first+n-1`` (absolute), keys ``0..``."""
    if isinstance(region, Band):
        return _band(segment, first, first + n, region.lo, region.hi, flash, first)
    if isinstance(region, FirstKeys):
        return _first_keys(segment, first, first + n, region, flash)
    if isinstance(region, ChunkRelation):
        return _chunks(segment, first, first + n, region, flash)
    raise TypeError(f"no tiling for {type(region).__name__}")


def _tile(segment: int, origin: int, a: int, rows: int, k0: int, keys: int, kind: str, **extra) -> list[Tile]:
    """A tile for absolute rows from ``a`` (``origin``: the call's first query), none when empty."""
    if rows <= 0 or keys <= 0:
        return []
    return [Tile(segment, a - origin, rows, k0, keys, kind, **extra)]


def _causal(segment: int, origin: int, a: int, e: int, lo: int, flash: bool) -> list[Tile]:
    """Rows a..e-1, row i seeing every key up to i - lo (keys from 0): one bottom-right causal call, or on
    the CPU kernel (causal only as a square) the rectangle left of the square plus the square."""
    if e <= a:
        return []
    stop = e - lo  # one past the last row's last key
    if flash or stop == e - a:
        return _tile(segment, origin, a, e - a, 0, stop, "causal")
    square = stop - (e - a)
    return [
        *_tile(segment, origin, a, e - a, 0, square, "full"),
        *_tile(segment, origin, a, e - a, square, e - a, "causal"),
    ]


def _band(segment: int, a: int, e: int, lo: int, hi: int | None, flash: bool, origin: int) -> list[Tile]:
    """Pairs lo <= i - j <= hi, j >= 0, for rows a..e-1."""
    a = max(a, lo)
    if e <= a:
        return []
    if hi is None or e - 1 - hi <= 0:  # no row reaches the band's upper edge: plain causal
        return _causal(segment, origin, a, e, lo, flash)
    width = hi - lo + 1
    fill = min(e, hi + 1)  # rows before this see keys from 0: the band's upper edge does not cut them
    if flash:
        # FlashAttention's windowed kernel ran ~20% slower than its causal one for the same pairs (H200,
        # 128K): rows the edge does not cut go to a causal call when they are most of the work
        if a < fill and (fill - a) ** 2 // 2 > (e - fill) * width:
            uncut = _causal(segment, origin, a, fill, lo, flash)
            return uncut + _band(segment, fill, e, lo, hi, flash, origin)
        k0 = max(0, a - hi)
        return _tile(segment, origin, a, e - a, k0, e - lo - k0, "window", width=width)
    # CPU: rows up to hi see keys from 0 (causal); then blocks of `width` rows, block at row b seeing keys
    # [b - hi, b - lo) reversed-causal and [b - lo, b - lo + width) causal
    out = _causal(segment, origin, a, fill, lo, flash) if a < fill else []
    b = max(a, fill)
    whole = (e - b) // width
    if whole:
        common = {"blocks": whole, "step": width}
        out += _tile(segment, origin, b, width, b - hi, width - 1, "anticausal", **common)
        out += _tile(segment, origin, b, width, b - lo, width, "causal", **common)
    b += whole * width
    m = e - b
    if m > 0 and m * (width + m - 1) <= MASKED_EDGE:  # the last partial block: one small masked call
        out += _tile(segment, origin, b, m, b - hi, width + m - 1, "mask", width=width)
    elif m > 0:  # too wide to mask: its left edge, the rectangle between, its right edge
        out += _tile(segment, origin, b, m, b - hi, m - 1, "anticausal")
        out += _tile(segment, origin, b, m, b - hi + m - 1, width - m, "full")
        out += _tile(segment, origin, b, m, b - lo, m, "causal")
    return out


def _first_keys(segment: int, a: int, e: int, region: FirstKeys, flash: bool) -> list[Tile]:
    """Row i >= lo sees keys [0, min(count, i - lo + 1)): causal until the count is reached, then all."""
    origin, lo, count = a, region.lo, region.count
    a = max(a, lo)
    grown = min(e, lo + count - 1)  # rows before this see fewer than `count` keys
    out = _causal(segment, origin, a, grown, lo, flash) if a < grown else []
    b = max(a, grown)
    return out + _tile(segment, origin, b, e - b, 0, count, "full")


def _chunks(segment: int, a: int, e: int, region: ChunkRelation, flash: bool) -> list[Tile]:
    """DCA's chunk relations: whole chunks as one batched call, partial chunks (at either end) apart."""
    size, gap, origin = region.size, region.gap, a
    a = max(a, gap * size)  # queries in the first `gap` chunks see nothing
    if e <= a:
        return []
    out: list[Tile] = []
    if gap == 2:  # keys [0, (c - 1) s): the band i - j >= 2s, then each chunk's reversed-causal rest
        out += _band(segment, a, e, 2 * size, None, flash, origin)
    for start, stop, blocks in _chunk_runs(a, e, size):
        chunk = start - start % size
        offset = start - chunk  # a run starting mid-chunk (a chunked prefill) has rows offset..
        rows = stop - start if blocks == 1 else size
        common = {"blocks": blocks, "step": size} if blocks > 1 else {}
        if gap == 0:  # keys [chunk, i]
            out += _causal_in_chunk(segment, origin, start, rows, chunk, offset, flash, common)
        elif gap == 1:  # keys of the previous chunk
            out += _tile(segment, origin, start, rows, chunk - size, size, "full", **common)
        else:  # keys ((c - 2) s + r, (c - 1) s), r the row within its chunk
            older = chunk - 2 * size
            if offset + rows == size:
                out += _tile(
                    segment, origin, start, rows, older + offset + 1, rows - 1, "anticausal", **common
                )
            else:  # a last partial chunk: reversed-causal over its rows, then the rest of the chunk
                out += _tile(segment, origin, start, rows, older + offset + 1, rows - 1, "anticausal")
                out += _tile(
                    segment, origin, start, rows, older + offset + rows, size - offset - rows, "full"
                )
    return out


def _causal_in_chunk(
    segment: int, origin: int, start: int, rows: int, chunk: int, offset: int, flash: bool, common: dict
) -> list[Tile]:
    if offset == 0:
        return _tile(segment, origin, start, rows, chunk, rows, "causal", **common)
    if flash:
        return _tile(segment, origin, start, rows, chunk, offset + rows, "causal")
    return [
        *_tile(segment, origin, start, rows, chunk, offset, "full"),
        *_tile(segment, origin, start, rows, start, rows, "causal"),
    ]


def _chunk_runs(a: int, e: int, size: int) -> list[tuple[int, int, int]]:
    """Rows a..e-1 as (start, stop, blocks): a partial first chunk, the whole chunks, a partial last one."""
    runs = []
    first_whole = -(-a // size) * size
    if a < min(first_whole, e):
        runs.append((a, min(first_whole, e), 1))
    whole = max(0, (e - first_whole) // size)
    if whole:
        runs.append((first_whole, first_whole + whole * size, whole))
    last = max(a, first_whole + whole * size)
    if last < e:
        runs.append((last, e, 1))
    return runs
