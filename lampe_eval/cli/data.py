"""``lampe-eval data check`` and ``lampe-eval data fetch``: a grid's data (and models) before a run.

Both take a run's grid options (or ``--experiment``). ``check`` resolves every source without downloading
(local, in the hub cache, on the hub with its size and commit, or one line saying what is wrong and how to
fix it) and exits 1 when any is missing; ``fetch`` downloads exactly what the grid reads (into the hub cache,
or the repositories' files into ``--data-dir``), so that ``HF_HUB_OFFLINE=1 lampe-eval run ...`` then works
on a machine without network. ``run --dry-run`` prints the same check.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..errors import LampeEvalError
from ..options import split_list
from .common import console, fail, parse_key_values, print_line, say_error
from .grid import spec_of
from .params import (
    RegistryHelpCommand,
    import_option,
    length_option,
    method_option,
    model_option,
    opt_option,
    param_option,
)

if TYPE_CHECKING:
    from ..runner.data_plan import Need
    from ..runner.jobs import Job

data_app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="A grid's data and models: check where they come from, fetch them ahead of a run.",
)

Models = Annotated[
    bool,
    typer.Option("--models/--no-models", help="Also the models' hub files (configs, tokenizer, weights)."),
]
# the grid options, as `run` takes them (a run's command line works here as it is)
ModelNames = Annotated[
    list[str] | None, model_option("Preset ({models}), HF id or local path (default {default_model}).")
]
MethodNames = Annotated[
    list[str] | None, method_option("Method(s): they read no data; accepted as run takes them.")
]
Benches = Annotated[list[str] | None, typer.Option("--bench", "-b", help="Benchmark name(s): {benchmarks}.")]
Tasks = Annotated[
    list[str] | None, typer.Option("--task", "-t", help="Task(s) (default: the benchmark's set).")
]
Lengths = Annotated[list[str] | None, length_option("Context length(s): some sources depend on it.")]
Params = Annotated[list[str] | None, param_option("Method parameter (accepted as run takes it).")]
Opts = Annotated[list[str] | None, opt_option("Benchmark option key=value: sources depend on them.")]
ExperimentName = Annotated[
    str | None, typer.Option("--experiment", "-e", help="Experiment YAML file or name.")
]
Imports = Annotated[list[str] | None, import_option("Module(s) registering your own benchmarks.")]


@dataclass(frozen=True)
class Grid:
    """A grid as the data commands take it (the run's options that decide what is read)."""

    experiment: str | None
    model: list[str] | None
    method: list[str] | None
    bench: list[str] | None
    task: list[str] | None
    length: list[str] | None
    param: list[str] | None
    opt: list[str] | None
    imports: list[str] | None

    def jobs(self, data_dir: str | None) -> list[Job]:
        spec = spec_of(
            self.experiment, self.model, self.method, self.bench, self.task, self.length, self.param
        )
        spec = spec.override(
            options=parse_key_values(self.opt, "--opt"), data_dir=data_dir, imports=split_list(self.imports)
        )
        return spec.expand()


def check_command(
    model: ModelNames = None,
    method: MethodNames = None,
    bench: Benches = None,
    task: Tasks = None,
    length: Lengths = None,
    param: Params = None,
    opt: Opts = None,
    experiment: ExperimentName = None,
    data_dir: str | None = typer.Option(None, help="Local data directory (as run takes it)."),
    imports: Imports = None,
    models: Models = True,
) -> None:
    """Where a grid's data comes from, without downloading; exit 1 when any is missing.

    Each source is local, in the hub cache, or on the hub (its size and commit); what is missing is one
    line per benchmark saying what is wrong and how to fix it.

    Example: lampe-eval data check --experiment table1
    """
    try:
        grid = Grid(experiment, model, method, bench, task, length, param, opt, imports)
        missing = say_check(grid.jobs(data_dir), models)
    except LampeEvalError as err:
        fail(str(err))
    if missing:
        raise typer.Exit(1)


def fetch_command(
    model: ModelNames = None,
    method: MethodNames = None,
    bench: Benches = None,
    task: Tasks = None,
    length: Lengths = None,
    param: Params = None,
    opt: Opts = None,
    experiment: ExperimentName = None,
    data_dir: str | None = typer.Option(
        None,
        help="Write the repositories' files under DIR/<benchmark>/ (run --data-dir DIR reads them) "
        "instead of the hub cache.",
    ),
    imports: Imports = None,
    models: Models = True,
) -> None:
    """Download exactly what a grid reads from the hub, ahead of a run.

    The benchmarks' files and the models' configs, tokenizers and safetensors weights, with sizes, sources
    and commits; afterwards HF_HUB_OFFLINE=1 lampe-eval run ... works without network (same HF_HOME).
    Exit 1 when anything failed.

    Example: lampe-eval data fetch --experiment table1
    """
    from ..data.check import ensure, human_size
    from ..data.hub import fetch_model
    from ..runner.data_plan import data_needs, hub_models

    failed = 0
    try:
        # the grid as run will see it (data_dir only says where fetched copies go: run reads them there)
        jobs = Grid(experiment, model, method, bench, task, length, param, opt, imports).jobs(None)
        local_dir = Path(data_dir).expanduser().resolve() if data_dir else None
        for need in data_needs(jobs):
            if need.source is None:
                failed += 1
                say_error("missing:", need.error)
                continue
            if need.source.kind == "hub":
                console.print(f"{_head(need)}  fetching {need.source.describe()}")
            try:
                done = ensure(need.source, local_dir, progress=True)
            except LampeEvalError as err:
                failed += 1
                say_error("failed:", str(err))
                continue
            size = f"{human_size(done.size)} " if done.size else ""
            print_line(f"{_head(need)}  {need.source.describe()}  {size}{done.detail}")
        for repo in hub_models(jobs) if models else []:
            console.print(f"model  fetching {repo}")
            try:
                snapshot = fetch_model(repo)
            except LampeEvalError as err:
                failed += 1
                say_error("failed:", str(err))
                continue
            total = sum(p.stat().st_size for p in snapshot.paths.values())
            print_line(f"model  {repo}  {human_size(total)} in the hub cache, commit {snapshot.commit[:12]}")
    except LampeEvalError as err:
        fail(str(err))
    if failed:
        say_error("error:", f"{failed} source(s) could not be fetched (lines above)")
        raise typer.Exit(1)
    offline = f" --data-dir {data_dir}" if data_dir else ""
    print_line(f"done: `HF_HUB_OFFLINE=1 lampe-eval run ...{offline}` now reads these without network")


def _head(need: Need) -> str:
    return f"{need.benchmark} [{need.tasks()}]"


def say_check(jobs: Sequence[Job], models: bool = True) -> int:
    """One line per distinct source (and model) of the jobs, one line per benchmark with missing data;
    returns how many sources are missing."""
    from ..data.check import human_size, status
    from ..data.hub import model_probe
    from ..runner.data_plan import data_needs, hub_models

    missing: dict[str, list[tuple[Need, str]]] = {}
    for need in data_needs(jobs):
        if need.source is None:
            missing.setdefault(need.benchmark, []).append((need, need.error))
            continue
        found = status(need.source)
        if not found.ok:
            missing.setdefault(need.benchmark, []).append((need, found.detail))
            continue
        size = f"{human_size(found.size)}, " if found.size else ""
        print_line(f"{_head(need)}  {need.source.describe()}  {size}{found.detail}")
    for benchmark, failures in missing.items():
        tasks = ", ".join(dict.fromkeys(job.task for need, _ in failures for job in need.jobs))
        more = f" (and {len(failures) - 1} more of its sources)" if len(failures) > 1 else ""
        say_error("missing:", f"{benchmark} [{tasks}]: {failures[0][1]}{more}")
    count = sum(len(f) for f in missing.values())
    for repo in hub_models(jobs) if models else []:
        try:
            probe = model_probe(repo)
        except LampeEvalError as err:
            count += 1
            say_error("missing:", str(err))
            continue
        print_line(f"model  {repo}  {human_size(probe.total)}, {probe.where}, commit {probe.commit[:12]}")
    return count


data_app.command("check", cls=RegistryHelpCommand)(check_command)
data_app.command("fetch", cls=RegistryHelpCommand)(fetch_command)
