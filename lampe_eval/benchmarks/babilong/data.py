"""BABILong's data: the pre-built sets (``RMT-team/babilong`` or local ``qaN/<length>.json`` files) and the
bAbI facts that local generation hides in background text.

bAbI files (``<babi_file>_train.txt`` of ``tasks_1-20_v1-2/en-10k``) are found, first that applies:

1. ``--opt fixture=true``: the hand-written fixture, package data ``fixtures/babilong/<babi_file>_train.txt``
   (a few stories in the bAbI format, qa1-qa10);
2. ``--opt babilong_dir=DIR`` or ``--data-dir DIR``: the extracted archive (``DIR/tasks_1-20_v1-2/en-10k/``,
   ``DIR/en-10k/``, ``DIR/`` itself, each also under ``DIR/babilong/``) or the archive itself
   (``tasks_1-20_v1-2.tar.gz`` / ``.zip``, BABILong's ``data/tasks_1-20_v1-2.zip``);
3. the hub: ``facebook/babi_qa``'s ``data/tasks_1-20_v1-2.tar.gz`` (the bAbI v1.2 archive), downloaded
   into the hub cache or read from it offline.
"""

from __future__ import annotations

import hashlib
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ... import resources
from ...data import hub
from ...data.sources import HubFiles
from ...errors import MissingDataError
from ..datafiles import Field, Schema, check_records, read_records, read_rows
from .config import BabilongConfig, TaskSpec

ARCHIVES = ("tasks_1-20_v1-2.tar.gz", "tasks_1-20_v1-2.zip")


@dataclass(frozen=True)
class BabiSample:
    """One bAbI question with the facts of its story before it (``babilong_utils.TaskDataset``)."""

    facts: tuple[str, ...]
    question: str  # as in the file, e.g. "Where is Mary? " (the trailing space stays, as in BABILong)
    answer: str
    supporting: tuple[int, ...]  # line numbers of the supporting facts in the story


def parse_babi(text: str) -> list[BabiSample]:
    """Every question of a bAbI file, in file order (``get_dataset_df``): a story starts at line number 1;
    a line with a tab is a question (``question<TAB>answer<TAB>supporting line numbers``); a question's
    facts are the story's non-question lines before it."""
    samples: list[BabiSample] = []
    story: list[str] = []
    for number, line in enumerate(text.strip().split("\n"), 1):
        head, _, rest = line.partition(" ")
        try:
            phrase = int(head)
        except ValueError:
            raise MissingDataError(
                f"bAbI line {number}: expected '<number> <text>', got {line[:60]!r}"
            ) from None
        if phrase == 1:
            story = []
        if "\t" not in rest:
            story.append(rest)
            continue
        question, answer_part = rest.split("\t", 1)
        answer, _, refs = answer_part.partition("\t")
        samples.append(BabiSample(tuple(story), question, answer, tuple(int(n) for n in refs.split())))
    return samples


def eligible(samples: list[BabiSample], max_n_facts: int | None) -> list[int]:
    """Indices of the samples with at most ``max_n_facts`` lines counting the question (``create_tasks.py``
    keeps ``slice.shape[0] <= max_n_facts``, a slice being the facts plus the question)."""
    return [i for i, s in enumerate(samples) if max_n_facts is None or len(s.facts) + 1 <= max_n_facts]


# --------------------------------------------------------------------------- bAbI files


@dataclass(frozen=True)
class FactsFile:
    text: str
    source: str  # recorded in every sample: fixture:..., file:..., hub:...

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()[:10]


def _roots(directories: list[str]) -> Iterator[Path]:
    for directory in directories:
        root = Path(directory).expanduser()
        yield root
        yield root / "babilong"
        yield root / "babilong" / "data"  # `data fetch --data-dir`: facebook/babi_qa's data/ archive


def _read_member(archive: Path, member: str) -> str | None:
    """A text member of a .tar.gz or .zip archive (matched by its path's end), or None."""
    if archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive) as handle:
            names = [n for n in handle.namelist() if n.endswith(member)]
            return handle.read(names[0]).decode("utf-8") if names else None
    with tarfile.open(archive, "r:*") as handle:
        for info in handle.getmembers():
            if info.isfile() and info.name.endswith(member):
                data = handle.extractfile(info)
                return data.read().decode("utf-8") if data else None
    return None


def find_local_facts(config: BabilongConfig, spec: TaskSpec, directories: list[str]) -> FactsFile | None:
    """The task's bAbI file in one of ``directories`` (extracted or as the archive), or None."""
    name = f"{spec.babi_file}_{config.babi_split}.txt"
    folder = config.babi_folder  # tasks_1-20_v1-2/en-10k
    for root in _roots(directories):
        for candidate in (root / folder / name, root / Path(folder).name / name, root / name):
            if candidate.is_file():
                return FactsFile(candidate.read_text(encoding="utf-8"), f"file:{candidate}")
        for archive in (root / a for a in ARCHIVES):
            if archive.is_file():
                text = _read_member(archive, f"{folder}/{name}")
                if text is not None:
                    return FactsFile(text, f"file:{archive}:{folder}/{name}")
    return None


def fixture_facts_path(config: BabilongConfig, spec: TaskSpec) -> tuple[str, resources.Resource | None]:
    relative = f"fixtures/babilong/{spec.babi_file}_{config.babi_split}.txt"
    return relative, resources.find(relative)


def babi_files(config: BabilongConfig) -> HubFiles:
    """The bAbI v1.2 archive on the hub."""
    return HubFiles(config.babi_hub_repo, (config.babi_hub_file,))


def hub_facts(config: BabilongConfig, spec: TaskSpec) -> FactsFile:
    """The task's file from the bAbI v1.2 archive on the hub (downloaded once into the hub cache)."""
    snapshot = hub.read(babi_files(config))
    member = f"{config.babi_folder}/{spec.babi_file}_{config.babi_split}.txt"
    text = _read_member(snapshot.path(config.babi_hub_file), member)
    if text is None:
        raise MissingDataError(f"{config.babi_hub_repo}:{config.babi_hub_file} has no {member}")
    return FactsFile(text, snapshot.label(member))


def load_facts(config: BabilongConfig, spec: TaskSpec, fixture: bool, directories: list[str]) -> FactsFile:
    """The bAbI file local generation uses (see the module docstring for the order)."""
    if fixture:
        relative, path = fixture_facts_path(config, spec)
        if path is None:
            raise MissingDataError(f"babilong: no fixture for task {spec.name} ({relative}, package data)")
        return FactsFile(path.read_text(encoding="utf-8"), f"fixture:{relative}")
    found = find_local_facts(config, spec, directories)
    if found is not None:
        return found
    try:
        return hub_facts(config, spec)
    except MissingDataError as err:
        where = f" (not in {', '.join(directories)})" if directories else ""
        raise MissingDataError(
            f"babilong task {spec.name}: no bAbI facts{where}: {err}; or pass --data-dir DIR with "
            f"{config.babi_folder}/{spec.babi_file}_{config.babi_split}.txt (the bAbI v1.2 archive)"
        ) from err


# --------------------------------------------------------------------------- pre-built sets


def find_prebuilt(task: str, name: str, directories: list[str]) -> Path | None:
    """A pre-built file ``qaN/<length name>.json`` (the Hub repository's and ``create_tasks.py``'s layout)
    in one of ``directories``, their ``babilong/`` or ``data/``, or None."""
    for root in _roots(directories):
        for sub in ("", "data"):
            for suffix in (".json", ".jsonl"):
                candidate = root / sub / task / f"{name}{suffix}" if sub else root / task / f"{name}{suffix}"
                if candidate.is_file():
                    return candidate
    return None


# The pre-built sets' record format (RMT-team/babilong's qaN/<length>.json and hub rows).
SCHEMA = Schema(
    "BABILong",
    (
        Field("input", (str,), nonempty=True),
        Field("question", (str,), nonempty=True),
        Field("target", (str,)),
    ),
)


def read_prebuilt(path: Path) -> list[dict[str, Any]]:
    return read_records(path, SCHEMA)


def prebuilt_files(dataset: str, name: str, task: str) -> HubFiles:
    """The data files of ``load_dataset(dataset, <length name>)[<task>]`` (the official runner's read), as
    the repository's README declares them: ``data/qaN/<length>.json`` in ``RMT-team/babilong``."""
    return HubFiles(dataset, config=name, split=task)


def hub_prebuilt(dataset: str, name: str, task: str) -> tuple[list[dict[str, Any]], str]:
    """The records of one pre-built set on the hub (only its files are downloaded), checked, and their
    source label."""
    snapshot = hub.read(prebuilt_files(dataset, name, task))
    records = read_rows(list(snapshot.paths.values()))
    check_records(records, SCHEMA, snapshot.label())
    return records, snapshot.label()
