"""Greedy generation used by every generation benchmark (one prompt, or prompts of one token count, at a
time: never padding)."""

from __future__ import annotations

import time
from typing import Any

import torch

from .methods.patch import generation_budget
from .models import LoadedModel


def adds_special_tokens(tokenizer: Any, prompt: str) -> bool:
    """Whether the prompt is tokenized with special tokens: not when it already starts with the BOS token
    (a chat template put it there), so it is never doubled."""
    return not (tokenizer.bos_token and prompt.startswith(tokenizer.bos_token))


def prompt_token_count(tokenizer: Any, prompt: str) -> int:
    """Tokens of ``prompt`` exactly as :func:`greedy_generate` feeds it (benchmarks fit prompts with it)."""
    return len(prompt_ids(tokenizer, prompt))


def greedy_ids(
    model: Any, input_ids: torch.Tensor, max_new_tokens: int, pad_token_id: int, **extra: Any
) -> Any:
    """``model.generate`` greedy, as every benchmark decodes (``extra``: more ``generate`` arguments, e.g. a
    streamer). A patched model is told the generation's final length (e.g. LaMPE's window decision)."""
    budget = max(1, max_new_tokens)
    with generation_budget(model, input_ids.shape[1] + budget):
        return model.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            max_new_tokens=budget,
            do_sample=False,
            temperature=None,
            top_p=None,
            top_k=None,
            pad_token_id=pad_token_id,
            **extra,
        )


@torch.inference_mode()
def greedy_generate(
    lm: LoadedModel, prompt: str, max_new_tokens: int, stop: list[str] | None = None
) -> dict[str, Any]:
    """Greedy-decode ``max_new_tokens`` after ``prompt``; cut the text at the first stop string."""
    return greedy_generate_batch(lm, [prompt], [max_new_tokens], [stop])[0]


def prompt_ids(tokenizer: Any, prompt: str) -> list[int]:
    """The token ids :func:`greedy_generate` feeds for ``prompt``."""
    add_special = adds_special_tokens(tokenizer, prompt)
    return tokenizer(prompt, add_special_tokens=add_special, verbose=False)["input_ids"]


@torch.inference_mode()
def greedy_generate_batch(
    lm: LoadedModel, prompts: list[str], max_new_tokens: list[int], stops: list[list[str] | None]
) -> list[dict[str, Any]]:
    """:func:`greedy_generate` for prompts of one token count, decoded together (no padding): each
    output equals the one-prompt output (greedy decoding of a row never reads the other rows; a row that
    stopped, or reached its own ``max_new_tokens``, is cut where a lone generation would have ended)."""
    tokenizer = lm.tokenizer
    rows = [prompt_ids(tokenizer, prompt) for prompt in prompts]
    if len({len(row) for row in rows}) != 1:
        raise ValueError("greedy_generate_batch takes prompts of one token count (no padding)")
    if len(set(max_new_tokens)) != 1:  # the patch is told one budget (e.g. LaMPE's window decision)
        raise ValueError("greedy_generate_batch takes prompts of one generation budget")
    input_ids = torch.tensor(rows, dtype=torch.long, device=lm.device)
    start = time.perf_counter()
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    output = greedy_ids(lm.model, input_ids, max(max_new_tokens), pad)
    seconds = (time.perf_counter() - start) / len(prompts)
    eos = _eos_ids(lm.model, tokenizer)
    results = []
    for row, limit, stop in zip(output, max_new_tokens, stops, strict=True):
        new_tokens = _until_eos(row[input_ids.shape[1] :][: max(1, limit)], eos)
        text = tokenizer.decode(new_tokens, skip_special_tokens=True)
        for marker in stop or []:
            if marker and marker in text:
                text = text[: text.index(marker)]
        results.append(
            {
                "prediction": text,
                "prompt_tokens": int(input_ids.shape[1]),
                "new_tokens": int(new_tokens.shape[0]),
                "seconds": seconds,
            }
        )
    return results


def _eos_ids(model: Any, tokenizer: Any) -> set[int]:
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos is None:
        eos = tokenizer.eos_token_id
    return set(eos) if isinstance(eos, (list, tuple)) else ({eos} if eos is not None else set())


def _until_eos(tokens: torch.Tensor, eos: set[int]) -> torch.Tensor:
    """The tokens up to and including the first end-of-sequence token (where a lone generation stops;
    in a batch, the rows that stopped are filled with padding until all have)."""
    for index, token in enumerate(tokens.tolist()):
        if token in eos:
            return tokens[: index + 1]
    return tokens
