"""What a grid reads, worked out before anything runs: each distinct data source of its jobs, and the hub
repositories of its models (``lampe-eval data check`` / ``data fetch``, ``run --dry-run``).

A job's sources come from its benchmark (``Benchmark.data_sources``, resolved by the rules it loads by); a
job whose chosen source is missing (a package not installed, a folder that is not there) gives its one
error line instead. Jobs that read the same source share one entry (the tasks of one archive, say).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..data.sources import DataSource
from ..errors import LampeEvalError
from .jobs import Job


@dataclass
class Need:
    """One distinct source of the grid (or one job's error line), and the jobs that read it."""

    source: DataSource | None
    error: str = ""
    jobs: list[Job] = field(default_factory=list)

    @property
    def benchmark(self) -> str:
        return self.source.benchmark if self.source is not None else self.jobs[0].benchmark

    def tasks(self) -> str:
        """The tasks that read it, in job order: ``qasper, hotpotqa, ...``."""
        return ", ".join(dict.fromkeys(job.task for job in self.jobs))


def data_needs(jobs: Sequence[Job]) -> list[Need]:
    """The grid's distinct data sources in job order (each job's data once: methods and models read the
    same data)."""
    from ..benchmarks import get_benchmark

    needs: dict[object, Need] = {}
    seen: set[tuple[str, str, int, str, str | None]] = set()
    for job in jobs:
        key = (job.benchmark, job.task, job.length, repr(sorted(job.options.items())), job.data_dir)
        if key in seen:
            continue
        seen.add(key)
        try:
            sources = get_benchmark(job.benchmark).data_sources(
                job.task, job.length, job.options, job.data_dir
            )
        except LampeEvalError as err:
            needs.setdefault(("error", str(err)), Need(None, str(err))).jobs.append(job)
            continue
        for source in sources:  # one entry per thing read (what it is for may differ by task)
            needs.setdefault((source.kind, source.location, source.hub), Need(source)).jobs.append(job)
    return list(needs.values())


def hub_models(jobs: Sequence[Job]) -> list[str]:
    """The hub repositories the grid's models load from (presets resolved; local paths and embedded models
    need nothing)."""
    from ..models import is_hub_id, resolve_source

    sources = (resolve_source(model)[0] for model in dict.fromkeys(job.model for job in jobs))
    return list(dict.fromkeys(source for source in sources if is_hub_id(source)))
