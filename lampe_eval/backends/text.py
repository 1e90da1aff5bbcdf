"""Where a generation ends, the same for every backend: the end tokens, and the text cut at stop
strings."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


def eos_ids(generation_config: Any, tokenizer: Any) -> set[int]:
    """The tokens that end a generation: the generation config's, else the tokenizer's."""
    eos = getattr(generation_config, "eos_token_id", None)
    if eos is None:
        eos = tokenizer.eos_token_id
    return set(eos) if isinstance(eos, (list, tuple)) else ({eos} if eos is not None else set())


def directory_eos_ids(source: str | None, tokenizer: Any) -> set[int]:
    """:func:`eos_ids` of a model directory (its generation config), for an engine that loads the model
    itself or serves it elsewhere: what the Hugging Face backend stops at."""
    from transformers import GenerationConfig

    try:
        config = GenerationConfig.from_pretrained(source) if source else None
    except (OSError, ValueError):
        config = None
    return eos_ids(config, tokenizer)


def finish(
    tokens: torch.Tensor, eos: set[int], stop: Sequence[str], tokenizer: Any
) -> tuple[torch.Tensor, str]:
    """An engine's new tokens as a generation keeps them: up to the first end token (:func:`until_eos`),
    and their text cut at the stop strings (:func:`cut_at_stops`)."""
    kept = until_eos(tokens, eos)
    return kept, cut_at_stops(tokenizer.decode(kept, skip_special_tokens=True), stop)


def until_eos(tokens: torch.Tensor, eos: set[int]) -> torch.Tensor:
    """The tokens up to and including the first end-of-sequence token (where a lone generation stops;
    in a batch, the rows that stopped are filled with padding until all have)."""
    for index, token in enumerate(tokens.tolist()):
        if token in eos:
            return tokens[: index + 1]
    return tokens


def cut_at_stops(text: str, stop: Sequence[str]) -> str:
    """``text`` up to the first occurrence of each stop string, applied in order."""
    for marker in stop:
        if marker and marker in text:
            text = text[: text.index(marker)]
    return text
