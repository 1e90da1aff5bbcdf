"""Qwen3 as people run it: ``--opt enable_thinking=true|false`` reaches the chat template and
``--opt thinking_budget=N`` cuts the thinking at N tokens, closes it with Qwen's early-stop text and then
generates the answer; the thinking is kept in the record and out of what is scored
(``lampe_eval/benchmarks/thinking.py``).

The model is a tiny random Qwen3 with Qwen3's chat template (``tests/fixtures/qwen3/chat_template.jinja``)
and SmolLM2's vocabulary plus ``<think>`` and ``</think>`` (single added tokens, as in Qwen3's). A random
model never opens or closes a thinking block by itself, so :func:`steer` biases two choices, as a thinking
model makes them: ``<think>`` as the first token after the generation prompt, and, when asked, ``</think>``
at a given step of the thinking; every other token is the random model's own greedy choice."""

from __future__ import annotations

import copy
import json
from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch

from lampe_eval.backends import Generation, GenerationRequest, NLLRequest, Request, TokenNLL
from lampe_eval.backends.hf import HFBackend
from lampe_eval.backends.rounds import evaluate_one
from lampe_eval.benchmarks.base import (
    BENCHMARKS,
    Benchmark,
    Metric,
    Sample,
    SampleContext,
    options_by_benchmark,
)
from lampe_eval.errors import LampeEvalError
from lampe_eval.models import LoadedModel
from lampe_eval.prompts import EARLY_STOP, prompt_ids
from lampe_eval.runner.jobs import Job
from lampe_eval.testing import tiny_family

TEMPLATE = Path(__file__).parent / "fixtures" / "qwen3" / "chat_template.jinja"
QUESTION = "What is the capital of France?"
ANSWER_TOKENS = 6


class Probe(Benchmark):
    """One question through the model's chat template; the score: whether the answer names Paris."""

    summary = "a thinking probe"
    metrics = (Metric("match", "Paris named"),)

    def tasks(self) -> list[str]:
        return ["capital"]

    def samples(self, task: str, ctx: SampleContext) -> Iterator[Sample]:
        yield Sample("0", task, ctx.lm.format_prompt(QUESTION), ["paris"], ANSWER_TOKENS)

    def score(self, sample: Sample, output: dict[str, Any]) -> dict[str, float]:
        return {"match": 100.0 * (sample.references[0] in str(output.get("prediction", "")).lower())}


@pytest.fixture(scope="module", autouse=True)
def probe() -> Iterator[Probe]:
    BENCHMARKS.register("thinking_probe")(Probe)
    yield Probe()
    BENCHMARKS.remove("thinking_probe")


@pytest.fixture(scope="module")
def tokenizer(smollm2_tokenizer: Any) -> Any:
    """SmolLM2's vocabulary with ``<think>`` and ``</think>`` added, and Qwen3's chat template."""
    own = copy.deepcopy(smollm2_tokenizer)
    own.add_tokens(["<think>", "</think>"])
    own.chat_template = TEMPLATE.read_text()
    return own


def ids_of(tokenizer: Any, token: str) -> int:
    (only,) = tokenizer.encode(token, add_special_tokens=False)
    return int(only)


@pytest.fixture(scope="module")
def lm(tokenizer: Any) -> LoadedModel:
    net = tiny_family("qwen3", window=256, head_dim=16, vocab=len(tokenizer))
    return LoadedModel("tiny-qwen3", net, tokenizer, 256, True)


@contextmanager
def steer(lm: LoadedModel, close_at: int | None = None) -> Iterator[None]:
    """The model answers the generation prompt with ``<think>`` and, with ``close_at``, closes the block with
    ``</think>`` as its ``close_at``-th new token (a large logit bias on these two choices alone)."""
    tokenizer = lm.tokenizer
    opening = prompt_ids(tokenizer, "<|im_start|>assistant\n")
    think, close = ids_of(tokenizer, "<think>"), ids_of(tokenizer, "</think>")
    state = {"armed": False, "step": 0}

    def hook(module: Any, args: tuple, kwargs: dict, output: Any) -> Any:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids.shape[1] > 1:  # a prefill: the thinking's when the prompt ends with the generation prompt
            state["armed"] = ids[0, -len(opening) :].tolist() == opening
            state["step"] = 1
            if state["armed"]:
                output.logits[:, -1, think] += 1e4
        else:
            state["step"] += 1
            if state["armed"] and state["step"] == close_at:
                output.logits[:, -1, close] += 1e4
        return output

    handle = lm.model.register_forward_hook(hook, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()


class Spy(HFBackend):
    """The HF backend, its generation requests and results kept."""

    def __init__(self, lm: LoadedModel) -> None:
        super().__init__(lm)
        self.calls: list[tuple[GenerationRequest, Generation]] = []

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        results = super().generate(requests)
        self.calls += list(zip(requests, results, strict=True))
        return results


def run_probe(lm: LoadedModel, options: dict[str, Any], backend: Any = None) -> tuple[Sample, dict, Any]:
    bench = Probe()
    typed = options_by_benchmark(["thinking_probe"], options)["thinking_probe"]
    ctx = SampleContext(lm, 256, options=typed)
    (sample,) = bench.samples("capital", ctx)
    backend = backend or Spy(lm)
    return sample, evaluate_one(backend, bench.rounds(sample, ctx)), backend


def chat(tokenizer: Any, **variables: Any) -> str:
    """The prompt Qwen3's own call gives: ``apply_chat_template(..., **variables)``."""
    messages = [{"role": "user", "content": QUESTION}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **variables)


# ---------------------------------------------------------------------------------- the tiny Qwen3


def test_a_budget_that_cuts_closes_the_thinking_with_qwens_text_then_generates_the_answer(lm) -> None:
    tokenizer = lm.tokenizer
    with steer(lm):  # the model opens a thinking block and never closes it
        sample, output, spy = run_probe(lm, {"thinking_budget": 8})
    assert sample.prompt == chat(tokenizer)  # the template's default (Qwen3: thinking)
    (thinking, made), (answering, answer) = spy.calls
    prompt = prompt_ids(tokenizer, sample.prompt)
    think, close = ids_of(tokenizer, "<think>"), ids_of(tokenizer, "</think>")
    # the thinking: at most 8 tokens, ended by </think> were it to come
    assert list(thinking.input_ids) == prompt and thinking.max_new_tokens == 8
    assert thinking.stop_token_ids == (close,)
    assert made.token_ids[0] == think and len(made.token_ids) == 8 and close not in made.token_ids
    # the answer: after the exact tokens so far, the cut thinking (its trailing newlines dropped) and
    # Qwen's early-stop text, whose </think> is the token before the last
    early = tokenizer.encode(EARLY_STOP, add_special_tokens=False)
    sequence = list(answering.input_ids)
    kept = sequence[len(prompt) : len(sequence) - len(early)]
    assert sequence[: len(prompt)] == prompt and sequence[len(sequence) - len(early) :] == early
    assert (
        kept == list(made.token_ids)[: len(kept)]
        and tokenizer.decode(made.token_ids[len(kept) :]).strip("\n") == ""
    )
    assert sequence[-2] == close and tokenizer.decode(sequence[-3:]) == "\n</think>\n\n"
    assert tokenizer.decode(sequence).endswith("directly now.\n</think>\n\n")
    assert answering.max_new_tokens == ANSWER_TOKENS and answering.budget == thinking.budget
    # ... the model's own greedy continuation of that sequence
    with torch.no_grad():
        alone = lm.model.generate(torch.tensor([sequence]), max_new_tokens=ANSWER_TOKENS, do_sample=False)
    assert list(answer.token_ids) == alone[0, len(sequence) :].tolist()[: len(answer.token_ids)]
    # scored: the answer alone; recorded: the thinking too
    assert output["prediction"] == answer.text.strip("\n") and "<think>" not in output["prediction"]
    assert output["thinking"] == tokenizer.decode(made.token_ids[1:]).strip("\n")
    assert output["thinking_cut"] is True and output["thinking_tokens"] == 8
    assert output["new_tokens"] == 8 + answer.new_tokens and output["prompt_tokens"] == len(prompt)


def test_a_thinking_closed_within_the_budget_is_answered_after_the_models_own_close(lm) -> None:
    tokenizer = lm.tokenizer
    close = ids_of(tokenizer, "</think>")
    with steer(lm, close_at=5):
        _, output, spy = run_probe(lm, {"enable_thinking": True, "thinking_budget": 16})
    (thinking, made), (answering, answer) = spy.calls
    assert len(made.token_ids) == 5 and made.token_ids[-1] == close
    assert list(answering.input_ids) == list(thinking.input_ids) + list(made.token_ids)  # no inserted text
    assert output["thinking_cut"] is False and output["thinking_tokens"] == 5
    assert output["thinking"] == tokenizer.decode(made.token_ids[1:4]).strip("\n")
    assert output["prediction"] == answer.text.strip("\n")


def test_thinking_off_renders_qwens_empty_block_and_generates_once(lm) -> None:
    with steer(lm):  # the bias applies after a bare generation prompt only: thinking off leaves it unused
        sample, output, spy = run_probe(lm, {"enable_thinking": False})
    assert sample.prompt == chat(lm.tokenizer, enable_thinking=False)
    assert sample.prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert sample.prompt != chat(lm.tokenizer)
    ((request, result),) = spy.calls  # one request, as the benchmark made it
    assert request.prompt == sample.prompt and request.max_new_tokens == ANSWER_TOKENS
    assert output["prediction"] == result.text and output["thinking"] == ""


def test_thinking_on_renders_the_templates_thinking_prompt(lm) -> None:
    with steer(lm):
        on, output_on, _ = run_probe(lm, {"enable_thinking": True, "thinking_budget": 8})
        default, output_default, _ = run_probe(lm, {"thinking_budget": 8})
    assert on.prompt == chat(lm.tokenizer, enable_thinking=True) == default.prompt
    assert output_on == {**output_default, "seconds": output_on["seconds"]}


def test_without_the_options_nothing_changes(lm, tokenizer) -> None:
    ctx = SampleContext(lm, 256)
    assert ctx.lm is lm
    (sample,) = Probe().samples("capital", ctx)
    assert sample.prompt == chat(tokenizer)
    bench = Probe()
    assert bench.rounds(sample, ctx).gi_code is bench.evaluate(sample, ctx).gi_code  # type: ignore[attr-defined]
    job = Job("m", "rope", "thinking_probe", "capital", 256)
    assert job.key() == Job("m", "rope", "thinking_probe", "capital", 256, options={}).key()


def test_both_options_are_part_of_the_jobs_identity_and_the_samples_fingerprint(lm) -> None:
    keys = set()
    for options in (
        {},
        {"enable_thinking": False},
        {"thinking_budget": 8},
        {"enable_thinking": True, "thinking_budget": 8},
    ):
        typed = options_by_benchmark(["thinking_probe"], options)["thinking_probe"]
        keys.add(Job("m", "rope", "thinking_probe", "capital", 256, options=typed).key())
    assert len(keys) == 4
    off = SampleContext(lm, 256, options={"enable_thinking": False})
    on = SampleContext(lm, 256)
    (a,), (b,) = Probe().samples("capital", off), Probe().samples("capital", on)
    assert a.fingerprint() != b.fingerprint()


def test_every_generating_benchmark_takes_the_options_and_a_loss_benchmark_refuses_them() -> None:
    import lampe_eval.benchmarks  # noqa: F401 - registers every benchmark

    for name in ["ruler", "longbench", "longbench_v2", "leval", "infinitebench", "babilong", "ruler2"]:
        assert options_by_benchmark([name], {"thinking_budget": "512"})[name] == {"thinking_budget": 512}
    with pytest.raises(LampeEvalError, match="unknown option thinking_budget for pg19"):
        options_by_benchmark(["pg19"], {"thinking_budget": 512})


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"enable_thinking": True}, "enable_thinking=true needs thinking_budget=N"),
        ({"thinking_budget": 0}, "give at least 1 token"),
        ({"enable_thinking": False, "thinking_budget": 8}, "thinking_budget needs thinking"),
        ({"enable_thinking": False, "chat_template": False}, "drop chat_template=false"),
    ],
)
def test_contradictory_settings_are_refused_in_one_line_before_any_model_loads(options, said) -> None:
    import lampe_eval.benchmarks  # noqa: F401

    with pytest.raises(LampeEvalError, match=said) as refused:
        options_by_benchmark(["ruler"], options)
    assert "\n" not in str(refused.value)


def test_a_model_that_cannot_honour_the_options_is_refused_never_silently_ignored(
    lm, smollm2_tokenizer
) -> None:
    plain = LoadedModel(
        "smollm2", None, smollm2_tokenizer, 256, True
    )  # its template reads no enable_thinking
    with pytest.raises(LampeEvalError, match="smollm2: its chat template ignores enable_thinking") as refused:
        SampleContext(plain, 256, options={"enable_thinking": False})
    assert "\n" not in str(refused.value)
    with pytest.raises(LampeEvalError, match="no single <think> and </think> tokens"):
        SampleContext(plain, 256, options={"thinking_budget": 8})
    bare = LoadedModel("tiny-qwen3", None, lm.tokenizer, 256, False)  # no chat template used
    with pytest.raises(LampeEvalError, match="need the model's chat template"):
        SampleContext(bare, 256, options={"thinking_budget": 8})


# ------------------------------------------------------------------------- the protocol, scripted


class Scripted:
    """A backend answering each generation request with the next scripted text, as tokens (stopping at
    the request's stop tokens, at most ``max_new_tokens``), its requests kept."""

    name = "scripted"
    batch_size = 1

    def __init__(self, lm: LoadedModel, replies: Sequence[str]) -> None:
        self.lm, self.replies, self.requests = lm, list(replies), []

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        results = []
        for request in requests:
            self.requests.append(request)
            tokens = self.lm.tokenizer.encode(self.replies.pop(0), add_special_tokens=False)
            kept = []
            for token in tokens[: request.max_new_tokens]:
                kept.append(token)
                if token in request.stop_token_ids:
                    break
            text = self.lm.tokenizer.decode(kept, skip_special_tokens=True)
            results.append(Generation(text, 3, len(kept), 0.5, tuple(kept)))
        return results

    def token_nll(self, requests: Sequence[NLLRequest]) -> list[TokenNLL]:
        return [TokenNLL(1.0, 1, 1.0, 1) for _ in requests]

    def batch_key(self, request: Request) -> Hashable:
        return type(request).__name__


def test_scoring_sees_the_answer_not_the_thinking(lm) -> None:
    # the thinking names Paris, the answer Rome: without the options (as before) the thinking is scored
    reply = "<think>\nParis? No.\n</think>\n\nRome"
    sample, plain, _ = run_probe(lm, {}, Scripted(lm, [reply]))
    assert Probe().score(sample, plain) == {"match": 100.0}  # what a run without the options keeps doing
    sample, output, backend = run_probe(lm, {"thinking_budget": 64}, Scripted(lm, [reply, "\n\nRome"]))
    assert output["prediction"] == "Rome" and output["thinking"] == "Paris? No."
    assert Probe().score(sample, output) == {"match": 0.0}
    first, second = backend.requests
    assert list(second.input_ids)[-1] == ids_of(lm.tokenizer, "</think>")  # the model's own close, kept
    sample, output, _ = run_probe(
        lm, {"enable_thinking": False}, Scripted(lm, ["<think>\n\n</think>\n\nParis"])
    )
    assert output["prediction"] == "Paris" and output["thinking"] == ""  # a stray empty block is split off


def test_a_thinking_that_ends_the_sequence_has_no_answer_and_a_model_that_does_not_think_answers_plainly(
    lm,
) -> None:
    _, output, backend = run_probe(lm, {"thinking_budget": 64}, Scripted(lm, ["<think>\nParis<|im_end|>"]))
    assert len(backend.requests) == 1 and output["prediction"] == "" and output["thinking"] == "Paris"
    _, output, backend = run_probe(lm, {"thinking_budget": 4}, Scripted(lm, ["Paris is the answer", "Paris"]))
    first, second = backend.requests
    assert first.max_new_tokens == 4 and second.max_new_tokens == ANSWER_TOKENS and second.input_ids is None
    assert output["prediction"] == "Paris" and output["thinking"] == "" and output["thinking_cut"] is False


class TwoQuestions(Probe):
    """Two generations in one round, then a loss pass: the protocol wraps each generation alone."""

    def evaluate(self, sample: Sample, ctx: SampleContext):
        a, b = yield [self.generation_request(sample), self.generation_request(sample, max_new_tokens=3)]
        (nll,) = yield [NLLRequest((1, 2, 3))]
        return {"prediction": a.text, "other": b.text, "nll": nll.nll_sum}


def test_several_generations_keep_their_thinking_in_request_order(lm) -> None:
    bench = TwoQuestions()
    ctx = SampleContext(lm, 256, options={"thinking_budget": 3})
    (sample,) = bench.samples("capital", ctx)
    replies = ["<think>\nA", "<think>\nB", "one", "two"]  # both cut at their 3 tokens
    output = evaluate_one(Scripted(lm, replies), bench.rounds(sample, ctx))
    assert output["prediction"] == "one" and output["other"] == "two" and output["nll"] == 1.0
    assert output["thinking"] == ["A", "B"] and output["thinking_cut"] == [True, True]


# ------------------------------------------------------------------------------ through the runner


def test_the_record_keeps_the_thinking_and_the_options(lm, tmp_path) -> None:
    import lampe_eval

    def load(name: str) -> LoadedModel:
        return lm

    with steer(lm):
        kwargs = {"benchmarks": "thinking_probe", "lengths": 256, "out": tmp_path, "load": load}
        result = lampe_eval.evaluate("tiny-qwen3", options={"thinking_budget": 8}, **kwargs)
        assert result.computed == 1
        plain = lampe_eval.evaluate("tiny-qwen3", **kwargs)  # another job: computed, not resumed
        assert plain.computed == 1
    records = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    thinking = next(r for r in records if r["options"])
    assert thinking["options"] == {"thinking_budget": 8}
    assert thinking["output"]["thinking_cut"] is True and thinking["output"]["thinking"]
    assert "<think>" not in thinking["output"]["prediction"]
    other = next(r for r in records if not r["options"])
    assert "thinking" not in other["output"] and other["job_key"] != thinking["job_key"]
