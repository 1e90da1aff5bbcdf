"""Whether a job's data sources can be read here, and getting them ahead of time (``lampe-eval data check``,
``lampe-eval data fetch``; the runner calls :func:`ensure` for each job before its model loads).

:func:`status` looks without downloading: a local file or package is there or not, a hub source is in the
hub cache or on the hub (with its size and commit), or the one-line error that says what is wrong and how to
fix it. :func:`ensure` makes a source readable: hub files are downloaded into the cache (or into
``local_dir``), everything else must already be there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import LampeEvalError, MissingDataError
from . import hub
from .sources import DataSource


@dataclass(frozen=True)
class Status:
    """What :func:`status` or :func:`ensure` found for one source."""

    source: DataSource
    state: str  # "ready" (local), "cached", "remote" (on the hub, not cached), "fetched", "missing"
    detail: str = ""  # sizes, the commit, or the error line
    size: int = 0  # bytes (hub sources and local files)

    @property
    def ok(self) -> bool:
        return self.state != "missing"


def status(source: DataSource) -> Status:
    """The source's state without downloading anything."""
    try:
        if source.kind == "hub":
            assert source.hub is not None
            probe = hub.probe(source.hub)
            return Status(source, probe.state, f"{probe.where}, commit {probe.commit[:12]}", probe.total)
        return Status(source, "ready", *_local(source))
    except LampeEvalError as err:
        return Status(source, "missing", str(err))


def ensure(source: DataSource, local_dir: Path | None = None, progress: bool = False) -> Status:
    """The source made readable here: hub files downloaded (or found in the cache offline), local ones
    checked; a one-line :class:`MissingDataError` when that cannot be."""
    if source.kind != "hub":
        return Status(source, "ready", *_local(source))
    assert source.hub is not None
    into = local_dir / source.benchmark if local_dir is not None else None
    snapshot = hub.fetch(source.hub, into) if progress else hub.read(source.hub, local_dir=into)
    size = sum(path.stat().st_size for path in snapshot.paths.values())
    where = f"in {into}" if into is not None else "in the hub cache"
    commit = f", commit {snapshot.commit[:12]}" if snapshot.commit else ""
    return Status(source, "fetched", f"{where}{commit}", size)


def ensure_all(sources: Sequence[DataSource]) -> None:
    """Every source readable (the runner, before a job's model loads); the first failure is one line."""
    for source in sources:
        try:
            ensure(source)
        except MissingDataError as err:
            text = str(err) if str(err).startswith(source.what) else f"{source.what}: {err}"
            raise MissingDataError(text) from err


def _local(source: DataSource) -> tuple[str, int]:
    """(detail, bytes) of a source that must already be on this machine, or a one-line error."""
    if source.kind == "generated":
        return "generated", 0
    if source.kind == "fixture":
        from .. import resources

        if resources.find(source.location) is None:
            raise MissingDataError(f"{source.benchmark}: no fixture {source.location} (package data)")
        return "package data", 0
    if source.kind == "corpus":
        from .corpus import check_installed

        check_installed()
        return "the offline book corpus (Debian bible-kjv)", 0
    path = Path(source.location)
    if not path.exists():
        fix = f"; {source.fix}" if source.fix else ""
        raise MissingDataError(f"{source.benchmark}: {source.what}: {path} does not exist{fix}")
    size = path.stat().st_size if path.is_file() else 0
    return ("local file" if path.is_file() else "local folder"), size


def human_size(size: int) -> str:
    """Bytes for a person: 0 B, 812 kB, 114.2 MB, 2.6 GB."""
    value = float(size)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit in ("B", "kB") else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} GB"
