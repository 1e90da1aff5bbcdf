"""What the parts of the GPU check share: the 8B layer's shape, random inputs, the methods checked, the
result rows, a timer and a peak-memory probe."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import torch

from lampe_eval.attention.counts import peak_memory
from lampe_eval.methods import METHODS, RopeBase, create_method

T = TypeVar("T")

# the official 8B shape (Llama-3-8B): 32 query heads, 8 KV heads, head_dim 128, 8K window
HQ, HKV, DIM, WINDOW = 32, 8, 128, 8192
ORACLE_ROWS = 32  # oracle rows per probe (start, middle, end): the oracle costs O(rows * L * D)


@dataclass
class Row:
    method: str
    cells: dict[str, str] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)


def rope_base(window: int, heads: int, kv_heads: int, dim: int, device: str) -> RopeBase:
    return RopeBase.plain(window, heads, kv_heads, dim, theta=500000.0, device=device)


ONLY: list[str] = []  # --methods: check and time only these


def position_methods() -> list[str]:
    return [
        name for name in METHODS.names() if METHODS.get(name).kind != "baseline" and name in (ONLY or [name])
    ]


def method_for(name: str, window: int, length: int):
    extra = {"identity_within_window": False} if name == "lampe" else {}
    return create_method(name, window, length, **extra)


def inputs(length: int, heads: int, kv_heads: int, dim: int, device: str, dtype: torch.dtype):
    generator = torch.Generator(device="cpu").manual_seed(0)
    shapes = [(1, heads, length, dim), (1, kv_heads, length, dim), (1, kv_heads, length, dim)]
    return [torch.randn(s, generator=generator).to(device=device, dtype=dtype) for s in shapes]


def best_time(fn: Callable[[], object], repeats: int, device: str) -> float:
    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    fn()  # warm-up (and plan caches)
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return min(times)


@dataclass(frozen=True)
class Shape:
    heads: int = HQ
    kv_heads: int = HKV
    dim: int = DIM
    window: int = WINDOW


def held(fn: Callable[[], T], device: str) -> tuple[T, int]:
    """``fn()`` and the most bytes it held at once above what was allocated before it."""
    if device != "cuda":
        return peak_memory(fn)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    result = fn()
    torch.cuda.synchronize()
    return result, torch.cuda.max_memory_allocated() - before
