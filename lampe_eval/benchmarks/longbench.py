"""LongBench v1 (THUDM/LongBench): 21 datasets in six categories, plus the 13 LongBench-E variants.

Per sample, as the official ``pred.py`` / ``eval.py`` do (facts: ``docs/benchmarks.md`` section 1):

1. ``prompt = template.format(**record)`` with the dataset's official template
   (``tasks/longbench/longbench.yaml``).
2. Middle truncation in tokens of the formatted prompt, *before* any chat wrapper: when it has more than
   ``max_length`` tokens (special tokens included), keep the decoded first ``max_length // 2`` and last
   ``max_length // 2`` tokens. ``max_length`` is the job's length (``--len``, the official
   ``model2maxlen``, e.g. 3500 for a 4K Llama-2: leave room for the wrapper and the answer yourself).
3. The model's chat template, except for trec, triviaqa, samsum, lsht, lcc and repobench-p (the official
   rule; ``--opt chat_template=false`` turns it off everywhere).
4. Greedy generation of the dataset's budget; samsum stops at the first newline token after at least
   one new token.
5. Scoring: the four few-shot datasets keep the prediction's first line; the dataset's metric, max over
   the gold answers, x100; the dataset score is the mean rounded to 2 decimals. A ``<dataset>_e`` task
   also reports the buckets 0-4k / 4-8k / 8k+ of the record's ``length`` field.

Data: ``--data-dir`` / ``--opt longbench_dir=`` (official JSONL files, e.g. ``data/`` of the official
``data.zip``, or ``data.zip`` itself), the hub repository's ``data.zip`` (``zai-org/LongBench``; the old id
``THUDM/LongBench`` redirects there), or ``--opt fixture=true`` (the test fixture; see
:mod:`lampe_eval.benchmarks.table_driven`). Options: ``chat_template`` (default true), ``code_sim``
(``difflib``, the official environment, or ``levenshtein``), ``longbench_dataset`` (another hub id).

:func:`longbench_categories` groups dataset scores into the paper's six categories and averages.
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..backends.base import Generation, Rounds
from ..data.hub import Snapshot
from ..data.sources import HubFiles
from ..errors import LampeEvalError
from ..options import Option
from ..prompts import newline_token
from . import metrics
from .base import BENCHMARKS, CLOSED_BOOK, Metric, Sample, SampleContext, closed_book_option
from .datafiles import FIXTURE_OPTION, DataFileError, Field, Schema, decode_text, parse_jsonl
from .predictions import PredictionFile
from .table_driven import TableDrivenBenchmark
from .tables import load_table, mapping

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

E_SUFFIX = "_e"

METRICS: dict[str, Callable[..., float]] = {
    "qa_f1": metrics.qa_f1_score,
    "qa_f1_zh": metrics.qa_f1_zh_score,
    "rouge_l": metrics.rouge_l_score,
    "rouge_l_zh": metrics.rouge_l_zh_score,
    "classification": metrics.classification_score,
    "retrieval": metrics.retrieval_score,
    "retrieval_zh": metrics.retrieval_zh_score,
    "count": metrics.count_score,
    "code_sim": metrics.code_sim_score,
}


@dataclass(frozen=True)
class DatasetSpec:
    """One LongBench dataset: how its prompt is built, generated and scored."""

    name: str
    category: str
    language: str  # en, zh or code
    metric: str
    max_new_tokens: int
    template: str
    chat_template: bool = True
    first_line: bool = False
    newline_stop: bool = False
    longbench_e: bool = False


@dataclass(frozen=True)
class LongBenchConfig:
    dataset: str
    hub_file: str  # the repository's archive
    hub_member: str  # a task's file in it ({task})
    categories: tuple[str, ...]
    buckets: tuple[tuple[str, float | None], ...]
    datasets: dict[str, DatasetSpec]

    def tasks(self) -> list[str]:
        names = list(self.datasets)
        return names + [n + E_SUFFIX for n, spec in self.datasets.items() if spec.longbench_e]

    def spec(self, task: str) -> DatasetSpec:
        base = task[: -len(E_SUFFIX)] if task.endswith(E_SUFFIX) else task
        return self.datasets[base]

    def bucket(self, length: float) -> str:
        for name, below in self.buckets:
            if below is None or length < below:
                return name
        return self.buckets[-1][0]


def parse_config(raw: dict[str, Any], where: str) -> LongBenchConfig:
    """The typed LongBench table (``tasks/longbench/longbench.yaml``)."""
    categories = tuple(raw.get("categories") or ())
    datasets: dict[str, DatasetSpec] = {}
    for name, entry in mapping(raw.get("datasets"), f"{where}: 'datasets'").items():
        spec = DatasetSpec(name=str(name), **mapping(entry, f"{where}: dataset {name}"))
        if spec.metric not in METRICS:
            raise LampeEvalError(f"{where}: dataset {name}: unknown metric {spec.metric!r}")
        if spec.category not in categories:
            raise LampeEvalError(f"{where}: dataset {name}: category {spec.category!r} not in categories")
        datasets[spec.name] = spec
    buckets = tuple((str(b["name"]), b.get("below")) for b in raw.get("length_buckets") or ())
    return LongBenchConfig(
        dataset=str(raw.get("dataset", "zai-org/LongBench")),
        hub_file=str(raw.get("hub_file", "data.zip")),
        hub_member=str(raw.get("hub_member", "data/{task}.jsonl")),
        categories=categories,
        buckets=buckets or (("all", None),),
        datasets=datasets,
    )


def load_config() -> LongBenchConfig:
    return load_table("longbench", parse_config)


# --------------------------------------------------------------------------- prompt


def middle_truncate(
    prompt: str, tokenizer: PreTrainedTokenizerBase, max_length: int
) -> tuple[str, int, bool]:
    """LongBench's truncation: (prompt, its token count with special tokens, whether it was cut).

    Over ``max_length`` tokens, the prompt becomes the decoded first ``max_length // 2`` tokens followed
    by the decoded last ``max_length // 2`` (two decodes, special tokens skipped, nothing between)."""
    ids = tokenizer(prompt, add_special_tokens=True)["input_ids"]
    count = len(ids)
    if count <= max_length:
        return prompt, count, False
    half = int(max_length / 2)
    head = tokenizer.decode(ids[:half], skip_special_tokens=True)
    tail = tokenizer.decode(ids[-half:], skip_special_tokens=True) if half > 0 else ""
    return head + tail, count, True


def build_prompt(spec: DatasetSpec, record: Mapping[str, Any]) -> str:
    """The official template filled with the record's fields (``str.format(**record)``)."""
    return spec.template.format(**record)


# --------------------------------------------------------------------------- scoring


def score_prediction(
    dataset: str,
    prediction: str,
    answers: Sequence[str],
    all_classes: Sequence[str] | None = None,
    code_sim_backend: str = "difflib",
) -> float:
    """One sample's official LongBench score in [0, 1] (``eval.py``: first-line post-processing for the
    few-shot datasets, then the max of the dataset's metric over the gold answers, never below 0)."""
    spec = load_config().spec(dataset)
    if spec.first_line:
        prediction = metrics.first_line(prediction)
    return metrics.max_over_references(
        METRICS[spec.metric],
        prediction,
        answers,
        all_classes=list(all_classes or []),
        backend=code_sim_backend,
    )


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def longbench_categories(
    task_scores: Mapping[str, float], language: str = "en", longbench_e: bool = False
) -> dict[str, float]:
    """Dataset scores grouped like the paper's Table 1.

    ``task_scores`` maps dataset names (``<dataset>_e`` with ``longbench_e=True``) to their scores; other
    keys are ignored. ``language``: ``en`` (English and code datasets: the paper's 16 and the README's
    English table), ``zh`` (Chinese and code: the README's Chinese table) or ``all``.

    Returns the categories present, in table order, each the mean of its datasets present, then
    ``Avg`` = the mean over all included datasets (the paper's average) and ``Avg (categories)`` = the
    mean of the category scores (the LongBench README's average).
    """
    if language not in ("en", "zh", "all"):
        raise LampeEvalError(f"longbench_categories: language {language!r}; choose en, zh or all")
    config = load_config()
    suffix = E_SUFFIX if longbench_e else ""
    included: dict[str, list[float]] = {c: [] for c in config.categories}
    every: list[float] = []
    for name, spec in config.datasets.items():
        key = name + suffix
        if key not in task_scores or (longbench_e and not spec.longbench_e):
            continue
        if language != "all" and spec.language not in (language, "code"):
            continue
        value = float(task_scores[key])
        included[spec.category].append(value)
        every.append(value)
    out = {category: _mean(values) for category, values in included.items() if values}
    if every:
        out["Avg"] = _mean(every)
        out["Avg (categories)"] = _mean([out[c] for c in config.categories if c in out])
    return out


# --------------------------------------------------------------------------- benchmark


def archive_records(archive: Path, member: str, where: str) -> list[dict[str, Any]]:
    """The records of one ``data/<task>.jsonl`` inside the official ``data.zip`` (read byte for byte)."""
    try:
        with zipfile.ZipFile(archive) as handle:
            data = handle.read(member)
    except KeyError:
        raise DataFileError(f"{where}: the archive has no {member}") from None
    except (OSError, zipfile.BadZipFile) as err:
        raise DataFileError(f"{where}: cannot read the archive ({err})") from err
    return parse_jsonl(decode_text(data, f"{where}/{member}"), f"{where}/{member}")[0]


# The official record format (the records of data.zip's data/<task>.jsonl).
SCHEMA = Schema(
    "LongBench",
    (
        Field("input", (str,)),
        Field("context", (str,), nonempty=True),
        Field("answers", (list,), items=str),
        Field("length", (int,), required=False),
        Field("dataset", (str,), required=False),
        Field("language", (str,), required=False),
        Field("all_classes", (list, type(None)), items=str, required=False),
        Field("_id", (str,), required=False),
    ),
)


@BENCHMARKS.register("longbench")
class LongBench(TableDrivenBenchmark):
    name = "longbench"
    summary = "LongBench v1: 21 bilingual long-context datasets (+ LongBench-E), official prompts and scorers"
    metrics = (
        Metric("qa_f1", "F1"),
        Metric("qa_f1_zh", "F1 (Chinese)"),
        Metric("rouge_l", "ROUGE-L"),
        Metric("rouge_l_zh", "ROUGE-L (Chinese)"),
        Metric("classification", "accuracy"),
        Metric("retrieval", "retrieval accuracy"),
        Metric("retrieval_zh", "retrieval accuracy (Chinese)"),
        Metric("count", "count accuracy"),
        Metric("code_sim", "edit similarity"),
        Metric("length", "input length (words; LongBench-E buckets)"),
    )
    options = (
        FIXTURE_OPTION,
        Option("longbench_dir", Path, None, "directory with the official <task>.jsonl files or data.zip"),
        Option("longbench_dataset", str, None, "hub repository with data.zip (default zai-org/LongBench)"),
        Option("chat_template", bool, True, "the model's chat template (the official rule per dataset)"),
        Option("code_sim", str, "difflib", "code_sim's ratio backend", choices=("difflib", "levenshtein")),
        closed_book_option("closed-book control: the template with an empty {context}"),
    )
    schema = SCHEMA
    subdirs = ("data",)
    bucket_plot = True
    input_length_key = "record_tokens"
    truncation = "the middle of the formatted prompt (pre chat template): first and last --len/2 tokens kept"
    # LongBench/pred.py, pred/<model>/<dataset>.jsonl (pred_e/ for LongBench-E): no sample id (its
    # processes append in any order); `length` is the record's own (words; LongBench-E's buckets)
    prediction_files = (
        PredictionFile(
            "LongBench's pred.py output (pred/<model>/<dataset>.jsonl)",
            prediction="pred",
            references="answers",
            keys=("all_classes", "length"),
            sample_id=("_id",),
            meta=(("all_classes", "all_classes"), ("length", "length")),
        ),
    )

    def tasks(self) -> list[str]:
        return load_config().tasks()

    def default_tasks(self) -> list[str]:
        return list(load_config().datasets)

    def hub_files(self, task: str, dataset: str | None) -> HubFiles:
        config = load_config()
        return HubFiles(dataset or config.dataset, (config.hub_file,))

    def hub_records(self, task: str, snapshot: Snapshot) -> tuple[list[dict[str, Any]], str]:
        """The task's member of ``data.zip``."""
        member = load_config().hub_member.format(task=task)
        archive = snapshot.path(load_config().hub_file)
        return archive_records(archive, member, str(archive)), snapshot.label(member)

    def samples(self, task: str, ctx: SampleContext) -> Iterator[Sample]:
        self.check_task(task)
        spec = load_config().spec(task)
        options = self.option_values(ctx)
        records, source = self.load_records(task, ctx)
        if ctx.limit is not None:
            records = records[: ctx.limit]
        use_chat = spec.chat_template and options["chat_template"]
        backend = options["code_sim"]
        tokenizer = ctx.lm.tokenizer
        for index, record in enumerate(records):
            raw = build_prompt(spec, {**record, "context": ""} if options[CLOSED_BOOK] else record)
            prompt, tokens, truncated = middle_truncate(raw, tokenizer, ctx.length)
            text = ctx.lm.format_prompt(prompt, use_chat_template=use_chat)
            meta: dict[str, Any] = {
                "dataset": spec.name,
                "category": spec.category,
                "language": record.get("language"),
                "length": record.get("length"),
                "all_classes": record.get("all_classes"),
                "data_source": source,
                "record_tokens": tokens,
                "truncated": truncated,
                "chat_template": text != prompt,
            }
            if spec.metric == "code_sim":
                meta["code_sim_backend"] = backend
            if spec.newline_stop:
                meta["newline_stop"] = True
            answers = record["answers"]
            yield Sample(
                sample_id=str(record.get("_id") or index),
                task=task,
                prompt=text,
                references=[str(a) for a in (answers if isinstance(answers, list) else [answers])],
                max_new_tokens=spec.max_new_tokens,
                meta=meta,
            )

    def evaluate(self, sample: Sample, ctx: SampleContext) -> Rounds:
        """Greedy generation; samsum (``newline_stop``) as the official ``pred.py``: the newline token ends
        generation like EOS, after at least one new token."""
        if not sample.meta.get("newline_stop"):
            return (yield from super().evaluate(sample, ctx))
        newline = newline_token(ctx.lm.tokenizer)
        request = self.generation_request(sample, min_new_tokens=1, stop_token_ids=(newline,))
        (generation,) = yield [request]
        assert isinstance(generation, Generation)
        return generation.output()

    def score(self, sample: Sample, output: dict[str, Any]) -> dict[str, float]:
        spec = load_config().spec(sample.task)
        value = score_prediction(
            spec.name,
            str(output.get("prediction", "")),
            sample.references,
            sample.meta.get("all_classes"),
            str(sample.meta.get("code_sim_backend", "difflib")),
        )
        scores = {spec.metric: 100.0 * value}
        if sample.task.endswith(E_SUFFIX):
            scores["length"] = float(sample.meta.get("length") or 0)
        return scores

    def aggregate(self, task: str, scores: Sequence[dict[str, float]]) -> dict[str, float]:
        """The dataset score (mean, 2 decimals, as ``eval.py``); ``_e`` tasks add the length buckets."""
        if not scores:
            return {}
        metric = next(iter(scores[0]))
        out = {metric: round(_mean([s[metric] for s in scores]), 2)}
        if task.endswith(E_SUFFIX):
            config = load_config()
            grouped: dict[str, list[float]] = {name: [] for name, _ in config.buckets}
            for s in scores:
                grouped[config.bucket(s.get("length", 0.0))].append(s[metric])
            out.update({name: round(_mean(v), 2) for name, v in grouped.items() if v})
        return out

    def summarize_tasks(self, task_scores: Mapping[str, float]) -> dict[str, float]:
        """Benchmark-level row for a run, like the paper's Table 1: the English (+ code) categories and
        averages; ``Avg zh (categories)`` adds the README's Chinese-table average when Chinese datasets
        ran (only Chinese datasets: the Chinese table). LongBench-E tasks when no standard ones ran."""
        config = load_config()
        e = not any(k in config.datasets for k in task_scores)
        english = longbench_categories(task_scores, language="en", longbench_e=e)
        chinese = longbench_categories(task_scores, language="zh", longbench_e=e)
        suffix = E_SUFFIX if e else ""
        zh_names = [name + suffix for name, spec in config.datasets.items() if spec.language == "zh"]
        if not any(name in task_scores for name in zh_names):
            return english
        if not any(name in english for name in config.categories if name != "Code"):
            return chinese
        return {**english, "Avg zh (categories)": chinese["Avg (categories)"]}
