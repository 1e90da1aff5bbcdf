"""The records of the table-driven benchmarks that read official data files (LongBench, L-Eval, LongBench v2).

A task's records come from one source, resolved before anything is read (:meth:`TableDrivenBenchmark.
task_source`, which ``data check``, ``data fetch`` and the runner use too), first that applies:

1. ``--opt fixture=true``: the hand-written fixture (package data; explicit, never a fallback);
2. a local file in the official record format: ``--opt <name>_dir=DIR`` or ``--data-dir DIR``, as
   ``DIR/<name>/<task file>``, ``DIR/<task file>`` or under the benchmark's usual sub-folders;
3. a local copy of the hub repository's files (``lampe-eval data fetch --data-dir DIR`` writes it:
   ``DIR/<name>/<the repository's paths>``);
4. the hub repository's files themselves (:mod:`lampe_eval.data.hub`: downloaded into the hub cache, or read
   from it offline), at the commit recorded in every sample's source.

A benchmark declares only what differs: its record format (``schema``), the sub-folders its files usually sit
in (``subdirs``), its file names (``file_names``), the repository files of a task (``hub_files``) and how to
read its records from them (``hub_records``), and which records the official evaluator scores (``keep``).
It declares the options ``fixture`` (:data:`~.datafiles.FIXTURE_OPTION`), ``<name>_dir`` and
``<name>_dataset`` (another repository with the same layout, e.g. a mirror).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from ..data import hub
from ..data.sources import DataSource, HubFiles
from ..errors import MissingDataError
from .base import Benchmark, SampleContext
from .datafiles import (
    Record,
    Schema,
    check_records,
    find_local_file,
    read_records,
    require_fixture,
)


class TableDrivenBenchmark(Benchmark):
    """A benchmark whose samples come from records in its official format, checked when read."""

    schema: ClassVar[Schema]  # the official record format
    subdirs: ClassVar[tuple[str, ...]] = ()  # the usual sub-folders of a data directory

    def file_names(self, task: str) -> list[str]:
        """The names a task's data file goes by, the usual one first."""
        return [f"{task}.jsonl"]

    @abstractmethod
    def hub_files(self, task: str, dataset: str | None) -> HubFiles:
        """The hub repository files that hold the task's records (``dataset``: the ``<name>_dataset``
        option, None for the default repository)."""

    def hub_records(self, task: str, snapshot: hub.Snapshot) -> tuple[list[Record], str]:
        """The task's records from its repository files, and the source label. Default: the one file, JSON
        Lines (a ``.json`` file: one JSON array)."""
        (name, path), *_ = snapshot.paths.items()
        return read_records(path), snapshot.label()

    def keep(self, records: list[Record]) -> list[Record]:
        """The records the official evaluator scores (default: all)."""
        return records

    # ------------------------------------------------------------------------------------ sources
    def task_source(self, task: str, options: Mapping[str, Any], data_dir: str | None) -> DataSource:
        """Where the task's records come from (see the module docstring for the order); a chosen source
        that is missing is a one-line error."""
        if options["fixture"]:
            require_fixture(self.name, task)
            return DataSource(
                self.name, f"{self.name} fixture", "fixture", f"fixtures/{self.name}/{task}.jsonl"
            )
        directory = options[f"{self.name}_dir"]
        local = find_local_file(self.name, None, directory or data_dir, self.file_names(task), self.subdirs)
        if local is not None:
            return DataSource(self.name, f"{self.name}/{task}", "file", str(local))
        files = self.hub_files(task, options[f"{self.name}_dataset"])
        fix = f"lampe-eval data fetch --bench {self.name} --task {task}"
        source = hub.hub_source(self.name, f"{self.name}/{task}", files, directory or data_dir, fix)
        if directory and source.kind == "hub":
            raise MissingDataError(
                f"{self.name}_dir={directory}: neither {self.file_names(task)[0]} nor the repository's "
                f"{files.describe()} found there (docs/benchmarks.md)"
            )
        return source

    def data_sources(
        self, task: str, length: int, options: Mapping[str, Any], data_dir: str | None
    ) -> list[DataSource]:
        return [self.task_source(self.check_task(task), self.typed_options(options), data_dir)]

    def check_job(self, task: str, length: int, options: Mapping[str, Any], data_dir: str | None) -> None:
        """A missing fixture, a missing or bad local file (or cached hub file) is a one-line error before any
        model loads."""
        self.read_records(task, self.typed_options(options), data_dir, offline=True)

    # ------------------------------------------------------------------------------------ records
    def read_records(
        self, task: str, options: Mapping[str, Any], data_dir: str | None, offline: bool = False
    ) -> tuple[list[Record], str] | None:
        """The task's checked records and their source label (``offline``: None when they are on the hub and
        not in its cache yet)."""
        source = self.task_source(task, options, data_dir)
        if source.kind == "fixture":
            path = require_fixture(self.name, task)
            return self.keep(read_records(path, self.schema)), f"fixture:{source.location}"
        if source.kind == "file" and source.hub is None:
            return self.keep(read_records(Path(source.location), self.schema)), f"file:{source.location}"
        assert source.hub is not None
        try:
            snapshot = self._snapshot(source.hub, options, data_dir, offline)
        except MissingDataError as err:
            raise MissingDataError(f"{self.name}/{task}: {err}") from err
        if snapshot is None:
            return None
        records, label = self.hub_records(task, snapshot)
        check_records(records, self.schema, label)
        return self.keep(records), label

    def _snapshot(
        self, files: HubFiles, options: Mapping[str, Any], data_dir: str | None, offline: bool
    ) -> hub.Snapshot | None:
        copies = hub.copy_folders(options[f"{self.name}_dir"] or data_dir, self.name)
        if offline:
            return hub.local_copy(files, copies) or hub.cached(files)
        return hub.read(files, copies=copies)

    def load_records(self, task: str, ctx: SampleContext) -> tuple[list[Record], str]:
        """The job's records and their source (the hub when no local file has them, or a one-line error)."""
        found = self.read_records(task, self.option_values(ctx), ctx.data_dir)
        assert found is not None  # not offline: the hub, or a one-line error
        return found
