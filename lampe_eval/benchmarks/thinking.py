"""Thinking models as their makers run them (Qwen3): ``--opt enable_thinking=true|false`` reaches the chat
template, ``--opt thinking_budget=N`` cuts the thinking at N tokens and closes it the way Qwen's recipe
does, and the thinking block is kept in the record (``output["thinking"]``) and out of what is scored.

Every benchmark that generates takes both options (``Benchmark`` adds them when it registers); neither set,
nothing here runs and nothing changes. Set, they are part of the job's identity (options that change
results), and:

- the prompt: the chat template renders with ``enable_thinking`` set (:func:`bind`, through a tokenizer copy
  whose template sets the variable first, so every render of it, and the sample caches keyed by its
  fingerprint, see it); a template that does not read ``enable_thinking``, a model without a chat template,
  a benchmark run with ``chat_template=false`` or a tokenizer without single ``<think>``/``</think>`` tokens
  is refused in one line (never a silently ignored switch);
- the generation (:func:`rounds`, wrapped around the benchmark's own rounds, so a benchmark still speaks
  only to a backend's requests): with a budget, each generation request becomes two. First the thinking:
  at most N new tokens, ending at ``</think>``. Then the answer, a request of the exact tokens so far: after
  the model's own ``</think>``, or, when the budget cut the thinking, after it (its trailing newlines
  dropped) and :data:`~lampe_eval.prompts.EARLY_STOP`; the answer keeps the benchmark's ``max_new_tokens``,
  stop strings and stop tokens. Both requests carry one ``budget`` (the length the whole may reach), so a
  method that plans on it (LaMPE) plans the same for both. A thinking that ends the sequence before its
  budget has no answer (""); a model that opens no thinking block answers as without the option (its
  request run as the benchmark made it);
- the scoring: the benchmark gets the answer as the generation's text (split off the thinking, as Qwen3's
  model card parses it: what follows the last ``</think>``), so ``score`` sees only the answer; the
  record's ``output`` keeps ``thinking`` (the text inside the block), ``thinking_tokens`` and
  ``thinking_cut`` (the budget cut it): values for a sample of one generation, lists in request order for
  several.

``enable_thinking=true`` needs a budget: the benchmarks' answer budgets (RULER's 128 new tokens, ...) are
not made to hold a thinking, which would leave no answer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..backends.base import Generation, GenerationRequest, Request, Result, Rounds
from ..errors import LampeEvalError
from ..models import LoadedModel
from ..options import Option
from ..prompts import (
    EARLY_STOP,
    THINK_OPEN,
    prompt_ids,
    split_thinking,
    template_reads,
    thinking_token_ids,
    with_template_variables,
)

ENABLE, BUDGET = "enable_thinking", "thinking_budget"
OPTIONS = (
    Option(
        ENABLE,
        bool,
        None,
        "the chat template's enable_thinking (Qwen3; default: the template's); true needs thinking_budget",
    ),
    Option(
        BUDGET,
        int,
        None,
        "thinking tokens before the thinking is closed (Qwen's early-stop text) and the answer generated",
    ),
)


@dataclass(frozen=True)
class Thinking:
    """A job's thinking settings: ``enabled`` (None: the template's default), ``budget`` (None: none)."""

    enabled: bool | None = None
    budget: int | None = None

    @classmethod
    def of(cls, options: Mapping[str, Any]) -> Thinking | None:
        """The settings in a job's typed options, None when neither option is set."""
        enabled, budget = options.get(ENABLE), options.get(BUDGET)
        return None if enabled is None and budget is None else cls(enabled, budget)

    def check(self, options: Mapping[str, Any]) -> None:
        """One line for settings that contradict each other or the benchmark's (checked before any model
        loads)."""
        if self.budget is not None and self.budget < 1:
            raise LampeEvalError(f"{BUDGET}={self.budget}: give at least 1 token")
        if self.enabled is False and self.budget is not None:
            raise LampeEvalError(f"{BUDGET} needs thinking: drop {ENABLE}=false or {BUDGET}")
        if self.enabled is True and self.budget is None:
            raise LampeEvalError(
                f"{ENABLE}=true needs {BUDGET}=N (the thinking's tokens; the answer keeps the benchmark's "
                "budget, which holds no thinking)"
            )
        if options.get("chat_template") is False:
            raise LampeEvalError(
                f"{ENABLE} and {BUDGET} act through the chat template: drop chat_template=false"
            )

    def template_variables(self) -> dict[str, Any]:
        return {} if self.enabled is None else {ENABLE: self.enabled}


def check_options(options: Mapping[str, Any]) -> None:
    """Raise one line for thinking options a job cannot run with (none set: nothing to check)."""
    thinking = Thinking.of(options)
    if thinking is not None:
        thinking.check(options)


def bind(lm: LoadedModel, options: Mapping[str, Any]) -> LoadedModel:
    """``lm`` with its chat template rendering the job's ``enable_thinking`` (a copy; ``lm`` itself is
    unchanged; without thinking options, ``lm``). Refused in one line when the model cannot honour them."""
    thinking = Thinking.of(options)
    if thinking is None:
        return lm
    thinking.check(options)
    tokenizer = lm.tokenizer
    if not (lm.chat_template and isinstance(getattr(tokenizer, "chat_template", None), str)):
        raise LampeEvalError(
            f"{lm.name}: {ENABLE} and {BUDGET} need the model's chat template, and it has none"
        )
    if thinking.enabled is not None and not template_reads(tokenizer, ENABLE):
        raise LampeEvalError(
            f"{lm.name}: its chat template ignores {ENABLE} (Qwen3's reads it): drop --opt {ENABLE}"
        )
    if thinking.budget is not None and thinking_token_ids(tokenizer) is None:
        raise LampeEvalError(
            f"{lm.name}: its tokenizer has no single <think> and </think> tokens, so {BUDGET} cannot find or "
            "close a thinking block"
        )
    bound = with_template_variables(tokenizer, thinking.template_variables())
    return lm if bound is tokenizer else dataclasses.replace(lm, tokenizer=bound)


def rounds(evaluation: Rounds, lm: LoadedModel, options: Mapping[str, Any]) -> Rounds:
    """A benchmark's rounds (``evaluate(sample, ctx)``) through the thinking protocol of the job's options
    (the module docstring); without thinking options, ``evaluation`` itself."""
    thinking = Thinking.of(options)
    if thinking is None:
        return evaluation
    return _thinking_rounds(evaluation, lm.tokenizer, thinking)


@dataclass
class _Thought:
    text: str
    tokens: int
    cut: bool


Answering = Generator[Sequence[Request], Sequence[Result], list[Result]]


def _thinking_rounds(evaluation: Rounds, tokenizer: Any, thinking: Thinking) -> Rounds:
    thoughts: list[_Thought] = []
    sent: list[Result] | None = None
    while True:
        try:
            requests = evaluation.send(sent) if sent is not None else next(evaluation)
        except StopIteration as done:
            return {**done.value, **_recorded(thoughts)}
        if thinking.budget is None:
            sent = yield from _split(requests, thoughts)
        else:
            sent = yield from _with_budget(requests, tokenizer, thinking.budget, thoughts)


def _recorded(thoughts: list[_Thought]) -> dict[str, Any]:
    """The record's thinking fields: values for one generation, lists for several."""
    if len(thoughts) == 1:
        (one,) = thoughts
        return {"thinking": one.text, "thinking_tokens": one.tokens, "thinking_cut": one.cut}
    return {
        "thinking": [t.text for t in thoughts],
        "thinking_tokens": [t.tokens for t in thoughts],
        "thinking_cut": [t.cut for t in thoughts],
    }


def _split(requests: Sequence[Request], thoughts: list[_Thought]) -> Answering:
    """The requests as they are; each generation's text split into thinking (kept) and answer (returned)."""
    results = list((yield requests))
    for index, result in enumerate(results):
        if isinstance(result, Generation):
            thinking, answer = split_thinking(result.text)
            thoughts.append(_Thought(thinking, 0, False))
            results[index] = dataclasses.replace(result, text=answer)
    return results


def _with_budget(
    requests: Sequence[Request], tokenizer: Any, budget: int, thoughts: list[_Thought]
) -> Answering:
    """Each generation request as a thinking of at most ``budget`` tokens, then its answer (the module
    docstring); other requests pass through in the first round."""
    ids = thinking_token_ids(tokenizer)
    assert ids is not None  # bind refused such a tokenizer
    open_id, close_id = ids
    early = list(tokenizer.encode(EARLY_STOP, add_special_tokens=False))
    prompts = {i: _ids(r, tokenizer) for i, r in enumerate(requests) if isinstance(r, GenerationRequest)}
    totals = {i: r.total_length(len(prompts[i])) + budget + len(early) for i, r in _generations(requests)}
    thinking = [
        GenerationRequest(
            r.prompt, budget, stop_token_ids=(close_id,), input_ids=tuple(prompts[i]), budget=totals[i]
        )
        if isinstance(r, GenerationRequest)
        else r
        for i, r in enumerate(requests)
    ]
    first = list((yield thinking))
    answers: dict[int, GenerationRequest] = {}
    for i, request in _generations(requests):
        thought = first[i]
        assert isinstance(thought, Generation)
        made = list(thought.token_ids)
        opened = open_id in made or _opens(prompts[i], tokenizer)
        if close_id in made:  # closed by the model: the answer follows its own </think>
            kept = made[: made.index(close_id) + 1]
            answers[i] = dataclasses.replace(request, input_ids=tuple(prompts[i] + kept), budget=totals[i])
        elif (
            opened and len(made) >= budget and made[-1] != tokenizer.eos_token_id
        ):  # cut: closed by Qwen's text
            kept = _without_trailing_newlines(made, tokenizer) + early
            answers[i] = dataclasses.replace(request, input_ids=tuple(prompts[i] + kept), budget=totals[i])
        elif not opened:  # no thinking: the request as the benchmark made it
            answers[i] = request
    second: dict[int, Result] = {}
    if answers:
        order = list(answers)
        second = dict(zip(order, (yield [answers[i] for i in order]), strict=True))
    results = list(first)
    for i, _ in _generations(requests):
        thought, answer = first[i], second.get(i)
        assert isinstance(thought, Generation)
        made = list(thought.token_ids)
        text = _decode(made, close_id, tokenizer)
        if answer is None:  # the sequence ended inside the thinking
            thoughts.append(_Thought(text, len(made), False))
            results[i] = dataclasses.replace(thought, text="", token_ids=())
            continue
        assert isinstance(answer, Generation)
        if answers[i] is requests[i]:  # no thinking block: the plain generation, split as without a budget
            inside, reply = split_thinking(answer.text)
            thoughts.append(_Thought(inside, 0, False))
            results[i] = dataclasses.replace(answer, text=reply, seconds=thought.seconds + answer.seconds)
            continue
        thoughts.append(_Thought(text, len(made), close_id not in made))
        results[i] = Generation(
            answer.text.strip("\n"),
            len(prompts[i]),
            len(made) + answer.new_tokens,
            thought.seconds + answer.seconds,
            answer.token_ids,
        )
    return results


def _generations(requests: Sequence[Request]) -> list[tuple[int, GenerationRequest]]:
    return [(i, r) for i, r in enumerate(requests) if isinstance(r, GenerationRequest)]


def _ids(request: GenerationRequest, tokenizer: Any) -> list[int]:
    """The tokens a backend feeds for ``request`` (:func:`lampe_eval.prompts.prompt_ids`)."""
    return list(request.input_ids) if request.input_ids is not None else prompt_ids(tokenizer, request.prompt)


def _opens(prompt: list[int], tokenizer: Any) -> bool:
    """Whether the prompt ends inside an open thinking block (a template that opens it: DeepSeek-R1's,
    Qwen3's thinking-only releases)."""
    tail = tokenizer.decode(prompt[-4:], skip_special_tokens=False)
    return tail.rstrip().endswith(THINK_OPEN)


def _without_trailing_newlines(tokens: list[int], tokenizer: Any) -> list[int]:
    """``tokens`` without the tokens at the end that are only newlines (Qwen's recipe strips the reasoning
    of newlines before its early-stop text)."""
    end = len(tokens)
    while end and not tokenizer.decode(tokens[end - 1 : end], skip_special_tokens=False).strip("\n"):
        end -= 1
    return tokens[:end]


def _decode(tokens: list[int], close_id: int, tokenizer: Any) -> str:
    """The thinking's text: the tokens up to ``</think>``, without the block's tags and outer newlines."""
    if close_id in tokens:
        tokens = tokens[: tokens.index(close_id)]
    text = tokenizer.decode(tokens, skip_special_tokens=True)
    return split_thinking(text, opened=True)[0]
