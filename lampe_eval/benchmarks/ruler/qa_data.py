"""SQuAD v2 (dev) and HotpotQA (dev, distractor) in the shape RULER's QA generator uses.

``docs``: sorted unique documents (SQuAD paragraphs; HotpotQA ``"{title}\\n{''.join(sentences)}"``).
``qas``: questions in data-set order, each with its gold answers, its gold documents and (SQuAD) the other
paragraphs of the same article, which RULER prefers as distractors. SQuAD keeps answerable questions only.

Sources, first found wins: the official JSON files in ``--data-dir`` (``squad.json`` or ``dev-v2.0.json``;
``hotpotqa.json`` or ``hotpot_dev_distractor_v1.json``), then ``datasets`` (``rajpurkar/squad_v2``,
``hotpotqa/hotpot_qa``) when the hub is reachable. Offline without files: :class:`MissingDataError`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from ...errors import MissingDataError
from ..datafiles import hub_reachable

FILES = {
    "squad": ("squad.json", "dev-v2.0.json"),
    "hotpotqa": ("hotpotqa.json", "hotpot_dev_distractor_v1.json"),
}
HUB = {
    "squad": ("rajpurkar/squad_v2", None, "validation"),
    "hotpotqa": ("hotpotqa/hotpot_qa", "distractor", "validation"),
}


@dataclass
class QAItem:
    query: str
    outputs: list[str]
    context: list[int]  # gold documents (HotpotQA: supporting-fact documents first)
    more_context: list[int] = field(default_factory=list)


@dataclass
class QAData:
    name: str
    source: str
    docs: list[str]
    qas: list[QAItem]

    @property
    def fingerprint(self) -> str:
        h = hashlib.sha256()
        for doc in self.docs:
            h.update(doc.encode("utf-8"))
            h.update(b"\0")
        for qa in self.qas:
            h.update(json.dumps([qa.query, qa.outputs, qa.context, qa.more_context]).encode("utf-8"))
        return h.hexdigest()[:10]


def squad_from_articles(articles: list[dict[str, Any]], source: str) -> QAData:
    """``articles``: SQuAD v2 ``data`` (title, paragraphs[context, qas[question, answers, is_impossible]])."""
    docs = sorted({p["context"] for a in articles for p in a["paragraphs"]})
    index = {doc: i for i, doc in enumerate(docs)}
    qas: list[QAItem] = []
    for article in articles:
        article_docs = [index[p["context"]] for p in article["paragraphs"]]
        for paragraph in article["paragraphs"]:
            doc = index[paragraph["context"]]
            for qa in paragraph["qas"]:
                answers = [a["text"] for a in qa.get("answers", [])]
                if qa.get("is_impossible", not answers):
                    continue
                more = [d for d in article_docs if d != doc]
                qas.append(QAItem(qa["question"], answers, [doc], more))
    return QAData("squad", source, docs, qas)


def hotpotqa_from_items(items: list[dict[str, Any]], source: str) -> QAData:
    """``items``: HotpotQA (question, answer, context[[title, sentences]], supporting_facts[[title, i]])."""

    def doc_text(title: str, sentences: list[str]) -> str:
        return f"{title}\n{''.join(sentences)}"

    docs = sorted({doc_text(t, s) for item in items for t, s in item["context"]})
    index = {doc: i for i, doc in enumerate(docs)}
    qas: list[QAItem] = []
    for item in items:
        supporting = {fact[0] for fact in item.get("supporting_facts", [])}
        gold = [(title in supporting, index[doc_text(title, s)]) for title, s in item["context"]]
        ordered = [d for sup, d in gold if sup] + [d for sup, d in gold if not sup]
        qas.append(QAItem(item["question"], [item["answer"]], ordered))
    return QAData("hotpotqa", source, docs, qas)


def _from_file(name: str, path: Path) -> QAData:
    data = json.loads(path.read_text(encoding="utf-8"))
    if name == "squad":
        return squad_from_articles(data["data"] if isinstance(data, dict) else data, str(path))
    return hotpotqa_from_items(data, str(path))


def _from_hub(name: str) -> QAData:
    import datasets

    repo, config, split = HUB[name]
    ds = (
        datasets.load_dataset(repo, config, split=split)
        if config
        else datasets.load_dataset(repo, split=split)
    )
    if name == "squad":
        articles: dict[str, dict[str, Any]] = {}
        paragraphs: dict[tuple[str, str], dict[str, Any]] = {}
        for row in ds:
            article = articles.setdefault(row["title"], {"title": row["title"], "paragraphs": []})
            key = (row["title"], row["context"])
            if key not in paragraphs:
                paragraphs[key] = {"context": row["context"], "qas": []}
                article["paragraphs"].append(paragraphs[key])
            texts = list(row["answers"]["text"])
            paragraphs[key]["qas"].append(
                {
                    "question": row["question"],
                    "answers": [{"text": t} for t in texts],
                    "is_impossible": not texts,
                }
            )
        return squad_from_articles(list(articles.values()), f"{repo} ({split})")
    items = []
    for row in ds:
        context = list(zip(row["context"]["title"], row["context"]["sentences"], strict=True))
        facts = list(zip(row["supporting_facts"]["title"], row["supporting_facts"]["sent_id"], strict=True))
        items.append(
            {
                "question": row["question"],
                "answer": row["answer"],
                "context": context,
                "supporting_facts": facts,
            }
        )
    return hotpotqa_from_items(items, f"{repo}/{config} ({split})")


@lru_cache(maxsize=4)
def load_qa(name: str, data_dir: str | None = None) -> QAData:
    if name not in FILES:
        raise MissingDataError(f"unknown RULER QA data set {name!r}; choose squad or hotpotqa")
    if data_dir:
        for filename in FILES[name]:
            path = Path(data_dir) / filename
            if path.is_file():
                return _from_file(name, path)
    if not hub_reachable():
        raise MissingDataError(
            f"{name} is not available offline: put {' or '.join(FILES[name])} in --data-dir "
            f"(the official file) or run where the Hugging Face hub is reachable"
        )
    try:
        return _from_hub(name)
    except Exception as err:  # noqa: BLE001 - report any hub/data set failure the same way
        raise MissingDataError(f"could not load {name} through datasets: {err}".splitlines()[0]) from err
