"""What ``lampe-eval dpe-select`` found (:class:`SelectReport`, made by :mod:`.dpe_select`) and what it
writes of it: the method config ``method_configs/dpe-<model>.yaml`` (``params``, what runs read, and
``selection``, the provenance) and the summary lines it prints."""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..lengths import format_length
from .dpe_dimensions import DimensionSelection
from .dpe_grid import TASK, DetectionGrid, GroupChoice
from .dpe_request import SelectRequest


@dataclass
class SelectReport:
    model: str
    window: int
    frequencies: int
    local_window: int
    length: int
    variant: str
    score: str
    samples: int
    boundaries: tuple[int, ...]
    grid: DetectionGrid
    choices: list[GroupChoice]
    dims: DimensionSelection | None = None
    seconds: float = 0.0

    @property
    def scale_factors(self) -> list[int]:
        return [c.factor for c in self.choices]


@dataclass
class SelectOutcome:
    report: SelectReport
    files: list[Path]


def config_document(report: SelectReport, request: SelectRequest | None = None) -> dict[str, Any]:
    """The YAML mapping for ``method_configs/dpe-<model>.yaml``: ``params`` (what runs read) and
    ``selection`` (provenance, ignored by runs)."""
    grid = report.grid
    selection: dict[str, Any] = {
        "model": report.model,
        "window": report.window,
        "frequencies": report.frequencies,
        "test_length": report.length,
        "task": f"ruler/{TASK}",
        "samples": report.samples,
        "score": report.score
        + (" (answer NLL, nats/token: lower is better)" if report.score == "nll" else " (string match)"),
        "base_factor": grid.base,
        "detect_factors": list(grid.factors),
        "scores": {
            f"group {c.group} (frequencies {c.frequencies[0]}-{c.frequencies[1] - 1})": {
                int(f): round(float(s), 4) for f, s in c.scores.items()
            }
            for c in report.choices
        },
        "seconds": round(report.seconds),
    }
    if report.dims is not None:
        dims = report.dims
        selection["key_dimensions"] = {
            "lengths": dims.lengths,
            "samples": dims.samples,
            "topk": dims.topk,
            "group_share_selected": dims.group_shares(report.boundaries),
            "note": "top-k per layer and head; not a parameter (plans are shared by every layer)",
        }
    if request is not None and request.command:
        selection["command"] = request.command
    return {
        "params": {
            "variant": report.variant,
            "window": report.local_window,
            "scale_factors": report.scale_factors,
            "dimension_groups": list(report.boundaries),
        },
        "selection": selection,
    }


def write_config(path: Path, report: SelectReport, request: SelectRequest | None = None) -> Path:
    import yaml

    from ..runner.worker import git_revision

    path.parent.mkdir(parents=True, exist_ok=True)
    date = _dt.date.today().isoformat()
    command = request.command if request is not None and request.command else "lampe-eval dpe-select"
    header = (
        f"# DPE settings found by `lampe-eval dpe-select` for {report.model} (window {report.window}, "
        f"{report.frequencies} RoPE frequencies),\n"
        f"# the procedure of LuLuLuyi/DPE @ 46b85de (docs/methods.md 7.3), {date}, lampe-eval "
        f"{git_revision()}.\n# Command: {command}\n"
        f"# Settings: ruler/{TASK} at {format_length(report.length)}, {report.samples} sample(s), score "
        f"{report.score}, base factor {report.grid.base}, factors {list(report.grid.factors)}, "
        f"{len(report.choices)} groups.\n"
        "# `params` is what runs read; `selection` is provenance.\n"
    )
    body = yaml.safe_dump(
        config_document(report, request), sort_keys=False, default_flow_style=None, width=100
    )
    path.write_text(header + body)
    return path


def summary_lines(report: SelectReport) -> list[str]:
    lines = [
        f"scale_factors {report.scale_factors} over groups {list(report.boundaries)} "
        f"(w {report.local_window}, {report.variant}; {report.seconds:.0f}s)"
    ]
    for c in report.choices:
        table = ", ".join(
            f"{f}:{s:.4f}" if math.isfinite(s) else f"{f}:{s}" for f, s in sorted(c.scores.items())
        )
        lines.append(f"  group {c.group} [{c.frequencies[0]}, {c.frequencies[1]}): s={c.factor}  [{table}]")
    if report.dims is not None:
        shares = report.dims.group_shares(report.boundaries)
        lines.append(f"  key dimensions: share selected per group {shares} (top {report.dims.topk})")
    return lines
