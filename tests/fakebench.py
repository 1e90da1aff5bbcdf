"""A tiny fake benchmark and model loader for runner tests (importable by spawned and Ray workers).

Importing this module registers the benchmark ``fake`` (tasks ``alpha``, ``beta``). Options:
``n`` samples per task (default 6), ``delay`` seconds of sleep per sample (the SIGKILL test),
``no_context`` (the closed-book control every benchmark with a context declares; here only a flag).
Each sample asks the backend for one NLL pass of a tiny random Llama (through the patched model).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import torch

from lampe_eval.backends import NLLRequest, Rounds, TokenNLL
from lampe_eval.benchmarks import BENCHMARKS, Benchmark, Metric, Sample, SampleContext
from lampe_eval.benchmarks.base import closed_book_option
from lampe_eval.models import LoadedModel
from lampe_eval.options import Option
from lampe_eval.testing import tiny_llama

WINDOW = 64


LOADS = [0]  # models loaded by this process (a worker should load each model once)


def load_tiny(name: str) -> LoadedModel:
    """The ``load=`` hook: any model name gives a tiny random Llama with a 64-token window."""
    LOADS[0] += 1
    return LoadedModel(
        name=name,
        model=tiny_llama(window=WINDOW, seed=len(name)),
        tokenizer=None,
        pretraining_window=WINDOW,
        chat_template=False,
        extra={"loads": LOADS[0]},
    )


def load_stub(name: str) -> LoadedModel:
    """A cheaper ``load=`` hook for ``rope`` only jobs: no transformers model (fast process start)."""
    LOADS[0] += 1
    return LoadedModel(
        name=name,
        model=torch.nn.Linear(1, 1),
        tokenizer=None,
        pretraining_window=WINDOW,
        chat_template=False,
        extra={"loads": LOADS[0]},
    )


class CharTokenizer:
    """One token per character (ids 2..127), an optional BOS (1): PG-19 runs on the tiny model."""

    bos_token = None
    chat_template = None

    def __call__(self, text: str, add_special_tokens: bool = True, **_: Any) -> dict[str, list[int]]:
        return {"input_ids": [2 + ord(c) % 126 for c in text]}

    def decode(self, ids: list[int], **_: Any) -> str:
        return "".join(chr(i - 2) for i in ids)


def load_tiny_chars(name: str) -> LoadedModel:
    """The ``load=`` hook (or a stand-in for ``load_model``): a tiny random Llama with a character
    tokenizer and a 256-token window, whatever the name."""
    LOADS[0] += 1
    return LoadedModel(name, tiny_llama(window=256, seed=3), CharTokenizer(), 256, False, {"loads": LOADS[0]})


def expected_score(task: str, index: int, length: int) -> float:
    return float((index * 37 + length + len(task)) % 101)


@BENCHMARKS.register("fake")
class FakeBenchmark(Benchmark):
    summary = "runner test benchmark (not real data)"
    metrics = (Metric("acc"), Metric("other"))
    options = (
        Option("n", int, 6, "samples per task"),
        Option("delay", float, 0.0, "seconds of sleep per sample", affects_results=False),
        closed_book_option(),
    )

    def tasks(self) -> list[str]:
        return ["alpha", "beta"]

    def samples(self, task: str, ctx: SampleContext) -> Iterator[Sample]:
        n = self.option_values(ctx)["n"]
        if ctx.limit is not None:
            n = min(n, ctx.limit)
        for i in range(n):
            yield Sample(f"{task}-{i}", task, prompt=str(i), references=[str(i)], meta={"i": i})

    def evaluate(self, sample: Sample, ctx: SampleContext) -> Rounds:
        delay = self.option_values(ctx)["delay"]
        if delay:
            time.sleep(delay)
        tokens = min(ctx.length, 2 * WINDOW)
        nll = 0.0
        if hasattr(ctx.lm.model, "config"):  # a real (tiny) transformers model: a patched forward pass
            (result,) = yield [NLLRequest(tuple(i % 100 for i in range(tokens)))]
            assert isinstance(result, TokenNLL)
            nll = result.nll_sum
        return {
            "prediction": sample.prompt,
            "prompt_tokens": tokens,
            "nll_sum": nll,
            "pid": os.getpid(),
            "loads": ctx.lm.extra.get("loads"),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        }

    def score(self, sample: Sample, output: dict[str, Any]) -> dict[str, float]:
        return {"acc": expected_score(sample.task, sample.meta["i"], output["prompt_tokens"]), "other": 1.0}
