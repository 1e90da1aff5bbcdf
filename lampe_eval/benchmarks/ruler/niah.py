"""RULER's niah generator (the eight niah_* tasks): needles "One of the special magic ... for KEY is: VALUE."
in a noise, essay or distractor-needle haystack; the meta says where the answering needles ended up."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from ...errors import LampeEvalError
from .config import TaskConfig
from .generator_base import Built, GenEnv, Generator, needle_depths
from .haystack import DEPTHS, NOISE_SENTENCE, insert_at_depths
from .words import random_needle

NEEDLE = "One of the special magic {type_needle_v} for {key} is: {value}."


@dataclass
class _NiahState:
    index: int
    keys: list[str]
    needles: list[str]
    query: str
    answers: list[str]
    depths: list[int]
    targets: list[int] = field(default_factory=list)  # the needles that answer the question
    distractors: list[str] = field(default_factory=list)
    distractor_rng: random.Random | None = None


class NiahGenerator(Generator[_NiahState]):
    def __init__(self, task: TaskConfig, env: GenEnv) -> None:
        super().__init__(task, env)
        a = self.args
        self.kind = a.get("type_haystack", "essay")
        if self.kind not in ("noise", "essay", "needle"):
            raise LampeEvalError(f"{task.name}: unknown type_haystack {self.kind!r}")
        if self.kind == "essay" and env.essay is None:
            raise LampeEvalError(f"{task.name}: the essay haystack is not loaded")
        self.type_k = a.get("type_needle_k", "words")
        self.type_v = a.get("type_needle_v", "numbers")
        self.num_q = int(a.get("num_needle_q", 1))
        self.num_k = max(int(a.get("num_needle_k", 1)), self.num_q)
        self.num_v = int(a.get("num_needle_v", 1))
        template, prefix, type_v = task.template, task.answer_prefix, self.type_v
        if self.num_q * self.num_v == 1:  # RULER's singular rewrite of the template
            for old, new in (("Some", "A"), ("are all", "is"), ("are", "is"), ("answers", "answer")):
                template, prefix = template.replace(old, new), prefix.replace(old, new)
            type_v = type_v[:-1]
        self.template, self.prefix, self.type_v_text = template, prefix, type_v
        self.unit = {"noise": "sentences", "needle": "distractor needles", "essay": "words"}[self.kind]

    def haystack(self) -> str:
        if self.kind == "essay":
            assert self.env.essay is not None
            return f"essay: {self.env.essay.description}"
        return self.kind

    def probe_size(self) -> int:
        return 500 if self.kind == "essay" else 25

    def min_size(self, state: _NiahState) -> int:
        return len(state.needles) if self.kind != "essay" else 1

    def prepare(self, index: int) -> _NiahState:
        rng = self.rng(index)
        keys: list[str] = []
        values: list[list[str]] = []
        needles: list[str] = []
        for _ in range(self.num_k):
            key = random_needle(rng, self.type_k)
            while key in keys:
                key = random_needle(rng, self.type_k)
            keys.append(key)
            values.append([random_needle(rng, self.type_v) for _ in range(self.num_v)])
            needles.extend(NEEDLE.format(type_needle_v=self.type_v, key=key, value=v) for v in values[-1])
        rng.shuffle(needles)
        chosen = rng.sample(range(self.num_k), self.num_q)
        queries = [keys[i] for i in chosen]
        query = ", ".join(queries[:-1]) + ", and " + queries[-1] if len(queries) > 1 else queries[0]
        answers = [v for i in chosen for v in values[i]]
        depths = rng.sample(DEPTHS, len(needles)) if self.kind == "essay" else []
        asked = [
            NEEDLE.format(type_needle_v=self.type_v, key=keys[i], value=v) for i in chosen for v in values[i]
        ]
        targets = sorted({needles.index(needle) for needle in asked})
        return _NiahState(index, keys, needles, query, answers, depths, targets)

    def _distractors(self, state: _NiahState, n: int) -> list[str]:
        if state.distractor_rng is None:
            state.distractor_rng = self.rng(state.index, "distractors")
        rng = state.distractor_rng
        while len(state.distractors) < n:
            key = random_needle(rng, self.type_k)
            if key in state.keys:  # a distractor must not answer the question
                continue
            value = random_needle(rng, self.type_v)
            state.distractors.append(NEEDLE.format(type_needle_v=self.type_v, key=key, value=value))
        return state.distractors[:n]

    def context(self, state: _NiahState, size: int) -> str:
        if self.kind == "essay":
            assert self.env.essay is not None
            return insert_at_depths(self.env.essay.sentences(size), state.needles, state.depths)
        lines = [NOISE_SENTENCE] * size if self.kind == "noise" else self._distractors(state, size)
        positions = sorted(self.rng(state.index, "positions", size).sample(range(size), len(state.needles)))
        for position, needle in zip(reversed(positions), state.needles, strict=True):
            lines.insert(position, needle)
        return "\n".join(lines)

    def build(self, state: _NiahState, size: int) -> Built:
        context = self.context(state, size)
        body = self.template.format(
            type_needle_v=self.type_v_text, context=self.shown(context), query=state.query
        )
        prefix = self.prefix.format(type_needle_v=self.type_v_text, query=state.query)
        prompt = self.env.wrap(body) + prefix
        placed = needle_depths(context, state.needles, state.targets)
        start = prompt.find(context)
        meta: dict[str, Any] = {"answer_prefix": prefix, "needle_depths": [depth for depth, _ in placed]}
        if start >= 0:
            meta["needle_chars"] = [start + at for _, at in placed]
        return Built(prompt, list(state.answers), meta)
