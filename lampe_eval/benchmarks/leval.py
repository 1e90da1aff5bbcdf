"""L-Eval (OpenLMLab/LEval) closed-ended tasks: coursera, gsm100, quality, tpo (TOEFL) and sci_fi.

One record is one long document with several questions (``instructions`` / ``outputs``); every question
is one sample. Per sample, as the official baselines and ``Evaluation/auto_eval.py`` do (facts:
``docs/benchmarks.md`` section 2; task table ``tasks/leval/leval.yaml``):

1. Document truncation: while the document has more than ``length - 512`` tokens (special tokens
   included), keep its first ``budget - 250 k`` space-separated words (k = 0, 1, ...). The job's
   ``--len`` plays the role of the official ``--max_length`` (4k there = 4000 tokens).
2. Prompt: the task's system prompt (gsm100's is the 16-shot in-context instruction, its document the
   16 worked examples) and the user message (``Document is as follows. {document} \\nQuestion: ...``,
   or ``{document}\\n\\n{question}`` for gsm100), then the answer prefix ``\\nAnswer:`` for the exam
   tasks. ``--opt leval_prompt=``: ``chat`` (default) renders system + user with the model's chat
   template (system folded into the user turn when the template has no system role); ``llama2`` is
   the official Llama-2 string verbatim (``[INST]<<SYS>>\\n...\\n<</SYS>>\\n\\n...[/INST]\\nAnswer:``; no
   ``[/INST]`` for gsm100); ``plain`` is system + user + prefix with no template. A model without a
   chat template (or ``--opt chat_template=false``) gets ``plain``.
3. Greedy generation of 512 tokens. sci_fi asks a second, document-free question (the instruction
   with "based on the world described in the document." replaced by the real-world wording, no
   template); the prediction is ``loyalty + " [fact: " + fact + "]"``.
4. Answer extraction and exact match (``auto_eval.py`` / ``em.py``), task score = 100 x mean;
   sci_fi = (loyalty + fact) / 2.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2

from ..backends.base import Generation, GenerationRequest, Rounds
from ..data.sources import HubFiles
from ..errors import LampeEvalError
from ..models import LoadedModel
from ..options import Option
from .base import BENCHMARKS, CLOSED_BOOK, Metric, Sample, SampleContext, closed_book_option
from .datafiles import FIXTURE_OPTION, Field, Record, Schema
from .table_driven import TableDrivenBenchmark
from .tables import load_table, mapping

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

ANSWER_KINDS = ("mc", "mc_multi", "math", "judge")
PROMPT_STYLES = ("chat", "llama2", "plain")


@dataclass(frozen=True)
class PromptSpec:
    user: str
    answer_prefix: str = ""
    close_instruction: bool = True


@dataclass(frozen=True)
class TaskSpec:
    name: str
    label: str
    answer: str
    prompt: str
    system: str
    fact_check: bool = False


@dataclass(frozen=True)
class LEvalConfig:
    dataset: str
    hub_file: str  # a task's records in the repository ({task})
    max_new_tokens: int
    truncation_step: int
    prompts: dict[str, PromptSpec]
    fact_replace: tuple[str, str]
    fact_suffix: str
    tasks: dict[str, TaskSpec]


def parse_config(raw: dict[str, Any], where: str) -> LEvalConfig:
    """The typed L-Eval table (``tasks/leval/leval.yaml``)."""
    prompts = {
        str(k): PromptSpec(**mapping(v, f"{where}: prompt {k}"))
        for k, v in mapping(raw.get("prompts"), f"{where}: 'prompts'").items()
    }
    tasks: dict[str, TaskSpec] = {}
    for name, entry in mapping(raw.get("tasks"), f"{where}: 'tasks'").items():
        spec = TaskSpec(name=str(name), **mapping(entry, f"{where}: task {name}"))
        if spec.answer not in ANSWER_KINDS:
            raise LampeEvalError(f"{where}: task {name}: answer must be one of {', '.join(ANSWER_KINDS)}")
        if spec.prompt not in prompts:
            raise LampeEvalError(f"{where}: task {name}: unknown prompt {spec.prompt!r}")
        tasks[spec.name] = spec
    fact = mapping(raw.get("fact_check"), f"{where}: 'fact_check'")
    replace = fact.get("replace") or ["", ""]
    return LEvalConfig(
        dataset=str(raw.get("dataset", "L4NLP/LEval")),
        hub_file=str(raw.get("hub_file", "LEval/Exam/{task}.jsonl")),
        max_new_tokens=int(raw.get("max_new_tokens", 512)),
        truncation_step=int(raw.get("truncation_step", 250)),
        prompts=prompts,
        fact_replace=(str(replace[0]), str(replace[1])),
        fact_suffix=str(fact.get("suffix", "")),
        tasks=tasks,
    )


def load_config() -> LEvalConfig:
    return load_table("leval", parse_config)


# --------------------------------------------------------------------------- answer extraction


def mc_gold(answer: str) -> str:
    """``process_gt_mc``: the letters A-D of the gold answer's first word ("(B) ..." -> "B"), else "A"."""
    words = answer.split()
    letters = re.sub(r"[^A-D]", "", words[0]) if words else ""
    return letters or "A"


def mc_answer(response: str, multi: bool = False) -> str:
    """``process_output_mc``: the option letter(s) of a response.

    Empty -> "None"; a response that is a substring of "ABCD" as it is; single-answer tasks: the first
    A/B/C/D character anywhere. Otherwise (coursera, or no such character): a leading run of 2+ letters
    (sorted, unique); else capitals followed by whitespace, "." or ")" before any "Question" (with a
    one-letter leading run), keeping A-D, sorted, unique; else the first run of A-D characters; else "A".
    """
    if not response.strip():
        return "None"
    if response in "ABCD":
        return response
    first = re.search(r"[ABCD]", response)
    if not multi and first:
        return first.group()
    run = _letter_run(response)
    if len(run) > 1:
        return "".join(sorted(set(run)))
    rest = response[len(run) :].split("Question")[0]
    options = re.findall(r"\s*[A-Z](?=[\s.)])", rest)
    letters = re.sub(r"[^A-D]", "", run + " ".join(options).strip())
    letters = "".join(sorted(set(letters)))
    if not letters:
        letters = _letter_run(rest, anywhere=True)
    return letters or "A"


def _letter_run(text: str, anywhere: bool = False) -> str:
    """The run of A-D characters that starts ``text`` (``anywhere``: the first run in it), or ""."""
    match = (re.search if anywhere else re.match)(r"[ABCD]+", text)
    return match.group() if match else ""


def math_answer(text: str) -> str:
    """``process_math``: the number after "The answer is", else the last word with a digit in the text
    before the first blank line; then its digits up to the first "."."""
    match = re.search(r"The answer is (\S+)", text)
    if match:
        token = match.group(1)
    else:
        token = ""
        for word in reversed(text.split("\n\n")[0].split(" ")):
            if any(ch.isdigit() for ch in word):
                token = word
                break
    digits = ""
    for char in token:
        if char.isdigit():
            digits += char
        if char == ".":
            break
    return digits


def judge_gold(answer: str) -> tuple[str, str]:
    """``process_gt_judge``: "True [fact: False]" -> ("true", "false") (lowercased; the fact part loses
    its last character, the closing bracket)."""
    parts = answer.lower().split("[fact:")
    fact = parts[1][:-1] if len(parts) > 1 else ""
    return parts[0].strip(), fact.strip()


def judge_answers(response: str) -> tuple[str, str]:
    """``process_output_judge``: the first word containing "true" or "false" in each part of the
    prediction, else "<error>" (no random guess)."""

    def verdict(text: str) -> str:
        for word in text.split():
            if "true" in word:
                return "true"
            if "false" in word:
                return "false"
        return "<error>"

    loyalty, fact = judge_gold(response)
    return verdict(loyalty), verdict(fact)


_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)


def em_normalize(text: str) -> str:
    """``em.py``'s normalisation: remove ASCII punctuation, the lowercase articles, extra spaces.
    No lowercasing (option letters stay capitals)."""
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> float:
    """``exact_match_score``. Option golds (only A-D after normalisation): 1 when equal, 0.25 when the
    predicted letters are a subset of the gold letters, else 0. Others: numeric equality when both
    parse as floats, else 1 when the gold (lowercased, spaces removed) is a substring of the prediction."""
    norm_gold = em_normalize(gold)
    if all(ch in "ABCD" for ch in norm_gold):
        norm_prediction = em_normalize(prediction)
        if norm_prediction == norm_gold:
            return 1.0
        if set(norm_prediction) <= set(norm_gold):
            return 0.25
        return 0.0
    try:
        return float(float(prediction) == float(gold))
    except ValueError:
        return float(gold.lower().replace(" ", "") in prediction.lower().replace(" ", ""))


def score_prediction(task: str, prediction: str, gold: str) -> dict[str, float]:
    """Per-sample scores in [0, 1]: ``exact_match`` (sci_fi: the mean of ``loyalty`` and ``fact``)."""
    spec = load_config().tasks[task]
    if spec.answer in ("mc", "mc_multi"):
        return {"exact_match": exact_match(mc_answer(prediction, spec.answer == "mc_multi"), mc_gold(gold))}
    if spec.answer == "math":
        return {"exact_match": exact_match(math_answer(prediction), math_answer(gold))}
    loyalty_gold, fact_gold = judge_gold(gold)
    loyalty_prediction, fact_prediction = judge_answers(prediction)
    loyalty = exact_match(loyalty_prediction, loyalty_gold)
    fact = exact_match(fact_prediction, fact_gold)
    return {"exact_match": (loyalty + fact) / 2, "loyalty": loyalty, "fact": fact}


# --------------------------------------------------------------------------- prompt


def truncate_document(
    document: str, tokenizer: PreTrainedTokenizerBase, budget: int, step: int = 250
) -> tuple[str, int, bool]:
    """The official document cut: (document, its original token count, whether it was cut)."""

    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=True)["input_ids"])

    original = count(document)
    if original <= budget:
        return document, original, False
    dropped = 0
    current, tokens = document, original
    while tokens > budget:
        current = " ".join(current.split(" ")[: budget - dropped])
        dropped += step
        tokens = count(current)
    return current, original, True


def render_prompt(lm: LoadedModel, system: str, user: str, prompt: PromptSpec, style: str) -> str:
    """System prompt + user message in the chosen style, then the answer prefix."""
    if style == "llama2":
        close = "[/INST]" if prompt.close_instruction else ""
        return f"[INST]<<SYS>>\n{system}\n<</SYS>>\n\n{user}{close}{prompt.answer_prefix}"
    if style == "chat" and lm.chat_template and lm.tokenizer.chat_template:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        try:
            text = lm.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        except jinja2.TemplateError:  # templates without a system role raise: fold it into the user turn
            text = lm.format_prompt(system + user)
        return text + prompt.answer_prefix
    return system + user + prompt.answer_prefix


def fill_user(template: str, **fields: str) -> str:
    """Fill ``{document}`` and ``{instruction}`` in one pass: braces inside the document stay as they are."""
    return re.sub(r"\{(document|instruction)\}", lambda m: fields[m.group(1)], template)


def fact_question(instruction: str, config: LEvalConfig) -> str:
    """sci_fi's second question (asked without the document or a template)."""
    old, new = config.fact_replace
    return instruction.replace(old, new) + config.fact_suffix


# --------------------------------------------------------------------------- benchmark


def _paired(record: Mapping[str, Any]) -> str | None:
    instructions, outputs = record["instructions"], record["outputs"]
    if len(instructions) != len(outputs):
        return (
            f"L-Eval fields 'instructions' and 'outputs' must pair up, got {len(instructions)} "
            f"instruction(s) and {len(outputs)} output(s)"
        )
    return None


# The official record format (L4NLP/LEval's data files and hub rows).
SCHEMA = Schema(
    "L-Eval",
    (
        Field("input", (str,), nonempty=True),
        Field("instructions", (list,), items=str, nonempty=True),
        Field("outputs", (list,), items=str),
        Field("evaluation", (str,), required=False),
    ),
    extra=_paired,
)


def document_budget(length: int) -> int:
    """The document's tokens at ``--len length`` (the answer's 512 kept free); none left is an error."""
    budget = length - load_config().max_new_tokens
    if budget <= 0:
        raise LampeEvalError(f"leval: --len {length} leaves no room for the document (512 new tokens)")
    return budget


@BENCHMARKS.register("leval")
class LEval(TableDrivenBenchmark):
    name = "leval"
    summary = "L-Eval closed-ended tasks (Coursera, GSM, QuALITY, TOEFL, SFiction): official prompts and EM"
    metrics = (
        Metric("exact_match", "exact match"),
        Metric("loyalty", "exact match (loyalty)"),
        Metric("fact", "exact match (fact)"),
    )
    options = (
        FIXTURE_OPTION,
        Option("leval_dir", Path, None, "directory with the official <task>.jsonl files"),
        Option(
            "leval_dataset", str, None, "hub repository with LEval/Exam/<task>.jsonl (default L4NLP/LEval)"
        ),
        Option("leval_prompt", str, "chat", "prompt style", choices=PROMPT_STYLES),
        Option("chat_template", bool, True, "the model's chat template (false: the plain prompt)"),
        closed_book_option("closed-book control: the user message with an empty {document}"),
    )
    schema = SCHEMA
    subdirs = ("Closed-ended-tasks", "LEval-data/Closed-ended-tasks", "LEval/Exam")
    bucket_plot = True
    input_length_key = "document_tokens"
    truncation = "the end of the document: its first words, 250 fewer per round, to --len - 512 tokens"

    def tasks(self) -> list[str]:
        return list(load_config().tasks)

    def check_job(self, task: str, length: int, options: Mapping[str, Any], data_dir: str | None) -> None:
        document_budget(length)
        super().check_job(task, length, options, data_dir)

    def hub_files(self, task: str, dataset: str | None) -> HubFiles:
        """The task's JSON Lines file (``LEval/Exam/<task>.jsonl``; the repository's loading script is never
        run)."""
        config = load_config()
        return HubFiles(dataset or config.dataset, (config.hub_file.format(task=task),))

    def keep(self, records: list[Record]) -> list[Record]:
        """The official evaluator scores only "exam" records of these tasks (all of them are)."""
        return [r for r in records if r.get("evaluation", "exam") == "exam"]

    def samples(self, task: str, ctx: SampleContext) -> Iterator[Sample]:
        self.check_task(task)
        config = load_config()
        spec = config.tasks[task]
        prompt_spec = config.prompts[spec.prompt]
        options = self.option_values(ctx)
        style = options["leval_prompt"]
        if style == "chat" and not options["chat_template"]:
            style = "plain"
        budget = document_budget(ctx.length)
        records, source = self.load_records(task, ctx)
        produced = 0
        for doc_index, record in enumerate(records):
            if ctx.limit is not None and produced >= ctx.limit:
                return
            document, doc_tokens, truncated = truncate_document(
                str(record["input"]), ctx.lm.tokenizer, budget, config.truncation_step
            )
            for q_index, (instruction, gold) in enumerate(
                zip(record["instructions"], record["outputs"], strict=False)
            ):
                if ctx.limit is not None and produced >= ctx.limit:
                    return
                shown = "" if options[CLOSED_BOOK] else document
                user = fill_user(prompt_spec.user, document=shown, instruction=instruction)
                meta: dict[str, Any] = {
                    "document": doc_index,
                    "question": q_index,
                    "data_source": source,
                    "document_tokens": doc_tokens,
                    "truncated": truncated,
                    "prompt_style": style,
                }
                if spec.fact_check:
                    meta["fact_prompt"] = fact_question(instruction, config)
                produced += 1
                yield Sample(
                    sample_id=f"{doc_index}-{q_index}",
                    task=task,
                    prompt=render_prompt(ctx.lm, spec.system, user, prompt_spec, style),
                    references=[str(gold)],
                    max_new_tokens=config.max_new_tokens,
                    meta=meta,
                )

    def evaluate(self, sample: Sample, ctx: SampleContext) -> Rounds:
        """One generation; sci_fi asks its fact question in the same round (``auto_eval.py`` scores the
        loyalty and the fact answers)."""
        fact_prompt = sample.meta.get("fact_prompt")
        requests = [self.generation_request(sample)]
        if fact_prompt:
            requests.append(GenerationRequest(str(fact_prompt), sample.max_new_tokens))
        results = yield requests
        output, *fact = [r.output() for r in results if isinstance(r, Generation)]
        if not fact:
            return output
        return {
            **output,
            "prediction": f"{output['prediction']} [fact: {fact[0]['prediction']}]",
            "loyalty_prediction": output["prediction"],
            "fact_prediction": fact[0]["prediction"],
            "new_tokens": output["new_tokens"] + fact[0]["new_tokens"],
            "seconds": output["seconds"] + fact[0]["seconds"],
        }

    def score(self, sample: Sample, output: dict[str, Any]) -> dict[str, float]:
        prediction = str(output.get("prediction", ""))
        best: dict[str, float] = {}
        for gold in sample.references:  # one gold answer per question; max over them as em.py does
            scores = score_prediction(sample.task, prediction, gold)
            if not best or scores["exact_match"] > best["exact_match"]:
                best = scores
        return {k: 100.0 * v for k, v in best.items()}

    def aggregate(self, task: str, scores: Sequence[dict[str, float]]) -> dict[str, float]:
        """100 x mean, rounded to 4 decimals as ``auto_eval.py`` prints it; sci_fi's headline is the
        mean of the rounded loyalty and fact scores."""
        if not scores:
            return {}
        means = {k: round(sum(s[k] for s in scores) / len(scores), 4) for k in scores[0]}
        if "loyalty" in means and "fact" in means:
            means["exact_match"] = (means["loyalty"] + means["fact"]) / 2
        return means

    def summarize_tasks(self, task_scores: Mapping[str, float]) -> dict[str, float]:
        """Benchmark-level row for a run: the mean of the task scores present (the paper's "Avg.")."""
        present = [float(task_scores[t]) for t in self.tasks() if t in task_scores]
        return {"Avg": sum(present) / len(present)} if present else {}
