"""Greedy generation used by every generation benchmark (one prompt at a time, no padding)."""

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
    add = adds_special_tokens(tokenizer, prompt)
    return len(tokenizer(prompt, add_special_tokens=add, verbose=False)["input_ids"])


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
    tokenizer = lm.tokenizer
    add_special = adds_special_tokens(tokenizer, prompt)
    input_ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=add_special).input_ids
    input_ids = input_ids.to(lm.device)
    start = time.perf_counter()
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    output = greedy_ids(lm.model, input_ids, max_new_tokens, pad)
    seconds = time.perf_counter() - start
    new_tokens = output[0, input_ids.shape[1] :]
    text = tokenizer.decode(new_tokens, skip_special_tokens=True)
    for marker in stop or []:
        if marker and marker in text:
            text = text[: text.index(marker)]
    return {
        "prediction": text,
        "prompt_tokens": int(input_ids.shape[1]),
        "new_tokens": int(new_tokens.shape[0]),
        "seconds": seconds,
    }
