"""The GPU check's table, its parts (a crash is reported and the next part runs) and its failures."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable

import torch

from perf.gpu.common import Row


def print_table(rows: dict[str, Row]) -> None:
    columns: list[str] = []
    for row in rows.values():
        columns += [c for c in row.cells if c not in columns]
    header = ["method", *columns, "result"]
    lines = [header]
    for row in rows.values():
        result = "FAIL" if row.failed else "ok"
        lines.append([row.method, *(row.cells.get(c, "-") for c in columns), result])
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for index, line in enumerate(lines):
        print("| " + " | ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)) + " |")
        if index == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")


CRASHES: list[str] = []  # parts that raised: reported, the other parts still run


def each_length(fn: Callable[[int], object], lengths: list[int]) -> Callable[[], None]:
    def run() -> None:
        for length in lengths:
            fn(length)

    return run


def part(label: str, fn: Callable[[], object]) -> None:
    """Run one part; a crash is printed, counted as a failure, and the next part runs (a lease is short)."""
    start = time.perf_counter()
    try:
        fn()
    except Exception as error:  # noqa: BLE001 - every part's crash is reported at the end
        traceback.print_exc()
        CRASHES.append(f"part ({label}) crashed: {type(error).__name__}: {str(error).splitlines()[0][:200]}")
    print(f"part ({label}): {time.perf_counter() - start:.0f} s", flush=True)
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def failures(*tables: dict[str, Row]) -> list[str]:
    """``method: what failed`` for each failed check in ``tables``."""
    return [f"{row.method}: {fail}" for table in tables for row in table.values() for fail in row.failed]
