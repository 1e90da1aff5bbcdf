"""What a model's config says, read in one place: :class:`ModelFacts`.

Every module that needs a fact of a transformers config (its heads, its RoPE, its window, its layers)
reads it here: the families, the memory estimate, the backends' RoPE and the vLLM engine's tensor-parallel
split. Plain reading, no torch and no transformers: a config is any object with the usual attributes (a
``PretrainedConfig``, a test's stand-in). Methods never read a config: what they need (the heads, the global
layers' RoPE parameters) comes to them on :class:`~lampe_eval.methods.base.RopeBase`, filled from these
facts (``RopeBase.from_facts``). ``tests/test_model_facts_guard.py`` keeps other modules off raw config
reads.

Lenient by design: a fact the config does not state is 0 (or empty), and the reader that needs it says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


def text_config(config: Any) -> Any:
    """The decoder's config of a model that wraps one (Gemma 3's multimodal checkpoints: the text model
    inside ``Gemma3ForConditionalGeneration``, model type ``gemma3_text``), else ``config`` itself."""
    get = getattr(config, "get_text_config", None)
    return get(decoder=True) if get is not None else config


def full_attention_layers(config: Any) -> list[int]:
    """The layers that see every key, which a method may change: those ``layer_types`` marks
    ``full_attention`` (Qwen2 and Qwen3 with ``use_sliding_window``: the layers below
    ``max_window_layers``); none when a config without layer types sets a ``sliding_window`` (Mistral v0.1:
    every layer slides); else every layer."""
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None:
        return [i for i, kind in enumerate(layer_types) if kind == "full_attention"]
    return [] if getattr(config, "sliding_window", None) else list(range(config.num_hidden_layers))


# The key of the global layers' RoPE parameters in a config that keeps one set per layer type (Gemma 3).
GLOBAL_LAYER_TYPE = "full_attention"


def global_rope_parameters(config: Any) -> dict[str, Any]:
    """The RoPE parameters of the layers that see every key: the config's ``rope_parameters``, or, in a
    config that keeps one set per layer type (Gemma 3), the ``full_attention`` set; {} when none."""
    rope = getattr(config, "rope_parameters", None) or {}
    if not isinstance(rope, Mapping):
        return {}
    if isinstance(rope.get(GLOBAL_LAYER_TYPE), Mapping):
        return dict(rope[GLOBAL_LAYER_TYPE])
    return dict(rope)


def _int(config: Any, name: str) -> int:
    return int(getattr(config, name, None) or 0)


@dataclass(frozen=True)
class ModelFacts:
    """The facts of one decoder config (a multimodal config's text model), each 0 when the config does not
    state it. ``text``: that decoder config itself (for the readers that hand it on to transformers)."""

    text: Any = field(repr=False, compare=False)
    model_type: str = ""
    layers: int = 0
    heads: int = 0  # query heads
    kv_heads: int = 0  # key (and value) heads: the query heads when the config does not group them
    head_dim: int = 0
    hidden: int = 0
    intermediate: int = 0  # the MLP's width
    vocab: int = 0
    rotary_dim: int = 0  # the dimensions of a head that turn (fewer than head_dim: partial rotary)
    window: int = 0  # the pretraining window
    rope_parameters: Mapping[str, Any] = field(default_factory=dict, compare=False)  # the global layers'
    sliding_window: int = 0
    full_attention_layers: tuple[int, ...] = ()  # the layers that see every key
    softcap: float | None = None  # the attention logits' soft cap (Gemma 2's attn_logit_softcapping)

    @classmethod
    def from_config(cls, config: Any) -> ModelFacts:
        text = text_config(config)
        heads = _int(text, "num_attention_heads")
        hidden = _int(text, "hidden_size")
        head_dim = _int(text, "head_dim") or (hidden // heads if heads else 0)
        rope = global_rope_parameters(text)
        factor = rope.get("partial_rotary_factor", getattr(text, "partial_rotary_factor", None))
        layers = _int(text, "num_hidden_layers")
        return cls(
            text=text,
            model_type=str(getattr(text, "model_type", "") or ""),
            layers=layers,
            heads=heads,
            kv_heads=_int(text, "num_key_value_heads") or heads,
            head_dim=head_dim,
            hidden=hidden,
            intermediate=_int(text, "intermediate_size"),
            vocab=_int(text, "vocab_size"),
            rotary_dim=int(head_dim * float(factor)) if factor is not None else head_dim,
            window=_window(text, rope),
            rope_parameters=rope,
            sliding_window=_int(text, "sliding_window"),
            full_attention_layers=tuple(full_attention_layers(text)) if layers else (),
            softcap=getattr(text, "attn_logit_softcapping", None) or None,
        )

    @property
    def soft_capped(self) -> bool:
        """Whether attention logits are soft-capped (no fused kernel here computes them)."""
        return self.softcap is not None

    @property
    def rope_theta(self) -> float:
        """The global layers' RoPE base (0.0 when the config does not say)."""
        return float(self.rope_parameters.get("rope_theta") or getattr(self.text, "rope_theta", None) or 0.0)

    @property
    def rope_type(self) -> str:
        """The global layers' RoPE scaling ("default": none)."""
        return str(self.rope_parameters.get("rope_type") or "default")

    @property
    def partial_rotary(self) -> bool:
        """Only the first ``rotary_dim`` dimensions of a head turn (GPT-NeoX's layout, partial.py)."""
        return 0 < self.rotary_dim < self.head_dim

    @property
    def local_layers(self) -> int:
        """The sliding-window layers (Gemma 2/3, Qwen with ``use_sliding_window``): none without a window."""
        return self.layers - len(self.full_attention_layers) if self.sliding_window else 0

    def rank_share(self, ranks: int) -> float:
        """The share of the KV cache one of ``ranks`` tensor-parallel ranks holds (a rank caches its own key
        heads, at least one)."""
        kv_heads = self.kv_heads or 1
        return max(1, kv_heads // max(1, ranks)) / kv_heads


def _window(config: Any, rope: Mapping[str, Any]) -> int:
    """The pretraining window: the original context when the config carries an inference-time rope scaling
    (YaRN, dynamic, ...), else ``max_position_embeddings``. Llama-3.1's "llama3" scaling is part of its
    long-context training (to 128K), so its window is ``max_position_embeddings``."""
    positions = _int(config, "max_position_embeddings")
    if rope.get("rope_type") == "llama3":
        return positions
    return int(rope.get("original_max_position_embeddings") or positions)
