"""The Python entry point: ``lampe_eval.evaluate`` runs a grid exactly as ``lampe-eval run`` does (the same
checks before any model loads, the same resumable results directory, the same records) and returns the
task scores (the analogue of lm-eval's ``simple_evaluate``)::

    import lampe_eval

    result = lampe_eval.evaluate(
        models="smollm2-135m", methods=["rope", "lampe"], benchmarks="pg19", lengths=["4k", "12k"], limit=2
    )
    for row in result.scores:
        print(row["method"], row["length"], row["ppl"])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .lengths import parse_lengths
from .options import split_list

MethodSpec = str | tuple[str, Mapping[str, Any]]


@dataclass
class EvaluationResult:
    """What :func:`evaluate` ran: one row of task scores per job (model, method, its parameters,
    benchmark, task, length, then the benchmark's aggregate metrics), where the records are, and how many
    samples were computed now or found already stored."""

    out: Path
    scores: list[dict[str, Any]] = field(default_factory=list)
    computed: int = 0
    resumed: int = 0


def _names(value: str | Sequence[str]) -> list[str]:
    return split_list([value] if isinstance(value, str) else [str(v) for v in value])


def _methods(
    value: MethodSpec | Sequence[MethodSpec] | Mapping[str, Mapping[str, Any]],
) -> list[tuple[str, dict]]:
    if isinstance(value, Mapping):
        return [(str(name), dict(params or {})) for name, params in value.items()]
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], Mapping):
        return [(str(value[0]), dict(value[1]))]
    items = [value] if isinstance(value, (str, tuple)) else list(value)
    out: list[tuple[str, dict]] = []
    for item in items:
        if isinstance(item, tuple):
            out.append((str(item[0]), dict(item[1])))
        else:
            out += [(name, {}) for name in _names(str(item))]
    return out


def evaluate(
    models: str | Sequence[str] = "smollm2-135m",
    methods: MethodSpec | Sequence[MethodSpec] | Mapping[str, Mapping[str, Any]] = "rope",
    benchmarks: str | Sequence[str] = (),
    lengths: int | str | Sequence[int | str] = (),
    *,
    tasks: Sequence[str] | None = None,
    limit: int | None = None,
    seed: int = 0,
    options: Mapping[str, Any] | None = None,
    data_dir: str | None = None,
    imports: Sequence[str] = (),
    out: str | Path = "results/default",
    raise_on_failure: bool = True,
    **settings: Any,
) -> EvaluationResult:
    """Run models x methods x benchmarks x lengths and return the task scores.

    ``methods``: names (``"rope,lampe"``), ``(name, params)`` pairs or ``{name: params}``; parameters are
    applied over ``method_configs/``, and what they leave unset is derived from them. ``options``: the
    benchmarks' ``--opt`` values. ``settings``: run settings as ``lampe-eval run`` takes them (``device``,
    ``dtype``, ``batch_size``, ``backend``, ``workers``, ``gpus``, ``device_map``, ``ray``...; ``load`` a
    model loader of your own). Finished samples in ``out`` are reused. Failed jobs raise
    :class:`~lampe_eval.errors.JobsFailedError` after the others ran (``raise_on_failure=False`` keeps
    going and leaves them out of ``scores``)."""
    from .runner.experiment import ExperimentSpec, GridSpec
    from .runner.local import JobsFailedError, run
    from .settings import RunSettings

    if not _names(benchmarks):
        raise ValueError("evaluate: name at least one benchmark")
    length_values = [lengths] if isinstance(lengths, (int, str)) else list(lengths)
    grid = GridSpec(
        models=_names(models),
        methods=_methods(methods),
        benchmarks=[(name, list(tasks) if tasks else None) for name in _names(benchmarks)],
        lengths=parse_lengths([str(x) for x in length_values]),
    )
    spec = ExperimentSpec(
        name="api",
        grids=[grid],
        out=str(out),
        limit=limit,
        seed=seed,
        options=dict(options or {}),
        imports=list(imports),
        data_dir=data_dir,
    )
    experiment = spec.build(RunSettings(**settings))
    result = run(experiment)
    if raise_on_failure and result.failures:
        raise JobsFailedError(result.failures)
    rows = []
    for job in experiment.jobs:
        if job.key() in result.summaries:
            rows.append(
                {
                    "model": job.model,
                    "method": job.method,
                    "params": dict(job.overrides),
                    "benchmark": job.benchmark,
                    "task": job.task,
                    "length": job.length,
                    **result.summaries[job.key()],
                }
            )
    return EvaluationResult(Path(experiment.out), rows, result.computed, result.skipped)
