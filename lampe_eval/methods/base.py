"""The method interface and registry.

A method is a dataclass whose fields are its hyperparameters. Three kinds:

* ``baseline``: plain RoPE, no patch at all.
* ``position``: remaps relative positions. It returns a list of :class:`Segment` s that partition
  the causal (query, key) pairs; the engine in ``lampe_eval.attention`` does the rest.
* ``frequency``: changes RoPE's inverse frequencies (and an attention factor); one plain causal
  segment.

Methods with a released reference implementation take ``variant=paper|official`` (``VARIANTS``): the
paper's formulas, or the official code's arithmetic exactly, including the diagonals its overlapping
passes count twice (``doubled_diagonals``; the engine's LSE merge then counts those pairs twice too).

Every method takes ``infoscale`` (default false; :mod:`.infoscale`): InfoScale's attention temperature on
top of the method's own plan (:meth:`Method.attention_plan`); not on ``rope``, which patches nothing.

Defaults may depend on the model's pretraining window, the target length and the values the user
did set (e.g. SelfExtend's group size from its neighbour window, YaRN's factor from the length):
``default_params`` sees the explicit values and derives only the others from them, as transformers'
``_compute_yarn_parameters`` does. ``create_method(name, window, target_length, **overrides)``; with
method_configs and the window warning: :func:`lampe_eval.methods.resolve.resolve_method`.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from ..attention import AttentionPlan, Band, Segment
from ..attention.rope import relative
from ..errors import LampeEvalError, suggestion
from ..model_facts import ModelFacts
from ..options import parse_typed
from ..registry import Registry


@dataclass(frozen=True)
class RopeBase:
    """The model's own RoPE: inverse frequencies and the factor it multiplies cos/sin by, with the facts of
    its config the methods need (:meth:`from_facts`: from :class:`~lampe_eval.model_facts.ModelFacts`);
    methods read these fields, never the config."""

    inv_freq: torch.Tensor  # [rotary_dim / 2], float32
    attention_scaling: float
    window: int  # pretraining window
    head_dim: int
    # the decoder config, only as the object transformers' rope init functions take: frequency methods
    # hand them a copy carrying the RoPE parameters they compute
    config: Any = None
    heads: int = 0  # query heads (0: unknown; per-head positions need them: Ms-PoE)
    kv_heads: int = 0  # key heads
    # the global layers' RoPE parameters (ModelFacts.rope_parameters: Gemma 3's full_attention set)
    rope_parameters: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def from_facts(
        cls, facts: ModelFacts, inv_freq: torch.Tensor, attention_scaling: float, window: int | None = None
    ) -> RopeBase:
        """The RoPE of a model whose config says ``facts`` (``window``: the pretraining window, default the
        config's)."""
        return cls(
            inv_freq=inv_freq,
            attention_scaling=attention_scaling,
            window=int(window or facts.window),
            head_dim=facts.head_dim,
            config=facts.text,
            heads=facts.heads,
            kv_heads=facts.kv_heads,
            # their own rope_theta, else the one an older config states beside them (0.0: none)
            rope_parameters={"rope_theta": facts.rope_theta, **facts.rope_parameters},
        )

    @property
    def rotary_dim(self) -> int:
        """The dimensions of a head that turn: ``head_dim``, or fewer for a partial rotary model (GPT-NeoX
        style: StableLM, Phi-4-mini; ``attention/partial.py``)."""
        return 2 * self.inv_freq.numel()

    @property
    def theta(self) -> float:
        """The global layers' RoPE base (``rope_theta``)."""
        theta = self.rope_parameters.get("rope_theta")
        if not theta:
            raise LampeEvalError("the model's RoPE parameters state no rope_theta: frequency methods need it")
        return float(theta)

    @property
    def rope_type(self) -> str:
        """The model's own rope scaling of the global layers ("default" when it ships none)."""
        return str(self.rope_parameters.get("rope_type") or "default")

    @classmethod
    def plain(
        cls,
        window: int,
        heads: int,
        kv_heads: int,
        head_dim: int,
        theta: float = 10000.0,
        device: Any = "cpu",
    ) -> RopeBase:
        """Plain RoPE of a Llama-shaped model with these heads (tests and benchmarks: no weights)."""
        from transformers import LlamaConfig

        config = LlamaConfig(
            hidden_size=heads * head_dim,
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            head_dim=head_dim,
            max_position_embeddings=window,
            rope_parameters={"rope_type": "default", "rope_theta": theta},
        )
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim))
        return cls.from_facts(ModelFacts.from_config(config), inv_freq, 1.0, window)


@dataclass
class Method:
    name: ClassVar[str]
    summary: ClassVar[str] = ""
    kind: ClassVar[str] = "position"
    # How reports present it (``lampe-eval report --baseline/--highlight`` override the last two):
    display_order: ClassVar[int] = 500  # rows, lines and bars in increasing order (then by name)
    is_baseline: ClassVar[bool] = False  # the method every other is compared with (the unmodified model)
    highlight: ClassVar[bool] = False  # drawn emphasised in plots (the method under study)
    # InfoScale on top of the method (keyword-only: after every method's own fields; not in params() when off)
    infoscale: bool = field(default=False, kw_only=True)

    @classmethod
    def default_params(
        cls, window: int, target_length: int | None, given: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Defaults that depend on the model window, the target length and the explicit values ``given``
        (typed): a value for each derived name NOT in ``given``, computed from the final values (those in
        ``given`` where the user set them), so that e.g. a user's neighbour window yields the group size
        its rule needs. Names in ``given`` are never overridden (``build`` drops them anyway)."""
        return {}

    @classmethod
    def param_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def typed_params(cls, overrides: dict[str, Any]) -> dict[str, Any]:
        """``overrides`` (command-line text or YAML data) checked and typed against the fields: an unknown
        name (with the closest one), a value of the wrong type (``s1=1.5`` for an integer) are errors."""
        names = cls.param_names()
        for name in overrides:
            if name not in names:
                raise LampeEvalError(
                    f"method {cls.name!r} has no parameter {name}{suggestion(name, names)} "
                    f"(its parameters: {', '.join(names) or 'none'})"
                )
        hints = typing.get_type_hints(cls)
        return {k: _coerce(v, hints[k], f"method {cls.name!r}: parameter {k}") for k, v in overrides.items()}

    @classmethod
    def build(cls, window: int, target_length: int | None = None, /, **overrides: Any) -> Method:
        """The method for a model window and target length: the explicit ``overrides``, then the defaults
        derived from them (``default_params``) for the names they leave out, then ``validate``."""
        given = cls.typed_params(overrides)
        derived = cls.default_params(window, target_length, types.MappingProxyType(given))
        params = {**{k: v for k, v in derived.items() if k not in given}, **given}
        try:
            method = cls(**params)
        except TypeError as err:
            raise LampeEvalError(f"method {cls.name!r}: {err}") from err
        method.validate()
        if method.infoscale and method.kind == "baseline":
            raise LampeEvalError(
                f"method {cls.name!r} is the unmodified model: infoscale=true applies on top of a method "
                "that patches attention (e.g. --method yarn --param infoscale=true)"
            )
        return method

    def validate(self) -> None:
        """Raise LampeEvalError for impossible hyperparameters."""

    def params(self) -> dict[str, Any]:
        """The hyperparameters (``infoscale`` only when on: runs without it keep their identity)."""
        values = dataclasses.asdict(self)
        if not values.get("infoscale"):
            values.pop("infoscale", None)
        return values

    def attention_plan(
        self, base: RopeBase, context_length: int, kv_len: int, total_length: int | None
    ) -> AttentionPlan:
        """What the backends run: ``plan_with_budget``, with InfoScale's temperature when ``infoscale``."""
        plan = self.plan_with_budget(base, context_length, kv_len, total_length)
        if not self.infoscale:
            return plan
        from .infoscale import with_infoscale

        return with_infoscale(plan, base.head_dim, base.window)

    def plan(self, base: RopeBase, context_length: int, kv_len: int) -> AttentionPlan:
        """Segments and frequencies for a sequence whose prompt had ``context_length`` tokens and
        whose cache now holds ``kv_len`` keys."""
        raise NotImplementedError

    def fixed_key_positions(self) -> bool:
        """Whether, once a prompt is prefilled, every key keeps its positions (and the frequencies stay
        fixed) for the rest of the generation: the KV cache then holds keys already rotated. False for
        methods whose positions move with the sequence length; they re-rotate every cached key at every
        decoding step (exact, slower)."""
        return True

    def patched_layers(self, count: int) -> range:
        """The attention layers (of ``count``) the method applies to; the others keep the model's own
        attention (Ms-PoE leaves its first layers alone). All of them unless the method says otherwise."""
        return range(count)

    def key_heads(self, heads: int, kv_heads: int) -> int:
        """The key heads the method's plans rotate, for a model of ``heads`` query and ``kv_heads`` key heads:
        ``kv_heads``, or ``heads`` for a method whose every query head sees its keys at positions of its own
        (Ms-PoE's ``variant=paper`` under grouped queries: the patched layers then keep keys and values per
        query head)."""
        return kv_heads

    def plan_with_budget(
        self, base: RopeBase, context_length: int, kv_len: int, total_length: int | None
    ) -> AttentionPlan:
        """``plan`` for a generation expected to reach ``total_length`` tokens (prompt + new tokens; None
        when unknown). Only a method whose choices depend on the final length overrides it."""
        return self.plan(base, context_length, kv_len)

    def label(self) -> str:
        """Short human label with parameters, for tables and logs."""
        inner = ", ".join(f"{k}={v}" for k, v in self.params().items())
        return f"{self.name}({inner})" if inner else self.name


def _coerce(value: Any, annotation: Any, what: str) -> Any:
    """A parameter value as its field's type, strictly (see :func:`lampe_eval.options.parse_typed`)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(value, inner[0], what) if len(inner) == 1 else value
    if origin is typing.Literal:
        if value not in args:
            choices = [str(a) for a in args]
            hint = suggestion(str(value), choices)
            raise LampeEvalError(f"{what} must be one of {', '.join(choices)}, got {value!r}{hint}")
        return value
    if annotation in (bool, int, float, str):
        return parse_typed(value, annotation, what)
    return value


METHODS: Registry[Method] = Registry("method")

# ``variant`` of the methods that have an official code to follow (docs/methods.md): "paper" is the paper's
# formulas with an exact partition of the causal pairs, "official" the released code's arithmetic.
VARIANTS = ("paper", "official")


def check_variant(method: str, variant: str) -> None:
    if variant not in VARIANTS:
        raise LampeEvalError(f"{method}: variant must be one of {', '.join(VARIANTS)}, not {variant!r}")


def create_method(name: str, window: int, target_length: int | None = None, /, **overrides: Any) -> Method:
    return METHODS.get(name).build(window, target_length, **overrides)


def causal_plan(inv_freq: torch.Tensor, rope_scaling: float) -> AttentionPlan:
    """Plain causal attention at true positions (what frequency methods use)."""
    return AttentionPlan([Segment("causal", Band(0))], inv_freq, rope_scaling)


@dataclass
class PositionMethod(Method):
    """Base for methods that remap positions; subclasses implement ``segments``."""

    kind: ClassVar[str] = "position"

    def segments(self, base: RopeBase, context_length: int, kv_len: int) -> list[Segment]:
        raise NotImplementedError

    def rope_mscale(self) -> float:
        """Extra factor on cos and sin (logits scale by its square); 1 unless the method has one."""
        return float(getattr(self, "mscale", 1.0))

    def query_scale(self, base: RopeBase):
        return None

    def largest_position(self, base: RopeBase, length: int) -> int:
        """The largest relative position the last query of a ``length``-token prefill sees (O(length);
        the last row holds the maximum for every method here, whose PE grows with i - j)."""
        return last_row_maximum(self.segments(base, length, length), length)

    def doubled_diagonals(self, base: RopeBase, context_length: int, kv_len: int) -> list[int]:
        """Distances d = i - j whose pairs the segments deliberately count twice (an official code's
        overlapping passes, reproduced by a ``variant=official``); [] for an exact partition."""
        return []

    def pair_counts(
        self, base: RopeBase, context_length: int, kv_len: int, queries: torch.Tensor, num_keys: int
    ) -> torch.Tensor:
        """How many softmax terms each (query, key) pair is meant to get: 1 per causal pair, one more
        per doubled diagonal. Dense [len(queries), num_keys]: for the oracle and the partition tests."""
        d = queries[:, None] - torch.arange(num_keys)[None, :]
        counts = (d >= 0).long()
        for distance in self.doubled_diagonals(base, context_length, kv_len):
            counts += (d == distance).long()
        return counts

    def plan(self, base: RopeBase, context_length: int, kv_len: int) -> AttentionPlan:
        return self.plan_from_segments(base, self.segments(base, context_length, kv_len))

    def plan_from_segments(self, base: RopeBase, segments: list[Segment]) -> AttentionPlan:
        return AttentionPlan(
            segments,
            base.inv_freq,
            base.attention_scaling * self.rope_mscale(),
            self.query_scale(base),
        )


def last_row_maximum(segments: list[Segment], length: int) -> int:
    """The largest relative position that query ``length - 1`` sees over ``length`` keys."""
    last = torch.tensor([length - 1])
    largest = 0
    for segment in segments:
        start, stop = (int(b[0]) for b in segment.region.bounds(last))
        if stop > start:
            keys = torch.arange(start, stop)
            rel = relative(segment.q_pos(last), segment.k_pos(keys))
            largest = max(largest, math.floor(rel.max().item()))
    return largest


@dataclass
class FrequencyMethod(Method):
    """Base for methods that change RoPE frequencies; subclasses implement ``frequencies``."""

    kind: ClassVar[str] = "frequency"

    def frequencies(self, base: RopeBase, kv_len: int) -> tuple[torch.Tensor, float]:
        raise NotImplementedError

    def plan(self, base: RopeBase, context_length: int, kv_len: int) -> AttentionPlan:
        inv_freq, factor = self.frequencies(base, kv_len)
        return causal_plan(inv_freq, factor)


def beyond_window_warning(method: Method, base: RopeBase, length: int) -> str | None:
    """A one-line warning when a position method shows the model relative positions past its window
    at ``length`` (e.g. STRING beyond the window, a too-small SelfExtend group): results are then
    extrapolation, not what the method promises. None when it stays within the window."""
    if not isinstance(method, PositionMethod):
        return None
    largest = method.largest_position(base, length)
    if largest < base.window:
        return None
    return (
        f"{method.name} at {length} tokens reaches relative position {largest} >= the pretraining window "
        f"{base.window}: the model extrapolates (check the method's parameters for this length)"
    )
