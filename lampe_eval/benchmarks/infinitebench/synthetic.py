"""Local generation of the synthetic retrieval tasks (passkey, number_string, kv_retrieval) at any length.

The recipe is the official one (``data/construct_synthetic_dataset.py``; facts in docs/benchmarks.md
section 3.2), sized to the evaluation length with the evaluated model's tokenizer instead of fixed line
counts:

* **passkey / number_string**: the noise line repeated ``n`` times with the needle inserted after ``j`` of
  them; passkey keys are 5 random digits (leading zeros allowed), number_string keys 10 digits built like the
  official ones (5 random digits, then 5 times a digit duplicated next to itself at a random position).
* **kv_retrieval**: ``JSON data:\\n{"<uuid>": "<uuid>", ...}`` with ``n`` random UUID4 pairs; the queried key
  is the pair at position ``floor(d * n / depths)``.

``n`` is the largest count whose prompt (template filled, chat template applied) fits ``length`` tokens.
Needle depths follow the official grid (59 depths from start to end for passkey/number_string, 500 for kv);
sample ``i`` takes grid point ``(i * stride) mod depths`` with a stride near ``depths / golden ratio`` and
coprime with it, so a small ``--limit`` already spreads over the depths and the full set covers every depth
equally often, like the official files.

Each sample draws its keys from ``random.Random("infinitebench:<task>:<seed>:<index>")``, so sample ``i`` is
the same whatever ``--limit`` is. What is expensive (finding ``n`` with the tokenizer) is cached as one small
JSON line per sample; the text is rebuilt from (seed, index, n, position) on every read.
"""

from __future__ import annotations

import math
import random
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import LampeEvalError
from .data import Record

GENERATOR_VERSION = 1  # bump when a change alters generated text


class TooShortError(LampeEvalError):
    """The length cannot hold even the prompt without any filler."""


def depth_stride(depths: int) -> int:
    """A stride coprime with ``depths`` near ``depths / phi`` (a well-spread visiting order)."""
    if depths <= 2:
        return 1
    target = round(depths / ((1 + math.sqrt(5)) / 2))
    for delta in range(depths):
        for candidate in (target - delta, target + delta):
            if 0 < candidate < depths and math.gcd(candidate, depths) == 1:
                return candidate
    return 1


def depth_index(index: int, depths: int) -> int:
    return (index * depth_stride(depths)) % depths


def sample_rng(task: str, seed: int, index: int) -> random.Random:
    return random.Random(f"infinitebench:{task}:{seed}:{index}")


def passkey_key(rng: random.Random) -> str:
    return "".join(str(rng.randint(0, 9)) for _ in range(5))


def number_string_key(rng: random.Random) -> str:
    digits = [str(rng.randint(0, 9)) for _ in range(5)]
    for k in range(5):
        pos = rng.randint(0, 4 + k)
        digits.insert(pos, digits[pos])
    return "".join(digits)


def random_uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


@dataclass
class SyntheticTask:
    """One synthetic task's recipe; ``build(index, n)`` gives the record with ``n`` filler units."""

    task: str
    recipe: dict[str, Any]
    noise: str
    seed: int

    @property
    def depths(self) -> int:
        return int(self.recipe.get("depths", 1))

    @property
    def num_samples(self) -> int:
        return int(self.recipe.get("num_samples", 1))

    @property
    def unit(self) -> str:
        return "pairs" if self.task == "kv_retrieval" else "noise_lines"

    def position(self, index: int, n: int) -> int:
        """Where the needle goes for sample ``index`` with ``n`` units (0 = before all of them)."""
        grid = depth_index(index, self.depths)
        if self.task == "kv_retrieval":  # the official ans_id = int(i * nnoise / nsample), always < n
            return min(n - 1, grid * n // self.depths) if n > 0 else 0
        # passkey / number_string: j noise lines before the needle, j = 0 .. n over depths - 1 steps
        return round(grid * n / max(1, self.depths - 1))

    def key(self, index: int) -> str:
        rng = sample_rng(self.task, self.seed, index)
        if self.task == "passkey":
            return passkey_key(rng)
        if self.task == "number_string":
            return number_string_key(rng)
        raise ValueError(self.task)

    def build(self, index: int, n: int) -> tuple[Record, dict[str, Any]]:
        pos = self.position(index, n)
        if self.task == "kv_retrieval":
            rng = sample_rng(self.task, self.seed, index)
            pairs = [(random_uuid(rng), random_uuid(rng)) for _ in range(max(1, n))]
            body = ", ".join(f'"{k}": "{v}"' for k, v in pairs)
            context = str(self.recipe.get("header", "JSON data:\n")) + "{" + body + "}"
            key, answer = pairs[pos]
            question = str(self.recipe["question"]).replace("{key}", key)
        else:
            answer = self.key(index)
            needle = str(self.recipe["needle"]).replace("{key}", answer)
            context = self.noise * pos + needle + self.noise * (n - pos)
            question = str(self.recipe["question"])
        # depth of the needle in [0, 1]: grid point / (depths - 1) for the noise tasks (both ends included),
        # grid point / depths for kv (the official ans_id never reaches the last pair's slot at depth 1)
        steps = self.depths if self.task == "kv_retrieval" else self.depths - 1
        depth = depth_index(index, self.depths) / max(1, steps)
        meta = {"units": n, "unit": self.unit, "position": pos, "depth": round(depth, 4)}
        return Record(id=f"gen-{index}", context=context, input=question, answer=[answer]), meta


@dataclass(frozen=True)
class Fit:
    size: int
    tokens: int
    evaluations: int


def _unbounded_step(
    n: int, tokens: int, base: int, budget: int, rate: float, ok: int, tried: Mapping[int, int]
) -> tuple[int, float]:
    """No size known too big yet: the secant through n = 0 and the last point, or double; (next n, rate)."""
    if n > 0:
        rate = max(1e-6, (tokens - base) / n)
    guess = int((budget - base) / rate)
    return (guess if guess > ok and guess not in tried else max(ok + 1, 2 * n)), rate


def _bracketed_step(ok: int, too_big: int, budget: int, cache: Mapping[int, int], slow: bool) -> int:
    """The next n inside the bracket: the middle after slow progress, else interpolated between the
    bounds (near-linear counts: lands on the answer or next to it)."""
    if slow:
        return (ok + too_big) // 2
    slope = max(1e-6, (cache[too_big] - cache[ok]) / (too_big - ok))
    return min(max(ok + int((budget - cache[ok]) / slope), ok + 1), too_big - 1)


def fit_size(
    tokens_at: Callable[[int], int],
    budget: int,
    *,
    start: int | None = None,
    rate: float | None = None,
    probe: int = 16,
    max_evaluations: int = 60,
) -> Fit:
    """The largest ``n >= 0`` with ``tokens_at(n) <= budget`` (``tokens_at`` non-decreasing in ``n``).

    Secant steps through ``n = 0`` from a start (a previous sample's fit, or a probe) until the answer is
    bracketed, then interpolation between the bounds, with a bisection whenever a step did not halve them.
    """
    cache: dict[int, int] = {}

    def at(n: int) -> int:
        if n not in cache:
            cache[n] = tokens_at(n)
        return cache[n]

    base = at(0)
    if base > budget:
        raise TooShortError(f"the prompt alone has {base} tokens, more than the length {budget}")
    if rate is None or rate <= 0:
        rate = max(1e-6, (at(probe) - base) / probe)
    n = start if start is not None and start >= 0 else max(0, int((budget - base) / rate))
    ok, too_big = 0, None  # largest n known to fit, smallest n known not to
    previous_width: int | None = None
    while len(cache) < max_evaluations:
        tokens = at(n)
        if tokens <= budget:
            ok = max(ok, n)
        else:
            too_big = n if too_big is None else min(too_big, n)
        if too_big is None:
            n, rate = _unbounded_step(n, tokens, base, budget, rate, ok, cache)
            continue
        width = too_big - ok
        if width <= 1:
            break
        slow = previous_width is not None and width > previous_width // 2
        n = _bracketed_step(ok, too_big, budget, cache, slow)
        previous_width = width
    return Fit(size=ok, tokens=at(ok), evaluations=len(cache))
