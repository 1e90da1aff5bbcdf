"""RULERv2's three generators and the official fitting, drawing from one random stream per (task, length).

A port (read, not copied) of nemo-skills' ``nemo_skills/dataset/ruler2/``: ``prepare_niah.py`` (the basic
levels: a haystack of needle-like lines), ``prepare_mmlu.py`` (mk/mv_niah easy-hard: MMLU questions as needles
and haystack) and ``prepare_qa.py`` (qa_*: HotpotQA paragraphs). Commits: see the package README.

**The random stream.** The official scripts seed the global ``random`` module with ``--random_seed`` and
draw from it in a fixed order; :func:`generate` does the same with one ``random.Random(seed)``:

1. the size estimate: one question built with ``incremental`` haystack items;
2. a binary search over the haystack size, one question built (and counted) per probe;
3. (mmlu) ``random.sample`` of the needle indices (``min(len(test), num_samples)`` of them);
4. each sample in turn, each attempt of its step-down (``incremental`` fewer items while the question is
   longer than the length) drawing anew.

Every draw uses the same ``random.Random`` methods with the same arguments as the official code (a list of
``n`` items repeated ``r`` times is sampled as ``range(n * r)``: the same draws), so the same seed, data and
tokenizer give the same questions. Questions are counted as the official ``HFTokenizer`` does:
``len(tokenizer.tokenize(question))``, the raw question without chat template, against the length itself
(no room is kept for the answer).

Official ``prepare_niah.py`` exists in two versions: 5536f54 shuffles the needles with
``random.Random(seed)`` made anew at every call, 8779b75 (later) with the global stream.
``shuffle="seeded"`` / ``"global"`` picks one (the benchmark's default: ``global``).
"""

from __future__ import annotations

import math
import random
import uuid
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...errors import LampeEvalError
from .config import TaskConfig
from .data import HotpotData, MCQuestion, MMLUData
from .words import official_keys

SHUFFLES = ("global", "seeded")


@dataclass
class Built:
    """One generated question (``generate_input_output``'s result)."""

    question: str
    references: list[str]
    context_span: tuple[int, int]  # the context's characters in the question (the closed-book cut)
    depths: list[float]  # where the answer's needle(s) lie among the context items, in [0, 1]
    meta: dict[str, Any] = field(default_factory=dict)


def random_number(rng: random.Random, digits: int = 7) -> str:
    return str(rng.randint(10 ** (digits - 1), 10**digits - 1))


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, 11th, 21st ... (inflect's ``ordinal`` of an integer)."""
    suffix = "th" if n % 100 in (11, 12, 13) else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _split_span(before: str, context: str) -> tuple[int, int]:
    return len(before), len(before) + len(context)


class Generator(ABC):
    """One official generator with its task's arguments."""

    unit = "items"
    probe_index = 0  # the needle the size estimate and the binary search use

    def __init__(self, task: TaskConfig, seed: int) -> None:
        self.task = task
        self.args = task.args
        self.seed = seed

    @abstractmethod
    def incremental(self, length: int) -> int:
        """The size step (estimate size, search floor, step-down)."""

    @abstractmethod
    def build(self, rng: random.Random, index: int, size: int) -> Built:
        """``generate_input_output``: the question for needle ``index`` with ``size`` haystack items."""

    def available(self, num_samples: int) -> int:
        return num_samples

    def sample_indices(self, rng: random.Random, num_samples: int) -> list[int]:
        return list(range(self.available(num_samples)))


class NiahGenerator(Generator):
    """``prepare_niah.py`` with ``--type_haystack needle``: keys and values in "One of the special magic ..."
    lines; the haystack lines are made like the needles (with ``num_needle_v`` > 1, each haystack key has
    ``num_needle_v`` values, shuffled)."""

    unit = "lines"

    def __init__(self, task: TaskConfig, seed: int, shuffle: str = "global") -> None:
        super().__init__(task, seed)
        if shuffle not in SHUFFLES:
            raise LampeEvalError(f"ruler2: niah_shuffle={shuffle}: choose one of {', '.join(SHUFFLES)}")
        self.shuffle = shuffle
        a = self.args
        self.num_v = int(a.get("num_needle_v", 1))
        self.num_q = int(a.get("num_needle_q", 1))
        self.num_k = max(int(a.get("num_needle_k", 1)), self.num_q)
        self.type_k = str(a.get("type_needle_k", "words"))
        self.type_v = str(a.get("type_needle_v", "numbers"))
        self.digits_k = int(a.get("num_digits_k", 7))
        self.digits_v = int(a.get("num_digits_v", 7))
        self.needle = task.shared["needle"]

    def incremental(self, length: int) -> int:
        return 5 if length < 4096 else max(5, self.num_v * self.num_k)

    def draw(self, rng: random.Random, kind: str, digits: int) -> str:
        if kind == "numbers":
            return random_number(rng, digits)
        if kind == "words":
            return rng.choice(official_keys())
        return str(uuid.UUID(int=rng.getrandbits(128), version=4))

    def line(self, key: str, value: str) -> str:
        return self.needle.format(type_needle_v=self.type_v, key=key, value=value)

    def build(self, rng: random.Random, index: int, size: int) -> Built:
        keys: list[str] = []
        values: list[list[str]] = []
        needles: list[tuple[int, str]] = []  # (key number, line): shuffled like the official list of lines
        for k in range(self.num_k):
            keys.append(self.draw(rng, self.type_k, self.digits_k))
            values.append([])
            for _ in range(self.num_v):
                values[-1].append(self.draw(rng, self.type_v, self.digits_v))
                needles.append((k, self.line(keys[-1], values[-1][-1])))
        (random.Random(self.seed) if self.shuffle == "seeded" else rng).shuffle(needles)

        if self.num_v == 1:
            lines = []
            for _ in range(size):
                key = self.draw(rng, self.type_k, self.digits_k)
                lines.append(self.line(key, self.draw(rng, self.type_v, self.digits_v)))
        else:
            hay_values = [self.draw(rng, self.type_v, self.digits_v) for _ in range(size)]
            hay_keys = [
                self.draw(rng, self.type_k, self.digits_k) for _ in range(math.ceil(size / self.num_v))
            ]
            hay_keys = (hay_keys * self.num_v)[:size]
            lines = [self.line(hay_keys[i], hay_values[i]) for i in range(size)]
            rng.shuffle(lines)

        # insertion points, largest first: needle j ends up after exactly positions[j] haystack lines
        positions = sorted(rng.sample(range(size), len(needles)), reverse=True)
        for at, (_, text) in zip(positions, needles, strict=False):
            lines.insert(at, text)
        context = "\n".join(lines)

        asked = rng.sample(range(self.num_k), self.num_q)
        queries = [keys[i] for i in asked]
        answers = [v for i in asked for v in values[i]]
        query = ", ".join(queries[:-1]) + ", and " + queries[-1] if len(queries) > 1 else queries[0]
        single = self.num_q * self.num_v == 1
        template = self.task.shared["template_single" if single else "template_multiple"]
        kind = self.type_v[:-1] if single else self.type_v
        head, tail = template.split("{context}", 1)
        before = head.format(type_needle_v=kind, query=query)
        after = tail.format(type_needle_v=kind, query=query)
        n = len(needles)
        last = max(1, size + n - 1)
        depths = sorted(
            (at + n - 1 - j) / last
            for j, (at, (k, _)) in enumerate(zip(positions, needles, strict=False))
            if k in asked
        )
        return Built(before + context + after, answers, _split_span(before, context), depths)


@dataclass
class _Question:
    """A question placed in the context: its random index and (num_order > 0) its ordinal among them."""

    item: MCQuestion
    random_index: str = ""
    order: str = ""


class MMLUGenerator(Generator):
    """``prepare_mmlu.py`` on MMLU: ``size`` auxiliary_train questions, each labelled "Question <7-digit
    number>", and the test question inserted at a random place. ``num_order`` > 0 gives each number to up to
    ``num_order`` questions (the question is then the n-th of its number); ``task_type`` retrieve (copy it),
    niah (copy all of its number) or solve (answer it, with ``fewshot`` solved examples)."""

    unit = "questions"

    def __init__(self, task: TaskConfig, seed: int, data: MMLUData) -> None:
        super().__init__(task, seed)
        self.data = data
        self.fewshot = int(self.args.get("fewshot", 0))
        self.num_order = int(self.args.get("num_order", 0))
        self.task_type = str(self.args.get("task_type", "retrieve"))
        if not data.haystack or not data.needles:
            raise LampeEvalError(f"ruler2/{task.name}: the MMLU data has no questions ({data.source})")

    def incremental(self, length: int) -> int:
        return max(10, self.fewshot)

    def available(self, num_samples: int) -> int:
        return min(len(self.data.needles), num_samples)

    def sample_indices(self, rng: random.Random, num_samples: int) -> list[int]:
        return rng.sample(range(len(self.data.needles)), self.available(num_samples))

    def build(self, rng: random.Random, index: int, size: int) -> Built:
        haystack = self.data.haystack
        repeats = -(-size // len(haystack)) if size > len(haystack) else 1
        picked = rng.sample(range(len(haystack) * repeats), size)
        context = [_Question(haystack[p // repeats]) for p in picked]
        if self.num_order > 0:
            numbers = [random_number(rng) for _ in range(math.ceil((size + 1) / self.num_order))]
            numbers = numbers * self.num_order
        else:
            numbers = [random_number(rng) for _ in range(size + 1)]
        rng.shuffle(numbers)
        numbers = numbers[: size + 1]
        for entry, number in zip(context, numbers, strict=False):
            entry.random_index = number
        rng.shuffle(context)
        examples = rng.sample(context, self.fewshot)
        target = _Question(self.data.needles[index], numbers[-1])
        at = rng.randint(0, len(context))
        context.insert(at, target)

        seen: dict[str, int] = defaultdict(int)
        for entry in context:
            seen[entry.random_index] += 1
            if self.num_order > 0:
                entry.order = ordinal(seen[entry.random_index]) + " (1 indexed) "

        needle = self.task.shared["needle"]
        needles = "\n\n".join(needle.format(i=q.random_index, question=q.item.question) for q in context)
        prompts = self.task.prompts
        problem = prompts["problem"].format(i=target.random_index, order=target.order)
        example = ""
        if self.fewshot > 0:
            shown = "\n\n".join(
                prompts["example"].format(
                    i=q.random_index, order=q.order, question=q.item.question, solution=q.item.solution
                )
                for q in examples
            )
            example = self.task.shared["examples"].format(examples=shown)
        intro = prompts["context"]
        question = f"{intro}{needles}\n\n{example}{problem}"
        if self.task_type == "solve":
            references = [target.item.answer]
        elif self.task_type == "niah":
            references = [q.item.question for q in context if q.random_index == target.random_index]
        else:
            references = [target.item.question]
        answers = [
            i
            for i, q in enumerate(context)
            if q is target or (self.task_type == "niah" and q.random_index == target.random_index)
        ]
        depths = [i / max(1, len(context) - 1) for i in answers]
        meta = {"same_index_questions": sum(q.random_index == target.random_index for q in context)}
        return Built(question, references, _split_span(intro, needles), depths, meta)


class QAGenerator(Generator):
    """``prepare_qa.py`` on HotpotQA: ``size`` train paragraphs plus the question's own paragraphs
    (supporting and, when ``size`` > 0, distractors), shuffled, each as "Document <7-digit number>:"; the
    task finds a document's number (retrieve: ``query_type`` doc gives the supporting text, question the
    question) or answers the question (solve)."""

    unit = "documents"

    def __init__(self, task: TaskConfig, seed: int, data: HotpotData) -> None:
        super().__init__(task, seed)
        self.data = data
        self.task_type = str(self.args.get("task_type", "retrieve"))
        self.query_type = str(self.args.get("query_type", "question"))
        if not data.needles:
            raise LampeEvalError(f"ruler2/{task.name}: the HotpotQA data has no questions ({data.source})")

    def incremental(self, length: int) -> int:
        return 5

    def available(self, num_samples: int) -> int:
        return min(len(self.data.needles), num_samples)

    def build(self, rng: random.Random, index: int, size: int) -> Built:
        item = self.data.needles[index]
        gold = [(text, random_number(rng), True) for text in item.context]
        distractor = [(text, random_number(rng), False) for text in item.distractor]
        haystack = self.data.haystack
        remaining = len(haystack) - len(set(item.context + item.distractor))
        if remaining <= 0:
            raise LampeEvalError(
                f"ruler2/{self.task.name}: no haystack paragraphs besides the question's own"
            )
        repeats = -(-size // remaining) if size > remaining else 1
        picked = rng.sample(range(len(haystack) * repeats), size)
        docs = [(haystack[p // repeats], random_number(rng), False) for p in picked]
        docs += gold
        if size > 0:
            docs += distractor
        rng.shuffle(docs)

        needle = self.task.shared["needle"]
        needles = "\n\n".join(needle.format(i=number, text=text) for text, number, _ in docs)
        prompts = self.task.prompts
        if self.task_type == "retrieve" and self.query_type == "doc":
            if not gold:
                raise LampeEvalError(f"ruler2/{self.task.name}: question {index} has no supporting paragraph")
            problem = prompts["problem"].format(text=gold[0][0])
            references = [gold[0][1]]
        else:
            problem = prompts["problem"].format(question=item.question)
            references = (
                [number for _, number, _ in gold] if self.task_type == "retrieve" else list(item.answers)
            )
        intro = prompts["context"]
        question = f"{intro}{needles}\n\n{problem}"
        depths = [i / max(1, len(docs) - 1) for i, doc in enumerate(docs) if doc[2]]
        return Built(question, references, _split_span(intro, needles), depths)


# ------------------------------------------------------------------------------------- the stream


@dataclass
class Setup:
    """What the official scripts settle before the first sample."""

    size: int  # the binary search's haystack size
    incremental: int
    indices: list[int]  # the needles of the samples, in order
    probes: list[tuple[int, int]]  # (size, tokens) of the estimate and each probe

    def as_dict(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "incremental": self.incremental,
            "indices": self.indices,
            "probes": self.probes,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Setup:
        probes = [(int(s), int(t)) for s, t in data["probes"]]
        return cls(int(data["size"]), int(data["incremental"]), [int(i) for i in data["indices"]], probes)


class TooShortError(LampeEvalError):
    """The length cannot hold a question even with the smallest haystack (the official scripts fail too)."""


def setup(
    gen: Generator, rng: random.Random, length: int, num_samples: int, count: Callable[[str], int]
) -> Setup:
    """Steps 1-3 of the stream: the estimate, the binary search and (mmlu) the needle draw."""
    step = gen.incremental(length)
    probes = []
    tokens = count(gen.build(rng, gen.probe_index, step).question)
    probes.append((step, tokens))
    estimate = int(length / (tokens / step) * 3)
    low, high = step, max(estimate, step * 2)
    best = None
    while low <= high:
        mid = (low + high) // 2
        tokens = count(gen.build(rng, gen.probe_index, mid).question)
        probes.append((mid, tokens))
        if tokens <= length:
            best, low = mid, mid + 1
        else:
            high = mid - 1
    size = best if best is not None else step
    return Setup(size, step, gen.sample_indices(rng, num_samples), probes)


def next_sample(
    gen: Generator, rng: random.Random, plan: Setup, position: int, length: int, count: Callable[[str], int]
) -> tuple[Built, int, int]:
    """Step 4 for one sample: (question, its tokens, the haystack size used), stepping down as the official
    loop does (a question over the length at the smallest size is an error there too)."""
    index = plan.indices[position]
    size = plan.size
    while True:
        try:
            built = gen.build(rng, index, size)
        except ValueError as err:  # random.sample of more items than there are: the official scripts crash
            raise TooShortError(
                f"ruler2/{gen.task.name} at length {length}: the official step-down reached {size} "
                f"{gen.unit}, too few to build sample {position} ({err})"
            ) from err
        tokens = count(built.question)
        if tokens <= length:
            return built, tokens, size
        if size > plan.incremental:
            size -= plan.incremental
        else:
            raise TooShortError(
                f"ruler2/{gen.task.name} at length {length}: sample {position} has {tokens} tokens with "
                f"the smallest haystack ({size} {gen.unit}); use a longer --len"
            )


def generate(
    gen: Generator, seed: int, length: int, num_samples: int, count: Callable[[str], int], limit: int
) -> list[tuple[Built, int, int]]:
    """The first ``limit`` samples of a fresh stream (the whole official order, in memory)."""
    rng = random.Random(seed)
    plan = setup(gen, rng, length, num_samples, count)
    return [next_sample(gen, rng, plan, i, length, count) for i in range(min(limit, len(plan.indices)))]


def official_count(tokenizer: Any) -> Callable[[str], int]:
    """The official ``HFTokenizer.text_to_tokens`` length: ``len(tokenizer.tokenize(text))``."""

    def count(text: str) -> int:
        return len(tokenizer.tokenize(text))

    return count


def make_generator(task: TaskConfig, seed: int, data: Any, shuffle: str = "global") -> Generator:
    if task.generator == "niah":
        return NiahGenerator(task, seed, shuffle)
    if task.generator == "mmlu":
        return MMLUGenerator(task, seed, data)
    return QAGenerator(task, seed, data)


__all__ = [
    "Built",
    "Generator",
    "MMLUGenerator",
    "NiahGenerator",
    "QAGenerator",
    "Setup",
    "TooShortError",
    "generate",
    "make_generator",
    "next_sample",
    "official_count",
    "ordinal",
    "setup",
]
