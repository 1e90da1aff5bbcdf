"""Ms-PoE, multi-scale positional encoding (Zhang et al., NeurIPS 2024): a position scale per head.

Every pair at positions compressed per head: head h's query i and key j sit at i / r_h and j / r_h, so it
sees the relative position d / r_h. Ratios, as ``VITA-Group/Ms-PoE`` @ a46c3d1
``utils/modify_arch/llama.py`` (``MsPoELlamaRotaryEmbedding``) builds them: r[k] = min_ratio + (max_ratio -
min_ratio) * k / H for k = 0..H-1 (max_ratio itself is never reached), head h takes r[order[h]].

``head_order``: ``normal`` (default) is the code's ``head_type == "normal"`` order, order[h] = H - 1 - h
(the first head the most compressed); ``index``: order[h] = h. The code's default (no head_type) orders the
heads by an outlier score of the first prompt's attention (``_calculate_outlier``: the share of the last
query's weights above 3x their mean, without RoPE), which needs the activations before the plan exists:
refused here (docs/methods.md 8). Keys: the code rotates the keys of key head g with the ratio of query
head g x (H / H_kv) (``sample_rotary_emb``), so under GQA the other query heads of the group see i / r_h -
j / r_g; done so with ``variant=official`` (the default). ``variant=paper``: every query head h sees its
keys at j / r_h as well, i / r_h - j / r_h (the paper's "position indices of each head scaled by its own
ratio"), which under GQA needs each key head's keys once per query head of its group: the patched layers
keep their keys and values per query head (``key_heads``), H / H_kv times the cache of those layers; equal
to ``official`` for a model without grouped queries. ``skip_layers``: the first layers keep plain RoPE (the
official scripts, ``src/ms_poe.sh``, apply it to layers 2..31 of 32); defaults min 1.2, max 1.8
(``inference.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..attention import Band, Segment
from ..errors import LampeEvalError
from .base import METHODS, PositionMethod, RopeBase, check_variant

HEAD_ORDERS = ("normal", "index")


def head_counts(base: RopeBase) -> tuple[int, int]:
    """The model's query and key heads, as the backend that built ``base`` read them from its config."""
    heads, kv_heads = base.heads, base.kv_heads or base.heads
    if not heads:
        raise LampeEvalError("ms_poe: per-head positions need the model's number of attention heads")
    return heads, kv_heads


@METHODS.register("ms_poe")
@dataclass
class MsPoE(PositionMethod):
    summary = "positions compressed by a ratio per head, min_ratio..max_ratio (Zhang et al. 2024)"
    display_order = 88

    min_ratio: float = 1.2
    max_ratio: float = 1.8
    head_order: str = "normal"
    skip_layers: int = 2  # the first layers keep plain RoPE (official: layers 2..31 of 32)
    variant: str = "official"  # official: keys at the ratio of their group's first query head; paper: own

    def validate(self) -> None:
        if self.head_order not in HEAD_ORDERS:
            raise LampeEvalError(
                f"ms_poe: head_order must be one of {', '.join(HEAD_ORDERS)} (the official outlier-score "
                "order needs the prompt's attention and is not supported)"
            )
        if not 0 < self.min_ratio <= self.max_ratio:
            raise LampeEvalError("ms_poe: need 0 < min_ratio <= max_ratio")
        if self.skip_layers < 0:
            raise LampeEvalError("ms_poe: skip_layers must be >= 0")
        check_variant("ms_poe", self.variant)

    def patched_layers(self, count: int) -> range:
        return range(min(self.skip_layers, count), count)

    def key_heads(self, heads: int, kv_heads: int) -> int:
        return heads if self.variant == "paper" else kv_heads

    def head_ratios(self, heads: int) -> torch.Tensor:
        """r of each query head, as the official table (float32) reordered by ``head_order``."""
        k = torch.arange(heads, dtype=torch.float32)
        ratios = self.min_ratio + (self.max_ratio - self.min_ratio) * (k / heads)
        order = torch.arange(heads) if self.head_order == "index" else heads - 1 - torch.arange(heads)
        return ratios[order]

    def segments(self, base: RopeBase, context_length: int, kv_len: int) -> list[Segment]:
        heads, kv_heads = head_counts(base)
        frequencies = base.inv_freq.numel()
        q_ratio = self.head_ratios(heads)
        # official: sample_rotary_emb's cos[::num_key_value_groups]; paper: each query head's own ratio
        k_ratio = q_ratio if self.key_heads(heads, kv_heads) == heads else q_ratio[:: heads // kv_heads]

        def scaled(ratios: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
            def positions(idx: torch.Tensor) -> torch.Tensor:
                # t / compress_ratio in float32, one row per head, the same for every frequency
                t = idx.to(torch.float32)[None, :] / ratios.to(idx.device)[:, None]
                return t[:, :, None].expand(-1, -1, frequencies)

            return positions

        return [Segment("causal", Band(0), scaled(q_ratio), scaled(k_ratio))]
