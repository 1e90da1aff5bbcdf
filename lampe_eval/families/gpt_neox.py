"""GPT-NeoX (Pythia, GPT-NeoX-20B; ``model_type`` ``gpt_neox``): one fused ``query_key_value`` projection
whose output holds, head after head, that head's query, key and value (``[H, 3 * D]``, not three blocks
of heads), no grouped keys, the first ``partial_rotary_factor`` (``rotary_pct``, 0.25) of each head
rotated, and a ``dense`` output projection (transformers' ``GPTNeoXAttention.forward``). The partial head
runs as a whole one (``attention/partial.py``)."""

from __future__ import annotations

from typing import Any

import torch

from .base import FAMILIES, AttentionFamily, dense


def project(layer: Any, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    batch, n, _ = hidden.shape
    qkv = layer.query_key_value(hidden).view(batch, n, -1, 3 * layer.head_size).transpose(1, 2)
    query, key, value = qkv.chunk(3, dim=-1)
    return query, key, value


FAMILY = AttentionFamily(
    name="gpt_neox", classes=("GPTNeoXAttention",), model_types=("gpt_neox",), project=project, output=dense
)
FAMILIES.add(FAMILY)
