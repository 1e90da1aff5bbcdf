"""RoPE rotation at arbitrary (possibly fractional) positions, computed exactly like transformers does."""

from __future__ import annotations

import torch


def rope_cos_sin(
    positions: torch.Tensor, inv_freq: torch.Tensor, scaling: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables [n, rotary_dim] for 1-D ``positions`` (same arithmetic as LlamaRotaryEmbedding)."""
    freqs = positions.to(torch.float32)[:, None] * inv_freq.to(device=positions.device, dtype=torch.float32)
    emb = torch.cat((freqs, freqs), dim=-1)
    return (emb.cos() * scaling).to(dtype), (emb.sin() * scaling).to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(
    x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor, scaling: float = 1.0
) -> torch.Tensor:
    """Rotate ``x`` [..., n, head_dim] so that row r sits at ``positions[r]``."""
    cos, sin = rope_cos_sin(positions, inv_freq, scaling, x.dtype)
    return x * cos + rotate_half(x) * sin
