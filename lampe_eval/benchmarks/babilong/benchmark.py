"""The ``babilong`` benchmark (booydar/babilong): bAbI reasoning questions whose facts hide in long text.

Tasks qa1-qa20 (default qa1-qa10, the official results table; the headline is the mean of qa1-qa5). Per
sample, as ``scripts/run_model_on_babilong.py`` does (facts: ``docs/benchmarks.md`` section 7; prompts and
labels: ``tasks/babilong/babilong.yaml``):

1. Prompt: ``DEFAULT_TEMPLATE`` filled with the task's instruction, examples and post-prompt
   (``--opt instruction|examples|post_prompt=false`` leaves a part empty, as the official flags do), the
   stripped context and the question; the result stripped; then the model's chat template
   (``--opt chat_template=false``: none). No truncation.
2. Greedy generation of 20 tokens; the output stripped.
3. ``compare_answers`` (``babilong/metrics.py``) x 100; a task's score is the mean.

Data, first that applies (``--opt source=auto``; recorded in ``meta["data_source"]``):

* ``--opt fixture=true``: local generation on the hand-written bAbI fixture (qa1-qa10) and the background
  text (the offline corpus unless ``background=`` says otherwise): runs anywhere, smoke tests, not numbers;
* a pre-built set ``qaN/<length>.json`` in ``--opt babilong_dir=`` / ``--data-dir`` (``source=dir``);
* the bAbI files in ``--opt babilong_dir=`` / ``--data-dir``: local generation (``source=generate``);
* for a pre-built length (``--len`` 1k..512k, 1M, 10M: 4k = 4096 or 4000 tokens), the Hub set
  ``RMT-team/babilong`` (``--opt babilong_dataset=RMT-team/babilong-1k-samples`` for the 1000-sample one)
  (``source=hub``): only the (length, task) files its README declares, e.g. ``data/qa1/4k.json``;
* otherwise local generation with the bAbI files of the hub (``facebook/babi_qa``) (``source=generate``).

Generated samples are cached as JSON Lines under ``$LAMPE_EVAL_CACHE/babilong/samples/<task>/`` per
(length, model, tokenizer, seed, facts, background, prompt) and extended as ``--limit`` grows
(:mod:`lampe_eval.benchmarks.sample_cache`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...data.sources import DataSource
from ...errors import LampeEvalError, MissingDataError
from ...models import LoadedModel, cache_dir
from ...options import Option
from ...prompts import prompt_token_count
from ..base import BENCHMARKS, CLOSED_BOOK, Benchmark, Metric, Sample, SampleContext, closed_book_option
from ..datafiles import FIXTURE_OPTION, require_directories
from ..sample_cache import cached_lines, tokenizer_fingerprint
from .config import PROMPT_PARTS, BabilongConfig, TaskSpec, load_config
from .data import (
    BabiSample,
    babi_files,
    eligible,
    find_local_facts,
    find_prebuilt,
    fixture_facts_path,
    hub_prebuilt,
    load_facts,
    parse_babi,
    prebuilt_files,
    read_prebuilt,
)
from .haystack import (
    BACKGROUND_MODES,
    DEFAULT_BACKGROUND_DATASET,
    TOKENS_PER_FACT,
    Background,
    TooShortError,
    background_source,
    build_haystack,
    resolve_background,
    seed_of,
)
from .scoring import compare_answers

GENERATOR_VERSION = 1  # bump when a change alters generated text
SOURCES = ("auto", "dir", "hub", "generate")


def format_input(
    template: str, spec: TaskSpec, parts: Mapping[str, bool], context: str, question: str
) -> str:
    """``get_formatted_input``: the template filled (a part switched off is ''), the context stripped, the
    result stripped."""
    values = {p: getattr(spec, p) if parts[p] else "" for p in PROMPT_PARTS}
    return template.format(**values, context=context.strip(), question=question).strip()


@dataclass(frozen=True)
class PromptBuilder:
    """The prompt of one task as the model gets it, and its token count."""

    config: BabilongConfig
    spec: TaskSpec
    parts: Mapping[str, bool]
    lm: LoadedModel
    chat_template: bool

    def prompt(self, context: str, question: str) -> str:
        text = format_input(self.config.template, self.spec, self.parts, context, question)
        return self.lm.format_prompt(text, use_chat_template=self.chat_template)

    def count(self, prompt: str) -> int:
        return prompt_token_count(self.lm.tokenizer, prompt)


class GeneratedSet:
    """The generated samples of one (task, length, tokenizer, seed, facts, background, prompt): cached."""

    def __init__(
        self,
        builder: PromptBuilder,
        samples: list[BabiSample],
        facts_fingerprint: str,
        background: Background,
        length: int,
        seed: int,
    ) -> None:
        self.builder = builder
        self.samples = samples
        self.background = background
        self.length = length
        self.seed = seed
        self.task = builder.spec.name
        self.budget = length - builder.config.max_new_tokens
        overhead = builder.count(builder.prompt("", ""))
        if self.budget - overhead < TOKENS_PER_FACT:
            raise LampeEvalError(f"babilong/{self.task}: length {length} leaves no room for the facts")
        self.max_n_facts = (self.budget - overhead) // TOKENS_PER_FACT
        self.order = self._order()
        lm = builder.lm
        parts = [
            str(GENERATOR_VERSION),
            facts_fingerprint,
            background.label,
            builder.spec.prompt_fingerprint(dict(builder.parts), builder.config.template),
            f"chat={builder.chat_template}",
            str(builder.config.max_new_tokens),
        ]
        digest = hashlib.sha256("|".join(parts).encode()).hexdigest()[:10]
        safe_model = re.sub(r"[^A-Za-z0-9._-]+", "_", lm.name)[-60:]
        name = f"{length}-{safe_model}-{tokenizer_fingerprint(lm.tokenizer)}-seed{seed}-{digest}.jsonl"
        self.cache_path = cache_dir() / "babilong" / "samples" / self.task / name

    def _order(self) -> list[int]:
        import numpy as np

        candidates = eligible(self.samples, self.max_n_facts)
        if not candidates:
            raise LampeEvalError(
                f"babilong/{self.task}: no bAbI question has at most {self.max_n_facts} facts "
                f"(length {self.length} is too short for this task)"
            )
        rng = np.random.default_rng(seed_of("babilong-order", self.task, self.length, self.seed))
        return [candidates[int(i)] for i in rng.permutation(len(candidates))]

    def make(self, index: int, first: dict[str, Any] | None) -> dict[str, Any]:
        """Sample ``index``'s cache line: the largest haystack whose prompt fits the budget."""
        babi = self.samples[self.order[index]]
        seed = seed_of("babilong", self.task, self.length, self.seed, index)
        size = self.budget - self.builder.count(self.builder.prompt("", babi.question))
        for _ in range(8):  # decoding and re-tokenising can shift the count by a few tokens: shrink, retry
            try:
                context, provenance = build_haystack(
                    list(babi.facts), size, self.background.books, self.builder.lm.tokenizer, seed
                )
            except TooShortError as err:
                raise LampeEvalError(f"babilong/{self.task} at length {self.length}: {err}") from err
            tokens = self.builder.count(self.builder.prompt(context, babi.question))
            if tokens <= self.budget:
                return {
                    "index": index,
                    "babi_index": self.order[index],
                    "context": context,
                    "question": babi.question,
                    "target": babi.answer,
                    "n_facts": len(babi.facts),
                    "haystack_tokens": size,
                    "prompt_tokens": tokens,
                    **provenance,
                }
            size -= tokens - self.budget
        raise LampeEvalError(f"babilong/{self.task}: could not fit sample {index} to {self.length} tokens")

    def lines(self, count: int, use_cache: bool) -> list[dict[str, Any]]:
        return cached_lines(self.cache_path if use_cache else None, min(count, len(self.order)), self.make)


@BENCHMARKS.register("babilong")
class Babilong(Benchmark):
    name = "babilong"
    summary = (
        "BABILong: bAbI reasoning facts hidden in book text (official prompts and answer check); "
        "pre-built lengths from the hub, or generated at any length"
    )
    metrics = (Metric("accuracy"),)
    options = (
        FIXTURE_OPTION,
        Option("source", str, "auto", "where samples come from (docs/benchmarks-guide.md)", choices=SOURCES),
        Option("babilong_dir", Path, None, "directory with pre-built qaN/<length>.json files or bAbI files"),
        Option(
            "babilong_dataset", str, None, "datasets id of the pre-built sets (default RMT-team/babilong)"
        ),
        Option(
            "instruction", bool, True, "the task's instruction in the prompt (official --use_instruction)"
        ),
        Option("examples", bool, True, "the task's examples in the prompt (official --use_examples)"),
        Option("post_prompt", bool, True, "the task's post-prompt (official --use_post_prompt)"),
        Option("chat_template", bool, True, "the model's chat template (official --use_chat_template)"),
        Option("background", str, "auto", "generation: background text", choices=BACKGROUND_MODES),
        Option("background_dataset", str, DEFAULT_BACKGROUND_DATASET, "generation: PG-19 datasets id"),
        Option("background_dir", Path, None, "generation: a folder of *.txt books as background text"),
        Option("num_samples", int, None, "generation: samples without --limit (default 100)", False),
        Option("cache", bool, True, "keep generated samples on disk (false: in memory only)", False),
        closed_book_option("closed-book control: the question without its facts and haystack (same samples)"),
    )
    input_length_key = "prompt_tokens"

    @property
    def config(self) -> BabilongConfig:
        return load_config()

    def tasks(self) -> list[str]:
        return list(self.config.tasks)

    def default_tasks(self) -> list[str]:
        return list(self.config.default_tasks)

    # ------------------------------------------------------------------------------------ data
    def directories(self, options: Mapping[str, Any], data_dir: str | None) -> list[str]:
        return [str(d) for d in (options["babilong_dir"], data_dir) if d]

    def pick_source(self, task: str, length: int, options: Mapping[str, Any], data_dir: str | None) -> str:
        """``dir``, ``hub`` or ``generate`` for a job (see the module docstring for the order)."""
        source = options["source"]
        if options["fixture"]:
            if source not in ("auto", "generate"):
                raise LampeEvalError(
                    f"babilong: fixture=true generates samples; it cannot use source={source}"
                )
            return "generate"
        if source != "auto":
            return source
        directories = self.directories(options, data_dir)
        name = self.config.length_name(length)
        if name and find_prebuilt(task, name, directories):
            return "dir"
        if find_local_facts(self.config, self.config.tasks[task], directories):
            return "generate"
        return "hub" if name else "generate"

    def check_job(self, task: str, length: int, options: Mapping[str, Any], data_dir: str | None) -> None:
        task = self.check_task(task)
        values = self.typed_options(options)
        require_directories("babilong", values, ["babilong_dir", "background_dir"])
        source = self.pick_source(task, length, values, data_dir)
        if values["fixture"]:
            relative, path = fixture_facts_path(self.config, self.config.tasks[task])
            if path is None:
                raise MissingDataError(f"babilong: no fixture for task {task} ({relative}, package data)")
        if source in ("dir", "hub"):
            name = self.config.length_name(length)
            if name is None:
                sizes = ", ".join(n for n, size in self.config.lengths.items() if size > 0)
                raise LampeEvalError(
                    f"babilong: no pre-built set of length {length} (they are {sizes}; 4k = 4096 or 4000 "
                    "tokens): use --opt source=generate for any length"
                )
            found = find_prebuilt(task, name, self.directories(values, data_dir)) if source == "dir" else None
            if source == "dir" and not found:
                where = ", ".join(self.directories(values, data_dir)) or "-"
                raise MissingDataError(
                    f"babilong: no {task}/{name}.json in {where} "
                    "(source=dir needs --data-dir or --opt babilong_dir=)"
                )
            if found is not None:
                read_prebuilt(found)  # checked against the record format before any model loads

    # --------------------------------------------------------------------------------- samples
    def samples(self, task: str, ctx: SampleContext) -> Iterator[Sample]:
        task = self.check_task(task)
        self.check_job(task, ctx.length, ctx.options, ctx.data_dir)
        options = self.option_values(ctx)
        spec = self.config.tasks[task]
        parts = {p: bool(options[p]) for p in PROMPT_PARTS}
        builder = PromptBuilder(self.config, spec, parts, ctx.lm, options["chat_template"])
        source = self.pick_source(task, ctx.length, options, ctx.data_dir)
        if source == "generate":
            yield from self._generated(builder, options, ctx)
            return
        name = self.config.length_name(ctx.length)
        assert name is not None  # check_job
        if source == "dir":
            path = find_prebuilt(task, name, self.directories(options, ctx.data_dir))
            assert path is not None  # check_job
            records, label = read_prebuilt(path), f"file:{path}"
        else:
            records, label = self._hub(options["babilong_dataset"] or self.config.dataset, name, task)
        for index, record in enumerate(records[: ctx.limit]):
            context = "" if options[CLOSED_BOOK] else str(record["input"])
            prompt = builder.prompt(context, str(record["question"]))
            meta: dict[str, Any] = {
                "data_source": label,
                "length_name": name,
                "question": str(record["question"]),
                "prompt_tokens": builder.count(prompt),
            }
            yield Sample(str(index), task, prompt, [str(record["target"])], self.config.max_new_tokens, meta)

    def _hub(self, dataset: str, name: str, task: str) -> tuple[list[dict[str, Any]], str]:
        try:
            return hub_prebuilt(dataset, name, task)
        except MissingDataError as err:
            raise MissingDataError(f"babilong/{task} ({name}): {err}") from err

    def data_sources(
        self, task: str, length: int, options: Mapping[str, Any], data_dir: str | None
    ) -> list[DataSource]:
        """The pre-built set, or the bAbI facts and the background text of generation."""
        task = self.check_task(task)
        values = self.typed_options(options)
        self.check_job(task, length, options, data_dir)
        source = self.pick_source(task, length, values, data_dir)
        directories = self.directories(values, data_dir)
        name = self.config.length_name(length)
        if source == "dir" and name is not None:
            return [
                DataSource(
                    self.name, f"babilong {task} {name}", "file", str(find_prebuilt(task, name, directories))
                )
            ]
        if source == "hub" and name is not None:
            files = prebuilt_files(values["babilong_dataset"] or self.config.dataset, name, task)
            fix = f"lampe-eval data fetch --bench babilong --task {task} --len {length}"
            return [DataSource(self.name, f"babilong {task} {name}", "hub", files.repo, hub=files, fix=fix)]
        spec = self.config.tasks[task]
        if values["fixture"]:
            facts = DataSource(self.name, "bAbI facts", "fixture", fixture_facts_path(self.config, spec)[0])
        else:
            local = find_local_facts(self.config, spec, directories)
            files = babi_files(self.config)
            facts = (
                DataSource(self.name, "bAbI facts", "file", local.source.removeprefix("file:"))
                if local is not None
                else DataSource(self.name, "bAbI facts", "hub", files.repo, hub=files)
            )
        background = background_source(
            values["background"],
            values["background_dataset"],
            str(values["background_dir"]) if values["background_dir"] else None,
            data_dir,
            values["fixture"],
        )
        return [facts, background]

    def _generated(
        self, builder: PromptBuilder, options: Mapping[str, Any], ctx: SampleContext
    ) -> Iterator[Sample]:
        directories = self.directories(options, ctx.data_dir)
        facts = load_facts(self.config, builder.spec, options["fixture"], directories)
        background_dir = str(options["background_dir"]) if options["background_dir"] else None
        background = resolve_background(
            options["background"],
            options["background_dataset"],
            background_dir,
            ctx.data_dir,
            options["fixture"],
        )
        data = GeneratedSet(
            builder, parse_babi(facts.text), facts.fingerprint, background, ctx.length, ctx.seed
        )
        total = options["num_samples"] or self.config.num_samples
        count = total if ctx.limit is None else min(total, ctx.limit)
        for line in data.lines(count, options["cache"]):
            closed = options[CLOSED_BOOK]
            prompt = builder.prompt("" if closed else line["context"], line["question"])
            meta = {
                "data_source": f"generated:seed{ctx.seed} from {facts.source} in {background.label}",
                "facts": facts.source,
                "background": background.label,
                "background_books": line["background_books"],
                "babi_index": line["babi_index"],
                "n_facts": line["n_facts"],
                "question": line["question"],
                "prompt_tokens": builder.count(prompt) if closed else line["prompt_tokens"],
            }
            sample_id = f"gen-{line['index']}"
            yield Sample(
                sample_id, builder.spec.name, prompt, [line["target"]], self.config.max_new_tokens, meta
            )

    # --------------------------------------------------------------------------------- scoring
    def score(self, sample: Sample, output: dict[str, Any]) -> dict[str, float]:
        labels = self.config.tasks[self.check_task(sample.task)].labels
        output_text = str(output.get("prediction", "")).strip()
        correct = compare_answers(
            sample.references[0], output_text, str(sample.meta.get("question", "")), labels
        )
        return {"accuracy": 100.0 * correct}

    def summarize_tasks(self, task_scores: Mapping[str, float]) -> dict[str, float]:
        """The official averages: over qa1-qa5 (the README's headline) and over the results table's tasks
        (qa1-qa10), each only when every one of its tasks ran (``collect_results.py`` prints -1 otherwise)."""
        out = {}
        for names in (self.config.headline_tasks, self.config.default_tasks):
            if all(n in task_scores for n in names):
                out[f"Avg {names[0]}-{names[-1]}"] = sum(task_scores[n] for n in names) / len(names)
        return out
