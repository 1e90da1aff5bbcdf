"""The detection grid of ``lampe-eval dpe-select`` (step 1 of :mod:`.dpe_select`) and its choice: the
equal dimension groups, the factors ``run_niah_detect.sh`` detects and the base factor of the other groups,
the settings they make; the probes' scores, their mean per setting and each group's best factor."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..errors import LampeEvalError

TASK = "niah_multivalue"  # RULER's 4-value NIAH: the official detection task (4 needles, one key)
OFFICIAL_GROUPS = 8  # run_niah_detect.sh: num_parts=8
DETECT_FLOOR = 1024  # run_niah_detect.sh: detected lengths halve down to 1024


# --------------------------------------------------------------------------------------- the grid
def equal_groups(frequencies: int, count: int) -> tuple[int, ...]:
    """Boundaries of ``count`` equal groups over ``frequencies`` (as ``dpe``'s empty dimension_groups)."""
    if count < 1 or count > frequencies:
        raise LampeEvalError(f"dpe-select: {count} dimension groups for {frequencies} RoPE frequencies")
    return tuple(round(g * frequencies / count) for g in range(count + 1))


def detection_factors(length: int, floor: int = DETECT_FLOOR) -> tuple[int, ...]:
    """run_niah_detect.sh's detecting factors: length // l for l = length, length // 2, ... >= floor."""
    factors = []
    l = length
    while l >= floor:
        factors.append(length // l)
        l //= 2
    return tuple(sorted(set(factors))) or (1,)


def base_factor(length: int, window: int) -> int:
    """run_niah_detect.sh's factor of the groups not under detection: (length / window) * 2 (integers)."""
    return max(1, length // window) * 2


@dataclass(frozen=True)
class DetectionGrid:
    """The settings the detection measures: every group at ``base`` but one, which runs each of
    ``factors`` in turn."""

    groups: int
    base: int
    factors: tuple[int, ...]

    def setting(self, group: int, factor: int) -> tuple[int, ...]:
        return tuple(factor if g == group else self.base for g in range(self.groups))

    def settings(self) -> list[tuple[int, ...]]:
        """The distinct settings, the all-base one first (a group at the base factor is that setting)."""
        out = [self.setting(0, self.base)]
        for group in range(self.groups):
            for factor in self.factors:
                candidate = self.setting(group, factor)
                if candidate not in out:
                    out.append(candidate)
        return out


# ------------------------------------------------------------------------------------- the scores
@dataclass
class Probe:
    """One NIAH sample under one setting: the answer's NLL (nats per token) and, when generated, the
    string-match score (0-100) and the prediction."""

    factors: tuple[int, ...]
    sample: int
    nll: float | None
    tokens: int
    match: float | None = None
    prediction: str | None = None
    seconds: float = 0.0

    def score(self, kind: str) -> float:
        value = self.nll if kind == "nll" else self.match
        if value is None:
            raise LampeEvalError(f"dpe-select: probe {self.factors} has no {kind} score")
        return value


@dataclass
class GroupChoice:
    """A dimension group's detected factor, with the score of each factor tried."""

    group: int
    frequencies: tuple[int, int]  # [first, last + 1) of the head_dim / 2 frequencies
    factor: int
    scores: dict[int, float]


def higher_is_better(kind: str) -> bool:
    return kind != "nll"


def score_table(probes: Sequence[Probe], kind: str, samples: int) -> dict[tuple[int, ...], float]:
    """Mean score over the first ``samples`` samples of each setting measured on all of them."""
    by_setting: dict[tuple[int, ...], dict[int, float]] = {}
    for probe in probes:
        if probe.sample < samples:
            by_setting.setdefault(tuple(probe.factors), {})[probe.sample] = probe.score(kind)
    return {k: sum(v.values()) / len(v) for k, v in by_setting.items() if len(v) == samples}


def choose_factors(
    grid: DetectionGrid, table: Mapping[tuple[int, ...], float], kind: str, boundaries: Sequence[int]
) -> list[GroupChoice]:
    """Each group's best factor ("by sorting these results", README). Ties (within 1e-9) go to the base
    factor when it is among the best, else to the smallest factor."""
    better = higher_is_better(kind)
    choices = []
    for group in range(grid.groups):
        scores = {}
        for factor in grid.factors:
            setting = grid.setting(group, factor)
            if setting not in table:
                raise LampeEvalError(f"dpe-select: no score for group {group} at factor {factor}")
            scores[factor] = table[setting]
        best = max(scores.values()) if better else min(scores.values())
        tied = [f for f, s in scores.items() if abs(s - best) <= 1e-9]
        factor = grid.base if grid.base in tied else min(tied)
        span = (int(boundaries[group]), int(boundaries[group + 1]))
        choices.append(GroupChoice(group, span, factor, scores))
    return choices
