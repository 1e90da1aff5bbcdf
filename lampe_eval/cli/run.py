"""``lampe-eval run``: models x methods x benchmarks x lengths, resumable, into OUT/records.jsonl."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from ..errors import LampeEvalError
from ..lengths import format_length
from ..options import split_list
from .common import console, fail, parse_key_values, print_line, say_error, say_failures
from .data import say_check
from .grid import spec_of
from .params import (
    Device,
    Dtype,
    Progress,
    import_option,
    length_option,
    method_option,
    model_option,
    opt_option,
    out_option,
    param_option,
)

if TYPE_CHECKING:
    from ..runner.experiment import Experiment, ExperimentSpec, RunSettings
    from ..runner.jobs import Job
    from ..runner.local import RunResult
    from ..runner.store import ResultStore


def run_command(
    model: Annotated[
        list[str] | None,
        model_option(
            "Preset ({models}), HF id, local dir or .gguf "
            "(repeat or comma-separate; default {default_model})."
        ),
    ] = None,
    method: Annotated[
        list[str] | None,
        method_option("Method name(s): {methods} (default rope; --backend openai: what the server runs)."),
    ] = None,
    bench: list[str] = typer.Option(None, "--bench", "-b", help="Benchmark name(s): {benchmarks}."),
    task: list[str] = typer.Option(None, "--task", "-t", help="Task(s) of the benchmark (default: all)."),
    length: Annotated[list[str] | None, length_option("Context length(s): 4096, 4k, 64K, 128k.")] = None,
    limit: int | None = typer.Option(None, "--limit", "-n", help="At most N samples per task."),
    param: Annotated[
        list[str] | None, param_option("Method parameter override key=value (repeatable).")
    ] = None,
    opt: Annotated[list[str] | None, opt_option("Benchmark option key=value (repeatable; see list).")] = None,
    experiment: str | None = typer.Option(
        None,
        "--experiment",
        "-e",
        help="Experiment YAML file or name (named grids) instead of the grid options.",
    ),
    out: Annotated[
        Path | None,
        out_option("Results directory, resumable (default results/default or the experiment's)"),
    ] = None,
    seed: int | None = typer.Option(None, help="Seed for generated data (default 0)."),
    device: Device = None,
    dtype: Dtype = None,
    data_dir: str | None = typer.Option(None, help="Local data directory for offline benchmark files."),
    workers: int | None = typer.Option(
        None, "--workers", "-w", help="Worker processes (default: one per visible GPU, else 1)."
    ),
    gpus: str | None = typer.Option(None, "--gpus", help="GPUs to use, one worker each, e.g. 0,1,3."),
    gpus_per_worker: int = typer.Option(
        1,
        "--gpus-per-worker",
        help="GPUs per worker; >1 spreads each worker's model over them (70B on 4; vLLM: tensor parallel).",
    ),
    device_map: str | None = typer.Option(
        None, "--device-map", help="auto: accelerate spreads the model over the worker's visible GPUs."
    ),
    batch_size: int = typer.Option(
        1,
        "--batch-size",
        help="Requests run together: hf, of equal token counts; vllm, N sequences of any length; openai, "
        "N in flight per endpoint.",
    ),
    backend: str | None = typer.Option(
        None,
        "--backend",
        help="Inference backend: {backends} (default hf; vllm needs pip install vllm; openai: --endpoint), "
        "or one an --import "
        "module registers (docs/backends.md).",
    ),
    kv_cache_gib: float | None = typer.Option(
        None, "--kv-cache-gib", help="vLLM: the engine's KV cache in GiB (default: vLLM sizes it)."
    ),
    gpu_memory_utilization: float | None = typer.Option(
        None, "--gpu-memory-utilization", help="vLLM: the share of the GPU the engine may take (vLLM's 0.9)."
    ),
    endpoint: str | None = typer.Option(
        None,
        "--endpoint",
        help="--backend openai: OpenAI-compatible server(s) of the model, e.g. http://127.0.0.1:8000 "
        "(comma-separated: the requests go to each in turn).",
    ),
    ray: bool = typer.Option(False, "--ray", help="Run the workers as Ray actors (one per GPU)."),
    ray_address: str | None = typer.Option(
        None, "--ray-address", help="Ray cluster to join (auto, ray://host:10001); implies --ray."
    ),
    imports: Annotated[
        list[str] | None,
        import_option("Module(s) to import first, e.g. one registering your own benchmark."),
    ] = None,
    progress: Progress = True,
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Check everything (data sources included), list the jobs and exit."
    ),
) -> None:
    """Run models x methods x benchmarks x lengths; per-sample records go to OUT/records.jsonl.

    Rerunning the same command skips finished samples; Ctrl-C keeps everything finished.

    Example: lampe-eval run --method rope,lampe --bench pg19 --len 4k,12k --limit 2
    """
    from ..runner.experiment import RunSettings

    try:
        for name, value in (("--limit", limit), ("--workers", workers)):
            if value is not None and value < 1:
                raise LampeEvalError(f"{name} must be at least 1, got {value}")
        endpoints = tuple(split_list([endpoint])) if endpoint else ()
        if method is None and experiment is None:
            method, param = _served_method(backend, endpoints, param)
        spec = spec_of(experiment, model, method, bench, task, length, param).override(
            limit=limit,
            seed=seed,
            out=str(out) if out is not None else None,
            options=parse_key_values(opt, "--opt"),
            data_dir=data_dir,
            imports=split_list(imports),
            backend=backend,
        )
        settings = RunSettings(
            device=device,
            dtype=dtype,
            workers=workers,
            gpus=tuple(split_list([gpus])) if gpus else None,
            gpus_per_worker=gpus_per_worker,
            device_map=device_map,
            batch_size=batch_size,
            kv_cache_gib=kv_cache_gib,
            gpu_memory_utilization=gpu_memory_utilization,
            endpoints=endpoints,
            ray=ray,
            ray_address=ray_address,
        )
        exp, store = _prepare(spec, settings)
        if dry_run:
            for job in exp.jobs:
                print_line(f"  {job.describe()}  [{job.key()}]")
            say_memory(exp)
            print_line("data (lampe-eval data fetch gets what is not here):")
            if say_check(exp.jobs, models=exp.settings.load is None):
                raise typer.Exit(1)
            return
        result = _run_jobs(exp, store, progress)
    except LampeEvalError as err:
        fail(str(err))
    show_results(exp.jobs, result.summaries)
    console.print(f"{result.computed} new sample(s), {result.skipped} resumed -> {store.path}")
    say_failures(result.failures)


def say_memory(exp: Experiment) -> None:
    """The memory estimate of each (model, method, length), one line each."""
    if exp.memory:
        batch = f", batch of {exp.settings.batch_size}" if exp.settings.batch_size > 1 else ""
        print_line(f"memory at the peak ({exp.settings.backend}{batch}, estimated from the configs):")
    for need in exp.memory:
        print_line(f"  {need.model} | {need.method} | {format_length(need.length)}: {need.describe()}")


def _served_method(
    backend: str | None, endpoints: tuple[str, ...], param: list[str] | None
) -> tuple[list[str] | None, list[str] | None]:
    """``--method`` and ``-p`` when ``--method`` is left out: what the backend's server runs (``--backend
    openai``: the method ``serve`` was started with, said in one line), else none (rope)."""
    from ..backends import BACKENDS
    from ..runner.experiment import RunSettings
    from ..settings import DEFAULT_BACKEND

    name = backend or DEFAULT_BACKEND
    if name not in BACKENDS:  # one an --import module registers: checked with the grid
        return None, param
    served = BACKENDS.get(name).default_method(RunSettings(backend=name, endpoints=endpoints))
    if served is None:
        return None, param
    method, given = served
    args = [f"{key}={value}" for key, value in given.items()]
    say_error(
        "note:",
        f"no --method: evaluating what {endpoints[0]} serves, {method}"
        + "".join(f" -p {arg}" for arg in args),
    )
    return [method], [*args, *(param or [])]


def _prepare(spec: ExperimentSpec, settings: RunSettings) -> tuple[Experiment, ResultStore]:
    """The experiment and its results store; warnings, and how many jobs and samples are already there."""
    from ..runner.checks import prepare_output
    from ..runner.store import ResultStore

    exp = spec.build(settings)
    store = ResultStore(prepare_output(exp.out))
    problems = store.problems.summary()
    if problems:
        say_error("warning:", f"{store.path}: {problems}; those samples are computed again")
    for warning in exp.warnings.values():
        say_error("warning:", warning)
    done = store.done_by_job()
    resumed = sum(len(done.get(job.key(), ())) for job in exp.jobs)
    console.print(f"{len(exp.jobs)} job(s) -> {store.path} ({resumed} sample(s) already there)")
    return exp, store


def _run_jobs(exp: Experiment, store: ResultStore, progress: bool) -> RunResult:
    """The jobs with live progress; Ctrl-C says what is kept and exits 130."""
    from ..runner.local import run
    from ..runner.progress import RunProgress

    tracker = RunProgress(console, len(exp.jobs), enabled=progress)
    try:
        with tracker:
            return run(exp, on_event=tracker, store=store)
    except KeyboardInterrupt:
        say_error(
            "interrupted:",
            f"{tracker.samples} new sample(s) this run are saved in {store.path}; "
            "rerun the same command to resume",
        )
        raise typer.Exit(130) from None


def show_results(jobs: list[Job], summaries: dict[str, dict[str, float]]) -> None:
    """The run's scores, one row per job (two scores at most), then the benchmarks' summary tables."""
    from ..benchmarks.summaries import summary_tables  # LongBench categories, L-Eval average

    table = Table(title="Results", title_justify="left")
    for column in ("model", "method", "benchmark", "task", "length", "scores"):
        table.add_column(column)
    for job in jobs:
        scores = summaries.get(job.key(), {})
        table.add_row(
            job.model,
            job.method,
            job.benchmark,
            job.task,
            format_length(job.length),
            ", ".join(f"{k}={v:.2f}" for k, v in list(scores.items())[:2]) or "-",
        )
    console.print(table)
    for summary in summary_tables(jobs, summaries):
        console.print(summary)
