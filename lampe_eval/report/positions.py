"""Position maps: the relative position RoPE gives each (query, key) pair under a method, as a picture
(a heat map like the LaMPE paper's Figure 1) and the positions the last query sees.

The positions come from the plan the engine runs (``method.plan(base, L, L)``: its segments' regions
and position maps). Up to ``resolution`` tokens the heat map is every pair, from
:func:`lampe_eval.attention.reference.relative_positions`; beyond, rows and columns are sampled evenly
and each sampled pair is computed from the same regions and maps (:func:`position_grid`), so no L x L
tensor is ever built. The last query row is always exact (O(L)). Pairs no segment covers (masked) are
blank.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..attention import AttentionPlan, relative
from ..attention.reference import relative_positions
from ..errors import LampeEvalError
from ..fileio import atomic_write_bytes
from ..lengths import format_length
from ..records import SampleRecord

DEFAULT_RESOLUTION = 384  # rows and columns of the heat map (sampled beyond this many tokens)


@dataclass
class PositionMap:
    label: str
    kind: str  # the method's kind (frequency methods keep positions: only their frequencies change)
    length: int
    window: int
    rows: np.ndarray  # query indices of the heat map's rows
    cols: np.ndarray  # key indices of its columns
    grid: np.ndarray  # [rows, cols] relative positions, NaN where the pair is not attended
    last_row: np.ndarray  # [length] positions of the last query, NaN where not attended

    @property
    def exact(self) -> bool:
        return len(self.rows) == self.length

    @property
    def largest(self) -> float:
        return float(np.nanmax(self.last_row))


def method_plan(method: Any, window: int, length: int) -> AttentionPlan:
    """The plan the engine runs for a ``length``-token prefill of a model with this window (on the
    stand-in RoPE of :func:`lampe_eval.methods.window_base`: positions do not depend on its frequencies)."""
    from ..methods import window_base

    return method.plan(window_base(window), length, length)


def sample_indices(length: int, count: int) -> torch.Tensor:
    """``count`` token indices spread evenly over [0, length), first and last included."""
    if length <= count:
        return torch.arange(length)
    return torch.unique(torch.linspace(0, length - 1, count).round().long())


def shown(rel: torch.Tensor) -> torch.Tensor:
    """The positions a picture shows: [n, kv] as they are; a per-head or per-frequency map [n, kv, H, F]
    (DPE, Ms-PoE) at its first head and its lowest frequency (the last: the one that spans the longest
    distances, so the one the window bounds)."""
    return rel[:, :, 0, -1] if rel.dim() == 4 else rel


def per_head_or_frequency(plan: AttentionPlan) -> bool:
    one = torch.tensor([0])
    return any(s.q_pos(one).dim() > 1 or s.k_pos(one).dim() > 1 for s in plan.segments)


def position_grid(plan: AttentionPlan, rows: torch.Tensor, cols: torch.Tensor) -> np.ndarray:
    """Relative positions of the pairs (rows x cols) by the plan's segments (NaN: not attended): the
    regions' bounds and position maps, as :func:`relative_positions` uses them, for any rows/columns
    (per head or frequency: :func:`shown`)."""
    grid = torch.full((len(rows), len(cols)), math.nan, dtype=torch.float64)
    for segment in plan.segments:
        start, stop = segment.region.bounds(rows)
        inside = (cols[None, :] >= start[:, None]) & (cols[None, :] < stop[:, None])
        rel = shown(relative(segment.q_pos(rows), segment.k_pos(cols)))
        grid = torch.where(inside, rel, grid)
    return grid.numpy()


def position_map(
    method: Any, window: int, length: int, label: str = "", resolution: int = DEFAULT_RESOLUTION
) -> PositionMap:
    plan = method_plan(method, window, length)
    if length <= resolution:
        pe, owner = relative_positions(plan, 0, length, length)
        pe = shown(pe)
        grid = torch.where(owner >= 0, pe, torch.full_like(pe, math.nan)).numpy()
        rows = cols = torch.arange(length)
    else:
        rows = cols = sample_indices(length, resolution)
        grid = position_grid(plan, rows, cols)
    last = position_grid(plan, torch.tensor([length - 1]), torch.arange(length))[0]
    label = label or method.name
    if per_head_or_frequency(plan):
        label += " (head 0, lowest frequency)"
    return PositionMap(label, method.kind, length, window, rows.numpy(), cols.numpy(), grid, last)


PER_ROW = 4  # methods side by side; more wrap onto further rows


def draw(maps: Sequence[PositionMap], path: Path | None = None) -> bytes:
    """One column per map (at most ``PER_ROW`` to a row): the heat map above, the last query's positions
    below. Returns the PNG (and writes it to ``path`` when given)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = min(len(maps), PER_ROW)
    bands = math.ceil(len(maps) / columns)
    fig, grid = plt.subplots(2 * bands, columns, figsize=(4.2 * columns, 7.6 * bands), squeeze=False)
    heat_axes = [grid[2 * (k // columns)][k % columns] for k in range(len(maps))]
    row_axes = [grid[2 * (k // columns) + 1][k % columns] for k in range(len(maps))]
    for ax in grid.flat:
        if ax not in heat_axes and ax not in row_axes:
            ax.set_visible(False)  # the unused places of the last band
    for ax in row_axes[1:]:
        ax.sharey(row_axes[0])  # the last rows on one scale; each heat map on its own (its structure)
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="white")
    axes = [heat_axes, row_axes]
    for k, pm in enumerate(maps):
        ax = axes[0][k]
        n = pm.length
        image = ax.imshow(
            np.ma.masked_invalid(pm.grid),
            cmap=cmap,
            vmin=0,
            extent=(0, n, n, 0),
            interpolation="nearest",
        )
        sampled = "" if pm.exact else f", {len(pm.rows)} x {len(pm.cols)} sampled"
        size = f"L = {format_length(n)}, W = {format_length(pm.window)}"
        ax.set_title(f"{pm.label}\n{size}{sampled}", fontsize=9)
        ax.set_xlabel("key j")
        ax.set_ylabel("query i")
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="relative position")
        ax = axes[1][k]
        keys = np.arange(n)
        ax.plot(keys, (n - 1) - keys, color="grey", linestyle=":", linewidth=1, label="plain RoPE: i - j")
        ax.plot(keys, pm.last_row, linewidth=1.5, label=pm.label)
        ax.axhline(pm.window, color="red", linestyle="--", linewidth=1, label="pretraining window W")
        note = "\n(positions kept: its frequencies change)" if pm.kind == "frequency" else ""
        ax.set_title(f"last query (i = {n - 1}): largest {pm.largest:.0f}{note}", fontsize=9)
        ax.set_xlabel("key j")
        ax.set_ylabel("relative position")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    data = buffer.getvalue()
    if path is not None:
        atomic_write_bytes(path, data)
    return data


def maps_for_results(
    records: Sequence[SampleRecord], resolution: int = DEFAULT_RESOLUTION, presentation: Any = None
) -> tuple[dict[str, list[PositionMap]], list[str]]:
    """Per model, the position maps of the method variants in its results at its longest length, with
    the parameters they ran with (``resolved_params`` of their records); one warning line per model or
    variant that cannot be drawn (unknown window, a method this process does not know)."""
    from ..methods import METHODS, resolve_method
    from ..models import known_window
    from .data import DECLARED, method_order, variant_labels, variant_of

    longest: dict[str, int] = {}
    for r in records:
        longest[r.model] = max(longest.get(r.model, 0), r.length)
    maps: dict[str, list[PositionMap]] = {}
    warnings: list[str] = []
    for model, length in sorted(longest.items()):
        try:
            window = known_window(model)
        except LampeEvalError:
            window = None
        if window is None:
            warnings.append(f"position maps: the window of {model} is unknown without loading it; skipped")
            continue
        chosen: dict[Any, SampleRecord] = {}
        for r in records:
            if r.model == model and r.length == length:
                chosen.setdefault(variant_of(r), r)
        labels = variant_labels(chosen)
        for variant in method_order(chosen, presentation or DECLARED):
            record = chosen[variant]
            try:
                if variant.method not in METHODS:
                    raise LampeEvalError(f"method {variant.method!r} is not registered in this process")
                params = dict(record.resolved_params)
                # the record's params hold its method_configs values already
                method = resolve_method(variant.method, window, length, params=params, configs=False).method
                maps.setdefault(model, []).append(
                    position_map(method, window, length, labels[variant], resolution)
                )
            except LampeEvalError as err:
                warnings.append(f"position maps: {model} {labels[variant]}: {err}")
    return maps, warnings
