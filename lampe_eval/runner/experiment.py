"""The one run configuration: an :class:`Experiment` (the jobs, where results go, how to run them).

``lampe-eval run`` builds it from its options or from an experiment file, ``lampe-eval fit`` from its
sweep, a notebook from code; all go through :meth:`ExperimentSpec.build`, the one place where
everything is checked before any model loads: names (with "did you mean"), lengths, method
parameters (types, then each job's values against its length and the model's window), benchmark
options (declared by the benchmarks of the grid, typed), the imports and each benchmark's own checks
of a job (the checks themselves: :mod:`.checks`). The runner (:func:`lampe_eval.runner.local.run`)
takes the result.

An experiment file (``lampe-eval run --experiment FILE``, or the name of a packaged or user
experiment)::

    name: my-grid
    out: results/my-grid            # default: results/<name>
    limit: 10                       # samples per (task, length); null = all
    seed: 0
    options: {}                     # benchmark options (--opt)
    imports: []                     # extra modules that register benchmarks or methods
    data_dir: null                  # --data-dir
    grid:                           # a list of sub-grids, each a cross product
      - models: [llama2-7b-chat]
        methods: [method_a, {name: method_b, params: {group_size: 16, window: 1024}}]
        benchmarks: {bench_a: all}  # or [bench_a, bench_b], or {bench_b: [task_1, task_2]}
        lengths: [4k, 8k, 16k]      # "window" (or "in-window"): each model's pretraining window

A length spelled ``window`` (or ``in-window``) is each model's pretraining window, as the runner knows it
before loading (:func:`lampe_eval.models.known_window`: a preset's, a local or cached config's): the
in-window length a report's short-context comparison reads (:mod:`lampe_eval.report.short_context`); a
model whose window only loading would tell is one line asking for a number.

A file with a single grid may put ``models``/``methods``/``benchmarks``/``lengths`` at the top level
instead of under ``grid``. Method parameters come from ``method_configs/`` as for ``run``, then the
entry's ``params``. Every key is typed: a wrong one is one line naming the key and the expected type.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import resources
from ..errors import LampeEvalError, clip, suggestion
from ..lengths import parse_lengths
from ..settings import RunSettings as RunSettings  # its home is below the runner and the backends
from .checks import check_jobs, check_models, check_settings, import_plugins, resolve_tasks, typed_params
from .jobs import Job, dedupe, expand_grid
from .memory_check import MemoryNeed, check_memory, memory_needs

GRID_KEYS = ("models", "methods", "benchmarks", "lengths")
WINDOW_LENGTHS = ("window", "in-window")  # a length that is each model's pretraining window
TOP_KEYS = (
    "name",
    "description",
    "out",
    "limit",
    "seed",
    "options",
    "imports",
    "data_dir",
    "backend",
    "grid",
    *GRID_KEYS,
)
DEFAULT_MODEL = "smollm2-135m"
ENGINE_LOG = "engine.log"  # in the results directory: the log lines of an engine that logs on its own


@dataclass
class Experiment:
    """A checked grid: the jobs (each with its method parameters, benchmark options and data
    directory), the results directory and the run settings."""

    name: str
    jobs: list[Job]
    out: str
    limit: int | None = None
    seed: int = 0
    options: dict[str, Any] = field(default_factory=dict)
    imports: tuple[str, ...] = ()
    data_dir: str | None = None
    settings: RunSettings = RunSettings()
    # job key -> one-line warning found before any model loaded (positions past the window)
    warnings: dict[str, str] = field(default_factory=dict)
    # the backend's memory estimate per (model, method, length), checked against the device's memory
    memory: list[MemoryNeed] = field(default_factory=list)

    @classmethod
    def from_jobs(
        cls, jobs: Sequence[Job], out: str | Path, name: str = "jobs", **settings: Any
    ) -> Experiment:
        """An experiment of jobs built in code (notebooks, tests: see :func:`~.jobs.expand_grid`);
        ``settings`` are :class:`RunSettings` fields. The jobs are taken as they are."""
        if "gpus" in settings and settings["gpus"] is not None:
            settings["gpus"] = tuple(settings["gpus"])
        return cls(name=name, jobs=list(jobs), out=str(out), settings=RunSettings(**settings))


@dataclass
class GridSpec:
    """One sub-grid as written (names not yet checked)."""

    models: list[str]
    methods: list[tuple[str, dict[str, Any]]]
    benchmarks: list[tuple[str, Any]]  # (name, None | "default" | "all" | [tasks])
    lengths: list[int]
    use_configs: bool = True  # add method_configs/ values to each job's parameters
    window_length: bool = False  # also each model's pretraining window ("window" in the lengths)

    def lengths_by_model(self) -> list[tuple[list[str], list[int]]]:
        """(models, lengths) groups to expand: the grid's lengths, plus each model's window when asked."""
        if not self.window_length:
            return [(self.models, self.lengths)]
        return [([model], [*self.lengths, model_window(model)]) for model in self.models]


def model_window(model: str) -> int:
    """The pretraining window of ``model`` for a length spelled ``window``; one line when it is not known
    before loading."""
    from ..models import known_window

    window = known_window(model)
    if not window:
        raise LampeEvalError(
            f"length 'window': the window of model {model!r} is not known before loading it (a hub id not "
            "in the local cache, a GGUF file): give the length as a number"
        )
    return int(window)


@dataclass
class ExperimentSpec:
    """What was asked for, from an experiment file or the ``run`` options; :meth:`build` checks it."""

    name: str
    grids: list[GridSpec]
    out: str | None = None
    limit: int | None = None
    seed: int = 0
    options: dict[str, Any] = field(default_factory=dict)
    imports: list[str] = field(default_factory=list)
    data_dir: str | None = None
    backend: str | None = None  # the inference backend (``--backend`` wins over the file); None: the default

    # ------------------------------------------------------------------------------ from a file
    @classmethod
    def from_file(cls, name: str | Path) -> ExperimentSpec:
        found = find_experiment(name)
        where = resources.display(found)
        data = resources.read_yaml(found)
        unknown_keys = sorted(set(map(str, data)) - set(TOP_KEYS))
        if unknown_keys:
            hint = suggestion(unknown_keys[0], TOP_KEYS)
            raise LampeEvalError(f"{where}: unknown experiment key(s): {', '.join(unknown_keys)}{hint}")
        key = Keys(data, where)
        if "grid" in data:
            entries = key.get("grid", list, "a list of sub-grids")
        else:
            entries = [{k: data[k] for k in GRID_KEYS if k in data}]
        grids = []
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict):
                raise LampeEvalError(f"{where}: grid entry {i + 1} must be a mapping, got {clip(entry)}")
            grids.append(grid_from_mapping(entry, f"{where}: grid entry {i + 1}"))
        name_value = key.get("name", str, "a string") or Path(found.name).stem
        return cls(
            name=str(name_value),
            grids=grids,
            out=key.get("out", str, "a directory name"),
            limit=key.positive_int("limit"),
            seed=key.get("seed", int, "an integer") or 0,
            options=dict(key.get("options", dict, "a mapping of option: value") or {}),
            imports=[str(m) for m in key.get("imports", list, "a list of module names") or []],
            data_dir=key.get("data_dir", str, "a directory name"),
            backend=key.get("backend", str, "a backend name"),
        )

    def expand(self) -> list[Job]:
        """The grid's jobs, names and options checked (no model is looked at: ``data check`` and ``data
        fetch`` need only these)."""
        from ..benchmarks.base import options_by_benchmark

        import_plugins(self.imports)
        data_dir = os.path.abspath(os.path.expanduser(self.data_dir)) if self.data_dir else None
        if not self.grids:
            raise LampeEvalError(f"experiment {self.name!r} has no grid")
        tasks = [resolve_tasks(grid.benchmarks) for grid in self.grids]
        # an option applies to every benchmark of the experiment that declares it
        per_benchmark = options_by_benchmark([b for pairs in tasks for b, _ in pairs], self.options)
        jobs: list[Job] = []
        for grid, bench_tasks in zip(self.grids, tasks, strict=True):
            methods = [(name, typed_params(name, params)) for name, params in grid.methods]
            for models, lengths in grid.lengths_by_model():
                jobs += expand_grid(
                    models,
                    methods,
                    bench_tasks,
                    lengths,
                    self.limit,
                    self.seed,
                    use_configs=grid.use_configs,
                    options=per_benchmark,
                    data_dir=data_dir,
                )
        return dedupe(jobs)

    def override(self, **values: Any) -> ExperimentSpec:
        """A copy with the given fields replaced (the ``run`` options over the file's values); ``options``
        and ``imports`` are merged."""
        given = {k: v for k, v in values.items() if v is not None and v != []}
        if "options" in given:
            given["options"] = {**self.options, **given["options"]}
        if "imports" in given:
            given["imports"] = [*self.imports, *(m for m in given["imports"] if m not in self.imports)]
        return dataclasses.replace(self, **given)

    # --------------------------------------------------------------------------------- checking
    def build(self, settings: RunSettings | None = None) -> Experiment:
        """The checked experiment; any bad input is one :class:`LampeEvalError` line (no model loads)."""
        settings = settings or RunSettings()
        if self.backend is not None:
            settings = dataclasses.replace(settings, backend=self.backend)
        out = self.out or default_out(self.name)
        # an engine's own log lines go beside the records, not to the terminal
        if settings.engine_log is None:
            settings = dataclasses.replace(settings, engine_log=os.path.join(out, ENGINE_LOG))
        import_plugins(self.imports)  # first: they may register the backend
        check_settings(settings)
        if settings.load is None:
            for grid in self.grids:
                methods = [name for name, _ in grid.methods]
                check_models(grid.models, settings.backend, methods, settings)
        jobs = self.expand()
        data_dir = os.path.abspath(os.path.expanduser(self.data_dir)) if self.data_dir else None
        warnings = check_jobs(jobs, known_windows=settings.load is None)
        memory = memory_needs(jobs, settings) if settings.load is None else []
        check_memory(memory, settings)
        return Experiment(
            name=self.name,
            jobs=jobs,
            out=out,
            limit=self.limit,
            seed=self.seed,
            options=_typed_options(self.options, jobs),
            imports=tuple(self.imports),
            data_dir=data_dir,
            settings=settings,
            warnings=warnings,
            memory=memory,
        )


def default_out(name: str) -> str:
    """``results/<name>``: a name that would leave ``results/`` (``..``, a path, an absolute name) is one
    line (give ``out:`` for another place)."""
    parts = Path(name).parts
    if not name.strip() or Path(name).is_absolute() or len(parts) != 1 or parts[0] in (".", ".."):
        raise LampeEvalError(
            f"experiment name {clip(name)} would write outside results/: use a plain name "
            "(no '/' or '..'), or give out: DIR"
        )
    return f"results/{name}"


class Keys:
    """Typed access to an experiment mapping: a wrong type is one line naming the key."""

    def __init__(self, data: Mapping[str, Any], where: str) -> None:
        self.data, self.where = data, where

    def get(self, key: str, kind: type, expected: str) -> Any:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
            raise LampeEvalError(f"{self.where}: '{key}' must be {expected}, got {clip(value)}")
        return value

    def positive_int(self, key: str) -> int | None:
        value = self.get(key, int, "a positive integer (or null for all samples)")
        if value is not None and value < 1:
            raise LampeEvalError(f"{self.where}: '{key}' must be a positive integer, got {clip(value)}")
        return value


def _names(value: Any, what: str, where: str) -> list[str]:
    """A list of names: a YAML list, or one comma-separated string."""
    if value is None:
        raise LampeEvalError(f"{where}: the grid needs '{what}'")
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        return [v.strip() for v in str(value).split(",") if v.strip()]
    if isinstance(value, list) and all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in value):
        return [str(v) for v in value]
    raise LampeEvalError(f"{where}: '{what}' must be a list of names, got {clip(value)}")


def grid_from_mapping(entry: Mapping[str, Any], where: str) -> GridSpec:
    unknown_keys = sorted(set(map(str, entry)) - set(GRID_KEYS))
    if unknown_keys:
        hint = suggestion(unknown_keys[0], GRID_KEYS)
        raise LampeEvalError(f"{where}: unknown experiment grid key(s): {', '.join(unknown_keys)}{hint}")
    methods: list[tuple[str, dict[str, Any]]] = []
    raw_methods = entry.get("methods")
    for item in raw_methods if isinstance(raw_methods, list) else _names(raw_methods, "methods", where):
        if isinstance(item, str):
            methods.append((item, {}))
        elif isinstance(item, dict) and isinstance(item.get("name"), str) and set(item) <= {"name", "params"}:
            params = item.get("params") or {}
            if not isinstance(params, dict):
                raise LampeEvalError(f"{where}: method {item['name']!r}: 'params' must be a mapping")
            methods.append((item["name"], dict(params)))
        else:
            raise LampeEvalError(
                f"{where}: bad method entry {clip(item)}: a name or {{name: ..., params: {{...}}}}"
            )
    raw_benchmarks = entry.get("benchmarks")
    if isinstance(raw_benchmarks, dict):
        benchmarks: list[tuple[str, Any]] = []
        for name, tasks in raw_benchmarks.items():
            if tasks not in (None, "default", "all"):
                tasks = _names(tasks, f"benchmarks.{name}", where)
            benchmarks.append((str(name), tasks))
    else:
        benchmarks = [(name, None) for name in _names(raw_benchmarks, "benchmarks", where)]
    written = _names(entry.get("lengths"), "lengths", where)
    window = any(str(x).strip().lower() in WINDOW_LENGTHS for x in written)
    numbers = [str(x) for x in written if str(x).strip().lower() not in WINDOW_LENGTHS]
    lengths = parse_lengths(numbers) if numbers or not window else []
    models = _names(entry.get("models"), "models", where)
    return GridSpec(models, methods, benchmarks, lengths, window_length=window)


def find_experiment(name: str | Path) -> resources.Resource:
    """An experiment file: a path, else a name from ``experiments/`` (user directory, then package)."""
    path = Path(name)
    if path.is_file():
        return path
    if path.suffix in ("", ".yaml") and len(path.parts) == 1:
        found = resources.find(f"experiments/{path.stem}.yaml")
        if found is not None:
            return found
    known = ", ".join(resources.listing("experiments", ".yaml"))
    raise LampeEvalError(f"experiment file {str(name)!r} does not exist (named experiments: {known})")


def load_experiment(name: str | Path, settings: RunSettings | None = None) -> Experiment:
    """An experiment file (a path or a name), checked."""
    return ExperimentSpec.from_file(name).build(settings)


def _typed_options(values: Mapping[str, Any], jobs: Sequence[Job]) -> dict[str, Any]:
    """The experiment's options as the jobs' benchmarks typed them."""
    typed: dict[str, Any] = {}
    for job in jobs:
        typed.update({k: v for k, v in job.options.items() if k in values})
    return {k: typed.get(k, v) for k, v in values.items()}
