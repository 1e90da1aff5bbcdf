"""The ``lampe-eval`` command line (typer + rich): ``list``, ``run``, ``report``, ``fit``, ``dpe-select``,
and the inspection commands ``show-prompt`` (what the model receives) and ``show-positions`` (position maps).

Every command turns its options into the objects the library takes (``run`` and ``fit`` an
:class:`~lampe_eval.runner.experiment.Experiment`) and prints; errors a user can cause are one line on
stderr (``error: ...``, never wrapped) with exit code 2, before any model loads.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .errors import LampeEvalError
from .lengths import format_length, parse_lengths
from .options import split_list

if TYPE_CHECKING:
    from .runner.experiment import ExperimentSpec
    from .runner.jobs import Job

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Evaluate training-free long-context extension methods (LaMPE, SelfExtend, DCA, ...) "
    "on RoPE language models.",
)
console = Console()
err_console = Console(stderr=True)


def say_error(label: str, message: str) -> None:
    """``label message`` on one stderr line: never wrapped, never read as markup."""
    line = Text.assemble((label, "bold red"), " ", message.replace("\n", " "))
    err_console.print(line, soft_wrap=True, highlight=False)


def fail(message: str) -> None:
    """One-line error, exit code 2."""
    say_error("error:", message)
    raise typer.Exit(2)


def parse_key_values(values: list[str] | None, what: str) -> dict[str, str]:
    """``key=value`` pairs as text; the declared type of each key parses its value."""
    out: dict[str, str] = {}
    for item in values or []:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise LampeEvalError(f"bad {what} {item!r}: use key=value")
        out[key.strip()] = raw.strip()
    return out


# ------------------------------------------------------------------------------------------- list
LIST_SECTIONS = ("methods", "benchmarks", "models")
# Method parameters are shown for this window and target length (the defaults depend on both).
LIST_WINDOW, LIST_LENGTH = 8192, 16384
# A terminal at least this wide gets rich tables; narrower ones and pipes get plain blocks.
LIST_TABLE_WIDTH = 160


def _plain(value: Any) -> Any:
    """A JSON-able value: numbers, strings, booleans and None as they are; anything else as text."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return float(f"{value:.6g}")
    return str(value)


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()  # as -p/--opt take it
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def list_document(sections: tuple[str, ...] = LIST_SECTIONS) -> dict[str, list[dict[str, Any]]]:
    """What ``lampe-eval list`` shows, as one JSON-able document (``--json``): per section a list of entries
    in registry order. Methods: name, kind, summary, parameters (defaults for an 8K window at 16K).
    Benchmarks: name, summary, tasks, options (name, type, default, changes_results, help). Models:
    name, source, pretraining_window, chat_template."""
    doc: dict[str, list[dict[str, Any]]] = {}
    if "methods" in sections:
        from .methods import METHODS

        doc["methods"] = []
        for name in METHODS.names():
            cls = METHODS.get(name)
            params = cls.build(LIST_WINDOW, LIST_LENGTH).params()
            doc["methods"].append(
                {
                    "name": name,
                    "kind": cls.kind,
                    "summary": cls.summary,
                    "parameters": {k: _plain(v) for k, v in params.items()},
                }
            )
    if "benchmarks" in sections:
        from .benchmarks import BENCHMARKS, get_benchmark

        doc["benchmarks"] = []
        for name in BENCHMARKS.names():
            bench = get_benchmark(name)
            options = [
                {
                    "name": option.name,
                    "type": option.type_name(),
                    "default": _plain(option.default),
                    "changes_results": option.affects_results,
                    "help": option.help,
                }
                for option in BENCHMARKS.get(name).options
            ]
            doc["benchmarks"].append(
                {"name": name, "summary": bench.summary, "tasks": list(bench.tasks()), "options": options}
            )
    if "models" in sections:
        from .models import PRESETS

        doc["models"] = [
            {
                "name": preset.name,
                "source": preset.source,
                "pretraining_window": preset.pretraining_window,
                "chat_template": preset.chat_template,
            }
            for preset in PRESETS.values()
        ]
    return doc


def list_text(doc: dict[str, list[dict[str, Any]]], width: int) -> str:
    """Plain text, one block per entry (name, one-line summary, then its details indented), every line
    at most ``width`` characters: readable at 80 columns and through a pipe."""
    import textwrap

    def wrap(text: str, indent: str, hang: str = "") -> list[str]:
        return textwrap.wrap(
            text,
            width=width,
            initial_indent=indent,
            subsequent_indent=indent + hang,
            break_on_hyphens=False,
        ) or [indent.rstrip()]

    lines: list[str] = []
    window, length = format_length(LIST_WINDOW), format_length(LIST_LENGTH)
    titles = {
        "methods": (
            "METHODS  --method NAME -p key=value",
            f"parameters: the defaults for window {window}, target length {length}",
        ),
        "benchmarks": ("BENCHMARKS  --bench NAME --task T --opt key=value", ""),
        "models": ("MODEL PRESETS  --model NAME", "or a Hugging Face id, a local directory, a .gguf file"),
    }
    for section, entries in doc.items():
        if lines:
            lines.append("")
        title, note = titles[section]
        lines += wrap(title, "")
        lines += wrap(note, "") if note else []
        for entry in entries:
            lines.append("")
            if section == "methods":
                lines += wrap(f"{entry['name']} ({entry['kind']})", "")
                lines += wrap(entry["summary"], "  ")
                params = ", ".join(f"{k}={_shown(v)}" for k, v in entry["parameters"].items())
                lines += wrap(f"parameters: {params or '-'}", "  ", "  ")
            elif section == "benchmarks":
                lines += wrap(entry["name"], "")
                lines += wrap(entry["summary"], "  ")
                lines += wrap(f"tasks: {', '.join(entry['tasks'])}", "  ", "  ")
                if entry["options"]:
                    lines.append("  options:")
                for option in entry["options"]:
                    default = "-" if option["default"] is None else _shown(option["default"])
                    changes = "" if option["changes_results"] else "; does not change results"
                    head = f"{option['name']}={option['type']} (default {default}{changes})"
                    lines += wrap(f"{head}: {option['help']}", "    ", "  ")
            else:
                lines += wrap(entry["name"], "")
                chat = "chat template" if entry["chat_template"] else "no chat template"
                window = format_length(entry["pretraining_window"])
                lines += wrap(f"{entry['source']}; window {window}; {chat}", "  ", "  ")
    return "\n".join(lines) + "\n"


def list_tables(doc: dict[str, list[dict[str, Any]]]) -> None:
    """The same document as rich tables (a wide terminal)."""
    if "methods" in doc:
        methods = Table(title="Methods", title_justify="left")
        for column in ("name", "kind", "parameters (defaults for an 8K window at 16K)", "what it does"):
            methods.add_column(column)
        for entry in doc["methods"]:
            params = ", ".join(f"{k}={_shown(v)}" for k, v in entry["parameters"].items())
            methods.add_row(entry["name"], entry["kind"], params or "-", entry["summary"])
        console.print(methods)
    if "benchmarks" in doc:
        benches = Table(title="Benchmarks", title_justify="left")
        for column in ("name", "tasks", "what it measures"):
            benches.add_column(column)
        for entry in doc["benchmarks"]:
            benches.add_row(entry["name"], ", ".join(entry["tasks"]), entry["summary"])
        console.print(benches)
        options = Table(title="Benchmark options (--opt name=value)", title_justify="left")
        for column in ("benchmark", "option", "type", "default", "changes results", "what it does"):
            options.add_column(column, no_wrap=column in ("benchmark", "option"), overflow="fold")
        for entry in doc["benchmarks"]:
            for option in entry["options"]:
                default = "-" if option["default"] is None else _shown(option["default"])
                changes = "yes" if option["changes_results"] else "no"
                options.add_row(
                    entry["name"], option["name"], option["type"], default, changes, option["help"]
                )
        console.print(options)
    if "models" in doc:
        presets = Table(title="Model presets", title_justify="left")
        for column in ("name", "source", "pretraining window", "chat template"):
            presets.add_column(column)
        for entry in doc["models"]:
            presets.add_row(
                entry["name"],
                entry["source"],
                format_length(entry["pretraining_window"]),
                "yes" if entry["chat_template"] else "no",
            )
        console.print(presets)


@app.command("list")
def list_command(
    section: str | None = typer.Argument(None, help="One section only: methods, benchmarks or models."),
    as_json: bool = typer.Option(False, "--json", help="One JSON document (for scripts) instead of text."),
) -> None:
    """List methods (with their parameters), benchmarks (with tasks and options) and model presets.

    Plain text, one block per entry, when the output is a pipe or a narrow terminal; tables on a wide
    terminal; --json for scripts.

    Example: lampe-eval list benchmarks
    """
    import json
    import shutil

    if section is not None and section not in LIST_SECTIONS:
        from .errors import suggestion

        hint = suggestion(section, LIST_SECTIONS)
        fail(f"unknown section {section!r}: choose one of {', '.join(LIST_SECTIONS)}{hint}")
    doc = list_document(LIST_SECTIONS if section is None else (section,))
    if as_json:
        typer.echo(json.dumps(doc, indent=2, ensure_ascii=False))
        return
    width = shutil.get_terminal_size((80, 24)).columns
    if sys.stdout.isatty() and width >= LIST_TABLE_WIDTH:
        list_tables(doc)
        return
    typer.echo(list_text(doc, max(40, min(width, 100))), nl=False)


# -------------------------------------------------------------------------------------------- run
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
    limit: int | None = typer.Option(None, "--limit", "-n", help="At most N samples per task."),
    param: list[str] = typer.Option(
        None, "--param", "-p", help="Method parameter override key=value (repeatable)."
    ),
    opt: list[str] = typer.Option(None, "--opt", help="Benchmark option key=value (repeatable; see list)."),
    experiment: str | None = typer.Option(
        None,
        "--experiment",
        "-e",
        help="Experiment YAML file or name (named grids) instead of the grid options.",
    ),
    out: Path | None = typer.Option(
        None, "--out", "-o", help="Results directory, resumable (default results/default or the experiment's)"
    ),
    seed: int | None = typer.Option(None, help="Seed for generated data (default 0)."),
    device: str | None = typer.Option(None, help="cpu, cuda, cuda:1 (default: cuda if available)."),
    dtype: str | None = typer.Option(None, help="auto (bf16 on CUDA, fp32 on CPU), fp32, bf16, fp16."),
    data_dir: str | None = typer.Option(None, help="Local data directory for offline benchmark files."),
    workers: int | None = typer.Option(
        None, "--workers", "-w", help="Worker processes (default: one per visible GPU, else 1)."
    ),
    gpus: str | None = typer.Option(None, "--gpus", help="GPUs to use, one worker each, e.g. 0,1,3."),
    gpus_per_worker: int = typer.Option(
        1, "--gpus-per-worker", help="GPUs per worker; >1 spreads each worker's model over them (70B on 4)."
    ),
    device_map: str | None = typer.Option(
        None, "--device-map", help="auto: accelerate spreads the model over the worker's visible GPUs."
    ),
    batch_size: int = typer.Option(
        1, "--batch-size", help="Run up to N samples of a job together when their token counts are equal."
    ),
    backend: str | None = typer.Option(
        None, "--backend", help="Inference backend: hf (transformers, default) or vllm (pip install vllm)."
    ),
    ray: bool = typer.Option(False, "--ray", help="Run the workers as Ray actors (one per GPU)."),
    ray_address: str | None = typer.Option(
        None, "--ray-address", help="Ray cluster to join (auto, ray://host:10001); implies --ray."
    ),
    imports: list[str] = typer.Option(
        None, "--import", help="Module(s) to import first, e.g. one registering your own benchmark."
    ),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Live progress bars."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Check everything, list the jobs and exit."),
) -> None:
    """Run models x methods x benchmarks x lengths; per-sample records go to OUT/records.jsonl.

    Rerunning the same command skips finished samples; Ctrl-C keeps everything finished.

    Example: lampe-eval run --method rope,lampe --bench pg19 --len 4k,12k --limit 2
    """
    from .runner.experiment import ExperimentSpec, RunSettings, prepare_output
    from .runner.local import run
    from .runner.progress import RunProgress
    from .runner.store import ResultStore

    try:
        for name, value in (("--limit", limit), ("--workers", workers)):
            if value is not None and value < 1:
                raise LampeEvalError(f"{name} must be at least 1, got {value}")
        grid = {"--model": model, "--method": method, "--bench": bench, "--task": task, "--len": length}
        if experiment is not None:
            given = [name for name, value in {**grid, "--param": param}.items() if value]
            if given:
                raise LampeEvalError(f"--experiment defines the grid: drop {', '.join(given)}")
            spec = ExperimentSpec.from_file(experiment)
        else:
            spec = grid_spec(model, method, bench, task, length, param)
        spec = spec.override(
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
            ray=ray,
            ray_address=ray_address,
        )
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
        if dry_run:
            for job in exp.jobs:
                console.print(
                    f"  {job.describe()}  [{job.key()}]", highlight=False, markup=False, soft_wrap=True
                )
            return
        tracker = RunProgress(console, len(exp.jobs), enabled=progress)
        try:
            with tracker:
                result = run(exp, on_event=tracker, store=store)
        except KeyboardInterrupt:
            say_error(
                "interrupted:",
                f"{tracker.samples} new sample(s) this run are saved in {store.path}; "
                "rerun the same command to resume",
            )
            raise typer.Exit(130) from None
    except LampeEvalError as err:
        fail(str(err))
        return
    show_results(exp.jobs, result.summaries)
    console.print(f"{result.computed} new sample(s), {result.skipped} resumed -> {store.path}")
    if result.failures:
        for failure in result.failures:
            say_error("failed:", f"{failure['describe']}: {failure['error']}")
        raise typer.Exit(1)


def grid_spec(
    model: list[str] | None,
    method: list[str] | None,
    bench: list[str] | None,
    task: list[str] | None,
    length: list[str] | None,
    param: list[str] | None,
) -> ExperimentSpec:
    """The ``run`` grid options as an experiment spec (checked by its ``build``)."""
    from .runner.experiment import DEFAULT_MODEL, ExperimentSpec, GridSpec

    lengths = parse_lengths(length or [])
    if not bench:
        raise LampeEvalError("--bench is required (or --experiment FILE)")
    method_names = split_list(method) or ["rope"]
    overrides = parse_key_values(param, "--param")
    if overrides and len(method_names) > 1:
        raise LampeEvalError("--param applies to one method: run the methods separately")
    tasks = split_list(task) or None
    grid = GridSpec(
        models=split_list(model) or [DEFAULT_MODEL],
        methods=[(m, overrides) for m in method_names],
        benchmarks=[(b, tasks) for b in split_list(bench)],
        lengths=lengths,
    )
    return ExperimentSpec(name="default", grids=[grid])


def show_results(jobs: list[Job], summaries: dict[str, dict[str, float]]) -> None:
    from .benchmarks.summaries import summary_tables  # LongBench categories, L-Eval average

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


# ----------------------------------------------------------------------------------------- report
@app.command("report")
def report_command(
    results: list[Path] = typer.Argument(..., help="Results directories (searched for records.jsonl)."),
    fmt: str = typer.Option(
        "md",
        "--format",
        "-f",
        help="md, latex, csv (tables), html (report.html) or one an --import module registers; "
        "comma-separate. leaderboard.csv comes always.",
    ),
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
    resamples: int = typer.Option(
        1000, "--resamples", help="Bootstrap resamples for the 95% intervals and paired tests (0: none)."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the bootstrap."),
    threshold: float | None = typer.Option(
        None,
        "--threshold",
        help="Score a length must pass to count in the effective length (default: the benchmark's own, "
        "85.6 for RULER: Llama-2-7B at 4K).",
    ),
    baseline: str | None = typer.Option(
        None, "--baseline", help="Method every other is compared with (default: the one declared, rope)."
    ),
    highlight: list[str] = typer.Option(
        None, "--highlight", help="Method(s) drawn emphasised in the plots (default: those declared)."
    ),
    sample_mb: float | None = typer.Option(
        None,
        "--sample-mb",
        help="report.html's budget for embedded samples, in MB (default 16); the rest stay in records.jsonl.",
    ),
    imports: list[str] = typer.Option(
        None, "--import", help="Module(s) to import first, e.g. one registering your own benchmark or method."
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only list the files written."),
) -> None:
    """Comparison tables (methods as rows, best in bold, 95% intervals, paired tests), the leaderboard
    CSV, plots, and with --format html one self-contained report.html.

    Example: lampe-eval report results/table-ppl --paper ppl --format md,latex,html
    """
    from .report import REPORT_FORMATS, BootstrapSettings, build_report
    from .runner.experiment import import_plugins

    try:
        import_plugins(split_list(imports))  # first: a module may register a format
        formats = split_list([fmt])
        bad = [f for f in formats if f not in REPORT_FORMATS]
        if bad or not formats:
            raise LampeEvalError(f"bad --format {fmt!r}: use {', '.join(REPORT_FORMATS.names())}")
        if resamples < 0:
            raise LampeEvalError(f"--resamples must be 0 (no intervals) or more, got {resamples}")
        if sample_mb is not None and sample_mb < 0:
            raise LampeEvalError(f"--sample-mb must be 0 or more, got {sample_mb}")
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
            bootstrap=BootstrapSettings(resamples=resamples, seed=seed) if resamples else None,
            threshold=threshold,
            baseline=baseline,
            highlight=split_list(highlight) or None,
            sample_bytes=int(sample_mb * 1_000_000) if sample_mb is not None else None,
        )
    except LampeEvalError as err:
        fail(str(err))
        return
    for warning in report.warnings:
        say_error("warning:", warning)
    if not quiet and formats[0] in ("md", "latex"):  # tables to read (CSV is for programs)
        typer.echo(report.text)
    for path in report.files:
        console.print(f"wrote {path}", highlight=False)


# ----------------------------------------------------------------------------------- show-prompt
@app.command("show-prompt")
def show_prompt_command(
    bench: str = typer.Option(..., "--bench", "-b", help="Benchmark."),
    task: str = typer.Option(..., "--task", "-t", help="Task of the benchmark."),
    length: str = typer.Option(..., "--len", "-l", help="Context length of the job: 4k, 16384."),
    model: str = typer.Option(
        "smollm2-135m", "--model", "-m", help="Model whose tokenizer and template apply."
    ),
    index: int = typer.Option(
        0, "--index", "-i", help="Which sample (its position in the job; records' index)."
    ),
    limit: int | None = typer.Option(
        None, "--limit", "-n", help="The run's --limit, if it had one (default: index + 1)."
    ),
    seed: int = typer.Option(0, help="The run's --seed (generated data)."),
    opt: list[str] = typer.Option(None, "--opt", help="The run's benchmark options key=value."),
    data_dir: str | None = typer.Option(None, help="The run's --data-dir."),
    imports: list[str] = typer.Option(None, "--import", help="Module(s) registering your own benchmark."),
    raw: bool = typer.Option(False, "--raw", help="Print the prompt alone, without the description."),
) -> None:
    """Print exactly what the model receives for one sample (after the chat template and truncation).

    The sample is built by the benchmark's own code with the model's tokenizer (no weights are loaded).
    The prompt goes to stdout as it is; its description (token count, where it was cut, its hash, which
    records store as prompt_hash) goes to stderr.

    Example: lampe-eval show-prompt --bench longbench --task qasper --len 4k --opt fixture=true
    """
    from .benchmarks.base import BENCHMARKS, SampleContext, options_by_benchmark
    from .benchmarks.sample_cache import tokenizer_fingerprint
    from .models import load_tokenizer
    from .prompts import prompt_token_count
    from .runner.experiment import import_plugins

    try:
        if index < 0 or (limit is not None and limit <= index):
            raise LampeEvalError(f"--index must be >= 0 and below --limit, got {index} (limit {limit})")
        import_plugins(split_list(imports))
        benchmark = BENCHMARKS.get(bench)()
        benchmark.check_task(task)
        n = parse_lengths([length])[0]
        options = options_by_benchmark([bench], parse_key_values(opt, "--opt"))[bench]
        benchmark.check_job(task, n, options, data_dir)
        lm = load_tokenizer(model)
        ctx = SampleContext(lm, n, limit or index + 1, seed, data_dir, options)
        sample = next(itertools.islice(benchmark.samples(task, ctx), index, None), None)
        if sample is None:
            raise LampeEvalError(f"{bench}/{task} at {format_length(n)} has no sample {index}")
    except LampeEvalError as err:
        fail(str(err))
        return
    if sample.input_ids is not None:
        tokens, fed = len(sample.input_ids), "token ids (shown decoded)"
    else:
        tokens, fed = prompt_token_count(lm.tokenizer, sample.prompt), "text"
        added = tokens - len(lm.tokenizer(sample.prompt, add_special_tokens=False)["input_ids"])
        if added:  # e.g. a BOS token the tokenizer puts in front: part of what the model receives
            fed += f", plus {added} special token(s) the tokenizer adds"
    if not raw:
        fingerprint = sample.fingerprint(tokenizer_fingerprint(lm.tokenizer))
        budget = f"up to {sample.max_new_tokens} new tokens" if sample.max_new_tokens else "no generation"
        for line in (
            f"{bench}/{task} at {format_length(n)} | {lm.name} | sample {index} (id {sample.sample_id})",
            f"tokens: {tokens} ({fed}; {len(sample.prompt)} characters; {budget})",
            f"cut: {benchmark.describe_cut(sample)}",
            f"prompt hash: {sample.prompt_hash()} | sample fingerprint: {fingerprint}",
            "--- the prompt follows on stdout, exactly ---",
        ):
            err_console.print(line, highlight=False, markup=False, soft_wrap=True)
    sys.stdout.write(sample.prompt)
    sys.stdout.flush()


# -------------------------------------------------------------------------------- show-positions
@app.command("show-positions")
def show_positions_command(
    method: list[str] = typer.Option(..., "--method", help="Method(s), comma-separated: drawn side by side."),
    length: str = typer.Option(..., "--len", "-l", help="Input length L: 16k, 32768."),
    window: str | None = typer.Option(
        None,
        "--window",
        help="Pretraining window W (default: the model's; another W ignores method_configs).",
    ),
    model: str = typer.Option(
        "smollm2-135m", "--model", "-m", help="Model whose window and method_configs apply (none is loaded)."
    ),
    bench: str | None = typer.Option(
        None, "--bench", help="Use method_configs' settings for this benchmark."
    ),
    param: list[str] = typer.Option(None, "--param", "-p", help="Method parameter key=value (one method)."),
    out: Path = typer.Option(Path("positions.png"), "--out", "-o", help="PNG to write."),
    resolution: int = typer.Option(
        384, "--resolution", help="Rows and columns of the heat map (sampled beyond, 16-4096)."
    ),
) -> None:
    """Draw the relative-position matrix and the last query's positions of one or several methods.

    The positions come from the plan the attention engine runs for an L-token prefill (the method's
    segments); beyond --resolution tokens the heat map samples rows and columns, the last row is exact.

    Example: lampe-eval show-positions --method rope,selfextend,lampe --len 32k --window 8k
    """
    from .methods import METHODS, resolve_method
    from .models import known_window
    from .report.positions import draw, position_map

    try:
        names = split_list(method)
        overrides = parse_key_values(param, "--param")
        if overrides and len(names) > 1:
            raise LampeEvalError("--param applies to one method: draw the methods separately")
        if not 16 <= resolution <= 4096:
            raise LampeEvalError(f"--resolution must be between 16 and 4096, got {resolution}")
        n = parse_lengths([length])[0]
        own = known_window(model)
        w = parse_lengths([window])[0] if window else own
        if w is None:
            raise LampeEvalError(f"the window of {model!r} is unknown without loading it: give --window")
        configured = w == own  # method_configs hold settings for the model's own window only
        methods = []
        for name in names:
            METHODS.get(name)  # an unknown name: one line with the closest one
            resolved = resolve_method(
                name, w, n, model=model, benchmark=bench, params=overrides, configs=configured
            )
            methods.append(resolved.method)
        shown = ", ".join(f"{k}={v}" for k, v in overrides.items())
        maps = [position_map(m, w, n, f"{m.name}({shown})" if shown else m.name, resolution) for m in methods]
        draw(maps, out)
    except LampeEvalError as err:
        fail(str(err))
        return
    for pm in maps:
        beyond = "  (>= W: the model extrapolates)" if pm.largest >= w else ""
        if pm.kind == "frequency":  # YaRN, NTK, ...: the positions stay, the rotation frequencies change
            beyond = "  (positions kept: the method scales the frequencies instead)"
        console.print(
            f"{pm.label}: the last query sees relative positions up to {pm.largest:.0f}{beyond}",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
    if not configured:
        console.print(
            f"(W = {format_length(w)} is not {model}'s window: the methods' defaults for W, not its "
            "method_configs)",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
    console.print(f"wrote {out}", highlight=False)


# -------------------------------------------------------------------------------------------- fit
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
    passages: int = typer.Option(1, "--passages", "-n", help="PG-19 passages per (l, m)."),
    param: list[str] = typer.Option(
        None, "--param", "-p", help="Other LaMPE parameters, e.g. s1=512, mscale=1."
    ),
    opt: list[str] = typer.Option(
        None, "--opt", help="PG-19 option key=value (pg19_dataset=..., pg19_dir=...)."
    ),
    fixed_L: float | None = typer.Option(
        None, "--L", help="Keep the sigmoid maximum L fixed (tokens); fit a, b."
    ),
    out: Path = typer.Option(
        Path("results/fit"), "--out", "-o", help="Results directory of the sweep (resumable) and the plot."
    ),
    config: Path | None = typer.Option(
        None, help="Config to write (default: $LAMPE_EVAL_HOME/method_configs/lampe-MODEL.yaml)."
    ),
    write: bool = typer.Option(True, "--write/--no-write", help="Write the fitted config."),
    device: str | None = typer.Option(None, help="cpu, cuda, cuda:1 (default: cuda if available)."),
    dtype: str | None = typer.Option(None, help="auto (bf16 on CUDA, fp32 on CPU), fp32, bf16, fp16."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Live progress bars."),
) -> None:
    """LaMPE's mapping-length sweep (PPL vs m per input length l) and the sigmoid fit m(l) (paper Sec. 3.1).

    The sweep runs as ordinary jobs (lampe with m=... on pg19) into OUT/records.jsonl: resumable, and
    visible to `lampe-eval report`.

    Example: lampe-eval fit --model smollm2-135m --len 4k,8k,12k,16k --points 6 --passages 1
    """
    from .fit import FitRequest, run_fit
    from .runner.progress import RunProgress

    try:
        if passages < 1 or points < 2:
            raise LampeEvalError("--passages must be at least 1 and --points at least 2")
        request = FitRequest(
            model=model,
            lengths=parse_lengths(length) if length else None,
            points=points,
            grid=parse_lengths(grid) if grid else None,
            passages=passages,
            params=parse_key_values(param, "--param"),
            options=parse_key_values(opt, "--opt"),
            fixed_L=fixed_L,
            out=out,
            config=config,
            write=write,
            device=device,
            dtype=dtype,
            command=" ".join(["lampe-eval", *sys.argv[1:]]) if sys.argv[1:2] == ["fit"] else "",
        )
        tracker: RunProgress | None = None

        def start(jobs: int) -> RunProgress:
            nonlocal tracker
            tracker = RunProgress(console, jobs, enabled=progress)
            return tracker

        outcome = run_fit(request, progress=start, echo=lambda line: console.print(line, highlight=False))
    except KeyboardInterrupt:
        saved = tracker.samples if tracker else 0
        say_error(
            "interrupted:", f"{saved} new sample(s) are saved in {out}; rerun the same command to resume"
        )
        raise typer.Exit(130) from None
    except LampeEvalError as err:
        fail(str(err))
        return
    if outcome.failures:
        for failure in outcome.failures:
            say_error("failed:", f"{failure['describe']}: {failure['error']}")
        raise typer.Exit(1)


# ------------------------------------------------------------------------------------- dpe-select
@app.command("dpe-select")
def dpe_select_command(
    model: str = typer.Option("smollm2-135m", "--model", "-m", help="Preset, HF id, local dir or .gguf."),
    length: str | None = typer.Option(
        None, "--len", "-l", help="Test length of the detection (default: 2 x the pretraining window)."
    ),
    groups: int = typer.Option(8, "--groups", help="Equal groups of the head_dim / 2 frequencies."),
    factors: str | None = typer.Option(
        None,
        "--factors",
        help="Factors tried per group, e.g. 1,2,4,8 (default: len // l, l halving to 1K).",
    ),
    base: int | None = typer.Option(
        None, "--base-factor", help="Factor of the other groups (default: (len // window) * 2)."
    ),
    window: int | None = typer.Option(None, "--window", "-w", help="DPE's local window w (default: dpe's)."),
    variant: str = typer.Option("official", "--variant", help="dpe variant: official or paper."),
    samples: int = typer.Option(4, "--samples", "-n", help="NIAH samples per setting."),
    score: str = typer.Option("nll", "--score", help="nll (answer NLL, one pass) or generate (match)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the NIAH samples."),
    dim_lengths: str | None = typer.Option(
        None, "--dim-len", help="Lengths of the key-dimension pass (default: window halving to 2k)."
    ),
    dim_samples: int = typer.Option(2, "--dim-samples", help="Text samples per key-dimension length."),
    topk: int | None = typer.Option(None, "--topk", help="Key dimensions per head (default: 3/4 of them)."),
    dimensions: bool = typer.Option(True, "--dims/--no-dims", help="Run the key-dimension pass."),
    opt: list[str] = typer.Option(None, "--opt", help="RULER option key=value (essay=..., essay_file=...)."),
    out: Path = typer.Option(
        Path("results/dpe-select"), "--out", "-o", help="Probes (resumable) and key-dimension files."
    ),
    config: Path | None = typer.Option(
        None, help="Config to write (default: $LAMPE_EVAL_HOME/method_configs/dpe-MODEL.yaml)."
    ),
    write: bool = typer.Option(True, "--write/--no-write", help="Write the config."),
    device: str | None = typer.Option(None, help="cpu, cuda, cuda:1 (default: cuda if available)."),
    dtype: str | None = typer.Option(None, help="auto (bf16 on CUDA, fp32 on CPU), fp32, bf16, fp16."),
) -> None:
    """DPE's own search (LuLuLuyi/DPE): a scale factor per dimension group from NIAH detection, and the
    key dimensions from the q/k 2-norms (docs/methods.md 7.3).

    Example: lampe-eval dpe-select --model smollm2-135m --len 10k --groups 4 --samples 1
    """
    from .dpe_select import SelectRequest, run_select

    try:
        request = SelectRequest(
            model=model,
            length=parse_lengths(length)[0] if length else None,
            groups=groups,
            factors=_int_list(factors, "--factors") if factors else None,
            base=base,
            local_window=window,
            variant=variant,
            samples=samples,
            score=score,
            seed=seed,
            dim_lengths=parse_lengths(dim_lengths) if dim_lengths else None,
            dim_samples=dim_samples,
            topk=topk,
            dimensions=dimensions,
            options=parse_key_values(opt, "--opt"),
            out=out,
            config=config,
            write=write,
            device=device,
            dtype=dtype,
            command=" ".join(["lampe-eval", *sys.argv[1:]]) if sys.argv[1:2] == ["dpe-select"] else "",
        )
        request.check(None)
        run_select(request, echo=lambda line: console.print(line, highlight=False))
    except LampeEvalError as err:
        fail(str(err))


def _int_list(text: str, what: str) -> list[int]:
    try:
        return [int(v) for v in split_list([text])]
    except ValueError as err:
        raise LampeEvalError(f"{what} must be integers separated by commas, got {text!r}") from err


# ------------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> None:
    """The console script: every error a user can cause is one line (typer's usage errors too)."""
    try:
        code = app(args=argv, prog_name="lampe-eval", standalone_mode=False)
    except LampeEvalError as err:
        say_error("error:", str(err))
        sys.exit(2)
    except Exception as err:
        if not (hasattr(err, "format_message") and hasattr(err, "exit_code")):
            raise  # a bug: show the traceback
        if type(err).__name__ == "NoArgsIsHelpError":  # `lampe-eval` alone: the help
            typer.echo(err.format_message())
            sys.exit(0)
        say_error("error:", err.format_message())  # a usage error (unknown option, bad value)
        sys.exit(err.exit_code)
    sys.exit(code or 0)


if __name__ == "__main__":
    main()
