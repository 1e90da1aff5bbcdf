"""The ``infinitebench`` benchmark (OpenBMB/InfiniteBench): 12 tasks; by default the LaMPE paper's Table 2
set (En.MC, En.QA, En.Sum, Code.Debug, Retrieve.KV, Retrieve.Number, Retrieve.PassKey).

Prompt: the task's official template (``tasks/infinitebench/infinitebench.yaml``; the ``yarn_mistral``
family, the one the official scripts use for open models, or ``--opt template=gpt4``) filled with the record.
The completion-style ``yarn_mistral`` family is fed as raw text, as the official open-model scripts and the
LaMPE authors' own InfiniteBench script (``scar-on/LaMPE`` ``InfiniteBench/src/test_infbench_llama_cw.py``)
do: its answer cue ("The pass key is") must end the text the model continues, and inside a chat user turn
an instruct model restates it and overruns the tiny budgets (6 tokens for passkey, 5 for Code.Debug). The
chat-style ``gpt4`` family goes through the model's chat template. ``--opt chat_template=true|false``
overrides either default.

Truncation: when the prompt as fed to the model is longer than the job's length L (``--len``), the filled
template is cut in the middle -- the first and the last half of its token budget are kept, decoded and
re-tokenised, as the official ``truncate_by_tokens`` does -- so that the prompt *as fed* (chat template and
special tokens included) has at most L tokens. (The official scripts cut the raw template to L tokens
including BOS and add no chat template; with ``chat_template=false`` this is the same budget.) No room is
reserved for the answer, as in the official scripts. Generation: greedy, the official ``max_new_tokens``.

Data, first that applies (recorded in ``sample.meta["data_source"]``, the key LongBench uses):

* ``--opt fixture=true`` (or ``source=fixture``): the tiny hand-written fixture, package data
  ``fixtures/infinitebench/<task>.jsonl`` (a few records per task in the official format; smoke tests, not
  numbers);
* ``--data-dir DIR`` holding the official ``<task>.jsonl`` (in ``DIR`` or ``DIR/infinitebench``)
  (``source=dir``);
* passkey, number_string, kv_retrieval: generated locally with the official recipe, sized to L with the
  model's tokenizer, seeded (``--seed``) and cached under ``$LAMPE_EVAL_CACHE/infinitebench/synthetic``
  (``source=generate``). The needle then always lies inside L. This is *not* the paper's protocol: the
  LaMPE authors cut the official ~128K-token files in the middle to L, which drops the needles of the middle
  depths (at 32K only the 16 of 59 outer depths survive, hence the paper's 27.12 = 16/59 for PassKey and
  Number); ``--opt source=hub`` (or ``--data-dir``) reproduces that, and the packaged experiment ``table2``
  uses it;
* otherwise the task's ``<task>.jsonl`` of the hub repository ``xinrongzhang2022/InfiniteBench`` (only that
  file; ``source=hub``, ``--opt dataset=ID`` for a copy), downloaded into the hub cache or read from it
  offline; neither is one line that says what to pass instead.

``--limit N`` on the official files takes N records spread over the file by a seeded permutation (the files
are sorted by needle depth), on the fixture the first N, on generated tasks samples 0..N-1.

Scores: the official scorers (``scoring.py``) x 100, mean over samples.

Options (``--opt key=value``): ``template``, ``chat_template``, ``fixture``, ``source`` (auto, fixture, dir,
generate, hub), ``dataset``, ``num_samples`` (generated tasks; default the official counts 590/590/500),
``max_new_tokens``, ``cache`` (false: generate in memory only), ``math_calc_gpt4`` (true: Math.Calc drops
the first number of the prediction, the official scorer's rule for GPT-4 outputs; off by default).
"""

from __future__ import annotations

import hashlib
import logging
import random
import re
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

from ...data.sources import DataSource
from ...errors import LampeEvalError, MissingDataError
from ...models import LoadedModel, cache_dir
from ...options import Option
from ...prompts import prompt_token_count
from ..base import BENCHMARKS, CLOSED_BOOK, Benchmark, Metric, Sample, SampleContext, closed_book_option
from ..datafiles import FIXTURE_OPTION
from ..predictions import PredictionFile
from ..sample_cache import cached_lines, tokenizer_fingerprint
from .config import InfiniteBenchConfig, TaskSpec, load_config
from .data import (
    Record,
    fill_template,
    find_task_file,
    fixture_file,
    gold,
    hub_files,
    hub_records,
    read_jsonl,
)
from .scoring import score_one
from .synthetic import GENERATOR_VERSION, SyntheticTask, TooShortError, fit_size

log = logging.getLogger(__name__)

SOURCES = ("auto", "fixture", "dir", "generate", "hub")


class PromptBuilder:
    """Wraps a filled template in the chat template, counts tokens like generation, cuts in the middle."""

    def __init__(self, lm: LoadedModel, length: int, chat_template: bool) -> None:
        self.lm = lm
        self.tokenizer = lm.tokenizer
        self.length = length
        self.chat_template = chat_template

    def wrap(self, text: str) -> str:
        return self.lm.format_prompt(text, use_chat_template=self.chat_template)

    def count(self, prompt: str) -> int:
        """Tokens of the prompt as a backend feeds it (:func:`lampe_eval.prompts.prompt_ids`: special tokens
        are added unless the prompt already starts with the BOS token, as a chat template's does)."""
        return prompt_token_count(self.tokenizer, prompt)

    def build(self, text: str) -> tuple[str, dict[str, Any]]:
        """(prompt as fed, meta): the wrapped text, middle-truncated to at most ``length`` tokens."""
        prompt = self.wrap(text)
        total = self.count(prompt)
        meta: dict[str, Any] = {"original_tokens": total, "truncated": False}
        if total <= self.length:
            return prompt, {**meta, "prompt_tokens": total}
        ids = self.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]
        keep = self.length - (total - len(ids))  # the wrapper's tokens stay whole
        for _ in range(8):  # decode + re-tokenise can shift the count by a few tokens: shrink and retry
            if keep <= 0:
                raise LampeEvalError(f"length {self.length} leaves no room for the prompt's text")
            head = keep // 2
            tail = keep - head
            cut = self.tokenizer.decode(ids[:head] + ids[len(ids) - tail :], skip_special_tokens=True)
            prompt = self.wrap(cut)
            tokens = self.count(prompt)
            if tokens <= self.length:
                return prompt, {**meta, "truncated": True, "prompt_tokens": tokens, "kept_text_tokens": keep}
            keep -= tokens - self.length
        raise LampeEvalError(f"could not truncate the prompt to {self.length} tokens")


def limited(records: list[Record], limit: int, seed: str, *, shuffle: bool) -> list[Record]:
    """``limit`` records. The official files are sorted (passkey and number_string by needle depth), so
    the first N would all be depth 0: take the first N of a seeded permutation instead. That is
    representative, and a larger ``--limit`` keeps every record of a smaller one (finished samples are
    reused)."""
    if not shuffle or limit >= len(records):
        return records[:limit]
    order = list(range(len(records)))
    random.Random(seed).shuffle(order)
    return [records[i] for i in sorted(order[:limit])]


class SyntheticSet:
    """The generated samples of one (task, length, tokenizer, template, seed): fitted sizes, cached."""

    def __init__(
        self,
        config: InfiniteBenchConfig,
        task: str,
        template: str,
        family: str,
        builder: PromptBuilder,
        seed: int,
    ) -> None:
        self.task = task
        self.template = template
        self.builder = builder
        self.recipe = SyntheticTask(
            task=task,
            recipe=dict(config.synthetic.get(task) or {}),
            noise=str(config.synthetic.get("noise", "")),
            seed=seed,
        )
        lm = builder.lm
        parts = [
            str(GENERATOR_VERSION),
            config.synthetic_fingerprint(task),
            hashlib.sha256(template.encode()).hexdigest()[:10],
            f"chat={builder.chat_template}",
        ]
        digest = hashlib.sha256("|".join(parts).encode()).hexdigest()[:10]
        safe_model = re.sub(r"[^A-Za-z0-9._-]+", "_", lm.name)[-60:]
        fingerprint = tokenizer_fingerprint(lm.tokenizer)
        name = f"{builder.length}-{safe_model}-{fingerprint}-seed{seed}-{family}-{digest}"
        self.cache_path = cache_dir() / "infinitebench" / "synthetic" / task / f"{name}.jsonl"

    def prompt_for(self, index: int, n: int) -> tuple[str, Record, dict[str, Any]]:
        record, meta = self.recipe.build(index, n)
        return self.builder.wrap(fill_template(self.template, self.task, record)), record, meta

    def fit(self, index: int, hint: dict[str, Any] | None) -> dict[str, Any]:
        """Sample ``index``'s cache line: the largest filler size whose prompt fits the length."""

        def tokens_at(n: int) -> int:
            return self.builder.count(self.prompt_for(index, n)[0])

        start = rate = None
        if hint is not None and hint.get("n", 0) > 0:
            start, rate = int(hint["n"]), float(hint["rate"])
        try:
            fit = fit_size(tokens_at, self.builder.length, start=start, rate=rate)
        except TooShortError as err:
            raise LampeEvalError(f"infinitebench/{self.task} at length {self.builder.length}: {err}") from err
        base = tokens_at(0)
        rate_seen = (fit.tokens - base) / fit.size if fit.size else 1.0
        return {
            "index": index,
            "n": fit.size,
            "tokens": fit.tokens,
            "rate": round(rate_seen, 6),
            "evaluations": fit.evaluations,
        }

    def lines(self, count: int, use_cache: bool) -> list[dict[str, Any]]:
        return cached_lines(self.cache_path if use_cache else None, count, self.fit)


@BENCHMARKS.register("infinitebench")
class InfiniteBench(Benchmark):
    name = "infinitebench"
    summary = (
        "InfiniteBench (official prompts, middle truncation to the length, official scorers); "
        "passkey/number_string/kv_retrieval generated locally at any length"
    )
    metrics = (
        Metric("accuracy"),
        Metric("qa_f1", "F1"),
        Metric("qa_f1_zh", "F1 (Chinese)"),
        Metric("rougeLsum", "ROUGE-Lsum"),
        Metric("prefix_accuracy", "accuracy (answer prefix)"),
    )
    options = (
        Option("template", str, None, "template family: yarn_mistral (default) or gpt4 (chat-style)"),
        Option("chat_template", bool, None, "use the chat template (default: only for chat-style templates)"),
        FIXTURE_OPTION,
        Option("source", str, "auto", "where records come from", choices=SOURCES),
        Option(
            "dataset", str, None, "hub repository of <task>.jsonl (default xinrongzhang2022/InfiniteBench)"
        ),
        Option("num_samples", int, None, "generated tasks: samples without --limit (official counts)", False),
        Option("max_new_tokens", int, None, "generation budget (default: the official one per task)"),
        Option("cache", bool, True, "keep generated samples on disk (false: in memory only)", False),
        Option("math_calc_gpt4", bool, False, "Math.Calc: drop the echoed first number (rescoring GPT-4)"),
        closed_book_option("closed-book control: the template with an empty {context} (same samples)"),
    )
    input_length_key = "original_tokens"
    depth_key = "depth"  # generated passkey, number_string, kv_retrieval: the needle's depth (synthetic.py)
    truncation = "the middle of the text, the wrapper kept whole: the first and last halves of what fits"
    # src/eval_<model>.py, preds_<task>.jsonl: `id` (the example's index), `prediction` and `ground_truth`
    # (eval_utils.get_answer: [option text, letter] for the choice tasks), what compute_scores.py reads
    prediction_files = (
        PredictionFile(
            "InfiniteBench's eval_*.py output (preds_<task>.jsonl)",
            prediction="prediction",
            references="ground_truth",
            keys=("id",),
            sample_id=("id",),
        ),
    )

    @property
    def config(self) -> InfiniteBenchConfig:
        return load_config()

    def tasks(self) -> list[str]:
        return list(self.config.tasks)

    def default_tasks(self) -> list[str]:
        return [name for name, spec in self.config.tasks.items() if spec.default]

    def check_task(self, task: str) -> str:
        """The official task name for a name or an alias (``passkey``, ``kv``, ``en.mc``, ...)."""
        return self.config.resolve(task)

    def spec(self, task: str) -> TaskSpec:
        return self.config.tasks[self.check_task(task)]

    def check_job(self, task: str, length: int, options: Mapping[str, Any], data_dir: str | None) -> None:
        task = self.check_task(task)
        values = self.typed_options(options)
        self.config.template(values["template"] or self.config.default_template, task)
        source = self.pick_source(task, values, data_dir)
        if source == "fixture" and fixture_file(task)[1] is None:
            raise MissingDataError(
                f"infinitebench/{task}: no fixture ({fixture_file(task)[0]}, package data)"
            )
        records: list[Record] = []
        if source in ("fixture", "dir"):  # a local file is checked now, before any model loads
            records = self.local_records(task, source, data_dir)[1]
        elif source == "hub":  # the hub's file, when it is in the cache already
            cached = hub_records(self.dataset(values), task, offline=True)
            records = cached[1] if cached is not None else []
        for record in records:
            gold(task, record)

    # ------------------------------------------------------------------------------------ data
    def source(self, task: str, ctx: SampleContext) -> str:
        return self.pick_source(task, self.option_values(ctx), ctx.data_dir)

    def pick_source(self, task: str, options: Mapping[str, Any], data_dir: str | None) -> str:
        """Where a job's records come from (see the module docstring for the order)."""
        source = options["source"]
        if source == "auto" and options["fixture"]:
            source = "fixture"
        if source == "auto":
            if data_dir and find_task_file(data_dir, task):
                source = "dir"
            elif self.config.tasks[task].synthetic:
                source = "generate"
            else:
                source = "hub"
        if source == "generate" and not self.config.tasks[task].synthetic:
            raise LampeEvalError(
                f"infinitebench/{task} is not synthetic: only passkey, number_string and kv_retrieval "
                "can be generated"
            )
        return source

    def records(self, task: str, source: str, ctx: SampleContext) -> tuple[str, list[Record]]:
        """(source label, records) for a non-generated source."""
        if source in ("fixture", "dir"):
            return self.local_records(task, source, ctx.data_dir)
        found = hub_records(self.dataset(self.option_values(ctx)), task)
        assert found is not None  # not offline: the records, or a one-line error
        return found

    def dataset(self, options: Mapping[str, Any]) -> str:
        return str(options["dataset"] or self.config.dataset)

    def data_sources(
        self, task: str, length: int, options: Mapping[str, Any], data_dir: str | None
    ) -> list[DataSource]:
        task = self.check_task(task)
        values = self.typed_options(options)
        source = self.pick_source(task, values, data_dir)
        what = f"infinitebench {task}"
        if source == "fixture":
            return [DataSource(self.name, what, "fixture", fixture_file(task)[0])]
        if source == "dir":
            return [DataSource(self.name, what, "file", str(find_task_file(str(data_dir), task)))]
        if source == "generate":
            return []
        files = hub_files(self.dataset(values), task)
        fix = f"lampe-eval data fetch --bench infinitebench --task {task}"
        return [DataSource(self.name, what, "hub", files.repo, hub=files, fix=fix)]

    def local_records(self, task: str, source: str, data_dir: str | None) -> tuple[str, list[Record]]:
        """(source label, records) of the fixture or of ``--data-dir``, in the official format (checked)."""
        if source == "fixture":
            relative, path = fixture_file(task)
            if path is None:
                raise MissingDataError(f"infinitebench/{task}: no fixture ({relative} of the package data)")
            return f"fixture:{relative}", read_jsonl(path, task)
        if source == "dir":
            found = find_task_file(data_dir, task) if data_dir else None
            if found is None:
                raise MissingDataError(
                    f"infinitebench/{task}: no {task}.jsonl in --data-dir {data_dir!r} "
                    "(nor in its infinitebench/)"
                )
            return f"file:{found}", read_jsonl(found, task)
        raise ValueError(f"not a local source: {source}")

    # --------------------------------------------------------------------------------- samples
    def samples(self, task: str, ctx: SampleContext) -> Iterator[Sample]:
        task = self.check_task(task)
        spec = self.config.tasks[task]
        options = self.option_values(ctx)
        family = options["template"] or self.config.default_template
        template = self.config.template(family, task)
        chat = options["chat_template"]
        if chat is None:
            chat = family != "yarn_mistral"  # completion-style templates are fed raw (module doc)
        builder = PromptBuilder(ctx.lm, ctx.length, chat)
        max_new = options["max_new_tokens"] or spec.max_new_tokens
        base_meta = {
            "label": spec.label,
            "metric": spec.metric,
            "template": family,
            "chat_template": builder.chat_template,
        }
        if task == "math_calc" and options["math_calc_gpt4"]:
            base_meta["math_calc_gpt4"] = True  # read back by score()
        source = self.source(task, ctx)
        if source == "generate":
            yield from self._generated(task, spec, template, family, builder, max_new, base_meta, ctx)
            return
        label, records = self.records(task, source, ctx)
        if ctx.limit is not None:
            records = limited(records, ctx.limit, f"{task}:{ctx.seed}", shuffle=source != "fixture")
        closed = options[CLOSED_BOOK]
        for record in records:
            shown = replace(record, context="") if closed else record
            prompt, meta = builder.build(fill_template(template, task, shown))
            sample_id = f"fixture-{record.id}" if source == "fixture" else record.id
            yield Sample(
                sample_id=sample_id,
                task=task,
                prompt=prompt,
                references=gold(task, record),
                max_new_tokens=max_new,
                meta={**base_meta, "data_source": label, "id": record.id, **meta},
            )

    def _generated(
        self,
        task: str,
        spec: TaskSpec,
        template: str,
        family: str,
        builder: PromptBuilder,
        max_new: int,
        base_meta: dict[str, Any],
        ctx: SampleContext,
    ) -> Iterator[Sample]:
        options = self.option_values(ctx)
        data = SyntheticSet(self.config, task, template, family, builder, ctx.seed)
        total = options["num_samples"] or data.recipe.num_samples
        count = total if ctx.limit is None else min(total, ctx.limit)
        lines = data.lines(count, options["cache"])
        for line in lines:
            index, n = int(line["index"]), int(line["n"])
            prompt, record, meta = data.prompt_for(index, n)
            tokens = int(line["tokens"])
            if options[CLOSED_BOOK]:  # the same generated sample, its context removed
                prompt = builder.wrap(fill_template(template, task, replace(record, context="")))
                tokens = builder.count(prompt)
            yield Sample(
                sample_id=record.id,
                task=task,
                prompt=prompt,
                references=list(record.answer),
                max_new_tokens=max_new,
                meta={
                    **base_meta,
                    "data_source": f"generated:seed{ctx.seed}",
                    "id": record.id,
                    "prompt_tokens": tokens,
                    "truncated": False,
                    **meta,
                },
            )

    # --------------------------------------------------------------------------------- scoring
    def score(self, sample: Sample, output: dict[str, Any]) -> dict[str, float]:
        task = self.check_task(sample.task)
        metric = self.config.tasks[task].metric
        gpt4 = bool(sample.meta.get("math_calc_gpt4"))
        return {metric: 100.0 * score_one(task, output.get("prediction"), sample.references, gpt4=gpt4)}


__all__ = ["InfiniteBench", "PromptBuilder", "SyntheticSet"]
