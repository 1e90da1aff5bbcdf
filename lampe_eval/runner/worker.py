"""One worker: keeps one model loaded behind a backend, runs work units and yields events
(:mod:`.events`: records included).

The same :class:`Worker` runs in the main process (one CPU worker), in a spawned process per GPU
(:mod:`.pool`) and inside a Ray actor (:mod:`.ray_backend`).
"""

from __future__ import annotations

import gc
import math
import subprocess
import time
import traceback
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..backends import BACKENDS, BaseBackend
from ..backends.rounds import Evaluated
from ..benchmarks.base import Benchmark, Sample
from ..errors import BackendGone
from ..records import SampleRecord, describe_identity, earlier_identity, engine_identity
from ..settings import DEFAULT_BACKEND, RunSettings
from .events import Computed, Event, Failed, Finished, Loading, Skipped, Started, Warned
from .jobs import Job, WorkUnit

if TYPE_CHECKING:
    from ..methods.resolve import ResolvedMethod


def git_revision() -> str:
    """Short revision of this checkout, ``+dirty`` when tracked files differ; ``unknown`` when the package
    is not a git checkout (an installed wheel: ``versions`` then names the release)."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return "unknown"
    try:
        rev = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
        if not rev:
            return "unknown"
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        return rev + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def library_versions() -> dict[str, str]:
    import importlib.metadata

    out: dict[str, str] = {}
    for name in ("lampe-eval", "torch", "transformers", "datasets"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


def unit_id(unit: WorkUnit) -> str:
    return f"{unit.job.key()}/{unit.shard}"


@dataclass
class WorkerConfig:
    """Everything a worker needs besides its units; picklable (``settings.load`` must be a module-level
    function). ``settings`` are the run's, shared by every worker; ``device`` and ``device_map`` are where
    this worker runs (a GPU worker: ``cuda``, its group of GPUs spread by accelerate)."""

    settings: RunSettings = field(default_factory=RunSettings)
    device: str | None = None
    device_map: str | None = None  # "auto": the model spread over the worker's GPUs (accelerate)
    imports: tuple[str, ...] = ()  # modules to import first (they may register benchmarks/methods)
    revision: str | None = None  # git revision to record (the driver's); computed when None
    warned: frozenset[str] = frozenset()  # job keys whose window warning the driver already gave


class Worker:
    def __init__(self, config: WorkerConfig, name: str = "worker-0") -> None:
        from .checks import import_plugins

        self.config = config
        self.name = name
        import_plugins(config.imports)
        self.revision = config.revision or git_revision()
        self.versions = library_versions()
        self.backend: BaseBackend | None = None
        self.model_name: str | None = None
        self.gone: str | None = None  # why the backend's engine or server is gone (BackendGone)

    def load(self, model: str) -> BaseBackend:
        """The backend with ``model`` loaded (kept across units of the same model): loaded by the backend's
        class, or by the run's own ``load`` hook (tests, notebooks)."""
        if self.model_name != model or self.backend is None:
            self.unload()
            settings = self.config.settings
            backend = BACKENDS.get(settings.backend)
            if settings.load is not None:
                lm = settings.load(model)
            else:
                lm = backend.load(model, settings, self.config.device, self.config.device_map)
            self.backend = backend.create(lm, settings)
            self.model_name = model
        return self.backend

    def unload(self) -> None:
        if self.backend is None:
            return
        self.backend.close()  # an engine with processes of its own stops them
        self.backend = None
        self.model_name = None
        gc.collect()
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except ImportError:  # pragma: no cover
            pass

    def run(self, unit: WorkUnit) -> Iterator[Event]:
        """Events for one unit; a failure becomes a ``fail`` event (the worker stays usable)."""
        uid = unit_id(unit)
        if self.gone is not None:  # not tried again against what is gone
            yield Failed(uid, f"not run: {self.gone}", describe=unit.describe())
            return
        try:
            yield from self._run(unit, uid)
            yield Finished(uid)
        except Exception as err:  # noqa: BLE001 - reported to the driver, which keeps going
            message = failure_line(err)
            if isinstance(err, BackendGone):
                self.gone = message
            yield Failed(uid, message, traceback.format_exc(), unit.describe())

    def _run(self, unit: WorkUnit, uid: str) -> Iterator[Event]:
        """The unit's samples that have no stored record, through the backend: each sample's rounds of
        requests (batched with other samples' by the backend's keys), its score, its record."""
        from ..backends.rounds import evaluate_samples
        from ..benchmarks import SampleContext, get_benchmark
        from ..benchmarks.sample_cache import tokenizer_fingerprint

        job = unit.job
        bench = get_benchmark(job.benchmark)
        bench.check_task(job.task)
        prepare_data(bench, job)  # before the model: a data error never costs a model load
        if self.model_name != job.model:
            yield Loading(self.name, job.model)
        backend = self.load(job.model)
        lm = backend.lm
        resolved = _resolve(job, backend)
        ctx = SampleContext(
            lm=lm,
            length=job.length,
            limit=job.limit,
            seed=job.seed,
            data_dir=job.data_dir,
            options=dict(job.options),
        )
        total = math.ceil(job.limit / unit.shards) if job.limit else None
        yield Started(uid, unit.describe(), total, self.name)
        if resolved.warning and job.key() not in self.config.warned:
            yield Warned(uid, f"{unit.describe()}: {resolved.warning}")
        engine = {**backend.describe(), "batch_size": self.config.settings.batch_size}
        stamp = RecordStamp(resolved.params, resolved.label, engine, tokenizer_fingerprint(lm.tokenizer))
        engines = accepted_engines(engine, self.config.settings.dtype)
        pending = _Pending(unit, engines, stamp.tokenizer)

        def skips() -> Iterator[Event]:
            while pending.skipped:
                yield Skipped(uid, pending.skipped.pop(0))

        with backend.install(resolved.method):
            todo = pending.samples(bench.samples(job.task, ctx))
            for done in evaluate_samples(backend, todo, lambda item: bench.rounds(item[1], ctx)):
                yield from skips()
                index, sample, fingerprint = done.item
                yield self._record(bench, uid, job, stamp, index, sample, fingerprint, done)
            yield from skips()
        for other, count in pending.elsewhere.items():  # one line per engine the stored records came from
            made = f"{count} stored sample(s) made with {describe_identity(other)}"
            now = describe_identity(engine_identity(engine))
            yield Warned(uid, f"{unit.describe()}: {made} are computed again with {now}")

    def _record(
        self,
        bench: Benchmark,
        uid: str,
        job: Job,
        stamp: RecordStamp,
        index: int,
        sample: Sample,
        fingerprint: str,
        done: Evaluated[tuple[int, Sample, str]],
    ) -> Computed:
        """The ``record`` event of one evaluated sample; its ``seconds`` is its share of the time of the
        batches its requests ran in."""
        output = done.output
        record = SampleRecord(
            key=job.sample_key(sample.sample_id),
            job_key=job.key(),
            sample_id=sample.sample_id,
            index=index,
            model=job.model,
            method=job.method,
            benchmark=job.benchmark,
            task=job.task,
            length=job.length,
            scores=bench.score(sample, output),
            resolved_params=stamp.params,
            method_label=stamp.label,
            variant_params=job.overrides,
            seed=job.seed,
            limit=job.limit,
            options=job.options,
            data_dir=job.data_dir,
            sample_fingerprint=fingerprint,
            prompt_tokens=output.get("prompt_tokens", sample.meta.get("prompt_tokens")),
            prompt_hash=sample.prompt_hash(),
            prompt_excerpt=sample.prompt_excerpt(),
            references=sample.references,
            output=output,
            seconds=done.seconds,
            batch_size=done.batch_size,
            time=time.time(),
            git=self.revision,
            versions=self.versions,
            worker=self.name,
            device=str(stamp.engine["device"]),
            engine=stamp.engine,
            meta={k: v for k, v in sample.meta.items() if k != "stop"},
        )
        return Computed(uid, record)


def prepare_data(bench: Benchmark, job: Job) -> None:
    """The job's data made readable here (hub files downloaded, or found in the cache offline) and checked
    against its format: a one-line error, before any model loads."""
    from ..data.check import ensure_all

    ensure_all(bench.data_sources(job.task, job.length, job.options, job.data_dir))
    bench.check_job(job.task, job.length, job.options, job.data_dir)


def _resolve(job: Job, backend: BaseBackend) -> ResolvedMethod:
    """The job's method on the loaded model: its window, and its own RoPE for a position method."""
    from ..methods import METHODS
    from ..methods.resolve import resolve_method

    return resolve_method(
        job.method,
        backend.lm.pretraining_window,
        job.length,
        params=job.method_params,
        configs=False,  # job.method_params already holds the method_configs values
        base=backend.rope_base() if METHODS.get(job.method).kind == "position" else None,
    )


class _Pending:
    """A unit's samples still to compute: those of its shard without a record from an accepted engine;
    the others' keys are kept (``skipped``), and the engines of stored records computed again are
    counted (``elsewhere``)."""

    def __init__(self, unit: WorkUnit, engines: set[str], tokenizer: str) -> None:
        self.unit, self.engines, self.tokenizer = unit, engines, tokenizer
        self.skipped: list[str] = []
        self.elsewhere: dict[str, int] = {}

    def samples(self, samples: Iterable[Sample]) -> Iterator[tuple[int, Sample, str]]:
        unit = self.unit
        for index, sample in enumerate(samples):
            if not unit.takes(index):
                continue
            fingerprint = sample.fingerprint(self.tokenizer)
            sample_id = str(sample.sample_id)
            if unit.finished(sample_id, fingerprint, self.engines):
                self.skipped.append(unit.job.sample_key(sample.sample_id))
                continue
            other = unit.other_engine(sample_id, fingerprint, self.engines)
            if other is not None:
                self.elsewhere[other] = self.elsewhere.get(other, 0) + 1
            yield index, sample, fingerprint


def failure_line(err: Exception) -> str:
    """One line for a failed unit: what is wrong (a LampeEvalError says it in words, so its class name is
    left out), else the exception's class and message."""
    from ..errors import LampeEvalError

    text = str(err) if isinstance(err, LampeEvalError) and str(err) else f"{type(err).__name__}: {err}"
    return (text.splitlines() or [type(err).__name__])[0]


def accepted_engines(engine: dict[str, Any], dtype_setting: str | None) -> set[str]:
    """The engine identities whose records this run reuses: its own, and, when it runs the automatic
    kernel choice, the records made with it before their kernels were spelled out (an engine of its own's
    ``earlier_identity``) and the schema-1 records of its device type when it also runs with the other
    defaults they were made with (the default backend, the device's default dtype)."""
    from ..attention import kernels

    accepted = {engine_identity(engine)}
    if kernels.override() != "auto":
        return accepted
    earlier = earlier_identity(engine)
    if earlier:
        accepted.add(earlier)
    if engine.get("backend") == DEFAULT_BACKEND and dtype_setting in (None, "auto"):
        accepted.add(engine_identity(None, str(engine.get("device"))))
    return accepted


@dataclass(frozen=True)
class RecordStamp:
    """What every record of one unit shares: the resolved method, the engine, the tokenizer."""

    params: dict[str, Any]
    label: str
    engine: dict[str, Any]
    tokenizer: str
