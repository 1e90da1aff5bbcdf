"""The ``ruler2`` benchmark: RULERv2's 12 tasks (3 ladders x 4 difficulty levels) generated for any length.

Samples follow the official random stream (:mod:`.generators`): sample ``i`` depends on the seed, the task,
the length, the tokenizer, the data, ``num_samples`` (MMLU tasks draw that many test questions up front) and
on every sample before it. They are cached as JSON Lines under
``$LAMPE_EVAL_CACHE/ruler2/samples/<task>/<length>-<model>-<tokenizer hash>-seed<seed>-<hash>.jsonl``; each
line keeps the random generator's state after it, so a longer ``--limit`` continues the stream from the last
cached line (line 0 also keeps the binary search's result and the needle indices).

Options (``--opt key=value``): ``chat_template=false`` (the raw question, no chat wrapper),
``num_samples=N`` (default 100, nemo-skills' ``--dataset_size``), ``tokens_to_generate=N`` (every task's
generation budget), ``niah_shuffle=global|seeded`` (the two official prepare_niah versions), ``cache=false``,
``no_context=true`` (the closed-book control).
"""

from __future__ import annotations

import base64
import hashlib
import logging
import random
import re
import struct
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ...data.sources import DataSource
from ...errors import LampeEvalError
from ...models import cache_dir
from ...options import Option
from ...prompts import prompt_token_count
from ..base import BENCHMARKS, CLOSED_BOOK, Benchmark, Metric, Sample, SampleContext, closed_book_option
from ..sample_cache import cached_lines, read_lines, tokenizer_fingerprint
from .config import DIFFICULTIES, LADDERS, TaskConfig, load_config
from .data import HOTPOT_FILES, HOTPOT_HUB, MMLU_FILES, MMLU_HUB, load_hotpotqa, load_mmlu, split_sources
from .generators import SHUFFLES, Generator, Setup, make_generator, next_sample, official_count, setup
from .scoring import METRIC_FNS, group_score

log = logging.getLogger(__name__)

GENERATOR_VERSION = 1  # bump when a change alters generated text or its meta
SCORE = "accuracy"


def encode_state(rng: random.Random) -> str:
    """A Mersenne Twister state as text (625 32-bit words)."""
    version, words, gauss = rng.getstate()
    assert version == 3 and gauss is None
    return base64.b64encode(struct.pack(f"<{len(words)}I", *words)).decode("ascii")


def decode_state(text: str) -> random.Random:
    raw = base64.b64decode(text)
    rng = random.Random()
    rng.setstate((3, struct.unpack(f"<{len(raw) // 4}I", raw), None))
    return rng


class TaskData:
    """The official stream for one (task, length, tokenizer, seed, options) and the cache file it fills."""

    def __init__(self, task: TaskConfig, ctx: SampleContext) -> None:
        lm = ctx.lm
        self.task = task
        self.length = ctx.length
        options = Ruler2Benchmark().option_values(ctx)
        self.use_chat = options["chat_template"]
        self.max_new_tokens = options["tokens_to_generate"] or task.tokens_to_generate
        self.num_samples = options["num_samples"] or load_config().num_samples
        data: Any = None
        self.source = "generated"
        if task.generator == "mmlu":
            data = load_mmlu(ctx.data_dir)
        elif task.generator == "qa":
            data = load_hotpotqa(ctx.data_dir)
        parts = [str(GENERATOR_VERSION), task.fingerprint(), f"chat={self.use_chat}"]
        if data is not None:
            self.source = data.source
            parts.append(data.fingerprint)
        if task.generator == "niah":
            parts.append(f"shuffle={options['niah_shuffle']}")
        if task.generator == "mmlu":
            parts.append(f"num_samples={self.num_samples}")  # the needle draw depends on it
        self.gen: Generator = make_generator(task, ctx.seed, data, options["niah_shuffle"])
        self.available = self.gen.available(self.num_samples)
        self.seed = ctx.seed
        self.lm = lm
        self.count = official_count(lm.tokenizer)
        self.closed_book = bool(options[CLOSED_BOOK])
        safe_model = re.sub(r"[^A-Za-z0-9._-]+", "_", lm.name)[-60:]
        key = hashlib.sha256("|".join(parts).encode()).hexdigest()[:10]
        name = f"{ctx.length}-{safe_model}-{tokenizer_fingerprint(lm.tokenizer)}-seed{ctx.seed}-{key}"
        self.cache_path = cache_dir() / "ruler2" / "samples" / task.name / f"{name}.jsonl"
        self.use_cache = options["cache"]
        # where the stream stands: the generator after line ``next - 1`` and the setup
        self._rng: random.Random | None = None
        self._next = -1
        self._setup: Setup | None = None

    def prompt(self, question: str) -> str:
        return self.lm.format_prompt(question, use_chat_template=self.use_chat)

    def _resume(self, index: int, first: dict[str, Any] | None) -> tuple[random.Random, Setup]:
        """The generator and the setup just before sample ``index``."""
        if self._rng is not None and self._setup is not None and self._next == index:
            return self._rng, self._setup
        if index == 0:
            rng = random.Random(self.seed)
            return rng, setup(self.gen, rng, self.length, self.num_samples, self.count)
        # extending a cache file: the stream continues from the state stored with the line before
        assert first is not None and self.use_cache
        previous = read_lines(self.cache_path)[index - 1]
        return decode_state(previous["rng"]), Setup.from_dict(first["setup"])

    def generate(self, index: int, first: dict[str, Any] | None) -> dict[str, Any]:
        """Sample ``index`` as a cache line (``first``: line 0, which holds the setup)."""
        rng, plan = self._resume(index, first)
        built, tokens, size = next_sample(self.gen, rng, plan, index, self.length, self.count)
        self._rng, self._setup, self._next = rng, plan, index + 1
        prompt = self.prompt(built.question)
        task = self.task
        meta = {
            **built.meta,
            "ladder": task.ladder,
            "difficulty": task.difficulty,
            "metric": task.metric,
            "official_index": plan.indices[index],
            "question_tokens": tokens,
            "prompt_tokens": prompt_token_count(self.lm.tokenizer, prompt),
            "haystack_size": size,
            "fitted_size": plan.size,
            "haystack_unit": self.gen.unit,
            "needle_depths": built.depths,
            "context_span": list(built.context_span),
            "data_source": self.source,
        }
        line: dict[str, Any] = {
            "index": index,
            "question": built.question,
            "prompt": prompt,
            "references": built.references,
            "meta": meta,
            "rng": encode_state(rng),
        }
        if index == 0:
            line["setup"] = plan.as_dict()
        return line

    def lines(self, count: int) -> list[dict[str, Any]]:
        count = min(count, self.available)
        lines = cached_lines(self.cache_path if self.use_cache else None, count, self.generate)
        return [self.without_context(line) for line in lines] if self.closed_book else lines

    def without_context(self, line: dict[str, Any]) -> dict[str, Any]:
        """The closed-book control: the question with its context (needles and haystack) cut out."""
        start, end = line["meta"]["context_span"]
        prompt = self.prompt(line["question"][:start] + line["question"][end:])
        meta = {
            **line["meta"],
            "prompt_tokens": prompt_token_count(self.lm.tokenizer, prompt),
            "closed_book": True,
        }
        return {**line, "prompt": prompt, "meta": meta}

    def sample(self, line: dict[str, Any]) -> Sample:
        return Sample(
            sample_id=str(line["index"]),
            task=self.task.name,
            prompt=line["prompt"],
            references=list(line["references"]),
            max_new_tokens=int(self.max_new_tokens),
            meta=dict(line["meta"]),
        )


@BENCHMARKS.register("ruler2")
class Ruler2Benchmark(Benchmark):
    summary = (
        "RULERv2 (nemo-skills): 12 tasks, multi-key NIAH / multi-value NIAH / QA ladders x basic, easy, "
        "medium, hard (needle lines, MMLU questions, HotpotQA paragraphs), generated at any length; 0-100"
    )
    metrics = (
        Metric(
            SCORE,
            "RULERv2 accuracy (string match or 1 - WER; MCQ letter)",
        ),
    )
    options = (
        Option(
            "chat_template", bool, True, "the model's chat template around the question (false: raw text)"
        ),
        Option(
            "num_samples", int, None, "samples per task without --limit (default 100); MMLU draws this many"
        ),
        Option(
            "tokens_to_generate", int, None, "generation budget of every task (default: the task table's)"
        ),
        Option(
            "niah_shuffle",
            str,
            "global",
            "basic levels' needle shuffle: global stream (prepare_niah 8779b75) or seeded anew (5536f54)",
            choices=SHUFFLES,
        ),
        Option("cache", bool, True, "keep generated samples on disk (false: in memory only)", False),
        closed_book_option("closed-book control: the same samples, their needles/documents cut out"),
    )
    truncation = "never: the haystack is generated so that the question fits --len (the official fitting)"
    depth_key = "needle_depths"

    def tasks(self) -> list[str]:
        return list(load_config().tasks)

    def task_config(self, task: str) -> TaskConfig:
        return load_config().tasks[self.check_task(task)]

    def samples(self, task: str, ctx: SampleContext) -> Iterator[Sample]:
        cfg = self.task_config(task)
        options = self.option_values(ctx)
        count = ctx.limit if ctx.limit is not None else options["num_samples"] or load_config().num_samples
        data = TaskData(cfg, ctx)  # missing data is a one-line error, never a skipped task
        for line in data.lines(count):
            yield data.sample(line)

    def data_sources(
        self, task: str, length: int, options: Mapping[str, Any], data_dir: str | None
    ) -> list[DataSource]:
        """MMLU's test and auxiliary_train splits (the MMLU tasks), HotpotQA's validation and train (qa)."""
        generator = self.task_config(task).generator
        if generator == "mmlu":
            return list(split_sources("MMLU", MMLU_FILES, MMLU_HUB, data_dir).values())
        if generator == "qa":
            return list(split_sources("HotpotQA", HOTPOT_FILES, HOTPOT_HUB, data_dir).values())
        return []

    def check_job(self, task: str, length: int, options: Mapping[str, Any], data_dir: str | None) -> None:
        values = self.typed_options(options)
        for name in ("num_samples", "tokens_to_generate"):
            if values[name] is not None and values[name] <= 0:
                raise LampeEvalError(f"ruler2: {name} must be positive, got {values[name]}")

    def score(self, sample: Sample, output: dict[str, Any]) -> dict[str, float]:
        metric = sample.meta.get("metric") or self.task_config(sample.task).metric
        prediction = str(output.get("prediction", ""))
        return {SCORE: 100.0 * METRIC_FNS[metric](prediction, sample.references)}

    def summarize_tasks(self, task_scores: Mapping[str, float]) -> dict[str, float]:
        """``ruler2_score.py``'s group score (the mean of the 12 tasks) and, here, each ladder's and each
        difficulty level's mean, each only when all of its tasks ran."""
        config = load_config().tasks
        scores = dict(task_scores)
        out: dict[str, float] = {}
        groups: list[tuple[str, Sequence[str]]] = [("Avg", list(config))]
        groups += [(ladder, [t for t, c in config.items() if c.ladder == ladder]) for ladder in LADDERS]
        groups += [(level, [t for t, c in config.items() if c.difficulty == level]) for level in DIFFICULTIES]
        for label, names in groups:
            value = group_score(scores, names)
            if value is not None:
                out[label] = value
        return out
