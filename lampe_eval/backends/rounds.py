"""Drive many samples' rounds of requests through one backend, batching what can run together.

Each sample's evaluation is a generator (``Benchmark.evaluate``): it yields a list of requests, receives
their results, and returns its output. Requests wait in groups keyed by ``Backend.batch_key``; a group runs
as soon as it holds ``Backend.batch_size`` requests, and whatever is left runs when the samples run out.
A sample's output is passed on as soon as its last round is answered, so records stream out while later
samples still wait for company.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from .base import Backend, GenerationRequest, NLLRequest, Request, Result, Rounds

Item = TypeVar("Item")


@dataclass
class _Pending(Generic[Item]):
    """One sample in flight: its rounds, the results of its current round, its share of batch time."""

    item: Item
    rounds: Rounds
    requests: list[Request] = field(default_factory=list)
    results: list[Result | None] = field(default_factory=list)
    seconds: float = 0.0
    batch_size: int = 1  # the largest batch any of its requests ran in


@dataclass(frozen=True)
class Evaluated(Generic[Item]):
    item: Item
    output: dict[str, Any]
    seconds: float  # the sample's share of the time of the batches its requests ran in
    batch_size: int  # the largest batch any of its requests ran in


def run_requests(backend: Backend, requests: list[Request]) -> list[Result]:
    """Results of requests that share one batch key (so one kind)."""
    if all(isinstance(r, GenerationRequest) for r in requests):
        return list(backend.generate([r for r in requests if isinstance(r, GenerationRequest)]))
    if all(isinstance(r, NLLRequest) for r in requests):
        return list(backend.token_nll([r for r in requests if isinstance(r, NLLRequest)]))
    raise TypeError("a batch mixes request kinds")


def evaluate_samples(
    backend: Backend, items: Iterable[Item], rounds: Callable[[Item], Rounds]
) -> Iterator[Evaluated[Item]]:
    """The output of ``rounds(item)`` for every item, batched by the backend's keys. Outputs come in the
    order samples finish (with batch size 1: the order of ``items``)."""
    batcher: _Batcher[Item] = _Batcher(backend)
    for item in items:
        yield from batcher.advance(_Pending(item, rounds(item)), None)
    yield from batcher.flush()


class _Batcher(Generic[Item]):
    """Requests waiting for company, in groups by batch key (oldest group first)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.waiting: dict[Hashable, list[tuple[_Pending[Item], int]]] = {}

    def advance(self, pending: _Pending[Item], sent: Sequence[Result] | None) -> Iterator[Evaluated[Item]]:
        """Send a sample its results (None: start it); queue its next round, or pass its output on."""
        try:
            requests = pending.rounds.send(sent) if sent is not None else next(pending.rounds)
        except StopIteration as done:
            yield Evaluated(pending.item, done.value, pending.seconds, pending.batch_size)
            return
        if not requests:
            raise ValueError("a round must send at least one request")
        pending.requests, pending.results = list(requests), [None] * len(requests)
        for slot, request in enumerate(pending.requests):
            key = self.backend.batch_key(request)
            group = self.waiting.setdefault(key, [])
            group.append((pending, slot))
            if len(group) >= self.backend.batch_size:
                yield from self.run(self.waiting.pop(key))

    def run(self, group: list[tuple[_Pending[Item], int]]) -> Iterator[Evaluated[Item]]:
        """Run one group; every sample whose round is then answered advances."""
        results = run_requests(self.backend, [pending.requests[slot] for pending, slot in group])
        finished: list[_Pending[Item]] = []
        for (pending, slot), result in zip(group, results, strict=True):
            pending.results[slot] = result
            pending.seconds += getattr(result, "seconds", 0.0)
            pending.batch_size = max(pending.batch_size, len(group))
            if all(r is not None for r in pending.results) and all(p is not pending for p in finished):
                finished.append(pending)
        for pending in finished:
            answered = [r for r in pending.results if r is not None]
            yield from self.advance(pending, answered)

    def flush(self) -> Iterator[Evaluated[Item]]:
        """Groups smaller than the batch size, oldest first, until none waits."""
        while self.waiting:
            key = next(iter(self.waiting))
            yield from self.run(self.waiting.pop(key))


def evaluate_one(backend: Backend, rounds: Rounds) -> dict[str, Any]:
    """The output of one sample's rounds: ``evaluate_one(backend, bench.evaluate(sample, ctx))``."""
    (done,) = list(evaluate_samples(backend, [None], lambda _: rounds))
    return done.output
