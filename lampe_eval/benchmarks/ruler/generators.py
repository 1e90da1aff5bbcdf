"""The five RULER generators (niah, variable_tracking, common_words_extraction, freq_words_extraction, qa).

Each generator splits a sample into what does not depend on the haystack size (``prepare``: keys,
values, queries, few-shot examples, drawn from the sample's own RNG) and a pure function of the size
(``build``: positions, distractors, word lists). :func:`lampe_eval.benchmarks.ruler.fitting.fit_to_budget`
then picks the largest size whose final prompt (chat template + answer prefix) fits the token budget.

Every random draw comes from ``random.Random`` seeded with a string naming (seed, task, sample index,
purpose[, size]), so a sample does not depend on how many samples are generated or in which order.

Where a generator places something to find, the sample's meta says where it ended up (the heat maps of
score by depth and length read it): NIAH ``needle_depths`` (the needles that answer the question, in
context order) and ``needle_chars`` (their offsets in the prompt, characters); variable tracking
``chain_depths`` (the queried chain's statements); QA ``gold_doc_depths`` (the gold documents). A depth is
the fraction of the haystack before the needle, in [0, 1]: 0 at the start of the context, 1 at its end.
"""

from __future__ import annotations

import random
import re
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ...errors import LampeEvalError
from .config import TaskConfig
from .fitting import fit_to_budget
from .haystack import DEPTHS, NOISE_SENTENCE, EssayHaystack, insert_at_depths
from .qa_data import QAData
from .words import common_words_vocabulary, large_english_vocabulary, random_needle

NEEDLE = "One of the special magic {type_needle_v} for {key} is: {value}."
DOCUMENT = "Document {i}:\n{document}"


def placed_offsets(context: str, needles: Sequence[str]) -> list[int]:
    """The character offset of each needle in ``context`` (-1 when absent; equal needles take successive
    occurrences)."""
    used: set[int] = set()
    out = []
    for needle in needles:
        at = context.find(needle)
        while at in used:
            at = context.find(needle, at + 1)
        if at >= 0:
            used.add(at)
        out.append(at)
    return out


def needle_depths(context: str, needles: Sequence[str], targets: Sequence[int]) -> list[tuple[float, int]]:
    """(depth, offset in ``context``) of ``needles[i]`` for each i in ``targets``, in context order.

    The depth is the share of the haystack (the context without the needles and a separator each) that
    comes before the needle: 0 before all of it, 1 after all of it, clamped to [0, 1]."""
    offsets = placed_offsets(context, needles)
    placed = [(at, len(n) + 1) for at, n in zip(offsets, needles, strict=True) if at >= 0]
    haystack = max(1, len(context) - sum(size for _, size in placed))
    out = []
    for i in targets:
        at = offsets[i]
        if at < 0:
            continue
        before = at - sum(size for other, size in placed if other < at)
        out.append((round(min(1.0, max(0.0, before / haystack)), 4), at))
    return sorted(out, key=lambda item: item[1])


@dataclass
class Built:
    """A candidate prompt at one haystack size."""

    prompt: str
    references: list[str]
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class GenEnv:
    """What the generators need from the job: the chat wrapper, the token counter and the data."""

    wrap: Callable[[str], str]  # user message -> prompt with the chat template (or unchanged)
    count: Callable[[str], int]  # prompt -> tokens, as the model will see them
    count_plain: Callable[[str], int]  # text -> tokens without special tokens (RULER's text_to_tokens)
    length: int
    seed: int
    essay: EssayHaystack | None = None
    qa: QAData | None = None
    closed_book: bool = False  # build prompts with an empty context (the closed-book control)


State = TypeVar("State")  # what a generator draws once per sample and builds every size from


class Generator(Generic[State]):
    unit = "units"

    def __init__(self, task: TaskConfig, env: GenEnv) -> None:
        self.task = task
        self.env = env
        self.args = task.args

    # -- randomness
    def rng(self, index: int | str, *purpose: object) -> random.Random:
        tag = "/".join(str(p) for p in (self.env.seed, self.task.name, index, *purpose))
        return random.Random(f"ruler/{tag}")

    # -- sizes
    def min_size(self, state: State) -> int:
        return 1

    def probe_size(self) -> int:
        return 16

    def max_size(self, state: State) -> int | None:
        return None

    def tolerance(self) -> int | None:
        return None

    def haystack(self) -> str:
        return "-"

    def shown(self, context: str) -> str:
        """What the template's context gets: the context, or nothing for the closed-book control."""
        return "" if self.env.closed_book else context

    # -- one sample
    def prepare(self, index: int) -> State:
        raise NotImplementedError

    def build(self, state: State, size: int) -> Built:
        raise NotImplementedError

    def sample_budget(self) -> int:
        return self.env.length - self.task.tokens_to_generate


# --------------------------------------------------------------------------- niah


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


# --------------------------------------------------------------------------- variable tracking


def _random_name(rng: random.Random, length: int) -> str:
    while True:
        name = "".join(rng.choices(string.ascii_uppercase, k=length))
        if name != "VAR":  # the statements' keyword: renaming a "VAR" name would rewrite every statement
            return name


@dataclass
class _VTState:
    index: int
    example: str
    chains: list[list[str]]
    names: list[str]
    value: str


class VariableTrackingGenerator(Generator[_VTState]):
    unit = "sentences"

    def __init__(self, task: TaskConfig, env: GenEnv) -> None:
        super().__init__(task, env)
        if self.args.get("type_haystack", "noise") != "noise":
            raise LampeEvalError(f"{task.name}: only the noise haystack is implemented for variable tracking")
        self.num_chains = int(self.args.get("num_chains", 1))
        self.num_hops = int(self.args.get("num_hops", 4))
        self._example: tuple[str, list[str]] | None = None

    def haystack(self) -> str:
        return "noise"

    def probe_size(self) -> int:
        return 10

    def min_size(self, state: _VTState) -> int:
        return self.num_hops + 1

    def _chains(self, rng: random.Random, name_length: int, hops: int, value: str | None) -> list[list[str]]:
        total = self.num_chains * (hops + 1)
        names = [_random_name(rng, name_length) for _ in range(total)]
        while len(set(names)) < total:  # RULER appends names until there are enough distinct ones
            names.append(_random_name(rng, name_length))
        chains = []
        for c in range(self.num_chains):
            chain_names = names[c * (hops + 1) : (c + 1) * (hops + 1)]
            first = value if value is not None else str(rng.randrange(10000, 99999))
            statements = [f"VAR {chain_names[0]} = {first}"]
            statements += [f"VAR {chain_names[j + 1]} = VAR {chain_names[j]} " for j in range(hops)]
            chains.append(statements)
        return chains

    @staticmethod
    def _names(chain: list[str]) -> list[str]:
        return [s.split()[1] for s in chain]

    def _noise(self, chains: list[list[str]], size: int, rng: random.Random) -> str:
        lines = [NOISE_SENTENCE] * size
        for chain in chains:
            positions = sorted(rng.sample(range(len(lines)), len(chain)))
            for j, (position, statement) in enumerate(zip(positions, chain, strict=True)):
                lines.insert(position + j, statement)
        return "\n".join(lines).replace(". \n", ".\n")

    def example(self) -> tuple[str, list[str]]:
        """The one in-context example: 3-letter names, value 12345, raw template + answer prefix (no chat
        wrapper), fitted to ``icl_max_tokens`` (500) tokens; built once per (seed, task)."""
        if self._example is None:
            rng = self.rng("icl")
            hops = min(10, self.num_hops)
            chains = self._chains(rng, 3, hops, "12345")
            raw = self.task.template + self.task.answer_prefix

            def build(size: int) -> str:
                context = self._noise(chains, size, self.rng("icl", "positions", size))
                return raw.format(context=context, query="12345", num_v=hops + 1)

            fit = fit_to_budget(
                build,
                self.env.count_plain,
                int(self.args.get("icl_max_tokens", 500)),
                min_size=hops + 1,
                probe_size=10,
                tolerance=0,
            )
            answers = self._names(chains[0])
            self._example = (fit.built + " " + " ".join(answers) + "\n", answers)
        return self._example

    def prepare(self, index: int) -> _VTState:
        rng = self.rng(index)
        example, old_names = self.example()
        for old in old_names:  # fresh names and value for this sample's copy of the example
            example = re.sub(rf"\b{re.escape(old)}\b", _random_name(rng, len(old)), example)
        example = example.replace("12345", str(rng.randrange(10000, 99999)))
        chains = self._chains(rng, 5, self.num_hops, None)
        value = chains[0][0].split("=")[-1].strip()
        return _VTState(index, example, chains, self._names(chains[0]), value)

    def build(self, state: _VTState, size: int) -> Built:
        context = self._noise(state.chains, size, self.rng(state.index, "positions", size))
        num_v = self.num_hops + 1
        body = (
            state.example
            + "\n"
            + self.task.template.format(context=self.shown(context), query=state.value, num_v=num_v)
        )
        prefix = self.task.answer_prefix.format(num_v=num_v, query=state.value)
        queried = state.chains[0]
        placed = needle_depths(context, queried, range(len(queried)))
        meta = {"answer_prefix": prefix, "chain_depths": [depth for depth, _ in placed]}
        return Built(self.env.wrap(body) + prefix, list(state.names), meta)


# --------------------------------------------------------------------------- common words


@dataclass
class _CWEState:
    index: int
    fewshot: str
    order: list[str]  # this sample's random order of the vocabulary: the first n words are used
    large_order: list[str] | None = None


class CommonWordsGenerator(Generator[_CWEState]):
    unit = "distinct words"

    def __init__(self, task: TaskConfig, env: GenEnv) -> None:
        super().__init__(task, env)
        self.num_cw = int(self.args.get("num_cw", 10))
        self.num_fewshot = int(self.args.get("num_fewshot", 1))
        if env.length < 4096:  # RULER's short-context setting
            self.example_shape = (20, 3, 1)
            self.freqs = (6, 1)
        else:
            self.example_shape = (40, 10, 3)
            self.freqs = (int(self.args.get("freq_cw", 30)), int(self.args.get("freq_ucw", 3)))

    def haystack(self) -> str:
        return "wonderwords"

    def probe_size(self) -> int:
        return 64

    def min_size(self, state: _CWEState) -> int:
        return self.num_cw

    def _listing(
        self, rng: random.Random, words: list[str], common_repeats: int, uncommon_repeats: int
    ) -> tuple[str, list[str]]:
        common, uncommon = words[: self.num_cw], words[self.num_cw :]
        listed = common * common_repeats + uncommon * uncommon_repeats
        rng.shuffle(listed)
        return " ".join(f"{i + 1}. {w}" for i, w in enumerate(listed)), common

    def _prompt(self, context: str) -> str:
        return self.env.wrap(self.task.template.format(context=context, query="")) + self.task.answer_prefix

    def prepare(self, index: int) -> _CWEState:
        rng = self.rng(index)
        vocabulary = common_words_vocabulary()
        shots = []
        for _ in range(self.num_fewshot):
            num_words, common_repeats, uncommon_repeats = self.example_shape
            words = rng.sample(vocabulary, num_words)
            context, answer = self._listing(rng, words, common_repeats, uncommon_repeats)
            listed = " ".join(f"{i + 1}. {w}" for i, w in enumerate(answer))
            shots.append(self._prompt(context) + " " + listed)
        return _CWEState(index, "\n".join(shots), rng.sample(vocabulary, len(vocabulary)))

    def _words(self, state: _CWEState, size: int) -> list[str]:
        if size <= len(state.order):
            return state.order[:size]
        if state.large_order is None:  # more distinct words than wonderwords has
            large = large_english_vocabulary()
            state.large_order = self.rng(state.index, "large").sample(large, len(large))
        if size > len(state.large_order):
            raise LampeEvalError(
                f"cwe needs {size} distinct words; the word lists have {len(state.large_order)}"
            )
        return state.large_order[:size]

    def build(self, state: _CWEState, size: int) -> Built:
        rng = self.rng(state.index, "order", size)
        context, answer = self._listing(rng, self._words(state, size), *self.freqs)
        prompt = (state.fewshot + "\n" if state.fewshot else "") + self._prompt(self.shown(context))
        return Built(prompt, answer, {"answer_prefix": self.task.answer_prefix})


# --------------------------------------------------------------------------- frequent words


@dataclass
class _FWEState:
    index: int
    vocab: list[str]


class FrequentWordsGenerator(Generator[_FWEState]):
    unit = "words"

    def __init__(self, task: TaskConfig, env: GenEnv) -> None:
        super().__init__(task, env)
        from scipy.special import zeta

        self.alpha = float(self.args.get("alpha", 2.0))
        self.zeta = float(zeta(self.alpha))
        self.word_length = int(self.args.get("coded_wordlen", 6))
        size = int(self.args.get("vocab_size", -1))
        self.vocab_size = (env.length - task.tokens_to_generate) // 50 if size == -1 else size
        if self.vocab_size < 4:
            raise LampeEvalError(
                f"{task.name}: length {env.length} is too short (vocabulary of {self.vocab_size})"
            )

    def haystack(self) -> str:
        return "coded words"

    def probe_size(self) -> int:
        return max(64, self.sample_budget() // 6)

    def min_size(self, state: _FWEState) -> int:
        return 10

    def prepare(self, index: int) -> _FWEState:
        rng = self.rng(index)
        letters = string.ascii_lowercase
        vocab = ["".join(rng.choices(letters, k=self.word_length)) for _ in range(self.vocab_size)]
        while len(set(vocab)) < self.vocab_size:
            vocab.append("".join(rng.choices(letters, k=self.word_length)))
        vocab = sorted(set(vocab))
        rng.shuffle(vocab)
        vocab[0] = "..."  # the most frequent "word" is noise
        return _FWEState(index, vocab)

    def build(self, state: _FWEState, size: int) -> Built:
        words: list[str] = []
        for rank, word in enumerate(state.vocab, start=1):
            words.extend([word] * int(size * (rank**-self.alpha) / self.zeta))
        self.rng(state.index, "order", size).shuffle(words)
        prompt = (
            self.env.wrap(self.task.template.format(context=self.shown(" ".join(words)), query=""))
            + self.task.answer_prefix
        )
        return Built(prompt, state.vocab[1:4], {"answer_prefix": self.task.answer_prefix})


# --------------------------------------------------------------------------- qa


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


GENERATOR_CLASSES: dict[str, type[Generator]] = {
    "niah": NiahGenerator,
    "variable_tracking": VariableTrackingGenerator,
    "common_words_extraction": CommonWordsGenerator,
    "freq_words_extraction": FrequentWordsGenerator,
    "qa": QAGenerator,
}
