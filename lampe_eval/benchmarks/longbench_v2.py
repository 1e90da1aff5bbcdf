"""LongBench v2 (THUDM/LongBench, v2 part): 503 four-choice questions over contexts of 8K to 2M words.

One task, ``longbench_v2``; per question, as the official ``pred.py`` / ``result.py`` do (facts:
``docs/benchmarks.md`` section 6; templates: ``tasks/longbench_v2/longbench_v2.yaml``):

1. The template (``0shot``; ``--opt cot=true``: ``0shot_cot``; ``--opt no_context=true``:
   ``0shot_no_context``) filled with ``str.replace``: ``$DOC$`` <- the stripped context, ``$Q$``, ``$C_A$`` ..
   ``$C_D$`` <- the stripped question and choices.
2. Middle truncation of the filled prompt in tokens of the model's tokenizer (special tokens included):
   over ``max_len`` tokens it becomes ``decode(ids[:max_len//2] + ids[-max_len//2:])`` (one decode, special
   tokens skipped; Python's ``-max_len//2`` rounds down, so the tail keeps the odd token). ``max_len`` is
   the job's length (``--len``: the official ``model2maxlen``, 120000 for 128K models: leave room for the
   chat wrapper and the answer yourself).
3. The model's chat template (one user message: ``pred.py`` sends it to a chat-completions server).
4. Generation of 128 tokens (greedy here; the official sampling uses temperature 0.1). With ``cot=true``,
   two steps: 1024 tokens of reasoning, then the ``0shot_cot_ans`` prompt (no context; ``$COT$`` <- the
   stripped reasoning), truncated and wrapped the same way, answered in 128 tokens.
5. ``extract_answer`` on the stripped response; the sample is correct when the letter equals ``answer``.

Scores: ``accuracy`` (x100) and the same per difficulty (easy, hard) and length bucket (short, medium,
long) as the leaderboard reports them (``result.py``: rounded to 1 decimal); ``--opt compensated=true`` is
``result.py``'s switch that counts an answer it cannot parse as 0.25.

Data: ``--opt fixture=true`` (a few hand-written questions in the official layout), ``--data-dir`` /
``--opt longbench_v2_dir=`` with the official ``data.json`` (or ``longbench_v2.jsonl``), else the hub
(``data.json`` of ``zai-org/LongBench-v2``, where ``THUDM/LongBench-v2`` redirects; ``--opt
longbench_v2_dataset=`` for a mirror).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..backends.base import Generation, GenerationRequest, Rounds
from ..data.sources import HubFiles
from ..errors import LampeEvalError
from ..options import Option
from .base import BENCHMARKS, Metric, Sample, SampleContext, closed_book_option
from .datafiles import FIXTURE_OPTION, Field, Schema, require_directories
from .predictions import PredictionFile
from .table_driven import TableDrivenBenchmark
from .tables import load_table, mapping

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

FIELDS = ("_id", "difficulty", "length", "question", "choice_A", "choice_B", "choice_C", "choice_D", "answer")
DIFFICULTIES = ("easy", "hard")
LENGTHS = ("short", "medium", "long")
# result.py's columns after Overall, as score keys: accuracy_<difficulty> and accuracy_<length bucket>
SPLITS = tuple(f"accuracy_{name}" for name in DIFFICULTIES + LENGTHS)
_ANSWER_IN_PARENS = re.compile(r"The correct answer is \(([A-D])\)")
_ANSWER_BARE = re.compile(r"The correct answer is ([A-D])")


@dataclass(frozen=True)
class LongBenchV2Config:
    dataset: str
    hub_file: str  # the repository's one data file
    task: str
    max_new_tokens: int
    cot_max_new_tokens: int
    templates: dict[str, str]


def parse_config(raw: dict[str, Any], where: str) -> LongBenchV2Config:
    templates = {str(k): str(v) for k, v in mapping(raw.get("templates"), f"{where}: 'templates'").items()}
    missing = {"zero_shot", "cot", "cot_answer", "no_context"} - set(templates)
    if missing:
        raise LampeEvalError(f"{where}: templates lack {', '.join(sorted(missing))}")
    return LongBenchV2Config(
        dataset=str(raw["dataset"]),
        hub_file=str(raw.get("hub_file", "data.json")),
        task=str(raw["task"]),
        max_new_tokens=int(raw["max_new_tokens"]),
        cot_max_new_tokens=int(raw["cot_max_new_tokens"]),
        templates=templates,
    )


def load_config() -> LongBenchV2Config:
    return load_table("longbench_v2", parse_config)


# --------------------------------------------------------------------------- prompt


def fill(template: str, record: Mapping[str, Any], context: str = "") -> str:
    """``pred.py``'s fill: ``str.replace`` of $DOC$, $Q$, $C_A$..$C_D$ in this order, each value stripped
    (so a placeholder inside the context is filled too, as there)."""
    text = template.replace("$DOC$", context.strip()).replace("$Q$", str(record["question"]).strip())
    for letter in "ABCD":
        text = text.replace(f"$C_{letter}$", str(record[f"choice_{letter}"]).strip())
    return text


def middle_truncate(prompt: str, tokenizer: PreTrainedTokenizerBase, max_len: int) -> tuple[str, int, bool]:
    """``pred.py``'s ``query_llm`` cut: (prompt, its token count with special tokens, whether it was cut).

    Unlike LongBench v1 (two decodes of ``int(max_len/2)`` tokens each), v2 keeps
    ``ids[:max_len//2] + ids[-max_len//2:]`` and decodes them together, special tokens skipped; for an
    odd ``max_len`` the tail has the extra token (``-max_len//2`` rounds towards minus infinity)."""
    ids = tokenizer(prompt, verbose=False)["input_ids"]  # = tokenizer.encode(prompt): special tokens added
    count = len(ids)
    if count <= max_len:
        return prompt, count, False
    kept = ids[: max_len // 2] + ids[-max_len // 2 :]
    return tokenizer.decode(kept, skip_special_tokens=True), count, True


def extract_answer(response: str) -> str | None:
    """``pred.py``'s ``extract_answer``: drop every ``*``, then the first "The correct answer is (X)", else
    the first "The correct answer is X" (X in A-D, case-sensitive), else None."""
    response = response.replace("*", "")
    match = _ANSWER_IN_PARENS.search(response) or _ANSWER_BARE.search(response)
    return match.group(1) if match else None


def judge(prediction: str, answer: str, compensated: bool = False) -> float:
    """One question's score in [0, 1]: ``pred == answer`` on the stripped response; ``result.py`` with
    ``compensated = True`` gives 0.25 to a response with no parsable answer."""
    pred = extract_answer(prediction.strip())
    if compensated and pred is None:
        return 0.25
    return float(pred == answer)


def split_keys(difficulty: str, length: str) -> tuple[str, str]:
    """The two split scores a question counts in, as ``result.py`` buckets it: anything but "easy" is
    hard, anything but "short" or "medium" is long."""
    level = "easy" if difficulty == "easy" else "hard"
    bucket = length if length in ("short", "medium") else "long"
    return f"accuracy_{level}", f"accuracy_{bucket}"


# The official record format (the records of the repository's data.json).
SCHEMA = Schema(
    "LongBench v2",
    (
        Field("_id", (str,), nonempty=True),
        Field("domain", (str,), required=False),
        Field("sub_domain", (str,), required=False),
        Field("difficulty", (str,), choices=("easy", "hard")),
        Field("length", (str,), choices=("short", "medium", "long")),
        Field("question", (str,), nonempty=True),
        *(Field(f"choice_{letter}", (str,)) for letter in "ABCD"),
        Field("answer", (str,), choices=("A", "B", "C", "D")),
        Field("context", (str,), nonempty=True),
    ),
)


# --------------------------------------------------------------------------- benchmark


@BENCHMARKS.register("longbench_v2")
class LongBenchV2(TableDrivenBenchmark):
    name = "longbench_v2"
    summary = (
        "LongBench v2: 503 multiple-choice questions (8K-2M words), official prompts (with or without "
        "chain-of-thought), middle truncation, answer extraction; by difficulty and length"
    )
    metrics = (
        Metric("accuracy", "accuracy"),
        *(Metric(key, f"accuracy ({key.split('_')[1]})", own_table=True) for key in SPLITS),
    )
    options = (
        FIXTURE_OPTION,
        Option("longbench_v2_dir", Path, None, "directory with the official data.json"),
        Option(
            "longbench_v2_dataset", str, None, "hub repository with data.json (default zai-org/LongBench-v2)"
        ),
        Option("cot", bool, False, "chain-of-thought: the official two-step protocol (1024 + 128 tokens)"),
        closed_book_option("the official no-context prompt (question and choices only)"),
        Option("chat_template", bool, True, "the model's chat template (the official code always uses it)"),
        Option("compensated", bool, False, "result.py's switch: an unparsable answer counts 0.25"),
    )
    schema = SCHEMA
    input_length_key = "record_tokens"
    # pred.py (results/<model>[_cot|_no_context].jsonl): the record without its context, with `response`
    # (the answer step's text, what result.py's `pred` is extracted from), `pred` and `judge`
    prediction_files = (
        PredictionFile(
            "LongBench v2's pred.py output (results/<model>.jsonl)",
            prediction="response",
            references="answer",
            keys=("_id", "difficulty", "length", "pred", "judge"),
            sample_id=("_id",),
            meta=tuple((key, key) for key in ("domain", "sub_domain", "difficulty", "length")),
            score="judge",
        ),
    )

    def tasks(self) -> list[str]:
        return [load_config().task]

    def check_job(self, task: str, length: int, options: Mapping[str, Any], data_dir: str | None) -> None:
        values = self.typed_options(options)
        if values["cot"] and values["no_context"]:
            raise LampeEvalError("longbench_v2: choose one of --opt cot=true and --opt no_context=true")
        require_directories("longbench_v2", values, ["longbench_v2_dir"])
        super().check_job(self.check_task(task), length, options, data_dir)

    def file_names(self, task: str) -> list[str]:
        return ["data.json", f"{task}.jsonl"]

    def hub_files(self, task: str, dataset: str | None) -> HubFiles:
        """The repository's ``data.json`` (the 503 records, one JSON array)."""
        config = load_config()
        return HubFiles(dataset or config.dataset, (config.hub_file,))

    def samples(self, task: str, ctx: SampleContext) -> Iterator[Sample]:
        self.check_task(task)
        self.check_job(task, ctx.length, ctx.options, ctx.data_dir)
        config = load_config()
        options = self.option_values(ctx)
        mode = "cot" if options["cot"] else "no_context" if options["no_context"] else "zero_shot"
        records, source = self.load_records(task, ctx)
        if ctx.limit is not None:
            records = records[: ctx.limit]
        for record in records:
            context = "" if mode == "no_context" else str(record["context"])
            raw = fill(config.templates[mode], record, context)
            prompt, tokens, truncated = middle_truncate(raw, ctx.lm.tokenizer, ctx.length)
            text = ctx.lm.format_prompt(prompt, use_chat_template=options["chat_template"])
            meta: dict[str, Any] = {
                "domain": record.get("domain"),
                "sub_domain": record.get("sub_domain"),
                "difficulty": record["difficulty"],
                "length": record["length"],
                "data_source": source,
                "prompt": mode,
                "record_tokens": tokens,
                "truncated": truncated,
                "chat_template": text != prompt,
                "compensated": options["compensated"],
            }
            if mode == "cot":  # step 2's prompt, filled except $COT$ (pred.py fills it last)
                meta["cot_answer_template"] = fill(config.templates["cot_answer"], record)
                meta["cot_max_new_tokens"] = config.cot_max_new_tokens
            yield Sample(
                sample_id=str(record["_id"]),
                task=task,
                prompt=text,
                references=[str(record["answer"])],
                max_new_tokens=config.max_new_tokens,
                meta=meta,
            )

    def evaluate(self, sample: Sample, ctx: SampleContext) -> Rounds:
        """``pred.py``: one answer; with chain of thought two rounds: the reasoning, then the answer prompt
        with the reasoning filled in (middle-truncated to the length, in the chat template)."""
        template = sample.meta.get("cot_answer_template")
        if not template:
            (output,) = yield [self.generation_request(sample)]
            assert isinstance(output, Generation)
            return {**output.output(), "pred": extract_answer(output.text.strip())}
        cot_tokens = int(sample.meta["cot_max_new_tokens"])
        (reasoning,) = yield [self.generation_request(sample, max_new_tokens=cot_tokens)]
        assert isinstance(reasoning, Generation)
        response_cot = reasoning.text.strip()
        lm = ctx.lm
        second, _, _ = middle_truncate(str(template).replace("$COT$", response_cot), lm.tokenizer, ctx.length)
        second = lm.format_prompt(second, use_chat_template=bool(sample.meta["chat_template"]))
        (answer,) = yield [GenerationRequest(second, sample.max_new_tokens)]
        assert isinstance(answer, Generation)
        return {
            **answer.output(),
            "pred": extract_answer(answer.text.strip()),
            "response_cot": response_cot,
            "prompt_tokens": reasoning.prompt_tokens,
            "answer_prompt_tokens": answer.prompt_tokens,
            "new_tokens": reasoning.new_tokens + answer.new_tokens,
            "seconds": reasoning.seconds + answer.seconds,
        }

    def score(self, sample: Sample, output: dict[str, Any]) -> dict[str, float]:
        value = 100.0 * judge(
            str(output.get("prediction", "")), sample.references[0], bool(sample.meta.get("compensated"))
        )
        level, bucket = split_keys(str(sample.meta.get("difficulty")), str(sample.meta.get("length")))
        return {"accuracy": value, level: value, bucket: value}

    def aggregate(self, task: str, scores: Sequence[dict[str, float]]) -> dict[str, float]:
        """``result.py``: overall and per-split accuracy over the questions of each split, x100 rounded to 1
        decimal (a split without questions is left out)."""
        out: dict[str, float] = {}
        for key in ("accuracy", *SPLITS):
            values = [s[key] for s in scores if key in s]
            if values:
                out[key] = round(sum(values) / len(values), 1)
        return out

    def summarize_aggregates(self, aggregates: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
        """The leaderboard's row: Overall, Easy, Hard, Short, Medium, Long."""
        scores = aggregates.get(load_config().task) or {}
        columns = {"Overall": "accuracy", **{key.split("_")[1].title(): key for key in SPLITS}}
        return {column: scores[key] for column, key in columns.items() if key in scores}
