"""One worker: keeps one model loaded, runs work units and yields events (records included).

The same :class:`Worker` runs in the main process (one CPU worker), in a spawned process per GPU
(:mod:`.pool`) and inside a Ray actor (:mod:`.ray_backend`). Events are plain dicts::

    {"event": "load",   "worker": name, "model": model}
    {"event": "start",  "unit": uid, "describe": text, "total": n or None, "worker": name}
    {"event": "record", "unit": uid, "record": {...}}         # a finished sample, not yet stored
    {"event": "skip",   "unit": uid, "key": key}               # a sample already in the store
    {"event": "warn",   "unit": uid, "message": one line}      # e.g. positions past the window
    {"event": "finish", "unit": uid}
    {"event": "fail",   "unit": uid, "error": one line, "traceback": text}

Whoever consumes ``record`` events appends them to the store and passes on a lighter ``sample``
event (``{"event": "sample", "unit": uid, "key": ..., "scores": {...}, "seconds": s}``).
"""

from __future__ import annotations

import gc
import math
import subprocess
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..models import LoadedModel
from .jobs import WorkUnit

Event = dict[str, Any]


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
    """Everything a worker needs besides its units; picklable (``load`` must be a module-level function)."""

    device: str | None = None
    dtype: str | None = None
    device_map: str | None = None  # "auto": the model spread over the worker's GPUs (accelerate)
    batch_size: int = 1  # samples of one job with equal token counts evaluated together
    load: Callable[[str], LoadedModel] | None = None
    imports: tuple[str, ...] = ()  # modules to import first (they may register benchmarks/methods)
    revision: str | None = None  # git revision to record (the driver's); computed when None
    warned: frozenset[str] = frozenset()  # job keys whose window warning the driver already gave


class Worker:
    def __init__(self, config: WorkerConfig, name: str = "worker-0") -> None:
        from .experiment import import_plugins

        self.config = config
        self.name = name
        import_plugins(config.imports)
        self.revision = config.revision or git_revision()
        self.versions = library_versions()
        self.lm: LoadedModel | None = None
        self.model_name: str | None = None

    def load(self, model: str) -> LoadedModel:
        if self.model_name != model or self.lm is None:
            self.unload()
            if self.config.load is not None:
                self.lm = self.config.load(model)
            else:
                from ..models import load_model

                self.lm = load_model(
                    model,
                    device=self.config.device,
                    dtype=self.config.dtype,
                    device_map=self.config.device_map,
                )
            self.model_name = model
        return self.lm

    def unload(self) -> None:
        if self.lm is None:
            return
        self.lm = None
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
        try:
            if self.model_name != unit.job.model:
                yield {"event": "load", "worker": self.name, "model": unit.job.model}
            yield from self._run(unit, uid)
            yield {"event": "finish", "unit": uid}
        except Exception as err:  # noqa: BLE001 - reported to the driver, which keeps going
            message = f"{type(err).__name__}: {err}".splitlines()[0]
            yield {"event": "fail", "unit": uid, "error": message, "traceback": traceback.format_exc()}

    def _run(self, unit: WorkUnit, uid: str) -> Iterator[Event]:
        from ..benchmarks import SampleContext, get_benchmark
        from ..benchmarks.sample_cache import tokenizer_fingerprint
        from ..methods import apply_method, create_method

        job = unit.job
        lm = self.load(job.model)
        bench = get_benchmark(job.benchmark)
        bench.check_task(job.task)
        method = create_method(job.method, lm.pretraining_window, job.length, **job.method_params)
        labels = {"method_params": method.params(), "method_label": method.label()}
        ctx = SampleContext(
            lm=lm,
            length=job.length,
            limit=job.limit,
            seed=job.seed,
            data_dir=job.data_dir,
            options=dict(job.options),
        )
        total = math.ceil(job.limit / unit.shards) if job.limit else None
        yield {
            "event": "start",
            "unit": uid,
            "describe": unit.describe(),
            "total": total,
            "worker": self.name,
        }
        warning = None if job.key() in self.config.warned else window_warning(lm, method, job.length)
        if warning:
            yield {"event": "warn", "unit": uid, "message": f"{unit.describe()}: {warning}"}
        tokenizer = tokenizer_fingerprint(lm.tokenizer)
        # (token count, generation budget) -> samples waiting for a batch; the budget too, since a method
        # may decide on prompt + budget (LaMPE's identity_within_window): a batch must not change it
        pending: dict[tuple[int, int], list[tuple[int, Any, str]]] = {}
        with apply_method(lm.model, method, window=lm.pretraining_window):
            for index, sample in enumerate(bench.samples(job.task, ctx)):
                if not unit.takes(index):
                    continue
                fingerprint = sample.fingerprint(tokenizer)
                if unit.finished(str(sample.sample_id), fingerprint):
                    yield {"event": "skip", "unit": uid, "key": job.sample_key(sample.sample_id)}
                    continue
                size = bench.batch_length(lm, sample) if self.config.batch_size > 1 else None
                if size is None:
                    yield from self._evaluate(
                        bench, lm, ctx, uid, job, labels, [(index, sample, fingerprint)]
                    )
                    continue
                key = (size, sample.max_new_tokens)
                group = pending.setdefault(key, [])
                group.append((index, sample, fingerprint))
                if len(group) == self.config.batch_size:
                    yield from self._evaluate(bench, lm, ctx, uid, job, labels, pending.pop(key))
            for group in pending.values():  # what is left: batches smaller than the batch size
                yield from self._evaluate(bench, lm, ctx, uid, job, labels, group)

    def _evaluate(
        self,
        bench: Any,
        lm: LoadedModel,
        ctx: Any,
        uid: str,
        job: Any,
        labels: dict[str, Any],
        group: list[tuple[int, Any, str]],
    ) -> Iterator[Event]:
        """Evaluate samples of one token count together (one alone: ``evaluate``) and yield their records;
        each sample's ``seconds`` is its share of the batch's time."""
        start = time.perf_counter()
        if len(group) == 1:
            outputs = [bench.evaluate(lm, group[0][1], ctx)]
        else:
            outputs = bench.evaluate_batch(lm, [sample for _, sample, _ in group], ctx)
        seconds = (time.perf_counter() - start) / len(group)
        for (index, sample, fingerprint), output in zip(group, outputs, strict=True):
            scores = bench.score(sample, output)
            prompt_tokens = output.get("prompt_tokens", sample.meta.get("prompt_tokens"))
            record = {
                "key": job.sample_key(sample.sample_id),
                "job_key": job.key(),
                "sample_id": sample.sample_id,
                "index": index,
                "model": job.model,
                "method": job.method,
                **labels,
                "variant_params": job.overrides,
                "benchmark": job.benchmark,
                "task": job.task,
                "length": job.length,
                "seed": job.seed,
                "limit": job.limit,
                "options": job.options,
                "data_dir": job.data_dir,
                "sample_fingerprint": fingerprint,
                "prompt_tokens": prompt_tokens,
                "prompt_hash": sample.prompt_hash(),
                "prompt_excerpt": sample.prompt_excerpt(),
                "references": sample.references,
                "output": output,
                "scores": scores,
                "seconds": seconds,
                "batch_size": len(group),
                "time": time.time(),
                "git": self.revision,
                "versions": self.versions,
                "worker": self.name,
                "device": str(lm.device),
                "meta": {k: v for k, v in sample.meta.items() if k != "stop"},
            }
            yield {"event": "record", "unit": uid, "record": record}


def window_warning(lm: Any, method: Any, length: int) -> str | None:
    """The method's warning about positions past the window (None for frequency methods, rope)."""
    from ..methods.base import beyond_window_warning
    from ..methods.patch import rope_base

    if method.kind != "position":
        return None
    return beyond_window_warning(method, rope_base(lm.model, lm.pretraining_window), length)
