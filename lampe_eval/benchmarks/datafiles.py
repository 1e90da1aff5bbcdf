"""Where LongBench / L-Eval records come from: local data files, the Hugging Face hub, or the test fixture.

One function, :func:`load_task_records`, decides for one (benchmark, task), in this order:

1. ``fixture``: the small fixture shipped as package data, ``fixtures/<benchmark>/<task>.jsonl``
   (:mod:`lampe_eval.resources`; explicit, never a silent fallback).
2. A local file in the official record format (JSON Lines, or a ``.json`` array): ``directory``
   (``--opt <benchmark>_dir=DIR``) or ``--data-dir DIR``, as ``DIR/<benchmark>/<file>``, ``DIR/<file>`` or
   ``DIR/<subdir>/<file>`` for the benchmark's usual sub-folders (LongBench's ``data/`` from ``data.zip``,
   L-Eval's ``Closed-ended-tasks/``).
3. The hub through ``datasets`` when it is reachable.

Otherwise a one-line :class:`MissingDataError` says how to provide the data. The caller records the
returned source string in every sample's ``meta["data_source"]``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import resources
from ..errors import MissingDataError
from ..options import Option

# --opt fixture=true: shared by the benchmarks that ship hand-written fixtures
FIXTURE_OPTION = Option("fixture", bool, False, "the tiny hand-written fixture (smoke tests, not numbers)")


def read_jsonl(path: resources.Resource) -> list[dict[str, Any]]:
    """The JSON objects of a JSON Lines file (blank lines skipped)."""
    records: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise MissingDataError(f"{path}:{number}: not valid JSON ({err.msg})") from err
            if not isinstance(record, dict):
                raise MissingDataError(f"{path}:{number}: expected a JSON object per line")
            records.append(record)
    return records


def read_records(path: resources.Resource) -> list[dict[str, Any]]:
    """Records of a data file: a ``.json`` file holding one JSON array of objects (LongBench v2's
    ``data.json``, BABILong's ``qaN/<length>.json``), anything else JSON Lines."""
    if not path.name.endswith(".json"):
        return read_jsonl(path)
    with path.open(encoding="utf-8") as handle:
        try:
            data = json.load(handle)
        except json.JSONDecodeError as err:
            raise MissingDataError(f"{path}: not valid JSON ({err.msg}, line {err.lineno})") from err
    if not isinstance(data, list) or not all(isinstance(record, dict) for record in data):
        raise MissingDataError(f"{path}: expected a JSON array of objects")
    return data


def hub_reachable() -> bool:
    from .ruler.haystack import hub_reachable as reachable

    return reachable()


def fixture_path(benchmark: str, task: str) -> tuple[str, resources.Resource | None]:
    """(relative name, file or None) of a task's hand-written fixture."""
    relative = f"fixtures/{benchmark}/{task}.jsonl"
    return relative, resources.find(relative)


def require_fixture(benchmark: str, task: str) -> resources.Resource:
    """The task's fixture, or a one-line error (checked before any model loads)."""
    relative, path = fixture_path(benchmark, task)
    if path is None:
        raise MissingDataError(f"no {benchmark} fixture for task {task!r} ({relative}, package data)")
    return path


def require_directories(benchmark: str, values: Mapping[str, Any], names: Sequence[str]) -> None:
    """A directory option that is set must name an existing directory (checked before any model loads)."""
    for name in names:
        if values.get(name) is not None and not Path(values[name]).expanduser().is_dir():
            raise MissingDataError(f"{benchmark}: {name}={values[name]} is not a directory")


def load_task_records(
    benchmark: str,
    task: str,
    *,
    fixture: bool,
    directory: str | None,
    data_dir: str | None,
    file_names: Sequence[str],
    subdirs: Sequence[str] = (),
    hub: Callable[[], list[dict[str, Any]]],
    hub_label: str,
) -> tuple[list[dict[str, Any]], str]:
    """Records of one task and where they came from (``fixture:...``, ``file:...``, ``hub:...``)."""
    if fixture:
        return read_jsonl(require_fixture(benchmark, task)), f"fixture:fixtures/{benchmark}/{task}.jsonl"

    explicit = directory
    directory = explicit or data_dir
    if directory:
        root = Path(str(directory)).expanduser()
        for sub in (benchmark, "", *subdirs):
            for name in file_names:
                candidate = root / sub / name if sub else root / name
                if candidate.is_file():
                    return read_records(candidate), f"file:{candidate}"
        if explicit:
            raise MissingDataError(
                f"{benchmark}_dir={directory}: none of {', '.join(file_names)} found there "
                f"(also looked in {', '.join([benchmark, *subdirs])}/)"
            )

    if hub_reachable():
        try:
            return hub(), f"hub:{hub_label}"
        except Exception as err:  # noqa: BLE001 - any hub / datasets failure is reported the same way
            raise MissingDataError(
                f"could not load {hub_label} through datasets: {err}".splitlines()[0]
            ) from err
    where = f" (not in {directory})" if directory else ""
    raise MissingDataError(
        f"{benchmark} task {task!r}: the Hugging Face hub is unreachable and no local file was found{where}; "
        f"pass --data-dir DIR with DIR/{benchmark}/{file_names[0]} in the official format, "
        f"or --opt fixture=true to run on the tiny hand-written fixture"
    )
