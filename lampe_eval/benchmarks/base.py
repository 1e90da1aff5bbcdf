"""What every benchmark is: an abstract base that says what a benchmark must define and declare.

A benchmark module defines a subclass of :class:`Benchmark`, decorates it with
``@BENCHMARKS.register("name")`` and lives in ``lampe_eval/benchmarks/`` (modules there register
themselves on import; a benchmark of your own registers when ``--import`` imports its module).

It must define ``tasks``, ``samples`` and ``score`` (abstract), and declare:

- ``metrics``: every score it reports (direction, display cap, label): reports rank and print them
  from this, never from names;
- ``options``: its ``--opt`` settings (type, default, help, whether they change results); one that
  generates (not ``loss_only``) also takes ``enable_thinking`` and ``thinking_budget``, added when it
  registers (:mod:`.thinking`: the runner drives ``rounds``, which wraps ``evaluate``);
- optionally ``summarize_tasks`` (a benchmark-level row: LongBench's categories, L-Eval's average; or
  ``summarize_aggregates`` when the row needs more than each task's headline),
  ``bucket_plot`` / ``input_length_key`` (the score-by-input-length plot, the paper's Figure 5),
  ``depth_key`` (the sample meta key of the needle depth(s): the depth x length heat map),
  ``effective_length_threshold`` (reports give each method's effective length at this threshold),
  ``aggregate`` (task score from sample scores; default: the mean of each metric) with ``resample``
  (the same aggregate over bootstrap resamples of the samples, vectorised: reports' confidence
  intervals; default: the mean) and ``truncation`` (where an over-long input is cut: ``show-prompt``).
- optionally ``prediction_files``: the prediction files other harnesses write for it, which
  ``lampe-eval import`` reads and scores with ``score`` (``score_prediction``; :mod:`.predictions`).

Data flow for one job (model, method, benchmark, task, length):
``samples(task, ctx)`` -> for each sample ``evaluate(sample, ctx)``, a generator of rounds of requests to
the inference backend (:mod:`lampe_eval.backends`; the default: one greedy generation) -> the sample's
output -> ``score(sample, output)`` -> the runner stores one record per sample ->
``aggregate(task, scores)``. A benchmark never touches the model: it builds requests and reads results,
and the runner batches requests of many samples (``--batch-size``) whatever the benchmark. A
:class:`Sample` carries everything its evaluation needs (the prompt, or the exact token ids), so
``evaluate`` is a function of the sample and the job's options, never of state kept from ``samples``.
"""

from __future__ import annotations

import hashlib
import json
import math
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ..backends.base import Generation, GenerationRequest, Rounds
from ..data.sources import DataSource
from ..errors import LampeEvalError, suggestion, unknown
from ..models import LoadedModel
from ..options import Option, identity, parse_options
from ..registry import Registry
from . import thinking
from .predictions import PredictionFile


@dataclass(frozen=True)
class Metric:
    """A score a benchmark reports, and how tables, plots and the leaderboard treat it."""

    name: str
    label: str = ""  # axis and column label (default: the name)
    higher_is_better: bool = True
    cap: float | None = None  # values past it (or not finite) show as ``cap_text``: saturated, not ranked
    cap_text: str = ""
    log_scale: bool = False  # plots use a log axis
    own_table: bool = False  # gets its own by-length table when every result has it

    @property
    def title(self) -> str:
        return self.label or self.name

    def saturated(self, value: float) -> bool:
        return self.cap is not None and (not math.isfinite(value) or value > self.cap)

    def format(self, value: float | None) -> str:
        """A table cell: two decimals, ``cap_text`` past the cap, ``-`` for no value."""
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return "-"
        if self.saturated(value):
            return self.cap_text
        if not math.isfinite(value):
            return "inf" if value > 0 else "-inf"
        return f"{value:.2f}"


PROMPT_EXCERPT_CHARS = 240  # characters of a prompt's head and of its tail kept in each record


@dataclass
class Sample:
    """One evaluation item, with everything its evaluation needs.

    ``prompt`` is the exact text given to the tokenizer (truncation and, where the benchmark uses it,
    the chat template already applied); ``input_ids``, when set, are the exact tokens to feed instead
    (PG-19's passages). ``references`` are the gold answers the scorer compares with.
    """

    sample_id: str
    task: str
    prompt: str
    references: list[str] = field(default_factory=list)
    max_new_tokens: int = 0
    meta: dict[str, Any] = field(default_factory=dict)
    input_ids: list[int] | None = None

    def fingerprint(self, tokenizer: str = "") -> str:
        """A hash of everything the sample is (its data as read, after truncation and templates) and of
        the tokenizer's fingerprint: a stored result is reused only for the same fingerprint."""
        content = [self.sample_id, self.task, self.prompt, self.references, self.max_new_tokens]
        content += [self.input_ids, self.meta, tokenizer]
        blob = json.dumps(content, sort_keys=True, ensure_ascii=False, default=str)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]

    def prompt_hash(self) -> str:
        """A hash of what the model receives: the token ids when the sample has them, else the prompt text
        (records store it; ``lampe-eval show-prompt`` prints it for the rebuilt sample)."""
        blob = "ids:" + ",".join(map(str, self.input_ids)) if self.input_ids is not None else self.prompt
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]

    def prompt_excerpt(self, chars: int = PROMPT_EXCERPT_CHARS) -> dict[str, Any]:
        """The prompt's first and last ``chars`` characters and its length (what reports show of it;
        ``tail`` is empty when the head holds the whole prompt)."""
        text = self.prompt
        if len(text) <= 2 * chars:
            return {"head": text, "tail": "", "chars": len(text)}
        return {"head": text[:chars], "tail": text[-chars:], "chars": len(text)}


@dataclass
class SampleContext:
    """Everything a benchmark may need to build samples for one (task, length) job."""

    lm: LoadedModel  # the tokenizer and chat template (benchmarks never call its model: backends do)
    length: int  # target context length in tokens (the job's --len)
    limit: int | None = None  # at most this many samples (None: the benchmark's full set)
    seed: int = 0
    data_dir: str | None = None  # local data override (offline fixtures, downloaded files)
    options: dict[str, Any] = field(default_factory=dict)  # the job's --opt values for this benchmark

    def __post_init__(self) -> None:
        # the chat template renders the job's enable_thinking (benchmarks/thinking.py); no option, same lm
        self.lm = thinking.bind(self.lm, self.options)


def mean_scores(scores: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """The mean of each metric of the first sample over the samples (that have it)."""
    if not scores:
        return {}
    out = {}
    for key in scores[0]:
        values = [s[key] for s in scores if key in s]
        out[key] = sum(values) / len(values)
    return out


def resampled_means(scores: Sequence[Mapping[str, float]], counts: np.ndarray, metric: str) -> np.ndarray:
    """The mean of ``metric`` over each resample: ``counts[b, i]`` is how often sample i is drawn in
    resample b (samples without the metric count in none; a resample with none of them is NaN)."""
    values = np.array([float(s.get(metric, math.nan)) for s in scores], dtype=np.float64)
    present = ~np.isnan(values)
    weights = np.asarray(counts, dtype=np.float64)[:, present]
    with np.errstate(invalid="ignore", divide="ignore"):
        return (weights @ values[present]) / weights.sum(axis=1)


class Benchmark(ABC):
    """Base class; see the module docstring for what a benchmark defines."""

    name: ClassVar[str]
    summary: ClassVar[str] = ""
    metrics: ClassVar[tuple[Metric, ...]] = ()  # required: checked when the benchmark registers
    options: ClassVar[tuple[Option, ...]] = ()
    bucket_plot: ClassVar[bool] = False  # part of the score-by-input-length bucket plot (Figure 5)
    input_length_key: ClassVar[str | None] = None  # sample meta key: the input length before truncation
    # sample meta key: where the needle(s) lie, a fraction of the context in [0, 1] (a number, or a list when
    # several needles answer): reports draw the score by needle depth and length (a heat map per method)
    depth_key: ClassVar[str | None] = None
    # the benchmark score a length must exceed to count as handled: reports give each method's effective
    # length (the longest tested length whose benchmark score, the mean over tasks, passes it); None: none
    effective_length_threshold: ClassVar[float | None] = None
    truncation: ClassVar[str] = ""  # where an over-long input is cut (``show-prompt`` says it)
    # every request is a loss pass (NLLRequest): no KV cache is kept, which the memory estimate uses
    loss_only: ClassVar[bool] = False
    # the prediction files other harnesses write for it (``lampe-eval import``; benchmarks/predictions.py)
    prediction_files: ClassVar[tuple[PredictionFile, ...]] = ()
    # ``score`` needs only a record's references, meta and output (``score_stored``: ``lampe-eval rescore``)
    rescorable: ClassVar[bool] = True

    # ------------------------------------------------------------------------------------- tasks
    @abstractmethod
    def tasks(self) -> list[str]:
        """All task names, in the order tables show them."""

    def default_tasks(self) -> list[str]:
        """Tasks run when the user gives no --task (usually all of them)."""
        return self.tasks()

    def check_task(self, task: str) -> str:
        """The task's canonical name; an unknown one is a one-line error."""
        if task not in self.tasks():
            raise unknown(f"{self.name} task", task, self.tasks())
        return task

    # ----------------------------------------------------------------------------------- samples
    @abstractmethod
    def samples(self, task: str, ctx: SampleContext) -> Iterator[Sample]:
        """The samples of one (task, length) job, in a fixed order."""

    def evaluate(self, sample: Sample, ctx: SampleContext) -> Rounds:
        """The sample's rounds of requests (see :mod:`lampe_eval.backends.base`): yield a list of requests,
        receive their results, return the output ``score`` reads. Default: one greedy generation of
        ``sample.max_new_tokens`` (cut at ``meta["stop"]`` strings, if any)."""
        (generation,) = yield [self.generation_request(sample)]
        assert isinstance(generation, Generation)
        return generation.output()

    def rounds(self, sample: Sample, ctx: SampleContext) -> Rounds:
        """What the runner drives for a sample: ``evaluate``'s rounds, through the thinking protocol when
        the job sets ``enable_thinking`` or ``thinking_budget`` (:mod:`.thinking`: the budget's two
        requests per generation, the thinking kept out of what ``score`` reads); else ``evaluate``'s own."""
        return thinking.rounds(self.evaluate(sample, ctx), ctx.lm, ctx.options)

    @staticmethod
    def generation_request(sample: Sample, **changes: Any) -> GenerationRequest:
        """The sample's plain generation request (its prompt or token ids, its budget), with ``changes``."""
        ids = tuple(sample.input_ids) if sample.input_ids is not None else None
        fields: dict[str, Any] = {
            "prompt": sample.prompt,
            "max_new_tokens": sample.max_new_tokens,
            "stop": tuple(sample.meta.get("stop") or ()),
            "input_ids": ids,
        }
        return GenerationRequest(**{**fields, **changes})

    @abstractmethod
    def score(self, sample: Sample, output: dict[str, Any]) -> dict[str, float]:
        """Per-sample metrics (declared in ``metrics``); the first key is the task's headline metric."""

    def score_stored(
        self, task: str, references: Sequence[Any], meta: Mapping[str, Any], output: Mapping[str, Any]
    ) -> dict[str, float]:
        """``score`` of an output kept in a record (``lampe-eval rescore``), on the sample rebuilt from what
        the record keeps: its references and meta (a record keeps no whole prompt, and no scorer reads
        one; a benchmark whose scorer needs more sets ``rescorable = False``)."""
        sample = Sample("", self.check_task(task), "", list(references), 0, dict(meta))
        return self.score(sample, dict(output))

    def score_prediction(
        self, task: str, prediction: str, references: Sequence[Any], meta: Mapping[str, Any]
    ) -> dict[str, float]:
        """The scores of a prediction made elsewhere (``lampe-eval import``, a line of one of
        ``prediction_files`` or of a ``--field`` mapping): ``score`` with the prediction as the output. A
        benchmark that scores no generated text (``loss_only``) refuses in one line."""
        if self.loss_only or not self.rescorable:
            raise LampeEvalError(f"{self.name} scores no predictions made elsewhere: nothing to import")
        return self.score_stored(task, references, meta, {"prediction": prediction})

    def aggregate(self, task: str, scores: Sequence[dict[str, float]]) -> dict[str, float]:
        """Task-level numbers from per-sample scores. Default: the mean of each metric."""
        return mean_scores(scores)

    def resample(
        self, task: str, scores: Sequence[Mapping[str, float]], counts: np.ndarray, metric: str
    ) -> np.ndarray:
        """``aggregate``'s value of ``metric`` for many resamples of the samples at once (reports'
        bootstrap): ``counts`` is [resamples, samples], ``counts[b, i]`` how often sample i is drawn in
        resample b; entry b of the result is what ``aggregate`` gives for that resample (up to its
        rounding). Default: the mean. Override it with ``aggregate`` when a task score is not the mean of
        its samples' values (PG-19's token-weighted perplexity)."""
        return resampled_means(scores, counts, metric)

    def summarize_tasks(self, task_scores: Mapping[str, float]) -> dict[str, float]:
        """A benchmark-level row from task headlines (e.g. category averages); {} when there is none."""
        return {}

    def describe_cut(self, sample: Sample) -> str:
        """One line for ``show-prompt``: whether and where the sample's input was cut to the length.
        Default: from ``meta["truncated"]``, the input length before the cut (``input_length_key``) and
        the ``truncation`` declaration."""
        meta = sample.meta
        before = meta.get(self.input_length_key) if self.input_length_key else None
        size = f" (the input had {before} tokens)" if before is not None else ""
        if "truncated" not in meta:
            return self.truncation or "no cut recorded"
        if not meta["truncated"]:
            return f"not cut{size}"
        return f"cut{size}: {self.truncation or 'where the benchmark cuts'}"

    def summarize_aggregates(self, aggregates: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
        """The benchmark-level row from each task's whole aggregate (a benchmark whose row needs more than
        the headlines overrides this, e.g. LongBench v2's difficulty and length splits of its one task).
        Default: ``summarize_tasks`` of the headlines (each aggregate's first key)."""
        return self.summarize_tasks({t: float(next(iter(a.values()))) for t, a in aggregates.items() if a})

    def check_job(self, task: str, length: int, options: Mapping[str, Any], data_dir: str | None) -> None:
        """Raise a one-line LampeEvalError for a job that cannot run (checked before any model loads):
        e.g. a length too short for the benchmark's budget, a fixture that does not exist."""
        return None

    def data_sources(
        self, task: str, length: int, options: Mapping[str, Any], data_dir: str | None
    ) -> list[DataSource]:
        """What the job reads, resolved by the same rules ``samples`` loads by, without reading it (``data
        check``, ``data fetch``, the runner before a model loads). A source that was chosen and is missing
        is a one-line MissingDataError here. Default: nothing (generated samples)."""
        return []

    # ----------------------------------------------------------------------------------- options
    def option_values(self, ctx: SampleContext) -> dict[str, Any]:
        """The job's options for this benchmark, typed, with the defaults filled in."""
        return self.typed_options(ctx.options or {})

    def typed_options(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """``values`` checked against the declared options, typed, with the defaults filled in."""
        return parse_options(self.options, values, self.name)

    @classmethod
    def identity_options(cls, values: Mapping[str, Any]) -> dict[str, Any]:
        """The options that change results and differ from their defaults (part of a job's key)."""
        return identity(cls.options, values)

    @classmethod
    def metric(cls, name: str) -> Metric:
        """The declared metric, or a plain higher-is-better one for a name the benchmark does not declare."""
        for metric in cls.metrics:
            if metric.name == name:
                return metric
        return Metric(name)


CLOSED_BOOK = "no_context"  # the option of every benchmark with a context: its closed-book control


def closed_book_option(help_text: str = "") -> Option:
    """``--opt no_context=true``: the same samples with their context removed from the prompt (the
    closed-book control; reports set each method against it: the context gain, docs/reports.md)."""
    return Option(
        CLOSED_BOOK, bool, False, help_text or "closed-book control: the prompt without its context"
    )


def is_closed_book(benchmark: str, options: Mapping[str, Any]) -> bool:
    """Whether a record of ``benchmark`` with these options is a closed-book control."""
    cls = benchmark_class(benchmark)
    declared = cls is None or any(o.name == CLOSED_BOOK for o in cls.options)
    return declared and options.get(CLOSED_BOOK) is True


def options_by_benchmark(benchmarks: Sequence[str], values: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The ``--opt`` values each benchmark of a run declares, typed. Options apply to every benchmark
    that declares them; one that none of them declares is an error with the closest declared name."""
    classes = {name: BENCHMARKS.get(name) for name in dict.fromkeys(benchmarks)}
    declared = {o.name for cls in classes.values() for o in cls.options}
    for name in values:
        if name not in declared:
            where = ", ".join(classes) or "these benchmarks"
            hint = suggestion(name, sorted(declared))
            known = (
                ""
                if hint
                else f" (their options: {', '.join(sorted(declared)) or 'none'}; see lampe-eval list)"
            )
            raise LampeEvalError(f"unknown option {name} for {where}{hint}{known}")
    out = {}
    for bench, cls in classes.items():
        mine = {o.name: o for o in cls.options}
        out[bench] = {k: mine[k].parse(v, f"{bench}: ") for k, v in values.items() if k in mine}
        thinking.check_options(out[bench])
    return out


def _check_declarations(cls: type[Benchmark]) -> None:
    if not cls.metrics:
        raise TypeError(f"benchmark {cls.__name__} must declare its metrics (metrics = (Metric(...), ...))")
    # every benchmark that generates takes the thinking options (benchmarks/thinking.py)
    if not cls.loss_only and not any(o.name in (thinking.ENABLE, thinking.BUDGET) for o in cls.options):
        cls.options = (*cls.options, *thinking.OPTIONS)
    names = [o.name for o in cls.options]
    if len(set(names)) != len(names):
        raise TypeError(f"benchmark {cls.__name__} declares an option twice")


BENCHMARKS: Registry[Benchmark] = Registry("benchmark", check=_check_declarations)


def get_benchmark(name: str) -> Benchmark:
    return BENCHMARKS.get(name)()


def benchmark_class(name: str) -> type[Benchmark] | None:
    """The registered class, or None (records of a benchmark this process did not import)."""
    return BENCHMARKS.get(name) if name in BENCHMARKS else None


def aggregate(benchmark: str, task: str, scores: Sequence[dict[str, float]]) -> dict[str, float]:
    """The task score of stored sample scores: the benchmark's aggregate, or the mean when unregistered."""
    cls = benchmark_class(benchmark)
    return cls().aggregate(task, list(scores)) if cls else mean_scores(scores)


def resample(
    benchmark: str, task: str, scores: Sequence[Mapping[str, float]], counts: np.ndarray, metric: str
) -> np.ndarray:
    """The benchmark's ``resample`` of stored sample scores (the mean when it is not registered)."""
    cls = benchmark_class(benchmark)
    return cls().resample(task, scores, counts, metric) if cls else resampled_means(scores, counts, metric)


def metric_of(benchmark: str, name: str) -> Metric:
    """How to show and rank ``name`` of ``benchmark`` (a plain higher-is-better metric if unknown)."""
    cls = benchmark_class(benchmark)
    return cls.metric(name) if cls else Metric(name)
