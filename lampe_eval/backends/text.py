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
