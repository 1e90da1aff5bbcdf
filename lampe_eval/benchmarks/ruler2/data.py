"""RULERv2's data: MMLU (mk/mv_niah easy-hard) and HotpotQA distractor (qa_*), in the shapes the official
generators use.

- **MMLU** (``prepare_mmlu.py``): ``cais/mmlu`` config ``all``; the ``test`` split gives the needles (the
  questions asked), ``auxiliary_train`` the haystack. Each item is the question followed by
  ``"\\nA. ...\\nB. ...\\nC. ...\\nD. ..."``, every whitespace run collapsed to one space, with its letter
  and its few-shot solution ``" \\boxed{X}"``.
- **HotpotQA** (``prepare_qa.py``): ``hotpotqa/hotpot_qa`` config ``distractor``; ``train`` paragraphs
  (``f"{title}\\n{''.join(sentences)}"``) are the haystack, ``validation`` questions the needles, each with
  its supporting paragraphs (``context``, the titles named in ``supporting_facts``) and the other paragraphs
  of its record (``distractor``), in the record's order. The official haystack is ``list(set(...))``, whose
  order depends on ``PYTHONHASHSEED``; here it is ``sorted(set(...))`` (a deliberate deviation).

Sources, first found wins: files in ``--data-dir`` (``DIR/ruler2/`` or ``DIR``): ``mmlu_test.jsonl`` and
``mmlu_auxiliary_train.jsonl`` (JSON Lines or ``.json`` arrays of the hub's rows: question, choices, answer),
``hotpot_dev_distractor_v1.json`` and ``hotpot_train_v1.1.json`` (the official HotpotQA files, or the hub's
rows); else the splits' Parquet files on the hub (``cais/mmlu`` ``all``, ``hotpotqa/hotpot_qa``
``distractor``; their cards declare them), downloaded into the hub cache or read from it offline. Otherwise
a one-line :class:`MissingDataError`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from ...data import hub
from ...data.sources import DataSource, HubFiles
from ...errors import MissingDataError
from ..datafiles import Field, Schema, check_records, find_local_file, read_records, read_rows

BENCHMARK = "ruler2"
LETTERS = ("A", "B", "C", "D")
MMLU_HUB = ("cais/mmlu", "all")
HOTPOT_HUB = ("hotpotqa/hotpot_qa", "distractor")
MMLU_FILES = {
    "test": ("mmlu_test.jsonl", "mmlu_test.json"),
    "auxiliary_train": ("mmlu_auxiliary_train.jsonl", "mmlu_auxiliary_train.json"),
}
HOTPOT_FILES = {
    "validation": ("hotpot_dev_distractor_v1.json", "hotpot_dev_distractor_v1.jsonl"),
    "train": ("hotpot_train_v1.1.json", "hotpot_train_v1.1.jsonl"),
}

MMLU_SCHEMA = Schema(
    "MMLU",
    (
        Field("question", (str,)),
        Field("choices", (list,), items=str),
        Field("answer", (int,)),
    ),
    extra=lambda r: (
        None
        if len(r["choices"]) == 4 and 0 <= r["answer"] < 4
        else "MMLU record needs 4 choices and an answer in 0-3"
    ),
)


@dataclass(frozen=True)
class MCQuestion:
    """One MMLU question as the generator shows it."""

    question: str  # the question and its four options, whitespace runs collapsed
    answer: str  # its letter
    solution: str  # the few-shot solution text: " \\boxed{<letter>}"


@dataclass(frozen=True)
class MMLUData:
    source: str
    needles: tuple[MCQuestion, ...]  # test
    haystack: tuple[MCQuestion, ...]  # auxiliary_train

    @property
    def fingerprint(self) -> str:
        return _digest([[q.question, q.answer] for q in (*self.needles, *self.haystack)])


@dataclass(frozen=True)
class HotpotNeedle:
    question: str
    answers: tuple[str, ...]
    context: tuple[str, ...]  # the supporting paragraphs
    distractor: tuple[str, ...]  # the record's other paragraphs


@dataclass(frozen=True)
class HotpotData:
    source: str
    needles: tuple[HotpotNeedle, ...]  # validation
    haystack: tuple[str, ...]  # train paragraphs, sorted and unique

    @property
    def fingerprint(self) -> str:
        needles = [[n.question, n.answers, n.context, n.distractor] for n in self.needles]
        return _digest([needles, self.haystack])


def _digest(payload: Any) -> str:
    return hashlib.sha256(json.dumps(payload, ensure_ascii=False).encode("utf-8")).hexdigest()[:10]


def mmlu_question(row: Mapping[str, Any]) -> MCQuestion:
    choices = row["choices"]
    text = row["question"] + "".join(
        f"\n{letter}. {choice}" for letter, choice in zip(LETTERS, choices, strict=True)
    )
    letter = LETTERS[int(row["answer"])]
    return MCQuestion(re.sub(r"\s+", " ", text), letter, " \\boxed{" + letter + "}")


def paragraph(title: str, sentences: Iterable[str]) -> str:
    return f"{title}\n{''.join(sentences)}"


def _hotpot_context(row: Mapping[str, Any]) -> list[tuple[str, list[str]]]:
    """(title, sentences) of each paragraph of an official record or a hub row."""
    context = row["context"]
    if isinstance(context, Mapping):  # the hub's columns
        return list(zip(context["title"], context["sentences"], strict=True))
    return [(c[0], c[1]) for c in context]


def _supporting_titles(row: Mapping[str, Any]) -> list[str]:
    facts = row["supporting_facts"]
    return list(facts["title"]) if isinstance(facts, Mapping) else [f[0] for f in facts]


def hotpot_needle(row: Mapping[str, Any]) -> HotpotNeedle:
    supporting = _supporting_titles(row)
    docs = [(title in supporting, paragraph(title, s)) for title, s in _hotpot_context(row)]
    return HotpotNeedle(
        question=row["question"],
        answers=(row["answer"],),
        context=tuple(d for sup, d in docs if sup),
        distractor=tuple(d for sup, d in docs if not sup),
    )


def hotpot_haystack(rows: Iterable[Mapping[str, Any]]) -> tuple[str, ...]:
    docs: set[str] = set()
    for row in rows:
        docs.update(paragraph(title, s) for title, s in _hotpot_context(row))
    return tuple(sorted(docs))


def split_sources(
    what: str, files: Mapping[str, tuple[str, ...]], hub_config: tuple[str, str], data_dir: str | None
) -> dict[str, DataSource]:
    """Where each split comes from: the local files when every split has one, else the splits' data files
    on the hub (the repository's README declares them; Parquet)."""
    local = {split: find_local_file(BENCHMARK, None, data_dir, names) for split, names in files.items()}
    if all(path is not None for path in local.values()):
        return {
            split: DataSource(BENCHMARK, f"{what} {split}", "file", str(path))
            for split, path in local.items()
        }
    repo, config = hub_config
    names = " and ".join(n[0] for n in files.values())
    fix = f"lampe-eval data fetch --bench {BENCHMARK}, or put {names} in --data-dir"
    return {
        split: hub.hub_source(
            BENCHMARK, f"{what} {split}", HubFiles(repo, config=config, split=split), data_dir, fix
        )
        for split in files
    }


def _splits(
    what: str,
    files: Mapping[str, tuple[str, ...]],
    hub_config: tuple[str, str],
    data_dir: str | None,
    columns: Mapping[str, Sequence[str]] | None = None,
) -> tuple[dict[str, Iterable[Mapping[str, Any]]], str]:
    """Each split's rows and where they come from (:func:`split_sources`; ``columns`` keeps only what a
    split needs: HotpotQA's train split is large)."""
    rows: dict[str, Iterable[Mapping[str, Any]]] = {}
    labels = []
    for split, source in split_sources(what, files, hub_config, data_dir).items():
        if source.hub is None:
            rows[split], label = read_records(Path(source.location)), f"file:{source.location}"
        else:
            try:
                snapshot = hub.read(source.hub, copies=hub.copy_folders(data_dir, BENCHMARK))
            except MissingDataError as err:
                raise MissingDataError(f"{BENCHMARK}: {what}: {err}") from err
            rows[split] = read_rows(list(snapshot.paths.values()), (columns or {}).get(split))
            label = snapshot.label()
        labels.append(label)
    return rows, ",".join(labels)


@lru_cache(maxsize=2)
def load_mmlu(data_dir: str | None = None) -> MMLUData:
    splits, source = _splits("MMLU", MMLU_FILES, MMLU_HUB, data_dir)
    questions = {}
    for split, rows in splits.items():
        records = [dict(r) for r in rows]
        check_records(records, MMLU_SCHEMA, f"{source} ({split})")
        questions[split] = tuple(mmlu_question(r) for r in records)
    return MMLUData(source=source, needles=questions["test"], haystack=questions["auxiliary_train"])


@lru_cache(maxsize=2)
def load_hotpotqa(data_dir: str | None = None) -> HotpotData:
    rows, source = _splits("HotpotQA", HOTPOT_FILES, HOTPOT_HUB, data_dir, {"train": ("context",)})
    try:
        needles = tuple(hotpot_needle(r) for r in rows["validation"])
        haystack = hotpot_haystack(rows["train"])
    except (KeyError, TypeError, ValueError, IndexError) as err:
        raise MissingDataError(f"{source}: not in HotpotQA's format ({type(err).__name__}: {err})") from err
    return HotpotData(source=source, needles=needles, haystack=haystack)
