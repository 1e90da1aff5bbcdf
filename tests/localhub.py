"""A local Hugging Face hub for the tests: an HTTP server on 127.0.0.1 that answers the part of the hub's API
the installed clients use, so tests run the real ``huggingface_hub``, ``datasets`` and ``transformers`` code
(``hf_hub_download``, ``HfApi``, ``HfFileSystem``, ``snapshot_download``, ``load_dataset``,
``from_pretrained``) against repositories the test builds, with no network.

What it serves, as the hub does today (each answer mirrors what the client source reads):

- ``HEAD``/``GET /[datasets/]{repo}/resolve/{revision}/{path}``: a regular file is a 307 to
  ``/api/resolve-cache/...`` (same host: the client follows it and reads ``X-Repo-Commit``, ``ETag`` and
  ``Content-Length`` from the final answer); an LFS file (``LFS_SUFFIXES``) is a 302 to the "CDN", a second
  server on another port, carrying ``X-Repo-Commit``, ``X-Linked-Etag`` (its sha256) and ``X-Linked-Size``:
  the client does not follow a redirect to another origin, takes the metadata from the 302 and downloads from
  the CDN without its ``Authorization`` header. ``Range`` requests are answered (206) everywhere. No Xet
  header is ever sent, so ``hf_xet`` stays unused and downloads are plain HTTP.
- ``/api/{models,datasets}/{repo}[/revision/{rev}]`` (info: ``sha``, ``siblings``, ``cardData``, ``gated``,
  ``?blobs=true``, ``expand``), ``/tree/{rev}[/{path}]`` (``recursive``, ``expand``, paginated with a ``Link``
  header), ``POST /paths-info/{rev}``, ``/refs``, ``/commits/{rev}``, ``/auth-check``,
  ``/api/whoami-v2`` and ``/api/agent-harnesses`` (the registry ``huggingface_hub`` fetches once per process
  to build its user agent).
- Errors with the hub's ``X-Error-Code``/``X-Error-Message``: ``RepoNotFound`` (401 without a token, 404
  with one), ``RevisionNotFound`` (404), ``EntryNotFound`` (404, with ``X-Repo-Commit``), ``GatedRepo``
  (401 without ``Authorization``, 403 with a token other than :attr:`LocalHub.token`) on the file endpoints
  of a gated repository; its metadata (info, tree, paths-info) is public as on the hub since 2024 unless
  :attr:`LocalHub.gated_metadata` is set.
- A renamed repository (``moved_from``) answers every request under an old id with a 307 to the same path
  under the new id, as the hub does; the client follows it (its cache keeps the old id's folder).

Revisions: a branch (``main``), a full commit sha or a unique prefix of at least 7 hex digits; earlier
commits stay readable after :meth:`LocalHub.update_repo`.

In-process use: :func:`hub_environment` points every client of this process at the server (environment
variables and the module constants computed at import), :func:`set_offline` switches ``HF_HUB_OFFLINE`` on,
:func:`clear_client_caches` drops the clients' per-process caches. ``tests/conftest.py`` wraps them as the
``local_hub`` (session) and ``hub_env`` (per test) fixtures.

A subprocess needs only its environment (:func:`subprocess_env` builds it)::

    env = subprocess_env(hub, home)  # or offline=True
    # HF_ENDPOINT=<hub.url> HF_HOME=<home> HF_HUB_CACHE=<home>/hub HF_DATASETS_CACHE=<home>/datasets
    # HF_UPDATE_DOWNLOAD_COUNTS=0, and HF_HUB_OFFLINE/HF_TOKEN/... removed
    subprocess.run([sys.executable, "-c", code], env=env, check=True)

There ``datasets`` still asks its viewer at ``http://datasets-server.127.0.0.1:<port>`` (a name lookup
that fails; in process :func:`hub_environment` switches that off with ``datasets.config.USE_PARQUET_EXPORT``).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import socket
import sys
import threading
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

import pytest
import yaml

# Files stored with Git LFS (the hub's default .gitattributes patterns, by suffix): served through the CDN.
LFS_SUFFIXES = (
    ".7z",
    ".arrow",
    ".bin",
    ".bz2",
    ".ckpt",
    ".ftz",
    ".gz",
    ".h5",
    ".joblib",
    ".lz4",
    ".mlmodel",
    ".model",
    ".msgpack",
    ".npy",
    ".npz",
    ".onnx",
    ".ot",
    ".parquet",
    ".pb",
    ".pickle",
    ".pkl",
    ".pt",
    ".pth",
    ".rar",
    ".safetensors",
    ".tar",
    ".tflite",
    ".tgz",
    ".wasm",
    ".xz",
    ".zip",
    ".zst",
)
LFS_MIN_SIZE = 10 * 1024 * 1024  # anything larger is LFS too (the hub refuses larger regular files)
GITATTRIBUTES = "".join(
    f"*{suffix} filter=lfs diff=lfs merge=lfs -text\n" for suffix in LFS_SUFFIXES
).encode()
REPO_TYPES = {"models": "model", "datasets": "dataset", "spaces": "space"}
URL_PREFIX = {"model": "", "dataset": "datasets/", "space": "spaces/"}
FIRST_COMMIT = datetime(2026, 11, 28, tzinfo=timezone.utc)
LOOPBACK = {"127.0.0.1", "localhost", "::1", "0.0.0.0"}
AGENT_REGISTRY = {"standardEnvVars": ["AI_AGENT", "AGENT"], "harnesses": {}}


def git_blob_sha1(data: bytes) -> str:
    """The git object id of a blob (the hub's ``oid``/``ETag`` of a regular file)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass(frozen=True)
class Blob:
    """One file's content and the ids the hub gives it."""

    data: bytes
    lfs: bool
    oid: str  # git blob id (of the LFS pointer file for an LFS file)
    sha256: str
    pointer_size: int  # size of the LFS pointer file (0 for a regular file)

    @classmethod
    def make(cls, path: str, data: bytes) -> Blob:
        sha256 = hashlib.sha256(data).hexdigest()
        lfs = path.endswith(LFS_SUFFIXES) or len(data) >= LFS_MIN_SIZE
        if not lfs:
            return cls(data, False, git_blob_sha1(data), sha256, 0)
        pointer = (
            f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {len(data)}\n".encode()
        )
        return cls(data, True, git_blob_sha1(pointer), sha256, len(pointer))

    @property
    def etag(self) -> str:
        """What ``X-Linked-Etag``/``ETag`` carry: the sha256 of an LFS file, the git id of a regular one."""
        return self.sha256 if self.lfs else self.oid

    def lfs_info(self) -> dict[str, Any]:
        return {"oid": self.sha256, "size": len(self.data), "pointerSize": self.pointer_size}


@dataclass(frozen=True)
class Commit:
    """One commit: the whole tree (path -> blob), as the hub serves a revision."""

    sha: str
    files: Mapping[str, Blob]
    date: datetime
    title: str
    parent: str | None

    @property
    def iso_date(self) -> str:
        return self.date.strftime("%Y-%m-%dT%H:%M:%S.000Z")


@dataclass
class Repo:
    """A repository: its commits (history through ``parent``) and branches."""

    repo_id: str
    repo_type: str
    gated: bool
    commits: dict[str, Commit] = field(default_factory=dict)  # in order, the last one newest
    branches: dict[str, str] = field(default_factory=dict)  # name or full ref -> commit sha

    def commit(self, revision: str) -> Commit | None:
        """The commit a branch, a full sha or a unique prefix (>= 7 hex digits) names."""
        for name in (revision, revision.removeprefix("refs/heads/")):
            if name in self.branches:
                return self.commits[self.branches[name]]
        if revision in self.commits:
            return self.commits[revision]
        if 7 <= len(revision) < 40 and all(c in "0123456789abcdef" for c in revision):
            found = [c for sha, c in self.commits.items() if sha.startswith(revision)]
            if len(found) == 1:
                return found[0]
        return None

    def history(self, commit: Commit) -> list[Commit]:
        """``commit`` and its ancestors, newest first."""
        out = [commit]
        while out[-1].parent is not None:
            out.append(self.commits[out[-1].parent])
        return out


class HubError(Exception):
    """An error answer: status, ``X-Error-Code`` (or None) and message."""

    def __init__(self, status: int, code: str | None, message: str, headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = dict(headers or {})


class LocalHub:
    """The server and its repositories; a context manager (starts on enter, stops on exit).

    ``requests``: every ``(method, path with query)`` received, in order (hub and CDN); ``downloads()``: the
    ``(repo_id, path)`` whose bytes were sent; ``errors``: tracebacks of requests the server failed on (tests
    should see none); ``outside``: ``(host, port)`` a guarded process tried to reach (see
    :func:`hub_environment`)."""

    def __init__(self, token: str = "hf_test") -> None:
        self.token = token  # the one token that opens gated repositories
        self.gated_metadata = (
            False  # True: gated repos refuse info/tree/paths-info too (the hub until ~10/2024)
        )
        self.tree_page_size = 1000  # the hub's page size of /tree (50 with expand=true)
        self.requests: list[tuple[str, str]] = []
        self.errors: list[str] = []
        self.outside: list[tuple[str, Any]] = []
        self._served: list[tuple[str, str]] = []
        self._repos: dict[tuple[str, str], Repo] = {}
        self._moved: dict[tuple[str, str], str] = {}
        self._blobs: dict[str, Blob] = {}
        self._lock = threading.RLock()
        self._servers: list[ThreadingHTTPServer] = []
        self._threads: list[threading.Thread] = []

    # ------------------------------------------------------------------------------------------ lifecycle
    def start(self) -> LocalHub:
        if self._servers:
            return self
        for role in ("hub", "cdn"):
            server = _Server(("127.0.0.1", 0), _Handler)
            server.hub = self
            server.role = role
            thread = threading.Thread(
                target=server.serve_forever, args=(0.05,), name=f"localhub-{role}", daemon=True
            )
            thread.start()
            self._servers.append(server)
            self._threads.append(thread)
        return self

    def close(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
        self._servers.clear()
        self._threads.clear()

    def __enter__(self) -> LocalHub:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    @property
    def url(self) -> str:
        """The endpoint root (``HF_ENDPOINT``), e.g. ``http://127.0.0.1:41234``."""
        return self._address("hub")

    @property
    def cdn_url(self) -> str:
        return self._address("cdn")

    def _address(self, role: str) -> str:
        if not self._servers:
            raise RuntimeError("LocalHub is not started (use it as a context manager or call start())")
        server = self._servers[0 if role == "hub" else 1]
        host, port = server.server_address[:2]
        return f"http://{host!s}:{port}"

    # --------------------------------------------------------------------------------------- repositories
    def add_repo(
        self,
        repo_id: str,
        files: Mapping[str, bytes],
        *,
        repo_type: str = "dataset",
        gated: bool = False,
        sha: str | None = None,
        moved_from: Sequence[str] = (),
    ) -> str:
        """A new repository with one commit on ``main`` holding ``files`` (plus the hub's default
        ``.gitattributes`` unless given); ``moved_from``: former ids that redirect here. Returns the commit
        sha (``sha``, else one derived from the content)."""
        if repo_type not in URL_PREFIX:
            raise ValueError(f"repo_type must be one of {sorted(URL_PREFIX)}, got {repo_type!r}")
        if repo_id.count("/") != 1 or not all(repo_id.split("/")):
            raise ValueError(f"repo_id must be 'namespace/name', got {repo_id!r}")
        with self._lock:
            key = (repo_type, repo_id)
            if key in self._repos or key in self._moved:
                raise ValueError(f"{repo_type} {repo_id} already exists (update_repo adds a commit)")
            for old in moved_from:
                if (repo_type, old) in self._repos:
                    raise ValueError(f"{repo_type} {old} exists: it cannot also redirect to {repo_id}")
            repo = Repo(repo_id, repo_type, gated)
            content = dict(files)
            content.setdefault(".gitattributes", GITATTRIBUTES)
            commit = self._commit(repo, content, sha, "initial commit", None)
            repo.branches["main"] = commit.sha
            self._repos[key] = repo
            for old in moved_from:
                self._moved[(repo_type, old)] = repo_id
            return commit.sha

    def has_repo(self, repo_id: str, repo_type: str = "dataset") -> bool:
        """Whether the repository (or a former id of it) is served."""
        with self._lock:
            return (repo_type, repo_id) in self._repos or (repo_type, repo_id) in self._moved

    def update_repo(
        self,
        repo_id: str,
        files: Mapping[str, bytes],
        *,
        repo_type: str | None = None,
        delete: Sequence[str] = (),
        branch: str = "main",
        sha: str | None = None,
        gated: bool | None = None,
    ) -> str:
        """A new commit on ``branch`` (created if new, from ``main``): ``files`` added or replaced, ``delete``
        removed. Returns its sha, new even when the content did not change (the parent differs)."""
        with self._lock:
            repo = self._repo(repo_id, repo_type)
            start = repo.branches.get(branch, repo.branches["main"])
            content = dict(repo.commits[start].files)
            for path in delete:
                content.pop(path, None)
            content_bytes = {path: blob.data for path, blob in content.items()}
            content_bytes.update(files)
            commit = self._commit(repo, content_bytes, sha, f"update {', '.join(files) or 'files'}", start)
            repo.branches[branch] = commit.sha
            if gated is not None:
                repo.gated = gated
            return commit.sha

    def head(self, repo_id: str, repo_type: str | None = None, branch: str = "main") -> str:
        """The commit sha ``branch`` points to."""
        with self._lock:
            return self._repo(repo_id, repo_type).branches[branch]

    def files(self, repo_id: str, repo_type: str | None = None, revision: str = "main") -> dict[str, bytes]:
        """The files of a revision (``.gitattributes`` included)."""
        with self._lock:
            repo = self._repo(repo_id, repo_type)
            commit = repo.commit(revision)
            if commit is None:
                raise KeyError(f"{repo_id} has no revision {revision!r}")
            return {path: blob.data for path, blob in commit.files.items()}

    def downloads(self) -> list[tuple[str, str]]:
        """``(repo_id, path)`` of every file whose bytes (or a range of them) were sent (GET on
        resolve-cache or the CDN), in order; a renamed repository is named by its new id."""
        with self._lock:
            return list(self._served)

    def clear_log(self) -> None:
        """Forget the requests, downloads, errors and outside attempts seen so far."""
        with self._lock:
            self.requests.clear()
            self._served.clear()
            self.errors.clear()
            self.outside.clear()

    def _repo(self, repo_id: str, repo_type: str | None) -> Repo:
        types = [repo_type] if repo_type else list(URL_PREFIX)
        found = [self._repos[(t, repo_id)] for t in types if (t, repo_id) in self._repos]
        if len(found) != 1:
            raise KeyError(f"no single repository {repo_id!r} (repo_type={repo_type!r})")
        return found[0]

    def _commit(
        self, repo: Repo, files: Mapping[str, bytes], sha: str | None, title: str, parent: str | None
    ) -> Commit:
        blobs = {path: Blob.make(path, data) for path, data in sorted(files.items())}
        for path in blobs:
            if path.startswith("/") or path.endswith("/") or "" in path.split("/") or ".." in path.split("/"):
                raise ValueError(f"bad path in repository: {path!r}")
        if sha is None:
            tree = "".join(f"{path}\0{blob.oid}\n" for path, blob in blobs.items())
            text = f"{repo.repo_type}/{repo.repo_id}\nparent {parent}\n{tree}\n{title}"
            sha = hashlib.sha1(text.encode()).hexdigest()
        if len(sha) != 40 or any(c not in "0123456789abcdef" for c in sha):
            raise ValueError(f"sha must be 40 lowercase hex digits, got {sha!r}")
        if sha in repo.commits:
            raise ValueError(f"{repo.repo_id} already has a commit {sha}")
        commit = Commit(sha, blobs, FIRST_COMMIT + timedelta(hours=len(repo.commits)), title, parent)
        repo.commits[sha] = commit
        for blob in blobs.values():
            self._blobs[blob.sha256] = blob
        return commit

    # ------------------------------------------------------------------------------------------- serving
    def _record(self, method: str, path: str) -> None:
        with self._lock:
            self.requests.append((method, path))

    def _served_file(self, repo_id: str, path: str) -> None:
        with self._lock:
            self._served.append((repo_id, path))

    def _find(self, repo_type: str, repo_id: str) -> tuple[Repo | None, str | None]:
        """(the repository, None) or (None, the id it moved to) or (None, None)."""
        with self._lock:
            repo = self._repos.get((repo_type, repo_id))
            return repo, (None if repo else self._moved.get((repo_type, repo_id)))

    def _user(self, authorization: str | None) -> str | None:
        """None without a token; ``"granted"`` for :attr:`token`; ``"other"`` for any other token (a user
        who was not granted access to gated repositories)."""
        if not authorization:
            return None
        token = authorization.removeprefix("Bearer ").strip()
        return "granted" if token == self.token else "other"


def _not_found(authorization: str | None) -> HubError:
    # The hub answers 401 to an anonymous request for a repository it does not show (missing or private).
    return HubError(401 if not authorization else 404, "RepoNotFound", "Repository not found")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # keep-alive connections of the clients' pools must not block close()
    hub: LocalHub
    role: str


def _page(repo: Repo, hub_url: str) -> str:
    return f"{hub_url}/{URL_PREFIX[repo.repo_type]}{repo.repo_id}"


class _Handler(BaseHTTPRequestHandler):
    """One connection of the hub or the CDN (HTTP/1.1 keep-alive, as the clients' pools expect)."""

    protocol_version = "HTTP/1.1"
    timeout = 60  # an idle keep-alive connection is dropped after this
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the requests are in LocalHub.requests

    def do_GET(self) -> None:
        self._handle("GET")

    def do_HEAD(self) -> None:
        self._handle("HEAD")

    def do_POST(self) -> None:
        self._handle("POST")

    # ------------------------------------------------------------------------------------------ plumbing
    @property
    def hub(self) -> LocalHub:
        return self.server.hub

    def _handle(self, method: str) -> None:
        self.hub._record(method, self.path)
        body = b""
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            body = self.rfile.read(length)
        try:
            if self.server.role == "cdn":
                self._cdn(method)
            else:
                self._route(method, body)
        except HubError as err:
            self._error(method, err)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception:  # noqa: BLE001 - a server bug: recorded for the tests, answered as the hub would
            self.hub.errors.append(f"{method} {self.path}\n{traceback.format_exc()}")
            self._error(method, HubError(500, None, "Internal Error - localhub"))

    def _send(
        self,
        method: str,
        status: int,
        body: bytes = b"",
        headers: Mapping[str, str] | None = None,
        content_type: str = "application/json; charset=utf-8",
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Request-Id", f"Root=localhub-{id(self):x}-{len(self.hub.requests)}")
        for name, value in (headers or {}).items():
            self.send_header(name, value.encode("latin-1", "replace").decode("latin-1"))  # as HTTP allows
        self.end_headers()
        if method != "HEAD" and body:
            self.wfile.write(body)

    def _json(self, method: str, value: Any, headers: Mapping[str, str] | None = None) -> None:
        self._send(method, 200, json.dumps(value).encode(), headers)

    def _error(self, method: str, err: HubError) -> None:
        headers = {"X-Error-Message": err.message, **err.headers}
        if err.code:
            headers["X-Error-Code"] = err.code
        self._send(method, err.status, json.dumps({"error": err.message}).encode(), headers)

    def _redirect(
        self, method: str, status: int, location: str, headers: Mapping[str, str] | None = None
    ) -> None:
        text = "Found" if status == 302 else "Temporary Redirect"
        body = f"{text}. Redirecting to {location}".encode()
        self._send(
            method, status, body, {"Location": location, **(headers or {})}, "text/plain; charset=utf-8"
        )

    # ------------------------------------------------------------------------------------------- routing
    def _route(self, method: str, body: bytes) -> None:
        split = urlsplit(self.path)
        query = parse_qs(split.query, keep_blank_values=True)
        raw = split.path.split("/")[1:]
        parts = [unquote(p) for p in raw]
        if parts[:1] == ["api"]:
            self._api(method, parts[1:], raw[1:], query, body, split.query)
            return
        prefix = 1 if parts[:1] and parts[0] in REPO_TYPES and len(parts) > 3 and parts[3] == "resolve" else 0
        if len(parts) >= prefix + 5 and parts[prefix + 2] == "resolve":
            repo_type = REPO_TYPES[parts[0]] if prefix else "model"
            repo_id = "/".join(parts[prefix : prefix + 2])
            revision, path = _split_revision(parts[prefix + 3 :])
            self._resolve(method, repo_type, repo_id, revision, path, raw, prefix, split.query)
            return
        raise HubError(404, None, "Sorry, we can't find the page you are looking for.")

    def _api(
        self, method: str, parts: list[str], raw: list[str], query: dict[str, list[str]], body: bytes, qs: str
    ) -> None:
        if parts == ["agent-harnesses"]:
            self._json(method, AGENT_REGISTRY)
            return
        if parts == ["whoami-v2"]:
            user = self.hub._user(self.headers.get("Authorization"))
            if user is None:
                raise HubError(401, None, "Invalid credentials in Authorization header")
            name = "localhub-user" if user == "granted" else "localhub-guest"
            self._json(method, {"type": "user", "id": name, "name": name, "fullname": name, "orgs": []})
            return
        if parts[:1] == ["resolve-cache"] and len(parts) >= 6 and parts[1] in REPO_TYPES:
            repo_type, repo_id = REPO_TYPES[parts[1]], "/".join(parts[2:4])
            repo = self._repo_or_redirect(method, repo_type, repo_id, raw, 2, qs)
            if repo is None:
                return
            self._check_gate(repo, files=True)
            commit = repo.commits.get(parts[4])
            if commit is None:
                raise HubError(404, "RevisionNotFound", f"Invalid rev id: {parts[4]}")
            self._file(method, repo, commit, "/".join(parts[5:]))
            return
        if len(parts) < 3 or parts[0] not in REPO_TYPES:
            raise HubError(404, None, "Sorry, we can't find the page you are looking for.")
        repo_type, repo_id, rest = REPO_TYPES[parts[0]], "/".join(parts[1:3]), parts[3:]
        repo = self._repo_or_redirect(method, repo_type, repo_id, raw, 1, qs)
        if repo is None:
            return
        if rest == ["auth-check"]:
            self._check_gate(repo, files=True)
            self._json(method, {})
            return
        self._check_gate(repo, files=False)
        if not rest or rest[0] == "revision":
            commit = self._revision(repo, rest[1] if len(rest) > 1 else "main")
            self._json(method, self._info(repo, commit, query))
        elif rest[0] == "tree" and len(rest) >= 2:
            revision, path = _split_revision(rest[1:])
            self._tree(method, repo, self._revision(repo, revision), path, query)
        elif rest[0] == "paths-info" and len(rest) >= 2 and method == "POST":
            revision, _ = _split_revision(rest[1:])
            self._paths_info(method, repo, self._revision(repo, revision), body)
        elif rest == ["refs"]:
            self._json(method, self._refs(repo))
        elif rest[0] == "commits" and len(rest) >= 2:
            revision, _ = _split_revision(rest[1:])
            self._commits(method, repo, self._revision(repo, revision))
        else:
            raise HubError(404, None, "Sorry, we can't find the page you are looking for.")

    def _repo_or_redirect(
        self, method: str, repo_type: str, repo_id: str, raw: list[str], at: int, qs: str
    ) -> Repo | None:
        """The repository, or None after answering the redirect of a renamed one (or raise RepoNotFound).
        ``raw[at:at+2]`` are the id's segments in the request path."""
        repo, moved_to = self.hub._find(repo_type, repo_id)
        if repo is not None:
            return repo
        if moved_to is None:
            raise _not_found(self.headers.get("Authorization"))
        segments = list(self.path.split("?", 1)[0].split("/")[1:])
        start = len(segments) - len(raw) + at  # the index of the id in the request path
        segments[start : start + 2] = [quote(s, safe="") for s in moved_to.split("/")]
        location = "/" + "/".join(segments) + (f"?{qs}" if qs else "")
        self._redirect(method, 307, location)
        return None

    def _check_gate(self, repo: Repo, *, files: bool) -> None:
        if not repo.gated or not (files or self.hub.gated_metadata):
            return
        user = self.hub._user(self.headers.get("Authorization"))
        if user == "granted":
            return
        kind = repo.repo_type
        if user is None:
            message = (
                f"Access to {kind} {repo.repo_id} is restricted. You must have access to it and be "
                "authenticated to access it. Please log in."
            )
            raise HubError(401, "GatedRepo", message)
        message = (
            f"Access to {kind} {repo.repo_id} is restricted and you are not in the authorized list. "
            f"Visit {_page(repo, self.hub.url)} to ask for access."
        )
        raise HubError(403, "GatedRepo", message)

    @staticmethod
    def _revision(repo: Repo, revision: str) -> Commit:
        commit = repo.commit(revision)
        if commit is None:
            raise HubError(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return commit

    # ------------------------------------------------------------------------------------------- files
    def _resolve(
        self,
        method: str,
        repo_type: str,
        repo_id: str,
        revision: str,
        path: str,
        raw: list[str],
        prefix: int,
        qs: str,
    ) -> None:
        repo = self._repo_or_redirect(method, repo_type, repo_id, raw, prefix, qs)
        if repo is None:
            return
        self._check_gate(repo, files=True)
        commit = self._revision(repo, revision)
        blob = commit.files.get(path)
        if blob is None:
            raise HubError(404, "EntryNotFound", "Entry not found", {"X-Repo-Commit": commit.sha})
        headers = {
            "X-Repo-Commit": commit.sha,
            "X-Linked-Etag": f'"{blob.etag}"',
            "X-Linked-Size": str(len(blob.data)),
            "Accept-Ranges": "bytes",
        }
        if blob.lfs:
            name = quote(path.rsplit("/", 1)[-1])
            location = (
                f"{self.hub.cdn_url}/lfs/{blob.sha256}?repo={quote(URL_PREFIX[repo_type] + repo.repo_id)}"
                f"&file={quote(path)}&response-content-disposition=attachment%3B+filename%3D{name}"
            )
            self._redirect(method, 302, location, {**headers, "ETag": f'"{blob.sha256}"'})
            return
        location = (
            f"/api/resolve-cache/{repo_type}s/{quote(repo.repo_id)}/{commit.sha}/{quote(path)}"
            f"?etag=%22{blob.oid}%22"
        )
        self._redirect(method, 307, location, headers)

    def _file(self, method: str, repo: Repo, commit: Commit, path: str) -> None:
        blob = commit.files.get(path)
        if blob is None:
            raise HubError(404, "EntryNotFound", "Entry not found", {"X-Repo-Commit": commit.sha})
        headers = {"X-Repo-Commit": commit.sha, "ETag": f'"{blob.oid}"'}
        self._content(method, blob, headers, repo.repo_id, path)

    def _cdn(self, method: str) -> None:
        split = urlsplit(self.path)
        parts = split.path.split("/")[1:]
        query = parse_qs(split.query)
        blob = self.hub._blobs.get(parts[1]) if len(parts) == 2 and parts[0] == "lfs" else None
        if blob is None:
            raise HubError(404, None, "NoSuchKey")
        name = query.get("file", ["file"])[0].rsplit("/", 1)[-1]
        headers = {
            "ETag": f'"{blob.sha256}"',
            "Content-Disposition": f"attachment; filename*=UTF-8''{quote(name)}; filename=\"{name}\";",
        }
        repo = query.get("repo", [""])[0]
        repo_id = "/".join(repo.split("/")[-2:])  # without the datasets/ or spaces/ prefix
        self._content(method, blob, headers, repo_id, query.get("file", [""])[0])

    def _content(self, method: str, blob: Blob, headers: dict[str, str], repo_id: str, path: str) -> None:
        """The bytes (or the ``Range`` asked for: 206, or 416 past the end)."""
        data, size = blob.data, len(blob.data)
        headers = {**headers, "Accept-Ranges": "bytes"}
        status = 200
        wanted = _byte_range(self.headers.get("Range"), size)
        if wanted == "unsatisfiable":
            raise HubError(416, None, "Requested Range Not Satisfiable", {"Content-Range": f"bytes */{size}"})
        if isinstance(wanted, tuple):
            start, end = wanted
            data = data[start : end + 1]
            headers["Content-Range"] = f"bytes {start}-{end}/{size}"
            status = 206
        if method == "GET":
            self.hub._served_file(repo_id, path)
        self._send(method, status, data, headers, "application/octet-stream")

    # --------------------------------------------------------------------------------------------- api
    def _info(self, repo: Repo, commit: Commit, query: dict[str, list[str]]) -> dict[str, Any]:
        blobs = query.get("blobs", ["false"])[0].lower() in ("1", "true")
        siblings: list[dict[str, Any]] = []
        for path, blob in commit.files.items():
            sibling: dict[str, Any] = {"rfilename": path}
            if blobs:
                sibling.update({"size": len(blob.data), "blobId": blob.oid})
                if blob.lfs:
                    sibling["lfs"] = {
                        "size": len(blob.data),
                        "sha256": blob.sha256,
                        "pointerSize": blob.pointer_size,
                    }
            siblings.append(sibling)
        card = _card_data(commit.files.get("README.md"))
        first = next(iter(repo.commits.values()))
        namespace = repo.repo_id.split("/")[0]
        info: dict[str, Any] = {
            "_id": hashlib.sha1(f"{repo.repo_type}/{repo.repo_id}".encode()).hexdigest()[:24],
            "id": repo.repo_id,
            "author": namespace,
            "sha": commit.sha,
            "lastModified": commit.iso_date,
            "createdAt": first.iso_date,
            "private": False,
            "gated": "auto" if repo.gated else False,
            "disabled": False,
            "downloads": 0,
            "likes": 0,
            "tags": list(card.get("tags") or []),
            "cardData": card,
            "siblings": siblings,
            "usedStorage": sum(len(b.data) for b in commit.files.values()),
        }
        if repo.repo_type == "model":
            info.update(_model_fields(repo.repo_id, commit, card))
        elif repo.repo_type == "dataset":
            info.update({"description": "", "citation": None, "paperswithcode_id": None})
        if "securityStatus" in query:
            info["securityRepoStatus"] = {"scansDone": True, "filesWithIssues": []}
        expand = query.get("expand", []) + query.get("expand[]", [])
        if expand:
            info = {key: value for key, value in info.items() if key in {"_id", "id", *expand}}
        return info

    def _entry(self, repo: Repo, commit: Commit, path: str, expand: bool) -> dict[str, Any] | None:
        """The tree entry of a file or folder (None if neither exists)."""
        blob = commit.files.get(path)
        if blob is not None:
            entry: dict[str, Any] = {"type": "file", "oid": blob.oid, "size": len(blob.data), "path": path}
            if blob.lfs:
                entry["lfs"] = blob.lfs_info()
        else:
            inside = {p: b for p, b in commit.files.items() if p.startswith(path + "/")}
            if not inside:
                return None
            tree = "".join(f"{p}\0{b.oid}\n" for p, b in sorted(inside.items()))
            entry = {
                "type": "directory",
                "oid": hashlib.sha1(tree.encode()).hexdigest(),
                "size": 0,
                "path": path,
            }
        if expand:
            last = _last_change(repo, commit, path)
            entry["lastCommit"] = {"id": last.sha, "title": last.title, "date": last.iso_date}
            if blob is not None:
                entry["securityFileStatus"] = {
                    "status": "safe",
                    "avScan": {"virusFound": False, "virusNames": None},
                    "pickleImportScan": None,
                }
        return entry

    def _tree(self, method: str, repo: Repo, commit: Commit, path: str, query: dict[str, list[str]]) -> None:
        recursive = query.get("recursive", ["false"])[0].lower() in ("1", "true")
        expand = query.get("expand", ["false"])[0].lower() in ("1", "true")
        if path and (path in commit.files or self._entry(repo, commit, path, False) is None):
            raise HubError(404, "EntryNotFound", f"{path} does not exist on {commit.sha}")
        base = path + "/" if path else ""
        names: set[str] = set()
        for file in commit.files:
            if not file.startswith(base):
                continue
            rest = file[len(base) :].split("/")
            depth = len(rest) if recursive else 1
            names.update(base + "/".join(rest[: i + 1]) for i in range(depth))
        ordered = sorted(
            names, key=lambda p: (p.count("/") if not recursive else 0, p not in commit.files, p)
        )
        entries = [e for e in (self._entry(repo, commit, p, expand) for p in ordered) if e is not None]
        size = 50 if expand else max(1, self.hub.tree_page_size)
        offset = int(query.get("cursor", ["0"])[0] or 0)
        page = entries[offset : offset + size]
        headers = {}
        if offset + size < len(entries):
            next_query = {k: v[0] for k, v in query.items() if k != "cursor"} | {"cursor": str(offset + size)}
            next_url = f"{self.hub.url}{urlsplit(self.path).path}?" + "&".join(
                f"{k}={quote(v)}" for k, v in next_query.items()
            )
            headers["Link"] = f'<{next_url}>; rel="next"'
        self._json(method, page, headers)

    def _paths_info(self, method: str, repo: Repo, commit: Commit, body: bytes) -> None:
        if self.headers.get("Content-Type", "").startswith("application/json"):
            data = json.loads(body or b"{}")
            paths, expand = list(data.get("paths", [])), bool(data.get("expand", False))
        else:
            form = parse_qs(body.decode(), keep_blank_values=True)
            paths = form.get("paths", []) + form.get("paths[]", [])
            expand = form.get("expand", ["false"])[0].lower() in ("1", "true")
        entries = [self._entry(repo, commit, p.strip("/"), expand) for p in paths]
        self._json(method, [e for e in entries if e is not None])

    def _refs(self, repo: Repo) -> dict[str, Any]:
        branches, converts = [], []
        for name, sha in repo.branches.items():
            if name.startswith("refs/convert/"):
                converts.append(
                    {"name": name.removeprefix("refs/convert/"), "ref": name, "targetCommit": sha}
                )
            else:
                branches.append({"name": name, "ref": f"refs/heads/{name}", "targetCommit": sha})
        return {"branches": branches, "converts": converts, "tags": [], "pullRequests": []}

    def _commits(self, method: str, repo: Repo, commit: Commit) -> None:
        items = [
            {
                "id": c.sha,
                "title": c.title,
                "message": "",
                "authors": [{"user": "localhub"}],
                "date": c.iso_date,
                "formatted": {"title": c.title, "message": ""},
            }
            for c in repo.history(commit)
        ]
        self._json(method, items)


def _split_revision(parts: list[str]) -> tuple[str, str]:
    """(revision, path) from the segments after ``resolve``/``tree``: a revision is one segment (quoted, as
    the clients send it) or a literal ``refs/pr/N`` / ``refs/convert/X``."""
    if len(parts) >= 3 and parts[0] == "refs" and parts[1] in ("pr", "convert"):
        return "/".join(parts[:3]), "/".join(parts[3:])
    return parts[0], "/".join(parts[1:]).strip("/")


def _byte_range(header: str | None, size: int) -> tuple[int, int] | str | None:
    """(first, last) byte of a single ``bytes=`` range; "unsatisfiable"; None for the whole file."""
    if not header or not header.strip().startswith("bytes=") or "," in header:
        return None
    first, _, last = header.strip()[len("bytes=") :].partition("-")
    try:
        if first == "":
            count = int(last)
            start, end = max(0, size - count), size - 1
        else:
            start, end = int(first), (int(last) if last else size - 1)
    except ValueError:
        return None
    if start >= size or start > end:
        return "unsatisfiable"
    return start, min(end, size - 1)


def _last_change(repo: Repo, commit: Commit, path: str) -> Commit:
    """The newest commit of ``commit``'s history that changed ``path`` (a file or a folder)."""

    def state(c: Commit) -> list[tuple[str, str]]:
        return sorted((p, b.oid) for p, b in c.files.items() if p == path or p.startswith(path + "/"))

    history = repo.history(commit)
    for newer, older in zip(history, history[1:], strict=False):
        if state(newer) != state(older):
            return newer
    return history[-1]


def _card_data(readme: Blob | None) -> dict[str, Any]:
    """The YAML front matter of a README (the hub's ``cardData``)."""
    if readme is None:
        return {}
    text = readme.data.decode("utf-8", errors="replace")
    if not text.startswith("---"):
        return {}
    head, sep, _ = text[3:].partition("\n---")
    if not sep:
        return {}
    try:
        data = yaml.safe_load(head)
    except yaml.YAMLError:
        return {}
    return data if isinstance(data, dict) else {}


def _model_fields(repo_id: str, commit: Commit, card: Mapping[str, Any]) -> dict[str, Any]:
    """What the hub adds to a model's info from its files: config, transformersInfo, safetensors, tags."""
    fields: dict[str, Any] = {"modelId": repo_id, "library_name": card.get("library_name"), "spaces": []}
    config_blob = commit.files.get("config.json")
    config: dict[str, Any] = {}
    if config_blob is not None:
        try:
            raw = json.loads(config_blob.data)
        except ValueError:
            raw = {}
        config = {k: raw[k] for k in ("architectures", "model_type", "auto_map") if k in raw}
    tokenizer_blob = commit.files.get("tokenizer_config.json")
    if tokenizer_blob is not None:
        try:
            raw = json.loads(tokenizer_blob.data)
        except ValueError:
            raw = {}
        tokens = ("bos_token", "eos_token", "pad_token", "unk_token")
        config["tokenizer_config"] = {k: raw[k] for k in tokens if k in raw}
    fields["config"] = config
    tags = ["transformers"] if config else []
    architectures = config.get("architectures") or []
    if any(a.endswith("ForCausalLM") for a in architectures):
        fields["pipeline_tag"] = "text-generation"
        fields["transformersInfo"] = {
            "auto_model": "AutoModelForCausalLM",
            "pipeline_tag": "text-generation",
            "processor": "AutoTokenizer",
        }
        tags.append("text-generation")
    if "model_type" in config:
        tags.append(str(config["model_type"]))
    if "auto_map" in config:
        tags.append("custom_code")
    parameters: dict[str, int] = {}
    for path, blob in commit.files.items():
        if path.endswith(".safetensors"):
            tags.append("safetensors")
            for dtype, count in _safetensors_parameters(blob.data).items():
                parameters[dtype] = parameters.get(dtype, 0) + count
    if parameters:
        fields["safetensors"] = {"parameters": parameters, "total": sum(parameters.values())}
    fields["tags"] = sorted(set(tags) | set(card.get("tags") or []))
    return fields


def _safetensors_parameters(data: bytes) -> dict[str, int]:
    """Parameters per dtype from a safetensors header (as the hub shows them)."""
    try:
        size = int.from_bytes(data[:8], "little")
        header = json.loads(data[8 : 8 + size])
    except ValueError:
        return {}
    out: dict[str, int] = {}
    for name, tensor in header.items():
        if name == "__metadata__":
            continue
        count = 1
        for dim in tensor["shape"]:
            count *= dim
        out[tensor["dtype"]] = out.get(tensor["dtype"], 0) + count
    return out


# ---------------------------------------------------------------------------------- the clients' state
_REMOVED = (
    "HF_HUB_OFFLINE",
    "HF_DATASETS_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "HF_TOKEN_PATH",
    "HF_STORED_TOKENS_PATH",
    "HF_OIDC_RESOURCE",
    "HF_OIDC_ID_TOKEN",
    "HUGGINGFACE_HUB_CACHE",
    "HUGGINGFACE_ASSETS_CACHE",
    "HUGGINGFACE_CO_STAGING",
    "HF_DATASETS_DOWNLOADED_DATASETS_PATH",
    "HF_DATASETS_EXTRACTED_DATASETS_PATH",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
)


def _paths(home: Path) -> dict[str, str]:
    return {
        "HF_HOME": str(home),
        "HF_HUB_CACHE": str(home / "hub"),
        "HF_ASSETS_CACHE": str(home / "assets"),
        "HF_XET_CACHE": str(home / "xet"),
        "HF_DATASETS_CACHE": str(home / "datasets"),
        "HF_MODULES_CACHE": str(home / "modules"),
    }


def subprocess_env(
    hub: LocalHub, home: Path, *, offline: bool = False, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of a child process that uses the local hub (``base``: default ``os.environ``)."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in _REMOVED}
    env.update(_paths(home))
    env["HF_ENDPOINT"] = hub.url
    env["HF_UPDATE_DOWNLOAD_COUNTS"] = "0"  # else datasets HEADs s3.amazonaws.com for every load
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    return env


@dataclass
class HubEnvironment:
    """What :func:`hub_environment` set up: the hub, the HF home and the monkeypatch that undoes it all."""

    hub: LocalHub
    home: Path
    monkeypatch: pytest.MonkeyPatch

    def set_offline(self, offline: bool = True) -> None:
        set_offline(self.monkeypatch, offline)

    def subprocess_env(self, *, offline: bool = False) -> dict[str, str]:
        return subprocess_env(self.hub, self.home, offline=offline)


def _setattr(monkeypatch: pytest.MonkeyPatch, module: str, name: str, value: Any) -> None:
    """``module.name = value`` until the test ends, if the module imports and has the attribute."""
    try:
        target = importlib.import_module(module)
    except ImportError:
        return
    if hasattr(target, name):
        monkeypatch.setattr(target, name, value)


def hub_environment(
    hub: LocalHub, home: Path, monkeypatch: pytest.MonkeyPatch, *, guard_network: bool = True
) -> HubEnvironment:
    """Point every hub client of this process at ``hub`` with a fresh ``home`` (``HF_HOME``), online, no
    token, until the test ends: the environment variables and what ``huggingface_hub.constants``,
    ``datasets.config`` and ``transformers`` computed from them at import (endpoint, URL template, caches,
    offline flag, token file, the default ``HfApi``'s endpoint, the trusted redirect origins), and the
    clients' per-process caches. ``guard_network``: name lookups of any host but the loopback fail and are
    recorded in ``hub.outside`` (nothing reaches huggingface.co, s3 or datasets-server)."""
    import datasets.config
    import huggingface_hub.constants as constants
    import huggingface_hub.hf_api
    import huggingface_hub.hf_file_system
    import huggingface_hub.utils._http as hub_http

    home.mkdir(parents=True, exist_ok=True)
    paths = _paths(home)
    for name in _REMOVED:
        monkeypatch.delenv(name, raising=False)
    for name, value in paths.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("HF_UPDATE_DOWNLOAD_COUNTS", "0")

    hf_home = paths["HF_HOME"]
    values: dict[str, Any] = {
        "_staging_mode": False,
        "ENDPOINT": hub.url,
        "HUGGINGFACE_CO_URL_TEMPLATE": hub.url + "/{repo_id}/resolve/{revision}/{filename}",
        "HF_URL_HOSTS": constants.HF_URL_HOSTS | {"127.0.0.1"},
        "HF_HOME": hf_home,
        "default_cache_path": paths["HF_HUB_CACHE"],
        "default_assets_cache_path": paths["HF_ASSETS_CACHE"],
        "HUGGINGFACE_HUB_CACHE": paths["HF_HUB_CACHE"],
        "HUGGINGFACE_ASSETS_CACHE": paths["HF_ASSETS_CACHE"],
        "HF_HUB_CACHE": paths["HF_HUB_CACHE"],
        "HF_ASSETS_CACHE": paths["HF_ASSETS_CACHE"],
        "default_xet_cache_path": paths["HF_XET_CACHE"],
        "HF_XET_CACHE": paths["HF_XET_CACHE"],
        "HF_HUB_OFFLINE": False,
        "HF_TOKEN_PATH": os.path.join(hf_home, "token"),
        "HF_STORED_TOKENS_PATH": os.path.join(hf_home, "stored_tokens"),
        "CHECK_FOR_UPDATE_DONE_PATH": os.path.join(hf_home, ".check_for_update_done"),
        "CHECK_FOR_SKILL_UPDATE_DONE_PATH": os.path.join(hf_home, ".check_for_skill_update_done"),
        "AGENT_HARNESSES_PATH": os.path.join(hf_home, ".agent_harnesses.json"),
    }
    for name, value in values.items():
        if hasattr(constants, name):
            monkeypatch.setattr(constants, name, value)
    # copies taken at import by `from ..constants import X`
    _setattr(monkeypatch, "huggingface_hub.utils._cache_manager", "HF_HUB_CACHE", paths["HF_HUB_CACHE"])
    _setattr(monkeypatch, "huggingface_hub.utils._cache_assets", "HF_ASSETS_CACHE", paths["HF_ASSETS_CACHE"])
    _setattr(monkeypatch, "huggingface_hub.utils._git_credential", "ENDPOINT", hub.url)
    # redirects followed with the Authorization header: the hub's origin, as if HF_ENDPOINT was set at import
    origin = hub_http._url_origin(hub.url)
    monkeypatch.setattr(hub_http, "_HUB_ORIGINS", hub_http._HUB_ORIGINS | {origin})
    # the module-level HfApi() behind huggingface_hub.model_info, dataset_info, list_repo_tree, ...
    monkeypatch.setattr(huggingface_hub.hf_api.api, "endpoint", hub.url)
    # the module-level HfFileSystem() (huggingface_hub.hffs): its endpoint and what it learnt about a hub
    hffs = huggingface_hub.hf_file_system.hffs
    monkeypatch.setattr(hffs, "endpoint", hub.url)
    monkeypatch.setattr(hffs._api, "endpoint", hub.url)
    monkeypatch.setattr(hffs, "dircache", {})
    monkeypatch.setattr(hffs, "_repo_and_revision_exists_cache", {})

    ds_home = Path(paths["HF_DATASETS_CACHE"])
    ds_values: dict[str, Any] = {
        "HF_ENDPOINT": hub.url,
        "HUB_DATASETS_URL": hub.url + "/datasets/{repo_id}/resolve/{revision}/{path}",
        "HF_CACHE_HOME": hf_home,
        "DEFAULT_HF_DATASETS_CACHE": str(ds_home),
        "HF_DATASETS_CACHE": ds_home,
        "DEFAULT_HF_MODULES_CACHE": paths["HF_MODULES_CACHE"],
        "HF_MODULES_CACHE": Path(paths["HF_MODULES_CACHE"]),
        "DEFAULT_DOWNLOADED_DATASETS_PATH": str(ds_home / "downloads"),
        "DOWNLOADED_DATASETS_PATH": ds_home / "downloads",
        "DEFAULT_EXTRACTED_DATASETS_PATH": str(ds_home / "downloads" / "extracted"),
        "EXTRACTED_DATASETS_PATH": ds_home / "downloads" / "extracted",
        "HF_HUB_OFFLINE": False,
        "HF_DATASETS_OFFLINE": False,
        "HF_UPDATE_DOWNLOAD_COUNTS": False,  # a HEAD to s3.amazonaws.com per load_dataset
        "USE_PARQUET_EXPORT": False,  # the dataset viewer: http://datasets-server.<endpoint host>
    }
    for name, value in ds_values.items():
        if hasattr(datasets.config, name):
            monkeypatch.setattr(datasets.config, name, value)

    modules = paths["HF_MODULES_CACHE"]
    for module in ("transformers.utils.hub", "transformers.utils", "transformers.dynamic_module_utils"):
        _setattr(monkeypatch, module, "HF_MODULES_CACHE", modules)
    _setattr(monkeypatch, "transformers.utils.hub", "_hf_api", None)  # a shared HfApi with the old endpoint
    monkeypatch.delitem(sys.modules, "transformers_modules", raising=False)

    if guard_network:
        _guard_network(hub, monkeypatch)
    clear_client_caches()
    return HubEnvironment(hub, home, monkeypatch)


def _guard_network(hub: LocalHub, monkeypatch: pytest.MonkeyPatch) -> None:
    real = socket.getaddrinfo

    def loopback_only(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else host
        if name is not None and name not in LOOPBACK:
            hub.outside.append((str(name), port))
            raise socket.gaierror(socket.EAI_NONAME, f"localhub: no network in tests (tried {name}:{port})")
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", loopback_only)


def set_offline(monkeypatch: pytest.MonkeyPatch, offline: bool = True) -> None:
    """``HF_HUB_OFFLINE=1`` (or 0) for this process from now on: the variable and the flags the clients
    read at import (``huggingface_hub.constants.HF_HUB_OFFLINE``: ``is_offline_mode()``, every request
    refused; ``datasets.config.HF_HUB_OFFLINE``); lampe-eval's cached reachability is forgotten."""
    import datasets.config
    import huggingface_hub.constants as constants

    if offline:
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    else:
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", offline)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", offline)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", offline)
    _clear_reachability()


def _clear_reachability() -> None:
    for module in ("lampe_eval.benchmarks.datafiles", "lampe_eval.data.hub"):
        try:
            cached = getattr(importlib.import_module(module), "_hub_reachable", None)
        except Exception:  # noqa: BLE001 - a module being rewritten must not break the hub's tests
            continue
        if cached is not None and hasattr(cached, "cache_clear"):
            cached.cache_clear()


def clear_client_caches() -> None:
    """Drop what the clients keep per process about a hub: ``HfFileSystem`` instances (their listings and
    "repo exists" answers), the shared HTTP client (its pooled connections and proxy settings), lampe-eval's
    cached reachability and the remote code modules transformers imported."""
    from huggingface_hub import HfFileSystem
    from huggingface_hub.utils._http import close_session

    HfFileSystem.clear_instance_cache()
    close_session()
    _clear_reachability()
    for name in [
        m for m in sys.modules if m == "transformers_modules" or m.startswith("transformers_modules.")
    ]:
        del sys.modules[name]  # remote code imported from a test's HF_MODULES_CACHE


def request_paths(hub: LocalHub, method: str | None = None, contains: str = "") -> list[str]:
    """The paths of the requests received (with ``method``, containing ``contains``)."""
    return [p for m, p in list(hub.requests) if (method is None or m == method) and contains in p]
