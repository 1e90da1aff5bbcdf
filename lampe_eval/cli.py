"""The ``lampe-eval`` command line (typer + rich)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from .errors import LampeEvalError
from .lengths import format_length, parse_lengths

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Evaluate training-free long-context extension methods (LaMPE, SelfExtend, DCA, ...) "
    "on RoPE language models.",
)
console = Console()
err_console = Console(stderr=True)


def fail(message: str) -> None:
    """One-line error, non-zero exit."""
    err_console.print(f"[bold red]error:[/] {message}", soft_wrap=True, highlight=False)
    raise typer.Exit(2)


def split_list(values: list[str] | None) -> list[str]:
    out: list[str] = []
    for value in values or []:
        out.extend(v.strip() for v in value.split(",") if v.strip())
    return out


def parse_key_values(values: list[str] | None, what: str) -> dict[str, Any]:
    import yaml

    out: dict[str, Any] = {}
    for item in values or []:
        if "=" not in item:
            raise LampeEvalError(f"bad {what} {item!r}: use key=value")
        key, raw = item.split("=", 1)
        out[key.strip()] = yaml.safe_load(raw)
    return out


@app.command("list")
def list_command() -> None:
    """List methods (with their parameters), benchmarks (with tasks) and model presets.

    Example: lampe-eval list
    """
    from .benchmarks import BENCHMARKS, get_benchmark
    from .methods import METHODS
    from .models import PRESETS

    methods = Table(title="Methods", title_justify="left")
    for column in ("name", "kind", "parameters (defaults for an 8K window at 16K)", "what it does"):
        methods.add_column(column)
    for name in METHODS.names():
        cls = METHODS.get(name)
        params = ", ".join(
            f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
            for k, v in cls.build(8192, 16384).params().items()
        )
        methods.add_row(name, cls.kind, params or "-", cls.summary)
    console.print(methods)

    benches = Table(title="Benchmarks", title_justify="left")
    for column in ("name", "tasks", "what it measures"):
        benches.add_column(column)
    for name in BENCHMARKS.names():
        bench = get_benchmark(name)
        benches.add_row(name, ", ".join(bench.tasks()), bench.summary)
    console.print(benches)

    presets = Table(title="Model presets", title_justify="left")
    for column in ("name", "source", "pretraining window", "chat template"):
        presets.add_column(column)
    for preset in PRESETS.values():
        presets.add_row(
            preset.name,
            preset.source,
            format_length(preset.pretraining_window),
            "yes" if preset.chat_template else "no",
        )
    console.print(presets)


@app.command("run")
def run_command(
    model: list[str] = typer.Option(
        ["smollm2-135m"],
        "--model",
        "-m",
        help="Preset, HF id, local dir or .gguf (repeat or comma-separate).",
    ),
    method: list[str] = typer.Option(["rope"], "--method", help="Method name(s), e.g. rope,lampe."),
    bench: list[str] = typer.Option(..., "--bench", "-b", help="Benchmark name(s), e.g. ruler, pg19."),
    task: list[str] = typer.Option(None, "--task", "-t", help="Task(s) of the benchmark (default: all)."),
    length: list[str] = typer.Option(..., "--len", "-l", help="Context length(s): 4096, 4k, 64K, 128k."),
    limit: int | None = typer.Option(None, "--limit", "-n", min=1, help="At most N samples per task."),
    param: list[str] = typer.Option(
        None, "--param", "-p", help="Method parameter override key=value (repeatable)."
    ),
    opt: list[str] = typer.Option(None, "--opt", help="Benchmark option key=value (repeatable)."),
    out: Path = typer.Option(Path("results/default"), "--out", "-o", help="Results directory (resumable)."),
    seed: int = typer.Option(0, help="Seed for generated data."),
    device: str | None = typer.Option(None, help="cpu, cuda, cuda:1 (default: cuda if available)."),
    dtype: str | None = typer.Option(None, help="auto (bf16 on CUDA, fp32 on CPU), fp32, bf16, fp16."),
    data_dir: str | None = typer.Option(None, help="Local data directory for offline benchmark files."),
) -> None:
    """Run models x methods x benchmarks x lengths; per-sample records go to OUT/records.jsonl.

    Example: lampe-eval run --method rope,lampe --bench pg19 --len 4k,12k --limit 2
    """
    from .benchmarks import get_benchmark
    from .methods import METHODS
    from .models import resolve_source
    from .runner.jobs import expand_grid
    from .runner.local import run_jobs
    from .runner.store import ResultStore

    try:
        lengths = parse_lengths(length)
        models = split_list(model)
        for name in models:
            resolve_source(name)
        method_names = split_list(method)
        for name in method_names:
            METHODS.get(name)
        overrides = parse_key_values(param, "--param")
        options = parse_key_values(opt, "--opt")
        bench_tasks: list[tuple[str, str]] = []
        for bench_name in split_list(bench):
            benchmark = get_benchmark(bench_name)
            tasks = split_list(task) or benchmark.default_tasks()
            bench_tasks.extend((bench_name, benchmark.check_task(t)) for t in tasks)
        if overrides and len(method_names) > 1:
            raise LampeEvalError("--param applies to one method: run the methods separately")
        jobs = expand_grid(models, [(m, overrides) for m in method_names], bench_tasks, lengths, limit, seed)
        store = ResultStore(out)
        console.print(f"{len(jobs)} job(s) -> {store.path}")

        def show(job, record) -> None:
            scores = ", ".join(f"{k}={v:.2f}" for k, v in record["scores"].items())
            console.print(f"  {job.describe()} | {record['sample_id']}: {scores}", highlight=False)

        summaries = run_jobs(
            jobs, store, device=device, dtype=dtype, data_dir=data_dir, options=options, on_sample=show
        )
    except LampeEvalError as err:
        fail(str(err))
        return
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
            ", ".join(f"{k}={v:.2f}" for k, v in scores.items()) or "-",
        )
    console.print(table)


def main() -> None:
    try:
        app()
    except LampeEvalError as err:
        err_console.print(f"error: {err}")
        sys.exit(2)


if __name__ == "__main__":
    main()


@app.command("fit")
def fit_command(
    model: str = typer.Option("smollm2-135m", "--model", "-m", help="Preset, HF id, local dir or .gguf."),
    length: list[str] = typer.Option(
        None, "--len", "-l", help="Input lengths l (default: 1, 1.5, 2 and 3 x the pretraining window)."
    ),
    points: int = typer.Option(
        6, "--points", help="Mapping lengths per l, evenly from window/8 to 3/4 window."
    ),
    grid: str | None = typer.Option(
        None, "--grid", help="Explicit mapping lengths, e.g. 1k,2k,4k (overrides --points)."
    ),
    passages: int = typer.Option(1, "--passages", "-n", min=1, help="PG-19 passages per (l, m)."),
    param: list[str] = typer.Option(
        None, "--param", "-p", help="Other LaMPE parameters, e.g. s1=512, mscale=1."
    ),
    opt: list[str] = typer.Option(
        None, "--opt", help="PG-19 option key=value (pg19_dataset=..., pg19_dir=...)."
    ),
    fixed_L: float | None = typer.Option(
        None, "--L", help="Keep the sigmoid maximum L fixed (tokens); fit a, b."
    ),
    out: Path = typer.Option(Path("results/fit"), "--out", "-o", help="Sweep data (resumable) and the plot."),
    config: Path | None = typer.Option(
        None, help="Config to write (default method_configs/lampe-MODEL.yaml)."
    ),
    write: bool = typer.Option(True, "--write/--no-write", help="Write the fitted config."),
    device: str | None = typer.Option(None, help="cpu, cuda, cuda:1 (default: cuda if available)."),
    dtype: str | None = typer.Option(None, help="auto (bf16 on CUDA, fp32 on CPU), fp32, bf16, fp16."),
) -> None:
    """LaMPE's mapping-length sweep (PPL vs m per input length l) and the sigmoid fit m(l) (paper Sec. 3.1).

    Example: lampe-eval fit --model smollm2-135m --len 4k,8k,12k,16k --points 6 --passages 1
    """
    import hashlib
    import json

    from .fit import analyse, plot, run_sweep, summary_lines, write_config
    from .method_configs import config_path
    from .methods import create_method
    from .models import load_model

    try:
        overrides = parse_key_values(param, "--param")
        options = parse_key_values(opt, "--opt")
        grid_values = parse_lengths(grid) if grid else None
        lm = load_model(model, device=device, dtype=dtype)
        window = lm.pretraining_window
        lengths = parse_lengths(length) if length else [window, window * 3 // 2, 2 * window, 3 * window]
        lampe_params = create_method("lampe", window, max(lengths), **overrides).params()
        tag = json.dumps([lampe_params, passages, options], sort_keys=True, default=str)
        sweep_file = out / f"sweep-{Path(model).name}-{hashlib.sha256(tag.encode()).hexdigest()[:8]}.jsonl"
        console.print(
            f"sweep -> {sweep_file} (window {window}, lengths {', '.join(map(format_length, lengths))})"
        )

        def show(point) -> None:
            console.print(
                f"  l={format_length(point.length)} m={point.m}: ppl={point.ppl:.3f} "
                f"(last quarter {point.ppl_last_quarter:.3f}) {point.seconds:.0f}s",
                highlight=False,
            )

        sweep = run_sweep(
            lm,
            lengths,
            grid_points=points,
            grid=grid_values,
            passages=passages,
            method_params=overrides,
            options=options,
            sweep_file=sweep_file,
            on_point=show,
        )
        report = analyse(model, window, int(lampe_params["s1"]), int(lampe_params["s2"]), sweep, L=fixed_L)
        for line in summary_lines(report):
            console.print(line, highlight=False)
        extra = {
            "command": " ".join(
                ["lampe-eval fit --model", model, "--len", ",".join(map(format_length, lengths))]
                + (["--grid", grid] if grid else ["--points", str(points)])
                + ["--passages", str(passages)]
                + [f"--param {p}" for p in param or []]
                + [f"--opt {o}" for o in opt or []]
                + ([f"--L {fixed_L}"] if fixed_L is not None else [])
            ),
            "passages": passages,
            "mscale": lampe_params.get("mscale"),
            "pg19_options": options,
        }
        console.print(f"plot -> {plot(report, out / f'lampe-{Path(model).name}.png')}")
        if write:
            target = config or config_path("lampe", model)
            console.print(f"config -> {write_config(target, report, extra)}")
    except LampeEvalError as err:
        fail(str(err))
