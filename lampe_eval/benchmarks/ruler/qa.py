"""RULER's qa generator (qa_1, qa_2): the question's gold documents among distractors (the data set's
related documents first, then random others), shuffled; the meta says where the gold documents ended up."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from ...errors import LampeEvalError
from .config import TaskConfig
from .generator_base import Built, GenEnv, Generator

DOCUMENT = "Document {i}:\n{document}"


@dataclass
class _QAState:
    index: int
    query: str
    outputs: list[str]
    gold: list[int]
    more: list[int]
    extra: list[int] = field(default_factory=list)
    extra_rng: random.Random | None = None


class QAGenerator(Generator[_QAState]):
    unit = "documents"

    def __init__(self, task: TaskConfig, env: GenEnv) -> None:
        super().__init__(task, env)
        if env.qa is None:
            raise LampeEvalError(f"{task.name}: the QA data set is not loaded")
        self.data = env.qa

    def haystack(self) -> str:
        return f"{self.data.name}: {self.data.source}"

    def probe_size(self) -> int:
        return 10

    def prepare(self, index: int) -> _QAState:
        if index >= len(self.data.qas):
            raise IndexError(f"{self.task.name} has {len(self.data.qas)} questions")
        qa = self.data.qas[index]
        return _QAState(index, qa.query, list(qa.outputs), list(qa.context), list(qa.more_context))

    def _extra(self, state: _QAState, n: int) -> list[int]:
        """The first ``n`` of this sample's random order of the remaining documents."""
        if state.extra_rng is None:
            state.extra_rng = self.rng(state.index, "distractors")
        taken = set(state.gold) | set(state.more) | set(state.extra)
        available = len(self.data.docs) - len(taken)
        need = min(n - len(state.extra), available)
        if need > 0 and need > available // 2:
            rest = [d for d in range(len(self.data.docs)) if d not in taken]
            state.extra.extend(state.extra_rng.sample(rest, need))
        else:
            while need > 0:
                doc = state.extra_rng.randrange(len(self.data.docs))
                if doc not in taken:
                    taken.add(doc)
                    state.extra.append(doc)
                    need -= 1
        return state.extra[:n]

    def build(self, state: _QAState, size: int) -> Built:
        docs = self.data.docs
        meta: dict[str, Any] = {"answer_prefix": self.task.answer_prefix}
        if size < len(docs):
            if size < len(state.gold):  # shorter than the gold documents (RULER fails here): keep the first
                chosen = state.gold[:size]
                meta["gold_docs_kept"] = f"{size}/{len(state.gold)}"
            elif size - len(state.gold) <= len(state.more):
                chosen = state.gold + self.rng(state.index, "more", size).sample(
                    state.more, size - len(state.gold)
                )
            else:
                chosen = (
                    state.gold + state.more + self._extra(state, size - len(state.gold) - len(state.more))
                )
            texts = [docs[i] for i in chosen]
            gold = {k for k, doc in enumerate(chosen) if doc in state.gold}
        else:  # more documents than the data set has: repeat it
            texts = (docs * (size // len(docs) + 1))[:size]
            gold = set()
        order = list(range(len(texts)))
        self.rng(state.index, "order", size).shuffle(order)  # the same permutation as shuffling the texts
        texts = [texts[k] for k in order]
        if gold:  # where the gold documents ended up: 0 first, 1 last
            places = [p for p, k in enumerate(order) if k in gold]
            meta["gold_doc_depths"] = [round(p / max(1, len(order) - 1), 4) for p in places]
        context = "\n\n".join(DOCUMENT.format(i=i + 1, document=d) for i, d in enumerate(texts))
        body = self.task.template.format(context=self.shown(context), query=state.query)
        return Built(self.env.wrap(body) + self.task.answer_prefix, list(state.outputs), meta)
