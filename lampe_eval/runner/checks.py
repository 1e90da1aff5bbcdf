"""The checks of an experiment before any model loads (:meth:`.experiment.ExperimentSpec.build` runs them
all; the tools, the workers and the commands call some alone): the run settings (the runner's, then the
backend's own), the imported plugin modules, benchmark and task names, the types of method parameters, the
models, each job's parameters against its length and its model's window with the benchmark's own checks
of the job, and the results directory. Each bad input is one :class:`~lampe_eval.errors.LampeEvalError`
line."""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import LampeEvalError
from ..settings import RunSettings
from .jobs import Job


def check_settings(settings: RunSettings) -> None:
    """One-line errors for run settings, before any model loads: the runner's, then the backend's own."""
    for name, value in (
        ("--gpus-per-worker", settings.gpus_per_worker),
        ("--batch-size", settings.batch_size),
    ):
        if value < 1:
            raise LampeEvalError(f"{name} must be at least 1, got {value}")
    if settings.kv_cache_gib is not None and not settings.kv_cache_gib > 0:
        raise LampeEvalError(f"--kv-cache-gib must be above 0, got {settings.kv_cache_gib}")
    utilization = settings.gpu_memory_utilization
    if utilization is not None and not 0 < utilization <= 1:
        raise LampeEvalError(f"--gpu-memory-utilization is a share of the GPU in (0, 1], got {utilization}")
    from ..backends import BACKENDS, Placement

    if settings.backend not in BACKENDS:
        raise LampeEvalError(f"--backend {settings.backend!r}: choose one of {', '.join(BACKENDS.names())}")
    backend = BACKENDS.get(settings.backend)
    backend.check_settings(settings)
    if backend.placement is Placement.REMOTE:
        _check_one_client(settings)


def _check_one_client(settings: RunSettings) -> None:
    """A backend that calls endpoints from this process takes no worker or placement settings."""
    asked = {
        "--ray": settings.ray or settings.ray_address,
        "--workers": (settings.workers or 1) > 1,
        "--gpus": settings.gpus,
        "--device-map": settings.device_map,
        "--gpus-per-worker": settings.gpus_per_worker > 1,
    }
    given = [flag for flag, value in asked.items() if value]
    if given:
        raise LampeEvalError(
            f"--backend {settings.backend} calls its endpoints from this process (they place the model "
            f"themselves): drop {'/'.join(given)}"
        )


def import_plugins(modules: Sequence[str]) -> None:
    """Import the modules that register benchmarks or methods; a missing one is one line."""
    for module in modules:
        if not isinstance(module, str) or not module.strip():
            raise LampeEvalError(f"import {module!r}: not a module name")
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise LampeEvalError(f"cannot import {module}: {err}".splitlines()[0]) from err


def resolve_tasks(benchmarks: Sequence[tuple[str, Any]]) -> list[tuple[str, str]]:
    """(benchmark, task) pairs: a benchmark's default tasks, all of them, or the named ones (checked)."""
    from ..benchmarks import get_benchmark

    out: list[tuple[str, str]] = []
    for name, tasks in benchmarks:
        bench = get_benchmark(name)
        if tasks in (None, "default"):
            names = bench.default_tasks()
        elif tasks == "all":
            names = bench.tasks()
        else:
            names = list(tasks)
        out.extend((name, bench.check_task(t)) for t in names)
    return out


def typed_params(method: str, params: Mapping[str, Any]) -> dict[str, Any]:
    from ..methods import METHODS

    return METHODS.get(method).typed_params(dict(params))


def check_models(
    models: Sequence[str],
    backend: str | None = None,
    methods: Sequence[str] = (),
    settings: RunSettings | None = None,
) -> None:
    """Each model name resolves (a preset, a path, a hub id), and ``backend`` can load it, place it as
    ``settings`` ask and run ``methods`` on it."""
    from ..backends import BACKENDS
    from ..models import resolve_source

    for model in models:
        resolve_source(model)
    if backend is not None:
        for model in models:
            BACKENDS.get(backend).check_model(model, methods, settings)


def check_jobs(jobs: Sequence[Job], *, known_windows: bool = True) -> dict[str, str]:
    """Each job's method parameters against its length and its model's window (when the window is
    known without loading the model), and the benchmark's own checks of the job. Returns the jobs whose
    method shows the model positions past its window at the job's length (a warning, not an error:
    some settings do so on purpose), by job key."""
    from ..benchmarks import get_benchmark
    from ..methods.resolve import resolve_method
    from ..models import known_window

    windows: dict[str, int | None] = {}
    warnings: dict[str, str] = {}
    for job in jobs:
        if known_windows:
            if job.model not in windows:
                windows[job.model] = known_window(job.model)
            window = windows[job.model]
            if window is not None:
                try:  # the job's parameters already hold its method_configs values (expand_grid)
                    resolved = resolve_method(
                        job.method, window, job.length, params=job.method_params, configs=False
                    )
                except LampeEvalError as err:
                    raise LampeEvalError(f"{job.describe()}: {err}") from err
                if resolved.warning:
                    warnings[job.key()] = f"{job.describe()}: {resolved.warning}"
        get_benchmark(job.benchmark).check_job(job.task, job.length, job.options, job.data_dir)
    return warnings


def prepare_output(out: str | Path) -> Path:
    """Create the results directory and prove it writable, before any work: one line when it is not."""
    import tempfile

    path = Path(out).expanduser()
    for parent in [path, *path.parents]:
        if parent.exists() and not parent.is_dir():
            raise LampeEvalError(
                f"results directory {str(path)!r}: {str(parent)!r} is a file, not a directory"
            )
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-test-"):
            pass
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise LampeEvalError(f"results directory {str(path)!r} is not writable ({reason})") from err
    from .claims import CLAIMS_DIR, check_claims_dir
    from .store import RECORDS_FILE, StoreError

    check_claims_dir(path / CLAIMS_DIR)
    if (path / RECORDS_FILE).exists() and not (path / RECORDS_FILE).is_file():
        raise StoreError(
            f"{path / RECORDS_FILE} is a directory, not a file: move it out of the way "
            "(the results of a run are appended to that file)"
        )
    return path
