"""What every PNG of a report shares: matplotlib on the Agg backend (no display), a grid of panels, the
atomic save and :class:`Plot`, the record of a written figure. :mod:`.plots` and :mod:`.depth` both draw
with it (neither imports the other's drawing code)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from ..fileio import atomic_path  # noqa: E402

__all__ = ["Plot", "panels", "plt", "save_figure"]


@dataclass(frozen=True)
class Plot:
    path: Path
    benchmarks: tuple[str, ...]  # what it shows
    caption: str


def panels(
    count: int, width: float, height: float, pad: float = 0.0, **options: object
) -> tuple[Figure, list[Axes]]:
    """A figure of ``count`` panels, three per row, each ``width`` x ``height`` inches (plus ``pad`` inches
    of figure width); the grid's unused panels hidden. ``options`` go to ``plt.subplots``."""
    cols = min(count, 3)
    rows = math.ceil(count / cols)
    fig, axes = plt.subplots(
        rows, cols, figsize=(width * cols + pad, height * rows), squeeze=False, **options
    )
    flat = [ax for row in axes for ax in row]
    for ax in flat[count:]:
        ax.set_visible(False)
    return fig, flat[:count]


def save_figure(fig: Figure, path: Path) -> Path:
    """Write ``fig`` to ``path`` atomically (its format from the suffix, PNG by default) and free it."""
    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=120, format=path.suffix.lstrip(".") or "png")
    finally:
        plt.close(fig)
    return path
