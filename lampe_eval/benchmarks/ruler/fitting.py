"""Fit a sample to a token budget: the largest haystack size whose prompt has at most ``budget`` tokens.

The prompt length is (close to) linear in the haystack size, so instead of a plain binary search
(~17 full tokenisations at 128K) the search steps by interpolation inside a bracket
``[largest size that fits, smallest size that does not]``: a first probe gives the tokens per unit, one
full tokenisation near the answer and one correction usually land within the tolerance. Each sample
starts from the previous sample's size (``hint``), which mostly needs a single tokenisation. The result
is a pure function of (build, budget, hint), so generation stays deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from ...errors import LampeEvalError

T = TypeVar("T")


class TooShortError(LampeEvalError):
    """Even the smallest haystack does not fit the budget."""


@dataclass
class Fit(Generic[T]):
    size: int  # haystack units
    built: T
    tokens: int  # prompt tokens at this size
    slack: int  # budget - tokens (>= 0)
    exact: bool  # size + 1 was checked and does not fit
    evaluations: int  # full tokenisations spent
    tokens_per_unit: float
    tolerance: int  # the slack accepted without proving size + 1 does not fit


@dataclass
class _Search(Generic[T]):
    """The sizes tried so far (their builds and token counts) and the bracket they give: the largest size
    known to fit the budget and the smallest known not to."""

    build: Callable[[int], T]
    count: Callable[[T], int]
    budget: int
    min_size: int
    max_size: int | None
    cache: dict[int, tuple[T, int]] = field(default_factory=dict)
    fits: int | None = None
    fails: int | None = None

    def measure(self, size: int) -> int:
        """The prompt tokens at ``size`` (built once), moving the bracket."""
        if size not in self.cache:
            built = self.build(size)
            self.cache[size] = (built, self.count(built))
        tokens = self.cache[size][1]
        if tokens <= self.budget:
            self.fits = size if self.fits is None else max(self.fits, size)
        else:
            self.fails = size if self.fails is None else min(self.fails, size)
        return tokens

    def first_guess(self, probe_size: int, hint: int | None, rate: float | None) -> tuple[int, float]:
        """(start size, tokens per unit) without a previous sample's: the smallest size and a probe."""
        base = self.measure(self.min_size)
        if base > self.budget:
            raise TooShortError(f"the smallest prompt has {base} tokens, over the budget of {self.budget}")
        probe = max(self.min_size + 1, probe_size)
        if self.max_size is not None:
            probe = min(probe, self.max_size)
        if probe > self.min_size:
            tokens = self.measure(probe)
            rate = max((tokens - base) / (probe - self.min_size), 1e-3)
            start = probe
        else:
            rate, start = rate or 1.0, self.min_size
        if hint is None:
            hint = start + int((self.budget - self.cache[start][1]) / rate)
        return hint, rate

    def settled(self, tolerance: int) -> bool:
        """The fit is within ``tolerance`` of the budget, proven the largest, or at the largest size."""
        if self.fits is None:
            return False
        if self.budget - self.cache[self.fits][1] <= tolerance:
            return True
        if self.fails is not None and self.fails - self.fits <= 1:
            return True
        return self.max_size is not None and self.fits == self.max_size

    def clamp(self, size: int) -> int:
        """``size`` moved inside the open bracket and the allowed sizes."""
        if self.fits is not None:
            size = max(size, self.fits + 1)
        if self.fails is not None:
            size = min(size, self.fails - 1)
        if self.max_size is not None:
            size = min(size, self.max_size)
        if size < self.min_size:
            if self.min_size in self.cache:
                raise TooShortError(
                    f"the smallest prompt has {self.cache[self.min_size][1]} tokens, over the budget of "
                    f"{self.budget}"
                )
            size = self.min_size
        return size

    def run(self, size: int, rate: float, tolerance: int, max_evaluations: int) -> float:
        """Interpolate (bisect where that is slow) from ``size`` until settled; the last tokens per unit."""
        steps = 0
        while len(self.cache) < max_evaluations:
            tokens = self.measure(size)
            steps += 1
            if self.settled(tolerance):
                break
            if self.fits is not None and self.fails is not None:
                if steps > 3:
                    size = (self.fits + self.fails) // 2  # interpolation is slow here (a non-linear spot)
                    continue
                # Interpolate from the point just evaluated with the bracket's slope.
                width = self.fails - self.fits
                rate = max((self.cache[self.fails][1] - self.cache[self.fits][1]) / width, 1e-3)
            size = self.clamp(size + math.floor((self.budget - tokens) / rate))
        return rate

    def result(self, rate: float, tolerance: int) -> Fit[T]:
        if self.fits is None:
            raise TooShortError(f"no haystack size fits the budget of {self.budget} tokens")
        built, tokens = self.cache[self.fits]
        return Fit(
            size=self.fits,
            built=built,
            tokens=tokens,
            slack=self.budget - tokens,
            exact=self.fails is not None and self.fails == self.fits + 1,
            evaluations=len(self.cache),
            tokens_per_unit=rate,
            tolerance=tolerance,
        )


def fit_to_budget(
    build: Callable[[int], T],
    count: Callable[[T], int],
    budget: int,
    *,
    min_size: int,
    probe_size: int,
    tolerance: int | None = None,
    hint: int | None = None,
    tokens_per_unit: float | None = None,
    max_size: int | None = None,
    max_evaluations: int = 40,
) -> Fit[T]:
    """Largest ``size >= min_size`` with ``count(build(size)) <= budget``, stopping early once the slack is
    within ``tolerance`` tokens (default: 1.5 units' worth of tokens, capped at 1% of the budget, at
    least 8; a coarser unit than that makes the search prove that ``size + 1`` does not fit)."""
    search = _Search(build, count, budget, min_size, max_size)
    rate = tokens_per_unit
    if hint is None or rate is None:
        hint, rate = search.first_guess(probe_size, hint, rate)
    tol = tolerance if tolerance is not None else max(8, min(math.ceil(1.5 * rate), budget // 100))
    size = max(min_size, hint if max_size is None else min(hint, max_size))
    rate = search.run(size, rate, tol, max_evaluations)
    return search.result(rate, tol)
