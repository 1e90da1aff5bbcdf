"""One method resolution for every entry point (runner, dry run, lm-eval, show-positions, fit, reports).

The order, for a model window and a target length: ``method_configs/<method>-<model>.yaml`` (for the
model, length and benchmark) < the explicit ``params`` < the method's derived defaults, computed from the
values that are then final (``Method.default_params`` sees them: a neighbour window set in a config or
on the command line gives the group size its rule needs); then ``validate``; then the window warning.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..model_facts import ModelFacts
from .base import METHODS, Method, RopeBase, beyond_window_warning

# window_base's stand-in model: plain RoPE, rope_theta 10000, head_dim 16 (positions do not depend on it)
STAND_IN_THETA = 10000.0
STAND_IN_HEAD_DIM = 16
STAND_IN_HEADS = 1


@dataclass(frozen=True)
class ResolvedMethod:
    method: Method  # built and validated
    explicit: dict[str, Any]  # method_configs values < explicit params (what the user/config set)
    label: str  # method.label()
    warning: str | None  # one line when positions pass the window at `length` (None otherwise)

    @property
    def params(self) -> dict[str, Any]:
        """The resolved values (``method.params()``)."""
        return self.method.params()


@functools.lru_cache(maxsize=16)
def _stand_in_config(window: int) -> Any:
    from transformers import AutoConfig

    heads = STAND_IN_HEADS
    return AutoConfig.for_model(
        "llama",
        vocab_size=8,
        hidden_size=heads * STAND_IN_HEAD_DIM,
        intermediate_size=2 * heads * STAND_IN_HEAD_DIM,
        num_hidden_layers=1,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        head_dim=STAND_IN_HEAD_DIM,
        max_position_embeddings=window,
        rope_parameters={"rope_type": "default", "rope_theta": STAND_IN_THETA},
    )


def window_base(window: int) -> RopeBase:
    """The stand-in RopeBase used where no model is loaded: plain RoPE (rope_theta 10000, head_dim 16) with
    the given pretraining window and a config, so that every method plans on it (positions only need the
    window; frequency methods compute frequencies for this stand-in)."""
    from .frequency import plain_frequencies

    facts = ModelFacts.from_config(_stand_in_config(int(window)))
    return RopeBase.from_facts(facts, plain_frequencies(STAND_IN_THETA, STAND_IN_HEAD_DIM), 1.0, int(window))


def explicit_params(
    name: str,
    model: str | None,
    length: int | None,
    benchmark: str | None,
    params: Mapping[str, Any] | None,
    configs: bool = True,
) -> dict[str, Any]:
    """What was set for the method: ``method_configs`` for (model, length, benchmark) when ``configs``
    and a model are given, then ``params`` on top (untyped: as written)."""
    from ..method_configs import load_method_params

    found = load_method_params(name, model, length, benchmark) if configs and model else {}
    return {**found, **(params or {})}


def resolve_method(
    name: str,
    window: int,
    length: int | None,
    *,
    model: str | None = None,  # for method_configs lookup
    benchmark: str | None = None,  # method_configs by_benchmark block
    params: Mapping[str, Any] | None = None,  # explicit parameters (typed or text)
    configs: bool = True,  # read method_configs/ for (model, length, benchmark) when model is given
    base: RopeBase | None = None,  # the real model's RopeBase when loaded; else window_base(window)
) -> ResolvedMethod:
    """The method ``name`` for a model ``window`` and target ``length``: method_configs < ``params`` <
    the defaults derived from those final values, validated, with its window warning at ``length``
    (None without a length, or when the warning needs the real model and ``base`` is not given)."""
    cls = METHODS.get(name)
    explicit = cls.typed_params(explicit_params(name, model, length, benchmark, params, configs))
    method = cls.build(window, length, **explicit)
    return ResolvedMethod(method, explicit, method.label(), window_warning(method, window, length, base))


def window_warning(
    method: Method, window: int, length: int | None, base: RopeBase | None = None
) -> str | None:
    """``beyond_window_warning`` on the real model's base, else on :func:`window_base` (None when the
    method's positions cannot be computed without the real model)."""
    if length is None or method.kind != "position":
        return None
    if base is not None:
        return beyond_window_warning(method, base, length)
    try:
        return beyond_window_warning(method, window_base(window), length)
    except Exception:  # noqa: BLE001 - a method that needs the real model: warned once it is loaded
        return None
