"""The records of the table-driven benchmarks that read official data files (LongBench, L-Eval, LongBench v2).

One implementation finds, reads and checks a task's records (:func:`~.datafiles.load_task_records`: the
fixture, a local file, the hub); a benchmark declares only what differs: its record format (``schema``),
the sub-folders its data usually sits in (``subdirs``), its file names (``file_names``), how to load a
task from the hub (``hub_source``) and which records the official evaluator scores (``keep``). It declares
the options ``fixture`` (:data:`~.datafiles.FIXTURE_OPTION`), ``<name>_dir`` and ``<name>_dataset``.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from .base import Benchmark, SampleContext
from .datafiles import Record, Schema, load_task_records

HubLoader = Callable[[], list[Record]]


class TableDrivenBenchmark(Benchmark):
    """A benchmark whose samples come from records in its official format, checked when read."""

    schema: ClassVar[Schema]  # the official record format
    subdirs: ClassVar[tuple[str, ...]] = ()  # the usual sub-folders of a data directory

    def file_names(self, task: str) -> list[str]:
        """The names a task's data file goes by, the usual one first."""
        return [f"{task}.jsonl"]

    @abstractmethod
    def hub_source(self, task: str, dataset: str | None) -> tuple[HubLoader, str]:
        """How to load the task's records from the hub, and the label of that source (``dataset``: the
        ``<name>_dataset`` option, None for the default)."""

    def keep(self, records: list[Record]) -> list[Record]:
        """The records the official evaluator scores (default: all)."""
        return records

    def check_job(self, task: str, length: int, options: Mapping[str, Any], data_dir: str | None) -> None:
        """A missing fixture, a missing or bad local file is a one-line error before any model loads."""
        self.read_records(task, self.typed_options(options), data_dir, offline=True)

    def read_records(
        self, task: str, options: Mapping[str, Any], data_dir: str | None, offline: bool = False
    ) -> tuple[list[Record], str] | None:
        """The task's checked records and their source (``offline``: None when the hub would give them)."""
        hub, hub_label = self.hub_source(task, options[f"{self.name}_dataset"])
        found = load_task_records(
            self.name,
            task,
            fixture=options["fixture"],
            directory=options[f"{self.name}_dir"],
            data_dir=data_dir,
            file_names=self.file_names(task),
            subdirs=self.subdirs,
            hub=hub,
            hub_label=hub_label,
            schema=self.schema,
            offline=offline,
        )
        if found is None:
            return None
        records, source = found
        return self.keep(records), source

    def load_records(self, task: str, ctx: SampleContext) -> tuple[list[Record], str]:
        """The job's records and their source (the hub when no local file has them, or a one-line error)."""
        found = self.read_records(task, self.option_values(ctx), ctx.data_dir)
        assert found is not None  # not offline: the hub, or a one-line error
        return found
