"""What ``lampe-eval dpe-select`` is asked (:class:`SelectRequest`, run by :mod:`.dpe_select`): the request
with its one-line checks before any model loads, and the probe scores it offers (``--score``) with the
RULER options that give each."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..errors import LampeEvalError
from ..lengths import format_length
from .common import ToolRequest
from .dpe_dimensions import ATTENTION_INPUT_BACKENDS
from .dpe_grid import OFFICIAL_GROUPS

SCORES = ("nll", "generate")
# the RULER options that give each --score: the answer's NLL, or RULER's own greedy answer and string match
SCORE_OPTIONS: dict[str, dict[str, str]] = {"nll": {"score": "answer_nll"}, "generate": {}}


@dataclass
class SelectRequest(ToolRequest):
    """What ``lampe-eval dpe-select`` was asked; :meth:`check` raises one-line errors before any load.
    ``options`` are RULER's (essay=..., essay_file=...), the shared fields are
    :class:`~lampe_eval.tools.common.ToolRequest`'s."""

    model: str = "smollm2-135m"
    length: int | None = None  # test length (TEST_MAX_LENGTH); default 2 x the pretraining window
    groups: int = OFFICIAL_GROUPS
    factors: list[int] | None = None  # default: detection_factors(length)
    base: int | None = None  # default: base_factor(length, window)
    local_window: int | None = None  # DPE's w; default: dpe's default for the window
    variant: str = "official"
    samples: int = 4
    score: str = "nll"
    seed: int = 0
    dim_lengths: list[int] | None = None  # default: the window halving down to 2048
    dim_samples: int = 2
    topk: int | None = None  # default: 3/4 of the frequencies (48 of 64)
    dimensions: bool = True
    out: Path = field(default=Path("results/dpe-select"), kw_only=True)

    def check_run(self) -> None:
        """What the tools set themselves and what the backend cannot do: one line each, before any load."""
        if "score" in self.options:
            raise LampeEvalError(
                "dpe-select sets the RULER option score itself: drop --opt score (use --score)"
            )
        if self.dimensions and self.backend not in ATTENTION_INPUT_BACKENDS:
            raise LampeEvalError(
                f"dpe-select: the {self.backend} backend cannot hand over queries and keys before RoPE "
                f"(the key-dimension pass): use --backend {ATTENTION_INPUT_BACKENDS[0]}, or --no-dims"
            )

    def check(self, window: int | None) -> None:
        if self.score not in SCORES:
            raise LampeEvalError(f"--score must be one of {', '.join(SCORES)}, got {self.score!r}")
        if self.variant not in ("official", "paper"):
            raise LampeEvalError(f"--variant must be official or paper, got {self.variant!r}")
        if self.groups < 1 or self.samples < 1 or self.dim_samples < 1:
            raise LampeEvalError("--groups, --samples and --dim-samples must be at least 1")
        if self.factors is not None and (not self.factors or min(self.factors) < 1):
            raise LampeEvalError("--factors must be integers >= 1")
        if self.base is not None and self.base < 1:
            raise LampeEvalError("--base-factor must be at least 1")
        if self.topk is not None and self.topk < 1:
            raise LampeEvalError("--topk must be at least 1")
        if self.local_window is not None and self.local_window < 1:
            raise LampeEvalError("--window must be at least 1")
        if window and self.length is not None and self.length <= window:
            raise LampeEvalError(
                f"--len {format_length(self.length)} is within the model's {format_length(window)} window: "
                "the detection needs a test length beyond it"
            )
