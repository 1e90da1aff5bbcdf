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
from dataclasses import dataclass
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
    cache: dict[int, tuple[T, int]] = {}

    def evaluate(size: int) -> int:
        if size not in cache:
            built = build(size)
            cache[size] = (built, count(built))
        return cache[size][1]

    fits: int | None = None  # largest size known to fit
    fails: int | None = None  # smallest size known not to fit
    rate = tokens_per_unit

    def record(size: int, tokens: int) -> None:
        nonlocal fits, fails
        if tokens <= budget:
            fits = size if fits is None else max(fits, size)
        else:
            fails = size if fails is None else min(fails, size)

    if hint is None or rate is None:
        base = evaluate(min_size)
        record(min_size, base)
        if base > budget:
            raise TooShortError(f"the smallest prompt has {base} tokens, over the budget of {budget}")
        probe = max(min_size + 1, probe_size)
        if max_size is not None:
            probe = min(probe, max_size)
        if probe > min_size:
            tokens = evaluate(probe)
            record(probe, tokens)
            rate = max((tokens - base) / (probe - min_size), 1e-3)
            start = probe
        else:
            rate, start = rate or 1.0, min_size
        if hint is None:
            hint = start + int((budget - evaluate(start)) / rate)
    assert rate is not None
    tol = tolerance if tolerance is not None else max(8, min(math.ceil(1.5 * rate), budget // 100))

    size = max(min_size, hint if max_size is None else min(hint, max_size))
    steps = 0
    while len(cache) < max_evaluations:
        tokens = evaluate(size)
        record(size, tokens)
        steps += 1
        if fits is not None and budget - cache[fits][1] <= tol:
            break
        if fits is not None and fails is not None and fails - fits <= 1:
            break
        if max_size is not None and fits == max_size:
            break
        if fits is not None and fails is not None and steps > 3:
            size = (fits + fails) // 2  # interpolation is slow here (a non-linear spot): bisect
            continue
        # Interpolate from the point just evaluated (the bracket's slope once there is one).
        if fits is not None and fails is not None:
            rate = max((cache[fails][1] - cache[fits][1]) / (fails - fits), 1e-3)
        nxt = size + math.floor((budget - tokens) / rate)
        if fits is not None:
            nxt = max(nxt, fits + 1)
        if fails is not None:
            nxt = min(nxt, fails - 1)
        if max_size is not None:
            nxt = min(nxt, max_size)
        if nxt < min_size:
            if min_size in cache:
                raise TooShortError(
                    f"the smallest prompt has {cache[min_size][1]} tokens, over the budget of {budget}"
                )
            nxt = min_size
        size = nxt
    if fits is None:
        raise TooShortError(f"no haystack size fits the budget of {budget} tokens")
    built, tokens = cache[fits]
    return Fit(
        size=fits,
        built=built,
        tokens=tokens,
        slack=budget - tokens,
        exact=fails is not None and fails == fits + 1,
        evaluations=len(cache),
        tokens_per_unit=rate,
        tolerance=tol,
    )
