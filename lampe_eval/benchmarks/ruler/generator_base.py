"""What the RULER generators share (:mod:`.generators` lists them; the module docstring there says how they
work): the :class:`Generator` base (sizes, the sample's seeded RNG, ``prepare`` and ``build``), the job's
environment (:class:`GenEnv`), a candidate prompt (:class:`Built`), and where placed needles ended up
(:func:`needle_depths`)."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from .config import TaskConfig
from .haystack import EssayHaystack
from .qa_data import QAData


def placed_offsets(context: str, needles: Sequence[str]) -> list[int]:
    """The character offset of each needle in ``context`` (-1 when absent; equal needles take successive
    occurrences)."""
    used: set[int] = set()
    out = []
    for needle in needles:
        at = context.find(needle)
        while at in used:
            at = context.find(needle, at + 1)
        if at >= 0:
            used.add(at)
        out.append(at)
    return out


def needle_depths(context: str, needles: Sequence[str], targets: Sequence[int]) -> list[tuple[float, int]]:
    """(depth, offset in ``context``) of ``needles[i]`` for each i in ``targets``, in context order.

    The depth is the share of the haystack (the context without the needles and a separator each) that
    comes before the needle: 0 before all of it, 1 after all of it, clamped to [0, 1]."""
    offsets = placed_offsets(context, needles)
    placed = [(at, len(n) + 1) for at, n in zip(offsets, needles, strict=True) if at >= 0]
    haystack = max(1, len(context) - sum(size for _, size in placed))
    out = []
    for i in targets:
        at = offsets[i]
        if at < 0:
            continue
        before = at - sum(size for other, size in placed if other < at)
        out.append((round(min(1.0, max(0.0, before / haystack)), 4), at))
    return sorted(out, key=lambda item: item[1])


@dataclass
class Built:
    """A candidate prompt at one haystack size."""

    prompt: str
    references: list[str]
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class GenEnv:
    """What the generators need from the job: the chat wrapper, the token counter and the data."""

    wrap: Callable[[str], str]  # user message -> prompt with the chat template (or unchanged)
    count: Callable[[str], int]  # prompt -> tokens, as the model will see them
    count_plain: Callable[[str], int]  # text -> tokens without special tokens (RULER's text_to_tokens)
    length: int
    seed: int
    essay: EssayHaystack | None = None
    qa: QAData | None = None
    closed_book: bool = False  # build prompts with an empty context (the closed-book control)


State = TypeVar("State")  # what a generator draws once per sample and builds every size from


class Generator(Generic[State]):
    unit = "units"

    def __init__(self, task: TaskConfig, env: GenEnv) -> None:
        self.task = task
        self.env = env
        self.args = task.args

    # -- randomness
    def rng(self, index: int | str, *purpose: object) -> random.Random:
        tag = "/".join(str(p) for p in (self.env.seed, self.task.name, index, *purpose))
        return random.Random(f"ruler/{tag}")

    # -- sizes
    def min_size(self, state: State) -> int:
        return 1

    def probe_size(self) -> int:
        return 16

    def max_size(self, state: State) -> int | None:
        return None

    def tolerance(self) -> int | None:
        return None

    def haystack(self) -> str:
        return "-"

    def shown(self, context: str) -> str:
        """What the template's context gets: the context, or nothing for the closed-book control."""
        return "" if self.env.closed_book else context

    # -- one sample
    def prepare(self, index: int) -> State:
        raise NotImplementedError

    def build(self, state: State, size: int) -> Built:
        raise NotImplementedError

    def sample_budget(self) -> int:
        return self.env.length - self.task.tokens_to_generate
