"""StableLM (GPT-NeoX-style partial rotary): Llama's separate projections (with a bias when
``use_qkv_bias``), then, with ``qk_layernorm``, a LayerNorm per head over each query and key head
(``q_layernorm``, ``k_layernorm``), and only the first ``partial_rotary_factor`` of each head rotated
(transformers' ``StableLmAttention.forward``; default 0.25). The partial head runs as a whole one
(``attention/partial.py``)."""

from __future__ import annotations

from .base import FAMILIES, AttentionFamily, layer_norm_heads

FAMILY = AttentionFamily(
    name="stablelm", classes=("StableLmAttention",), model_types=("stablelm",), project=layer_norm_heads
)
FAMILIES.add(FAMILY)
