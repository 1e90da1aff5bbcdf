"""Experiment files: a named grid (or several) in YAML, for ``lampe-eval run --experiment FILE``.

::

    name: my-grid
    out: results/my-grid            # default: results/<name>
    limit: 10                       # samples per (task, length); null = all
    seed: 0
    options: {}                     # benchmark options (--opt)
    imports: []                     # extra modules that register benchmarks or methods
    grid:                           # a list of sub-grids, each a cross product
      - models: [llama2-7b-chat]
        methods: [rope, {name: selfextend, params: {group_size: 16, window: 1024}}]
        benchmarks: {bench_a: all}  # or [bench_a, bench_b], or {bench_b: [task_1, task_2]}
        lengths: [4k, 8k, 16k]

A file with a single grid may put ``models``/``methods``/``benchmarks``/``lengths`` at the top level
instead of under ``grid``. Method parameters come from ``method_configs/`` as for ``run``, then the
entry's ``params``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .. import resources
from ..errors import LampeEvalError
from ..lengths import parse_lengths
from .jobs import Job, dedupe, expand_grid

GRID_KEYS = ("models", "methods", "benchmarks", "lengths")
TOP_KEYS = (
    "name",
    "description",
    "out",
    "limit",
    "seed",
    "options",
    "imports",
    "data_dir",
    "grid",
    *GRID_KEYS,
)


@dataclass
class Experiment:
    name: str
    jobs: list[Job]
    out: str
    limit: int | None = None
    seed: int = 0
    options: dict[str, Any] = field(default_factory=dict)
    imports: list[str] = field(default_factory=list)
    data_dir: str | None = None


def _as_list(value: Any, what: str) -> list[Any]:
    if value is None:
        raise LampeEvalError(f"experiment grid needs '{what}'")
    if isinstance(value, (str, int)):
        return [v.strip() for v in str(value).split(",") if v.strip()]
    if isinstance(value, list):
        return value
    raise LampeEvalError(f"experiment '{what}' must be a list")


def _methods(value: Any) -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    for entry in _as_list(value, "methods"):
        if isinstance(entry, str):
            out.append((entry, {}))
        elif isinstance(entry, dict) and "name" in entry:
            params = entry.get("params") or {}
            if not isinstance(params, dict):
                raise LampeEvalError(f"experiment method {entry['name']!r}: 'params' must be a mapping")
            out.append((str(entry["name"]), params))
        else:
            raise LampeEvalError(f"bad experiment method entry {entry!r}: a name or {{name:, params:}}")
    return out


def _benchmark_tasks(value: Any) -> list[tuple[str, str]]:
    from ..benchmarks import get_benchmark

    if isinstance(value, dict):
        items = list(value.items())
    else:
        items = [(name, "default") for name in _as_list(value, "benchmarks")]
    out: list[tuple[str, str]] = []
    for name, tasks in items:
        bench = get_benchmark(str(name))
        if tasks in (None, "default"):
            names = bench.default_tasks()
        elif tasks == "all":
            names = bench.tasks()
        else:
            names = [str(t) for t in _as_list(tasks, f"benchmarks.{name}")]
        out.extend((str(name), bench.check_task(t)) for t in names)
    return out


def grid_jobs(entry: dict[str, Any], limit: int | None, seed: int) -> list[Job]:
    from ..methods import METHODS
    from ..models import resolve_source

    unknown_keys = set(entry) - set(GRID_KEYS)
    if unknown_keys:
        raise LampeEvalError(f"unknown experiment grid key(s): {', '.join(sorted(unknown_keys))}")
    models = [str(m) for m in _as_list(entry.get("models"), "models")]
    for model in models:
        resolve_source(model)
    methods = _methods(entry.get("methods"))
    for method, _ in methods:
        METHODS.get(method)
    lengths = parse_lengths([str(x) for x in _as_list(entry.get("lengths"), "lengths")])
    return expand_grid(models, methods, _benchmark_tasks(entry.get("benchmarks")), lengths, limit, seed)


def find_experiment(name: str | Path) -> resources.Resource:
    """An experiment file: a path, else a name from ``experiments/`` (user directory, then package)."""
    path = Path(name)
    if path.is_file():
        return path
    if path.suffix in ("", ".yaml") and len(path.parts) <= 2:
        found = resources.find(f"experiments/{path.stem}.yaml")
        if found is not None:
            return found
    known = ", ".join(resources.listing("experiments", ".yaml"))
    raise LampeEvalError(f"experiment file {str(name)!r} does not exist (named experiments: {known})")


def load_experiment(name: str | Path) -> Experiment:
    path = find_experiment(name)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as err:
        raise LampeEvalError(f"{path}: not valid YAML: {err}".splitlines()[0]) from err
    if not isinstance(data, dict):
        raise LampeEvalError(f"{path}: expected a mapping")
    unknown_keys = set(data) - set(TOP_KEYS)
    if unknown_keys:
        raise LampeEvalError(f"{path}: unknown experiment key(s): {', '.join(sorted(unknown_keys))}")
    from .worker import import_plugins

    imports = [str(m) for m in data.get("imports") or []]
    import_plugins(imports)
    name = str(data.get("name") or Path(path.name).stem)
    limit = data.get("limit")
    seed = int(data.get("seed") or 0)
    if "grid" in data:
        grids = data["grid"]
        if not isinstance(grids, list):
            raise LampeEvalError(f"{path}: 'grid' must be a list of sub-grids")
    else:
        grids = [{k: data[k] for k in GRID_KEYS if k in data}]
    jobs: list[Job] = []
    for entry in grids:
        if not isinstance(entry, dict):
            raise LampeEvalError(f"{path}: each grid entry must be a mapping")
        jobs.extend(grid_jobs(entry, int(limit) if limit is not None else None, seed))
    return Experiment(
        name=name,
        jobs=dedupe(jobs),
        out=str(data.get("out") or f"results/{name}"),
        limit=int(limit) if limit is not None else None,
        seed=seed,
        options=dict(data.get("options") or {}),
        imports=imports,
        data_dir=data.get("data_dir"),
    )
