"""The key dimensions of ``lampe-eval dpe-select`` (step 2 of :mod:`.dpe_select`): per layer, head and RoPE
frequency the mean over tokens of |q_f| * |k_f| on plain text, measured through a backend that hands over
each layer's queries and keys before RoPE; the top-k frequencies of each (layer, head), their shares, and
the side files that keep them (``qk_2_norm-<model>.pt``, ``dpe-dims-<model>.json``)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch

from ..errors import LampeEvalError
from ..lengths import format_length

if TYPE_CHECKING:
    from ..backends import Backend

DIMENSION_FLOOR = 2048  # qk_2_norm_select_dim.py: lengths from the pretraining length down to 2048
OFFICIAL_TOPK_SHARE = 0.75  # README / run_niah_detect.sh: top 48 of 64 frequencies
# the backends that hand over a layer's queries and keys before RoPE (``attention_inputs``)
ATTENTION_INPUT_BACKENDS = ("hf",)


@runtime_checkable
class AttentionInputs(Protocol):
    """A backend that hands over each attention layer's queries and keys before RoPE."""

    def attention_inputs(
        self, input_ids: Sequence[int], visit: Callable[[int, torch.Tensor, torch.Tensor], None]
    ) -> float: ...


# ------------------------------------------------------------------------------ the key dimensions
def pair_norms(states: torch.Tensor) -> torch.Tensor:
    """[L, heads, head_dim] -> [L, heads, head_dim / 2]: the 2-norm of each frequency's rotary pair
    (f, f + head_dim / 2), the rotate-half layout (``calculate_2_norm`` in qk_2_norm_select_dim.py)."""
    half = states.shape[-1] // 2
    return torch.sqrt(states[..., :half].float() ** 2 + states[..., half:].float() ** 2)


def qk_contribution(query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    """Mean over tokens of |q_f| * |k_f| per query head and frequency ([heads, head_dim / 2]); the key
    heads are repeated to the query heads as attention shares them (``repeat_kv``)."""
    q, k = pair_norms(query), pair_norms(key)
    if q.shape[1] % k.shape[1]:
        raise LampeEvalError(f"dpe-select: {q.shape[1]} query heads for {k.shape[1]} key heads")
    k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    return (q * k).mean(dim=0)


def top_dimensions(norms: torch.Tensor, k: int) -> torch.Tensor:
    """The ``k`` frequencies of largest contribution per (layer, head): [layers, heads, k], descending
    (``dimension_selection`` in dpe_for_llama.py, after its mean over lengths and samples)."""
    return torch.topk(norms, k=k, dim=-1).indices


def selection_shares(top: torch.Tensor, frequencies: int) -> list[float]:
    """The share of (layer, head) pairs that select each frequency."""
    counts = torch.zeros(frequencies)
    counts.index_add_(0, top.flatten(), torch.ones(top.numel()))
    return [round(float(c) / (top.shape[0] * top.shape[1]), 4) for c in counts]


@dataclass
class DimensionSelection:
    lengths: list[int]
    samples: int
    topk: int
    norms: torch.Tensor  # [lengths, samples, layers, heads, F], as qk_2_norm_selected_dim.pt
    seconds: float = 0.0

    @property
    def mean(self) -> torch.Tensor:
        return self.norms.mean(dim=(0, 1))

    def top(self) -> torch.Tensor:
        return top_dimensions(self.mean, self.topk)

    def shares(self) -> list[float]:
        return selection_shares(self.top(), self.norms.shape[-1])

    def group_shares(self, boundaries: Sequence[int]) -> list[float]:
        """Per group: the share of its frequencies' slots that were selected (1: all, always)."""
        shares = self.shares()
        return [
            round(sum(shares[a:b]) / (b - a), 4) for a, b in zip(boundaries, boundaries[1:], strict=False)
        ]


def measure_dimensions(
    backend: Backend,
    lengths: Sequence[int],
    samples: int,
    topk: int,
    options: Mapping[str, Any],
    echo: Callable[[str], None],
) -> DimensionSelection:
    """Step 2 on plain essay text (RULER's haystack, no chat template): sample i of length n is the
    text's tokens [i * n, (i + 1) * n)."""
    from ..benchmarks.ruler.haystack import load_essay_haystack

    if not isinstance(backend, AttentionInputs):
        raise LampeEvalError(
            f"dpe-select: the {backend.name} backend cannot hand over queries and keys before RoPE"
        )
    tokenizer = backend.lm.tokenizer
    essay = load_essay_haystack(None, dict(options))
    need = max(lengths) * samples
    words = need
    ids: list[int] = []
    while len(ids) < need:
        ids = list(tokenizer(" ".join(essay.sentences(words)), add_special_tokens=True)["input_ids"])
        words *= 2
    table: torch.Tensor | None = None
    start = time.perf_counter()
    for li, length in enumerate(lengths):
        for si in range(samples):
            per_layer: dict[int, torch.Tensor] = {}

            def visit(layer: int, q: torch.Tensor, k: torch.Tensor) -> None:
                per_layer[layer] = qk_contribution(q, k)  # noqa: B023 - called within this iteration

            seconds = backend.attention_inputs(ids[si * length : (si + 1) * length], visit)
            stacked = torch.stack([per_layer[i] for i in sorted(per_layer)])  # [layers, heads, F]
            if table is None:
                table = torch.zeros(len(lengths), samples, *stacked.shape)
            table[li, si] = stacked
            echo(f"  key dimensions: {format_length(length)} sample {si}: {seconds:.0f}s")
    assert table is not None
    return DimensionSelection(list(lengths), samples, topk, table, time.perf_counter() - start)


def write_dimensions(out: Path, model: str, dims: DimensionSelection) -> list[Path]:
    """``qk_2_norm-<model>.pt`` ([lengths, samples, layers, heads, F], the official file's layout) and
    ``dpe-dims-<model>.json`` (the top-k frequencies per layer and head, and their shares)."""
    name = Path(model).name
    tensor_file = out / f"qk_2_norm-{name}.pt"
    torch.save(dims.norms, tensor_file)
    json_file = out / f"dpe-dims-{name}.json"
    document = {
        "lengths": dims.lengths,
        "samples": dims.samples,
        "topk": dims.topk,
        "shape": list(dims.norms.shape),
        "frequency_share": dims.shares(),
        "top_per_layer_head": dims.top().tolist(),
    }
    json_file.write_text(json.dumps(document) + "\n")
    return [tensor_file, json_file]
