"""Files of Hugging Face hub repositories, read the way the repositories hold them today: exact files
through ``huggingface_hub`` (its cache, ``HF_HOME``, ``HF_ENDPOINT``, ``HF_TOKEN`` and ``HF_HUB_OFFLINE``
apply), never a dataset loading script (``datasets`` >= 4 refuses those).

- :func:`read` gives the files on this machine and the commit they are from: downloaded when the hub is
  reachable (only what changed), else from the hub cache; the commit goes into every sample's source, so a
  dataset updated on the hub is computed again instead of mixed with the old one.
- :func:`probe` says, without downloading, whether the files are cached or on the hub (with their sizes).
- :func:`fetch` is :func:`read` with progress bars, into the cache or into a folder (``--data-dir``).

Every failure is one :class:`~lampe_eval.errors.MissingDataError` line naming the repository, the cause and
the fix (gated: accept the license and set ``HF_TOKEN``; offline and not cached: ``lampe-eval data fetch``).
"""

from __future__ import annotations

import fnmatch
import os
import re
import socket
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

import yaml

from ..errors import MissingDataError
from .sources import DataSource, HubFiles

COMMIT = re.compile(r"^[0-9a-f]{40}$")
MODEL_OFFLINE_FIX = (
    "run `lampe-eval data fetch` with the same arguments where the hub is reachable (same HF_HOME), or give "
    "--model a local copy of it"
)
OFFLINE_FIX = (
    "run `lampe-eval data fetch` with the same arguments where the hub is reachable (same HF_HOME), "
    "or pass --data-dir DIR with the repository's files (docs/data.md)"
)


@dataclass(frozen=True)
class Snapshot:
    """Files of one repository at one commit, on this machine."""

    files: HubFiles
    commit: str  # the 40-hex commit the files are from ("" when unknown: a --data-dir copy)
    paths: dict[str, Path]  # path in the repository -> local file

    def label(self, member: str = "") -> str:
        """``hub:<repo>@<commit12>:<file>[/<member>]`` as records name the source (a local copy:
        ``file:<folder>/<file>[/<member>]``)."""
        names = ",".join(self.paths) + (f"/{member}" if member else "")
        if not self.commit:
            folder = next(iter(self.paths.values())).parents[len(Path(next(iter(self.paths))).parts) - 1]
            return f"file:{folder}/{names}"
        return f"hub:{self.files.repo}@{self.commit[:12]}:{names}"

    def path(self, name: str) -> Path:
        return self.paths[name]


@dataclass(frozen=True)
class Probe:
    """What :func:`probe` found: ``cached`` or ``remote``, the commit, and the bytes per file."""

    state: str
    commit: str
    sizes: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.sizes.values())

    @property
    def where(self) -> str:
        return "in the hub cache" if self.state == "cached" else "on the hub, not cached"


def offline() -> bool:
    """Whether the hub is switched off (``HF_HUB_OFFLINE=1``, in the environment or as huggingface_hub read
    it at import)."""
    from huggingface_hub import constants

    from ..options import TRUE

    return bool(constants.HF_HUB_OFFLINE) or os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in TRUE


def endpoint() -> str:
    from huggingface_hub import constants

    return str(constants.ENDPOINT).rstrip("/")


def page(files: HubFiles) -> str:
    """The repository's page on the hub this process talks to."""
    kind = "" if files.repo_type == "model" else f"{files.repo_type}s/"
    return f"{endpoint()}/{kind}{files.repo}"


def failure(files: HubFiles, err: BaseException, wanted: str = "") -> MissingDataError:
    """One line for any failure to reach or read ``files`` (the hub client's errors, by their class)."""
    from huggingface_hub import errors

    what = wanted or files.repo
    if isinstance(err, errors.GatedRepoError):
        return MissingDataError(
            f"{what}: the repository is gated; accept the license at {page(files)} and set HF_TOKEN"
        )
    if isinstance(err, errors.RepositoryNotFoundError):
        return MissingDataError(
            f"{what}: no such repository on {endpoint()} (check the name; a private one needs HF_TOKEN)"
        )
    if isinstance(err, errors.RevisionNotFoundError):
        return MissingDataError(f"{what}: no revision {files.revision!r} in the repository")
    if isinstance(err, (errors.LocalEntryNotFoundError, errors.OfflineModeIsEnabled)):
        state = "HF_HUB_OFFLINE is set" if offline() else "the hub is unreachable"
        fix = OFFLINE_FIX if files.repo_type == "dataset" else MODEL_OFFLINE_FIX
        return MissingDataError(f"{what}: not in the hub cache and {state}; {fix}")
    if isinstance(err, errors.EntryNotFoundError):
        return MissingDataError(
            f"{what}: the repository has no such file at {files.revision} (its layout changed? "
            "docs/benchmarks.md lists the files lampe-eval reads; --data-dir DIR with the files works too)"
        )
    text = (str(err).strip().splitlines() or [type(err).__name__])[0]
    return MissingDataError(f"{what}: {type(err).__name__}: {text}")


def reachable() -> bool:
    """Whether to ask the hub at all (False offline or when no connection opens: then the cache only)."""
    return not offline() and hub_reachable()


def hub_reachable(timeout: float = 3.0) -> bool:
    """False when the hub is switched off or no connection to it opens (checked once per process; a proxy
    or an ``HF_ENDPOINT`` mirror is trusted: the client then says what fails)."""
    return _hub_reachable(timeout)


@lru_cache(maxsize=1)
def _hub_reachable(timeout: float) -> bool:
    from ..options import TRUE

    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        if os.environ.get(var, "").strip().lower() in TRUE:
            return False
    if any(os.environ.get(var) for var in ("HTTPS_PROXY", "https_proxy", "HF_ENDPOINT")):
        return True
    try:
        with socket.create_connection(("huggingface.co", 443), timeout=timeout):
            return True
    except OSError:
        return False


# ------------------------------------------------------------------------------------------ the cache
def _repo_folder(files: HubFiles) -> Path:
    """The repository's folder in the hub cache (``datasets--org--name``)."""
    from huggingface_hub import constants
    from huggingface_hub.file_download import repo_folder_name

    return Path(constants.HF_HUB_CACHE) / repo_folder_name(repo_id=files.repo, repo_type=files.repo_type)


def cached_commit(files: HubFiles) -> str | None:
    """The commit the cache holds for the revision (``refs/<revision>``, or the revision itself)."""
    if COMMIT.match(files.revision):
        return files.revision
    ref = _repo_folder(files) / "refs" / files.revision
    try:
        commit = ref.read_text().strip()
    except OSError:
        return None
    return commit if COMMIT.match(commit) else None


def _snapshot_folder(files: HubFiles, commit: str) -> Path:
    return _repo_folder(files) / "snapshots" / commit


def cached(files: HubFiles) -> Snapshot | None:
    """The files from the hub cache, all from one commit, or None when any is missing."""
    commit = cached_commit(files)
    if commit is None:
        return None
    folder = _snapshot_folder(files, commit)
    names = _selected(files, _tree_of_folder(folder), partial(_card_of, folder))
    paths = {name: folder / name for name in names}
    if not names or not all(path.is_file() for path in paths.values()):
        return None
    return Snapshot(files, commit, paths)


def _card_of(folder: Path) -> dict[str, Any]:
    return front_matter(_read_or_none(folder / README))


def _read_or_none(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None


def _tree_of_folder(folder: Path) -> list[str]:
    if not folder.is_dir():
        return []
    return sorted(str(p.relative_to(folder).as_posix()) for p in folder.rglob("*") if p.is_file())


def _matching(names: list[str], pattern: str | None) -> list[str]:
    return sorted(n for n in names if pattern is not None and fnmatch.fnmatchcase(n, pattern))


README = "README.md"
DATA_SUFFIXES = (".parquet", ".json", ".jsonl")


def _selected(files: HubFiles, tree: list[str], card: Callable[[], Mapping[str, Any]]) -> list[str]:
    """The paths ``files`` names among the repository's ``tree``: its exact paths, its pattern's matches,
    or its split's data files (the README's ``configs:``, else the usual ``<split>-*`` file names)."""
    if files.paths:
        return list(files.paths)
    if files.split is None:
        return _matching(tree, files.pattern)
    patterns = split_patterns(card(), files.config or "default", files.split)
    if not patterns:  # no configs: the default layout datasets infers (data/<split>-*.parquet and kin)
        patterns = [f"{files.split}-*", f"{files.split}.*", f"data/{files.split}-*", f"data/{files.split}.*"]
    found = {n for p in patterns for n in _matching(tree, p) if n.endswith(DATA_SUFFIXES)}
    return sorted(found)


def front_matter(readme: str | None) -> dict[str, Any]:
    """A dataset card's YAML front matter ({} when it has none)."""
    if not readme or not readme.startswith("---") or readme.count("---") < 2:
        return {}
    try:
        card = yaml.safe_load(readme.split("---", 2)[1]) or {}
    except yaml.YAMLError:
        return {}
    return card if isinstance(card, dict) else {}


def split_patterns(card: Mapping[str, Any], config: str, split: str) -> list[str]:
    """The path patterns of one split of one config in a dataset card's ``configs:`` front matter."""
    for entry in card.get("configs") or []:
        if not isinstance(entry, dict) or str(entry.get("config_name", "default")) != config:
            continue
        data_files = entry.get("data_files") or []
        if isinstance(data_files, (str, dict)):
            data_files = [data_files]
        out: list[str] = []
        for item in data_files:
            if isinstance(item, dict) and str(item.get("split", "train")) == split:
                paths = item.get("path")
                out.extend([paths] if isinstance(paths, str) else list(paths or []))
        return [str(p) for p in out]
    return []


def copy_folders(data_dir: str | Path | None, benchmark: str) -> list[Path]:
    """Where ``lampe-eval data fetch --data-dir DIR`` puts a benchmark's repository files
    (``DIR/<benchmark>``), and ``DIR`` itself (a copy of the repository made by hand)."""
    if not data_dir:
        return []
    root = Path(data_dir).expanduser()
    return [root / benchmark, root]


def hub_source(
    benchmark: str, what: str, files: HubFiles, data_dir: str | Path | None, fix: str = ""
) -> DataSource:
    """The source of ``files``: their copy under ``data_dir`` when it has one (kind ``file``), else the
    hub."""
    copy = local_copy(files, copy_folders(data_dir, benchmark))
    if copy is not None:
        return DataSource(benchmark, what, "file", copy.label().removeprefix("file:"), hub=files)
    return DataSource(
        benchmark, what, "hub", files.repo, hub=files, fix=fix or f"lampe-eval data fetch --bench {benchmark}"
    )


def local_copy(files: HubFiles, folders: list[Path]) -> Snapshot | None:
    """The files in a plain copy of the repository (``lampe-eval data fetch --data-dir``: the repository's
    layout under a folder), the first folder that has them all; commit "" (a copy says no commit)."""
    for folder in folders:
        if not folder.is_dir():
            continue
        tree = [] if files.paths else _tree_of_folder(folder)
        names = _selected(files, tree, partial(_card_of, folder))
        paths = {name: folder / name for name in names}
        if names and all(path.is_file() for path in paths.values()):
            return Snapshot(files, "", paths)
    return None


# ------------------------------------------------------------------------------------------ the hub
def _api() -> Any:
    from huggingface_hub import HfApi

    return HfApi(endpoint=endpoint())


def remote_commit(files: HubFiles) -> str:
    """The commit the hub's revision points at now (one API call)."""
    info = _api().repo_info(files.repo, revision=files.revision, repo_type=files.repo_type)
    return str(info.sha)


def remote_names(files: HubFiles, commit: str, *, keep_card: bool = True) -> list[str]:
    """The paths in the repository that ``files`` names (its tree and card read from the hub). A split's
    files come from the card's front matter: ``keep_card`` downloads README.md into the cache (so that an
    offline read finds the same files), else the hub's parsed copy of it is asked for (nothing stored)."""
    if files.paths:
        return list(files.paths)
    api = _api()
    tree = api.list_repo_tree(files.repo, recursive=True, revision=commit, repo_type=files.repo_type)
    names = [entry.path for entry in tree if type(entry).__name__ == "RepoFile"]

    def card() -> dict[str, Any]:
        if README not in names:
            return {}
        if keep_card:
            return front_matter(_download(files, README, commit, None, False).read_text(encoding="utf-8"))
        info = api.repo_info(files.repo, revision=commit, repo_type=files.repo_type)
        data = getattr(info, "card_data", None)
        return dict(data.to_dict()) if data is not None else {}

    found = _selected(files, names, card)
    if not found:
        raise MissingDataError(
            f"{files.describe()}: no such data files at {commit[:12]} (the repository's layout changed? "
            "docs/benchmarks.md lists the files lampe-eval reads)"
        )
    return found


def probe(files: HubFiles) -> Probe:
    """Cached (with sizes), else what the hub holds (commit, sizes), without downloading; one line when
    neither."""
    snapshot = cached(files)
    if snapshot is not None:
        sizes = {name: path.stat().st_size for name, path in snapshot.paths.items()}
        return Probe("cached", snapshot.commit, sizes)
    if not reachable():
        raise failure(files, _offline_error(), files.describe())
    try:
        commit = remote_commit(files)
        names = remote_names(files, commit, keep_card=False)
        infos = _api().get_paths_info(files.repo, names, revision=commit, repo_type=files.repo_type)
    except MissingDataError:
        raise
    except Exception as err:  # noqa: BLE001 - any hub failure is one line
        raise failure(files, err, files.describe()) from err
    sizes = {info.path: int(getattr(info, "size", 0) or 0) for info in infos}
    missing = [name for name in names if name not in sizes]
    if missing:
        raise failure(files, _entry_missing(files, missing[0]), missing[0])
    return Probe("remote", commit, sizes)


def _offline_error() -> Exception:
    from huggingface_hub import errors

    return errors.LocalEntryNotFoundError("not cached")


def _entry_missing(files: HubFiles, name: str) -> Exception:
    from huggingface_hub import errors

    return errors.EntryNotFoundError(f"{files.repo} has no {name}")


def read(
    files: HubFiles, *, local_dir: Path | None = None, progress: bool = False, copies: Sequence[Path] = ()
) -> Snapshot:
    """The files on this machine, downloaded when the hub is reachable (only what changed), else from the
    cache; all from one commit. ``copies``: folders that may hold a copy of the repository's files, read
    first (:func:`copy_folders`); ``local_dir``: download a plain copy into that folder instead of the
    cache."""
    copy = local_copy(files, list(copies))
    if copy is not None:
        return copy
    if not reachable():
        snapshot = cached(files) if local_dir is None else None
        if snapshot is None:
            raise failure(files, _offline_error(), files.describe())
        return snapshot
    try:
        commit = remote_commit(files)
        names = remote_names(files, commit)
        paths = {name: _download(files, name, commit, local_dir, progress) for name in names}
    except MissingDataError:
        raise
    except Exception as err:  # noqa: BLE001 - any hub failure is one line
        snapshot = cached(files) if local_dir is None and _transport(err) else None
        if snapshot is not None:  # the connection broke, not the repository: its copy in the cache
            return snapshot
        raise failure(files, err, files.describe()) from err
    return Snapshot(files, commit, paths)


def _transport(err: BaseException) -> bool:
    """Whether ``err`` is the connection's (the hub did not answer), not the repository's (an answer that
    says no: missing, gated, no such file)."""
    from huggingface_hub import errors

    answered = (errors.RepositoryNotFoundError, errors.RevisionNotFoundError, errors.EntryNotFoundError)
    return not isinstance(err, answered)


def _download(files: HubFiles, name: str, commit: str, local_dir: Path | None, progress: bool) -> Path:
    from huggingface_hub import hf_hub_download
    from huggingface_hub.utils import disable_progress_bars

    # The revision as asked (not the commit), so the cache records refs/<revision> and a later offline
    # read finds the files; the commit asked for first pins what the file must come from.
    with nullcontext() if progress else disable_progress_bars("huggingface_hub.http_get"):
        path = hf_hub_download(
            files.repo,
            name,
            repo_type=files.repo_type,
            revision=files.revision,
            local_dir=str(local_dir) if local_dir is not None else None,
        )
    found = Path(path)
    if local_dir is None and commit not in found.parts:
        # the revision moved between our two calls: read the file of the commit asked for
        found = Path(hf_hub_download(files.repo, name, repo_type=files.repo_type, revision=commit))
    return found


def fetch(files: HubFiles, local_dir: Path | None = None) -> Snapshot:
    """:func:`read` with the hub client's progress bars (``lampe-eval data fetch``)."""
    if local_dir is not None:
        os.makedirs(local_dir, exist_ok=True)
    return read(files, local_dir=local_dir, progress=True)


# ------------------------------------------------------------------------------------------ models
# What a run reads of a model repository: configs, tokenizer files, safetensors weights (never Python code:
# lampe-eval does not run a checkpoint's own code; no .bin or .pth copies of the weights).
MODEL_FILES = ("*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.tiktoken")


def model_files(repo: str) -> HubFiles:
    return HubFiles(repo, repo_type="model")


def model_probe(repo: str) -> Probe:
    """A model repository's files that a run reads: in the cache (its config at least), or on the hub."""
    files = model_files(repo)
    commit = cached_commit(files) or ""
    folder = _snapshot_folder(files, commit)
    if commit and (folder / "config.json").is_file():
        sizes = {name: (folder / name).stat().st_size for name in _tree_of_folder(folder)}
        return Probe("cached", commit, sizes)
    if not reachable():
        raise failure(files, _offline_error(), f"model {repo}")
    try:
        info = _api().model_info(repo, files_metadata=True)
    except Exception as err:  # noqa: BLE001 - any hub failure is one line
        raise failure(files, err, f"model {repo}") from err
    sizes = {
        s.rfilename: int(s.size or 0)
        for s in info.siblings or []
        if any(fnmatch.fnmatchcase(s.rfilename, p) for p in MODEL_FILES)
    }
    return Probe("remote", str(info.sha), sizes)


def fetch_model(repo: str) -> Snapshot:
    """The model repository's configs, tokenizer and safetensors weights into the hub cache."""
    from huggingface_hub import snapshot_download

    files = model_files(repo)
    try:
        folder = Path(snapshot_download(repo, allow_patterns=list(MODEL_FILES)))
    except Exception as err:  # noqa: BLE001 - any hub failure is one line
        raise failure(files, err, f"model {repo}") from err
    return Snapshot(files, folder.name, {name: folder / name for name in _tree_of_folder(folder)})
