"""Uncertainty: percentile bootstrap confidence intervals over samples, and paired comparisons.

A *stratum* is one task at one length for one model and variant (a :class:`TaskScore`). Its bootstrap
draws ``resamples`` resamples of its samples (with replacement) as a count matrix ``[resamples, samples]``
and lets the benchmark aggregate every resample at once (:meth:`Benchmark.resample`: the mean, or whatever
weighting the benchmark's own aggregate uses), so the interval is that of the number the table prints. A
cell that averages several strata (``Avg.`` over tasks, a by-length cell, a paper column) resamples each
stratum on its own and averages the resampled values (a stratified bootstrap; tasks and lengths are
independent strata).

**Pairing.** The draws of a stratum come from a generator seeded by the report's seed, the stratum
without its variant (model, benchmark, task, length) and the sample ids drawn from. Two variants that ran
the same samples therefore get the same draws, sample by sample: the difference of their resampled values
is a paired bootstrap of the difference (on the samples both ran, when they differ). A difference is
*significant* when its percentile interval excludes 0; the p-value is the two-sided bootstrap one. Cells
of fewer than 2 samples (per stratum) get no interval and no test.

Everything is numpy over count matrices: a report of thousands of records takes well under a second.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..benchmarks.base import resample
from .data import TaskScore

DEFAULT_RESAMPLES = 1000
DEFAULT_SEED = 0
LEVEL = 0.95


@dataclass(frozen=True)
class BootstrapSettings:
    resamples: int = DEFAULT_RESAMPLES
    seed: int = DEFAULT_SEED
    level: float = LEVEL

    def describe(self) -> str:
        return (
            f"{self.level:.0%} percentile bootstrap over samples "
            f"({self.resamples} resamples, seed {self.seed})"
        )


@dataclass(frozen=True)
class Resampled:
    """A cell's value in every resample (``values``), and the fewest samples of its strata."""

    values: np.ndarray
    samples: int

    @staticmethod
    def mean_of(parts: Sequence[Resampled]) -> Resampled:
        return Resampled(np.mean([p.values for p in parts], axis=0), min(p.samples for p in parts))


@dataclass(frozen=True)
class Interval:
    low: float
    high: float
    stderr: float | None  # standard deviation of the resampled values (None when some are infinite)

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high


@dataclass(frozen=True)
class Difference:
    """``a - b`` on the samples both ran: the point difference, its interval and two-sided p-value."""

    diff: float
    low: float
    high: float
    p: float
    pairs: int  # fewest common samples of a stratum
    tested: bool  # False: fewer than 2 common samples (or no finite resample): nothing can be said

    @property
    def significant(self) -> bool:
        return self.tested and (self.low > 0 or self.high < 0)


UNTESTED = Difference(math.nan, math.nan, math.nan, 1.0, 0, False)


def stratum_of(score: TaskScore) -> tuple[str, str, str, int]:
    """What two variants' samples are paired by: the cell without the variant."""
    return (score.model, score.benchmark, score.task, score.length)


class Bootstrap:
    """Resampled values of strata and cells, cached (one report builds many tables from them)."""

    def __init__(self, settings: BootstrapSettings | None = None) -> None:
        self.settings = settings or BootstrapSettings()
        self._draws: dict[tuple, np.ndarray] = {}
        self._values: dict[tuple, np.ndarray] = {}

    # ------------------------------------------------------------------------------------ draws
    def draws(self, stratum: tuple, ids: tuple[str, ...]) -> np.ndarray:
        """Counts [resamples, len(ids)]: how often each sample is drawn in each resample. The same for
        every variant with these sample ids in this stratum (that pairs them)."""
        key = (stratum, ids)
        if key not in self._draws:
            blob = repr(key).encode("utf-8")
            entropy = int.from_bytes(hashlib.sha256(blob).digest()[:8], "little")
            rng = np.random.default_rng([self.settings.seed, entropy])
            n = len(ids)
            self._draws[key] = rng.multinomial(n, np.full(n, 1.0 / n), size=self.settings.resamples)
        return self._draws[key]

    def stratum(self, score: TaskScore, metric: str = "", ids: tuple[str, ...] | None = None) -> np.ndarray:
        """The benchmark's aggregate of ``metric`` (the task's headline when the task has no such metric)
        over each resample of the samples ``ids`` (default: all of them)."""
        metric = metric if metric in score.metrics else score.metric
        ids = ids if ids is not None else score.ordered_ids()
        key = (id(score), metric, ids)
        if key not in self._values:
            by_id = score.scores_by_id()
            chosen = [by_id[i] for i in ids]
            counts = self.draws(stratum_of(score), ids)
            self._values[key] = np.asarray(
                resample(score.benchmark, score.task, chosen, counts, metric), dtype=np.float64
            )
        return self._values[key]

    # ------------------------------------------------------------------------------------- cells
    def cell(self, parts: Sequence[TaskScore], metric: str = "") -> Resampled | None:
        """The mean over ``parts`` of their resampled values (None without parts or samples)."""
        if not parts or any(not p.sample_ids for p in parts):
            return None
        values = np.mean([self.stratum(p, metric) for p in parts], axis=0)
        return Resampled(values, min(len(p.sample_ids) for p in parts))

    def percentiles(self, values: np.ndarray) -> tuple[float, float]:
        """The central ``level`` range of resampled values (percentile method)."""
        tail = (1.0 - self.settings.level) / 2
        bounds = np.asarray(np.quantile(values, [tail, 1.0 - tail], method="inverted_cdf"), dtype=float)
        return float(bounds[0]), float(bounds[1])

    def interval(self, resampled: Resampled | None) -> Interval | None:
        """The percentile interval (None under 2 samples or without a finite resample)."""
        if resampled is None or resampled.samples < 2:
            return None
        values = resampled.values[~np.isnan(resampled.values)]
        if values.size == 0:
            return None
        low, high = self.percentiles(values)
        finite = bool(np.isfinite(values).all())
        stderr = float(np.std(values, ddof=1)) if finite and values.size > 1 else None
        return Interval(float(low), float(high), stderr)

    def interval_of(self, parts: Sequence[TaskScore], metric: str = "") -> Interval | None:
        return self.interval(self.cell(parts, metric))

    def difference(self, a: Sequence[TaskScore], b: Sequence[TaskScore], metric: str = "") -> Difference:
        """Paired bootstrap of ``mean(a) - mean(b)`` over the strata both have, each on the samples both
        ran (strata matched by task and length)."""
        b_by = {(s.task, s.length): s for s in b}
        diffs, points, pairs = [], [], []
        for sa in a:
            sb = b_by.get((sa.task, sa.length))
            if sb is None:
                return UNTESTED
            common = tuple(sorted(set(sa.sample_ids) & set(sb.sample_ids)))
            if len(common) < 2:
                return UNTESTED
            diffs.append(self.stratum(sa, metric, common) - self.stratum(sb, metric, common))
            ones = np.ones((1, len(common)))
            points.append(self._point(sa, metric, common, ones) - self._point(sb, metric, common, ones))
            pairs.append(len(common))
        if not diffs:
            return UNTESTED
        d = np.mean(diffs, axis=0)
        d = d[~np.isnan(d)]
        if d.size == 0:
            return UNTESTED
        low, high = self.percentiles(d)
        below, above = int((d <= 0).sum()), int((d >= 0).sum())
        p = min(1.0, 2 * (min(below, above) + 1) / (d.size + 1))
        return Difference(float(np.mean(points)), float(low), float(high), p, min(pairs), True)

    @staticmethod
    def _point(score: TaskScore, metric: str, ids: tuple[str, ...], ones: np.ndarray) -> float:
        by_id = score.scores_by_id()
        chosen = [by_id[i] for i in ids]
        metric = metric if metric in score.metrics else score.metric
        return float(resample(score.benchmark, score.task, chosen, ones, metric)[0])
