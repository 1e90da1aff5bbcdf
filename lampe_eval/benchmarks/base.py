"""What every benchmark provides: samples for (task, length), a way to evaluate one, and a scorer.

A benchmark module defines a subclass of :class:`Benchmark`, decorates it with
``@BENCHMARKS.register("name")`` and is imported in ``lampe_eval/benchmarks/__init__.py``.

Data flow for one job (model, method, benchmark, task, length):
``samples(task, ctx)`` -> for each sample ``evaluate(lm, sample, ctx)`` -> ``score(sample, output)``
-> the runner stores one record per sample -> ``aggregate(task, records)``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..errors import unknown
from ..models import LoadedModel
from ..registry import Registry


@dataclass
class Sample:
    """One evaluation item.

    ``prompt`` is the exact text given to the tokenizer (truncation and, where the benchmark uses it,
    the chat template already applied). ``references`` are the gold answers the scorer compares with.
    """

    sample_id: str
    task: str
    prompt: str
    references: list[str] = field(default_factory=list)
    max_new_tokens: int = 0
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class SampleContext:
    """Everything a benchmark may need to build samples for one (task, length) job."""

    lm: LoadedModel
    length: int  # target context length in tokens (the job's --len)
    limit: int | None = None  # at most this many samples (None: the benchmark's full set)
    seed: int = 0
    data_dir: str | None = None  # local data override (offline fixtures, downloaded files)
    options: dict[str, Any] = field(default_factory=dict)  # benchmark-specific --opt key=value


class Benchmark:
    """Base class. Generation benchmarks only implement ``tasks``, ``samples`` and ``score``."""

    name: ClassVar[str]
    summary: ClassVar[str] = ""

    def tasks(self) -> list[str]:
        """All task names, in the order tables show them."""
        raise NotImplementedError

    def default_tasks(self) -> list[str]:
        """Tasks run when the user gives no --task (usually all of them)."""
        return self.tasks()

    def check_task(self, task: str) -> str:
        if task not in self.tasks():
            raise unknown(f"{self.name} task", task, self.tasks())
        return task

    def samples(self, task: str, ctx: SampleContext) -> Iterator[Sample]:
        raise NotImplementedError

    def evaluate(self, lm: LoadedModel, sample: Sample, ctx: SampleContext) -> dict[str, Any]:
        """Run the model on one sample. Default: greedy generation of ``sample.max_new_tokens``."""
        from ..generation import greedy_generate

        return greedy_generate(lm, sample.prompt, sample.max_new_tokens, stop=sample.meta.get("stop"))

    def score(self, sample: Sample, output: dict[str, Any]) -> dict[str, float]:
        """Per-sample metrics on a 0-100 scale; the first key is the task's headline metric."""
        raise NotImplementedError

    def aggregate(self, task: str, scores: Sequence[dict[str, float]]) -> dict[str, float]:
        """Task-level numbers from per-sample scores. Default: the mean of each metric."""
        if not scores:
            return {}
        keys = list(scores[0])
        return {k: sum(s[k] for s in scores) / len(scores) for k in keys}


BENCHMARKS: Registry[Benchmark] = Registry("benchmark")


def get_benchmark(name: str) -> Benchmark:
    return BENCHMARKS.get(name)()
