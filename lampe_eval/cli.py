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

    options = Table(title="Benchmark options (--opt name=value)", title_justify="left")
    for column in ("benchmark", "option", "type", "default", "changes results", "what it does"):
        options.add_column(column)
    for name in BENCHMARKS.names():
        for option in BENCHMARKS.get(name).options:
            default = "-" if option.default is None else str(option.default)
            changes = "yes" if option.affects_results else "no"
            options.add_row(name, option.name, option.type_name(), default, changes, option.help)
    console.print(options)

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
        None,
        "--model",
        "-m",
        help="Preset, HF id, local dir or .gguf (repeat or comma-separate; default smollm2-135m).",
    ),
    method: list[str] = typer.Option(None, "--method", help="Method name(s), e.g. rope,lampe (default rope)"),
    bench: list[str] = typer.Option(None, "--bench", "-b", help="Benchmark name(s), e.g. ruler, pg19."),
    task: list[str] = typer.Option(None, "--task", "-t", help="Task(s) of the benchmark (default: all)."),
    length: list[str] = typer.Option(None, "--len", "-l", help="Context length(s): 4096, 4k, 64K, 128k."),
    limit: int | None = typer.Option(None, "--limit", "-n", min=1, help="At most N samples per task."),
    param: list[str] = typer.Option(
        None, "--param", "-p", help="Method parameter override key=value (repeatable)."
    ),
    opt: list[str] = typer.Option(None, "--opt", help="Benchmark option key=value (repeatable)."),
    experiment: Path | None = typer.Option(
        None, "--experiment", "-e", help="Experiment YAML (named grids) instead of the grid options."
    ),
    out: Path | None = typer.Option(
        None, "--out", "-o", help="Results directory, resumable (default results/default or the experiment's)"
    ),
    seed: int | None = typer.Option(None, help="Seed for generated data (default 0)."),
    device: str | None = typer.Option(None, help="cpu, cuda, cuda:1 (default: cuda if available)."),
    dtype: str | None = typer.Option(None, help="auto (bf16 on CUDA, fp32 on CPU), fp32, bf16, fp16."),
    data_dir: str | None = typer.Option(None, help="Local data directory for offline benchmark files."),
    workers: int | None = typer.Option(
        None, "--workers", "-w", min=1, help="Worker processes (default: one per visible GPU, else 1)."
    ),
    gpus: str | None = typer.Option(None, "--gpus", help="GPUs to use, one worker each, e.g. 0,1,3."),
    ray: bool = typer.Option(False, "--ray", help="Run the workers as Ray actors (one per GPU)."),
    ray_address: str | None = typer.Option(
        None, "--ray-address", help="Ray cluster to join (auto, ray://host:10001); implies --ray."
    ),
    imports: list[str] = typer.Option(
        None, "--import", help="Module(s) to import first, e.g. one registering your own benchmark."
    ),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Live progress bars."),
    dry_run: bool = typer.Option(False, "--dry-run", help="List the jobs and exit."),
) -> None:
    """Run models x methods x benchmarks x lengths; per-sample records go to OUT/records.jsonl.

    Rerunning the same command skips finished samples; Ctrl-C keeps everything finished.

    Example: lampe-eval run --method rope,lampe --bench pg19 --len 4k,12k --limit 2
    """
    import dataclasses

    from .runner.local import execute
    from .runner.progress import RunProgress
    from .runner.store import ResultStore
    from .runner.worker import import_plugins

    try:
        plugins = split_list(imports)
        import_plugins(plugins)
        options = parse_key_values(opt, "--opt")
        if experiment is not None:
            from .runner.experiment import load_experiment

            given = [n for n, v in (("--model", model), ("--method", method), ("--bench", bench),
                     ("--task", task), ("--len", length), ("--param", param)) if v]  # fmt: skip
            if given:
                raise LampeEvalError(f"--experiment defines the grid: drop {', '.join(given)}")
            exp = load_experiment(experiment)
            jobs = [
                dataclasses.replace(
                    job,
                    limit=limit if limit is not None else job.limit,
                    seed=seed if seed is not None else job.seed,
                )
                for job in exp.jobs
            ]
            out = out or Path(exp.out)
            plugins += [m for m in exp.imports if m not in plugins]
            options = {**exp.options, **options}
            data_dir = data_dir or exp.data_dir
        else:
            jobs = grid_from_options(model, method, bench, task, length, limit, param, seed or 0)
            out = out or Path("results/default")
        store = ResultStore(out)
        done = store.done_by_job()
        resumed = sum(len(done.get(job.key(), ())) for job in jobs)
        console.print(f"{len(jobs)} job(s) -> {store.path} ({resumed} sample(s) already there)")
        if dry_run:
            for job in jobs:
                console.print(f"  {job.describe()}  [{job.key()}]", highlight=False, markup=False)
            return
        tracker = RunProgress(console, len(jobs), enabled=progress)
        try:
            with tracker:
                result = execute(
                    jobs,
                    store,
                    device=device,
                    dtype=dtype,
                    data_dir=data_dir,
                    options=options,
                    imports=plugins,
                    workers=workers,
                    gpus=split_list([gpus]) if gpus else None,
                    use_ray=ray,
                    ray_address=ray_address,
                    on_event=tracker,
                )
        except KeyboardInterrupt:
            err_console.print(
                f"interrupted: {tracker.samples} new sample(s) this run are saved in {store.path}; "
                "rerun the same command to resume",
                highlight=False,
            )
            raise typer.Exit(130) from None
    except LampeEvalError as err:
        fail(str(err))
        return
    table = Table(title="Results", title_justify="left")
    for column in ("model", "method", "benchmark", "task", "length", "scores"):
        table.add_column(column)
    for job in jobs:
        scores = result.summaries.get(job.key(), {})
        table.add_row(
            job.model,
            job.method,
            job.benchmark,
            job.task,
            format_length(job.length),
            ", ".join(f"{k}={v:.2f}" for k, v in list(scores.items())[:2]) or "-",
        )
    console.print(table)
    from .benchmarks.summaries import summary_tables  # LongBench categories, L-Eval average

    for summary in summary_tables(jobs, result.summaries):
        console.print(summary)
    console.print(f"{result.computed} new sample(s), {result.skipped} resumed -> {store.path}")
    if result.failures:
        for failure in result.failures:
            message = f"{failure['describe']}: {failure['error']}"
            err_console.print(f"[bold red]failed:[/] {message}", highlight=False)
        raise typer.Exit(1)


def grid_from_options(
    model: list[str] | None,
    method: list[str] | None,
    bench: list[str] | None,
    task: list[str] | None,
    length: list[str] | None,
    limit: int | None,
    param: list[str] | None,
    seed: int,
) -> list:
    from .benchmarks import get_benchmark
    from .methods import METHODS
    from .models import resolve_source
    from .runner.jobs import expand_grid

    lengths = parse_lengths(length or [])
    if not bench:
        raise LampeEvalError("--bench is required (or --experiment FILE)")
    models = split_list(model) or ["smollm2-135m"]
    for name in models:
        resolve_source(name)
    method_names = split_list(method) or ["rope"]
    for name in method_names:
        METHODS.get(name)
    overrides = parse_key_values(param, "--param")
    bench_tasks: list[tuple[str, str]] = []
    for bench_name in split_list(bench):
        benchmark = get_benchmark(bench_name)
        tasks = split_list(task) or benchmark.default_tasks()
        bench_tasks.extend((bench_name, benchmark.check_task(t)) for t in tasks)
    if overrides and len(method_names) > 1:
        raise LampeEvalError("--param applies to one method: run the methods separately")
    return expand_grid(models, [(m, overrides) for m in method_names], bench_tasks, lengths, limit, seed)


@app.command("report")
def report_command(
    results: list[Path] = typer.Argument(..., help="Results directories (searched for records.jsonl)."),
    fmt: str = typer.Option("md", "--format", "-f", help="Tables as md, latex or csv (comma-separate)."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Output directory (default RESULTS/report)."),
    paper: list[str] = typer.Option(
        None, "--paper", help="Paper table(s) to compare with: table1, table2, ruler, ppl."
    ),
    as_model: str | None = typer.Option(
        None, "--as-model", help="Compare this model's results with every paper block (smoke runs)."
    ),
    as_length: str | None = typer.Option(
        None, "--as-length", help="Compare our results at this length with every paper length (smoke runs)."
    ),
    plots: bool = typer.Option(True, "--plots/--no-plots", help="Write the PNG plots."),
    buckets: str | None = typer.Option(
        None, "--buckets", help="Input-length bucket edges for the bucket plot, e.g. 4k (default: window)."
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only list the files written."),
) -> None:
    """Comparison tables (methods as rows, best in bold), the leaderboard CSV and plots.

    Example: lampe-eval report results/table-ppl --paper ppl --format md,latex
    """
    from .report import build_report

    try:
        formats = split_list([fmt])
        bad = [f for f in formats if f not in ("md", "latex", "csv")]
        if bad or not formats:
            raise LampeEvalError(f"bad --format {fmt!r}: use md, latex or csv")
        target = out or results[0] / "report"
        report = build_report(
            results,
            target,
            formats=formats,
            papers=split_list(paper),
            as_model=as_model,
            as_length=parse_lengths(as_length)[0] if as_length else None,
            plots=plots,
            bucket_edges=parse_lengths(buckets) if buckets else None,
        )
    except LampeEvalError as err:
        fail(str(err))
        return
    if not quiet and formats[0] != "csv":
        typer.echo(report.text)
    for path in report.files:
        console.print(f"wrote {path}", highlight=False)


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
