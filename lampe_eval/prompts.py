"""How a prompt becomes tokens, the same way everywhere: benchmarks fit prompts to a length with these
helpers, and every backend feeds exactly these ids."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from .errors import LampeEvalError


def adds_special_tokens(tokenizer: Any, prompt: str) -> bool:
    """Whether the prompt is tokenized with special tokens: not when it already starts with the BOS token
    (a chat template put it there), so it is never doubled."""
    return not (tokenizer.bos_token and prompt.startswith(tokenizer.bos_token))


def prompt_ids(tokenizer: Any, prompt: str) -> list[int]:
    """The token ids a backend feeds for ``prompt``."""
    add_special = adds_special_tokens(tokenizer, prompt)
    return list(tokenizer(prompt, add_special_tokens=add_special, verbose=False)["input_ids"])


def prompt_token_count(tokenizer: Any, prompt: str) -> int:
    """Tokens of ``prompt`` exactly as a backend feeds it (benchmarks fit prompts with it)."""
    return len(prompt_ids(tokenizer, prompt))


def newline_token(tokenizer: Any) -> int:
    """The token a lone newline ends with (LongBench samsum stops at it, as the official ``pred.py``)."""
    return int(tokenizer.encode("\n", add_special_tokens=False)[-1])


# ----------------------------------------------------------------------------------------------- thinking
# A thinking model's reasoning sits between these two tokens (Qwen3: `<think>` 151667 and `</think>` 151668,
# plain added tokens, so decoded text keeps them).
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
# Where a thinking budget cuts the thinking, this closes it before the answer, as Qwen's own thinking
# budget recipe does (QwenLM/Qwen3, docs/source/getting_started/thinking_budget.md: the reasoning, stripped
# of newlines, then "\n\nConsidering the limited time by the user, I have to give the solution based on the
# thinking directly now.", then the chat template's "\n</think>\n\n"; the Qwen3 technical report, section
# 4.3, quotes the sentence with "\n</think>.\n\n" after it).
EARLY_STOP = (
    "\n\nConsidering the limited time by the user, I have to give the solution based on the thinking "
    "directly now.\n</think>\n\n"
)
# a conversation that tells whether a chat template reads a variable (rendered with it true and false)
_PROBE = [{"role": "user", "content": "2 + 2?"}]


def with_template_variables(tokenizer: Any, variables: Mapping[str, Any]) -> Any:
    """A copy of ``tokenizer`` whose chat template sets ``variables`` before anything else (as
    ``apply_chat_template(..., **variables)`` would), for every caller of its template alike; the copy's
    template text, and so its fingerprint, differs from the original's. ``tokenizer`` itself is unchanged.
    Variables set again on a copy replace those set before."""
    original = getattr(tokenizer, "_lampe_original_template", tokenizer.chat_template)
    if not variables:
        return tokenizer
    if not isinstance(original, str):
        raise LampeEvalError(
            "this tokenizer has several named chat templates: cannot set " + ", ".join(variables)
        )
    copied = copy.copy(tokenizer)
    head = "".join(f"{{%- set {name} = {_jinja(value)} %}}" for name, value in sorted(variables.items()))
    copied.chat_template = head + original
    copied._lampe_original_template = original
    return copied


def _jinja(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    raise TypeError(f"template variable of type {type(value).__name__}")


def template_reads(tokenizer: Any, name: str) -> bool:
    """Whether the tokenizer's chat template renders a conversation differently with boolean ``name``
    true and false (Qwen3's reads ``enable_thinking``; most templates read no such variable)."""
    template = getattr(tokenizer, "_lampe_original_template", getattr(tokenizer, "chat_template", None))
    if not isinstance(template, str):
        return False
    rendered = {
        tokenizer.apply_chat_template(
            _PROBE, chat_template=template, tokenize=False, add_generation_prompt=True, **{name: value}
        )
        for value in (True, False)
    }
    return len(rendered) == 2


def thinking_token_ids(tokenizer: Any) -> tuple[int, int] | None:
    """The ids of ``<think>`` and ``</think>`` when the tokenizer has each as one token, else None."""
    ids = []
    for token in (THINK_OPEN, THINK_CLOSE):
        encoded = tokenizer.encode(token, add_special_tokens=False)
        if len(encoded) != 1 or encoded[0] == tokenizer.unk_token_id:
            return None
        ids.append(int(encoded[0]))
    return ids[0], ids[1]


def split_thinking(text: str, opened: bool = False) -> tuple[str, str]:
    """(thinking, answer) of a thinking model's output, as Qwen3's model card parses it: the answer is what
    follows the last ``</think>``, both stripped of newlines; the thinking without its ``<think>``. A text
    with no ``</think>`` is all thinking when a thinking block is open (``<think>`` in it, or ``opened``: the
    prompt opened one), else all answer, unchanged."""
    if THINK_CLOSE in text:
        thinking, _, answer = text.rpartition(THINK_CLOSE)
        return _inside(thinking), answer.strip("\n")
    if opened or THINK_OPEN in text:
        return _inside(text), ""
    return "", text


def _inside(thinking: str) -> str:
    """A thinking block's text without its ``<think>`` and the newlines around it."""
    return thinking.split(THINK_OPEN, 1)[-1].strip("\n")
