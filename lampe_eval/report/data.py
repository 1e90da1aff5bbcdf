"""From stored records to scores: one number per (model, variant, benchmark, task, length).

A *variant* is a method plus the parameters the user set explicitly (``--param``, an experiment's
``params:``); parameters the method derives from the length or reads from ``method_configs/``
(YaRN's factor, SelfExtend's G at 16K vs 25K) are part of the method, so one variant spans all
lengths. Task scores use the benchmark's own ``aggregate`` when the benchmark is registered, else the
mean of each metric; the headline metric is the aggregate's first key, shown and ranked as the
benchmark declares it (:class:`~lampe_eval.benchmarks.base.Metric`). A benchmark-level score is the
mean of its task headlines (the paper's "Avg.").
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..benchmarks.base import Metric, aggregate, metric_of
from ..errors import LampeEvalError
from ..records import RECORDS_FILE, Problems, SampleRecord, last_per_key, read_records


@dataclass(frozen=True)
class Variant:
    method: str
    params: str = "{}"  # JSON of the explicit parameters, sorted keys

    def params_dict(self) -> dict[str, Any]:
        return json.loads(self.params)


@dataclass
class TaskScore:
    """A task-level result: the benchmark aggregate over its samples."""

    model: str
    variant: Variant
    benchmark: str
    task: str
    length: int
    metrics: dict[str, float]
    samples: int
    seconds: float
    revisions: set[str] = field(default_factory=set)
    prompt_tokens: list[int] = field(default_factory=list)
    sample_ids: list[str] = field(default_factory=list)  # the samples behind it (what the bootstrap draws)
    sample_scores: list[dict[str, float]] = field(default_factory=list, repr=False)  # in the same order

    def ordered_ids(self) -> tuple[str, ...]:
        """The sample ids, sorted: the order the bootstrap draws them in (the same for every variant)."""
        return tuple(sorted(self.sample_ids))

    def scores_by_id(self) -> dict[str, dict[str, float]]:
        return dict(zip(self.sample_ids, self.sample_scores, strict=True))

    @property
    def metric(self) -> str:
        return next(iter(self.metrics)) if self.metrics else ""

    @property
    def score(self) -> float:
        return self.metrics[self.metric] if self.metrics else math.nan

    def metric_info(self, name: str = "") -> Metric:
        """How the benchmark shows and ranks ``name`` (default: the headline)."""
        return metric_of(self.benchmark, name or self.metric)


def record_files(paths: Iterable[str | Path]) -> list[Path]:
    """``records.jsonl`` files of the given results directories or files (searched recursively)."""
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_file():
            out.append(path)
        elif path.is_dir():
            found = sorted(path.rglob(RECORDS_FILE))
            if not found:
                raise LampeEvalError(f"no {RECORDS_FILE} under {path}")
            out.extend(found)
        else:
            raise LampeEvalError(f"results path {str(path)!r} does not exist")
    return out


def load_records(paths: Iterable[str | Path], warnings: list[str] | None = None) -> list[SampleRecord]:
    """Records of every store under ``paths`` (typed, of either schema), one per key (the last written wins).

    Unreadable lines and records with a field of the wrong type are skipped; each file that had some
    (or nothing readable) adds one line to ``warnings``. Nothing readable at all is an error.
    """
    records: list[SampleRecord] = []
    empty: list[str] = []
    notes: list[str] = []
    for path in record_files(paths):
        problems = Problems()
        count = len(records)
        records.extend(read_records(path, problems))
        if len(records) == count:
            what = "is empty" if problems.lines == 0 else f"has no readable record: {problems.summary()}"
            empty.append(f"{path} {what}")
        elif problems.summary():
            notes.append(f"{path}: {problems.summary()}")
    if not records:
        raise LampeEvalError("no results to report: " + "; ".join(empty))
    if warnings is not None:
        warnings.extend(notes + empty)
    return list(last_per_key(records).values())


def setting_of(record: SampleRecord) -> str:
    """The benchmark options (those that change results) and data directory a record was computed with."""
    from ..benchmarks.base import benchmark_class

    cls = benchmark_class(record.benchmark)
    setting = cls.identity_options(record.options) if cls else dict(record.options)
    if record.data_dir:
        setting = {**setting, "data_dir": record.data_dir}
    return json.dumps(setting, sort_keys=True, default=str)


def one_setting_per_cell(
    records: list[SampleRecord], warnings: list[str] | None = None
) -> list[SampleRecord]:
    """Never average samples computed on different data: where one (model, variant, benchmark, task,
    length) holds records of several benchmark settings (``--opt``, ``--data-dir``), keep those of the
    setting written last, and say so in ``warnings``."""
    cells: dict[tuple[Any, ...], list[SampleRecord]] = defaultdict(list)
    for record in records:  # file order: the last written record of a key comes last
        cells[(record.model, variant_of(record), record.benchmark, record.task, record.length)].append(record)
    out = []
    for (model, variant, benchmark, task, length), items in cells.items():
        settings = {setting_of(r) for r in items}
        if len(settings) > 1:
            latest = setting_of(items[-1])
            items = [r for r in items if setting_of(r) == latest]
            if warnings is not None:
                warnings.append(
                    f"{benchmark}/{task} at {length} ({model}, {variant.method}): records of {len(settings)} "
                    f"benchmark settings; the report uses the latest ({latest})"
                )
        out.extend(items)
    return out


def variant_of(record: SampleRecord) -> Variant:
    # records written before variant_params existed have none: {}
    return Variant(record.method, json.dumps(record.variant_params, sort_keys=True, default=str))


def task_scores(
    records: Iterable[SampleRecord], model_alias: dict[str, str] | None = None
) -> list[TaskScore]:
    alias = model_alias or {}
    groups: dict[tuple, list[SampleRecord]] = defaultdict(list)
    for r in records:
        model = alias.get(r.model, r.model)
        groups[(model, variant_of(r), r.benchmark, r.task, r.length)].append(r)
    out = []
    for (model, variant, benchmark, task, length), items in groups.items():
        items.sort(key=lambda r: (r.index, str(r.sample_id)))
        out.append(
            TaskScore(
                model=model,
                variant=variant,
                benchmark=benchmark,
                task=task,
                length=length,
                metrics=aggregate(benchmark, task, [r.scores for r in items]),
                samples=len(items),
                seconds=sum(float(r.seconds or 0.0) for r in items),
                revisions={str(r.git) for r in items},
                prompt_tokens=[int(r.prompt_tokens) for r in items if r.prompt_tokens is not None],
                sample_ids=unique_sample_ids(items),
                sample_scores=[r.scores for r in items],
            )
        )
    return out


def unique_sample_ids(items: Sequence[SampleRecord]) -> list[str]:
    """The records' sample ids, made unique within a cell: a cell that holds runs of several seeds (or
    method configs) names each sample by its seed (then its job) too, so pairs still match across
    variants."""
    ids = [str(r.sample_id) for r in items]
    if len(set(ids)) == len(ids):
        return ids
    ids = [f"{r.sample_id}|seed={r.seed}" for r in items]
    if len(set(ids)) == len(ids):
        return ids
    return [f"{r.sample_id}|{r.job_key}" for r in items]


def variant_labels(variants: Iterable[Variant]) -> dict[Variant, str]:
    """``method`` when a method has one variant, else ``method(k=v, ...)`` with the differing params."""
    by_method: dict[str, list[Variant]] = defaultdict(list)
    for v in sorted(set(variants), key=lambda v: (v.method, v.params)):
        by_method[v.method].append(v)
    labels: dict[Variant, str] = {}
    for method, items in by_method.items():
        if len(items) == 1:
            labels[items[0]] = method
            continue
        keys = sorted({k for v in items for k in v.params_dict()})
        for v in items:
            params = v.params_dict()
            inner = ", ".join(f"{k}={params[k]}" for k in keys if k in params)
            labels[v] = f"{method}({inner})" if inner else method
    return labels


@dataclass(frozen=True)
class Presentation:
    """How a report orders and marks methods: as each registered method declares it (``display_order``,
    ``is_baseline``, ``highlight`` of :class:`~lampe_eval.methods.base.Method`), unless the report is told
    otherwise (``baseline``, ``highlight``: ``lampe-eval report --baseline/--highlight``). Methods this
    process does not know (records of a method registered by a module not imported) come last."""

    baseline: str | None = None  # the method every other is compared with (None: the declared one)
    highlight: tuple[str, ...] | None = None  # the methods drawn emphasised (None: the declared ones)

    @staticmethod
    def declared(method: str) -> type[Any] | None:
        """The registered method class, or None."""
        from ..methods import METHODS

        return METHODS.get(method) if method in METHODS else None

    def baseline_method(self) -> str | None:
        if self.baseline is not None:
            return self.baseline
        from ..methods import METHODS

        declared = [n for n in METHODS.names() if METHODS.get(n).is_baseline]
        return min(declared, key=lambda n: (METHODS.get(n).display_order, n)) if declared else None

    def highlighted(self, method: str) -> bool:
        if self.highlight is not None:
            return method in self.highlight
        cls = self.declared(method)
        return bool(cls and cls.highlight)

    def rank(self, method: str) -> tuple[int, int]:
        """The baseline first, then the registered methods by ``display_order``, then unknown ones."""
        if method == self.baseline_method():
            return (0, 0)
        cls = self.declared(method)
        return (1, cls.display_order) if cls else (2, 0)


DECLARED = Presentation()


def method_order(variants: Iterable[Variant], presentation: Presentation = DECLARED) -> list[Variant]:
    """The variants as the methods declare (:class:`Presentation`), then by name and parameters."""
    return sorted(set(variants), key=lambda v: (presentation.rank(v.method), v.method, v.params))


def baseline_variant(variants: Iterable[Variant], presentation: Presentation = DECLARED) -> Variant | None:
    """The baseline of comparisons: the baseline method without explicit parameters, else its first
    variant; None when it did not run."""
    name = presentation.baseline_method()
    mine = sorted((v for v in variants if v.method == name), key=lambda v: (v.params != "{}", v.params))
    return mine[0] if mine else None


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan
