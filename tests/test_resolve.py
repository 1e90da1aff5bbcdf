"""One method resolution (lampe_eval.methods.resolve): method_configs < explicit parameters < the defaults
derived from the final values; a value the user sets is what the derived defaults are computed from."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from lampe_eval.backends.rope_config import rope_base
from lampe_eval.errors import LampeEvalError
from lampe_eval.method_configs import ENV
from lampe_eval.methods import (
    METHODS,
    PositionMethod,
    ResolvedMethod,
    create_method,
    resolve_method,
    window_base,
)
from lampe_eval.methods.selfextend import default_group_size
from lampe_eval.testing import tiny_llama

# ------------------------------------------------------------------------------------- named cases


def test_selfextend_group_size_follows_a_given_neighbour_window():
    """-p window=2048 on a 4K window at 16K: the group size is the rule's for w = 2048 (22), not the one
    derived from the default w = 1024 (which lets positions pass the window)."""
    resolved = resolve_method("selfextend", 4096, 16384, params={"window": "2048"})
    assert resolved.params["window"] == 2048
    assert resolved.params["group_size"] == 22 == default_group_size(4096, 2048, 16384)
    assert resolved.warning is None
    assert resolved.method.largest_position(window_base(4096), 16384) < 4096
    assert resolved.explicit == {"window": 2048}
    # the old order (group size from the default neighbour window) broke the rule (2/3) W > w + (N - w)/G
    old = create_method(
        "selfextend", 4096, 16384, group_size=default_group_size(4096, 1024, 16384), window=2048
    )
    assert old.group_size == 10 and old.largest_position(window_base(4096), 16384) >= 4096 * 2 / 3
    assert resolved.method.largest_position(window_base(4096), 16384) < 4096 * 2 / 3


def test_selfextend_neighbour_window_follows_a_given_group_size():
    """A G given alone keeps w = W/4 when the rule holds, and narrows w when it would not."""
    assert resolve_method("selfextend", 4096, 16384, params={"group_size": 16}).params["window"] == 1024
    narrow = resolve_method("selfextend", 4096, 16384, params={"group_size": 5})
    assert narrow.params["window"] < 1024 and narrow.warning is None


def test_streamingllm_recent_follows_the_given_sinks():
    """sinks=8: recent = W - 8 - 1, so the cache (sinks + recent) plus the new token is exactly W."""
    window = 4096
    resolved = resolve_method("streamingllm", window, 4 * window, params={"sinks": 8})
    sinks, recent = resolved.params["sinks"], resolved.params["recent"]
    assert (sinks, recent) == (8, window - 8 - 1)
    assert sinks + recent + 1 == window
    assert resolved.method.largest_position(window_base(window), 4 * window) == window - 1
    assert resolved.warning is None
    # and the other way: a recent window that leaves room for fewer sinks
    assert resolve_method("streamingllm", window, None, params={"recent": window - 3}).params["sinks"] == 2


def test_other_derived_defaults_follow_the_given_values():
    window = 4096
    # LM-Infinite: the limit follows n_local (it must not exceed it)
    assert (
        resolve_method("lm_infinite", window, None, params={"n_local": 1024}).params["limit_distance"] == 1024
    )
    # DCA: w = W - s, and max_position stays at least s + w - 1
    dca = resolve_method("dca", window, 4 * window, params={"chunk_size": 3584}).params
    assert (dca["local_window"], dca["max_position"]) == (512, 4095)
    # DCA official: the tables' tie max_position = s + w - 1 holds whatever one size is given
    for name, value in (("chunk_size", 2048), ("local_window", 100), ("max_position", 3000)):
        p = resolve_method("dca", window, 4 * window, params={"variant": "official", name: value}).params
        assert p[name] == value and p["max_position"] == p["chunk_size"] + p["local_window"] - 1, (name, p)
    # STRING: the default local stays below a small shift
    assert resolve_method("string", window, window, params={"shift": 64}).params["local"] < 64
    # LongRoPE without a target length: long when the factor says the run goes past the window
    assert resolve_method("longrope", window, None, params={"factor": 4}).params["long"] is True
    assert resolve_method("longrope", window, None).params["long"] is False


def test_dca_official_defaults_are_the_official_tables():
    from lampe_eval.methods.dca import DualChunk

    params = resolve_method("dca", 8192, 32768, params={"variant": "official"}).params
    assert {
        k: params[k] for k in ("chunk_size", "local_window", "max_position")
    } == DualChunk.official_params(8192)


# ------------------------------------------------------------------------- configs < params < derived


def test_configs_then_params_then_derived(tmp_path, monkeypatch):
    (tmp_path / "selfextend-mymodel.yaml").write_text("params:\n  window: 1024\n  scale_base: 100\n")
    monkeypatch.setenv(ENV, str(tmp_path))
    # a derived default follows the config-set value
    from_config = resolve_method("selfextend", 4096, 16384, model="mymodel")
    assert from_config.explicit == {"window": 1024, "scale_base": 100}
    assert from_config.params["group_size"] == default_group_size(4096, 1024, 16384) == 10
    # an explicit parameter overrides the config, and the derived default follows it
    explicit = resolve_method("selfextend", 4096, 16384, model="mymodel", params={"window": 2048})
    assert explicit.explicit == {"window": 2048, "scale_base": 100}
    assert explicit.params["group_size"] == 22 and explicit.params["scale_base"] == 100
    # configs=False (a job whose parameters already hold its config values) or no model: no config read
    assert resolve_method("selfextend", 4096, 16384, model="mymodel", configs=False).explicit == {}
    assert resolve_method("selfextend", 4096, 16384).params["window"] == 1024  # W / 4 by default


def test_config_by_benchmark_block(tmp_path, monkeypatch):
    (tmp_path / "streamingllm-mymodel.yaml").write_text(
        "params:\n  sinks: 2\nby_benchmark:\n  pg19:\n    params: {sinks: 16}\n"
    )
    monkeypatch.setenv(ENV, str(tmp_path))
    assert resolve_method("streamingllm", 256, 1024, model="mymodel").params == {"recent": 253, "sinks": 2}
    in_pg19 = resolve_method("streamingllm", 256, 1024, model="mymodel", benchmark="pg19")
    assert in_pg19.params == {"recent": 239, "sinks": 16}


def test_resolved_method_fields_and_errors():
    resolved = resolve_method("string", 256, 1024, params={"shift": "100"})
    assert isinstance(resolved, ResolvedMethod)
    assert resolved.label == resolved.method.label()
    assert resolved.explicit == {"shift": 100}  # typed
    assert resolved.warning and "string" in resolved.warning  # STRING past the window extrapolates
    assert resolve_method("string", 256, None).warning is None  # no length: nothing to warn about
    assert resolve_method("yarn", 256, 1024).warning is None  # frequency methods keep positions
    with pytest.raises(LampeEvalError, match="no parameter"):
        resolve_method("selfextend", 256, 1024, params={"windw": 3})
    with pytest.raises(LampeEvalError, match="local < shift"):
        resolve_method("string", 256, 1024, params={"shift": 10, "local": 20})


def test_real_model_base_gives_the_same_warning():
    model = tiny_llama(window=256, layers=1, vocab=8)
    base = rope_base(model, 256)
    for name in ("string", "selfextend", "lm_infinite"):
        with_model = resolve_method(
            name, 256, 1024, params={"group_size": 2} if name == "selfextend" else {}, base=base
        )
        alone = resolve_method(name, 256, 1024, params={"group_size": 2} if name == "selfextend" else {})
        assert with_model.warning == alone.warning and alone.warning, name


def test_window_base_matches_a_tiny_model():
    """window_base is the RoPE of a plain tiny Llama with that window: every method plans the same."""
    import torch

    tiny = rope_base(tiny_llama(window=256, layers=1, vocab=8), 256)
    stand_in = window_base(256)
    assert torch.equal(stand_in.inv_freq, tiny.inv_freq) and stand_in.window == 256
    for name in METHODS.names():
        method = create_method(name, 256, 1024)
        a, b = method.plan(stand_in, 1024, 1024), method.plan(tiny, 1024, 1024)
        assert torch.allclose(a.inv_freq, b.inv_freq) and a.rope_scaling == b.rope_scaling, name


# ------------------------------------------------------------------------------------ property test

Values = Callable[[int, int], list[Any]]  # (window W, length N) -> values to set alone

# Every parameter of every registered method, with a few values a user may set alone. Values that make the
# method's own rule unsatisfiable are left out, each with the reason:
# * selfextend group_size <= N / W: the group positions alone reach (N - 1) // G >= W - 1 (no w helps);
# * selfextend / rerope window (w) >= W: the neighbour band alone reaches W;
# * rerope leaky_k <= N / W (about): the slope reaches W even with w = 1;
# * streamingllm recent >= W or sinks >= W: the cache alone spans the window;
# * dca local_window > W / 2 (paper needs w <= s and s + w <= W), max_position >= W, and official
#   chunk_size > 7W/8 (with LW = W/8 kept, max_position = s + LW reaches W);
# * lampe s1 + s2 near W (the clamp m >= s1 + s2 + 1), m >= W + 1, U near W (m ~ U + s1 + s2), a paper
#   sigmoid L with L/2 >= W.
VALUES: dict[str, dict[str, Values]] = {
    "rope": {},
    "selfextend": {
        "group_size": lambda w, n: [n // w + 1, 2 * n // w, 4 * n // w],
        "window": lambda w, n: [w // 8, w // 2, 3 * w // 4],
        "scale_base": lambda w, n: [0, 4096],
        "variant": lambda w, n: ["paper", "official", "logistic"],
        "rate": lambda w, n: [0.02, 0.5],
    },
    "streamingllm": {
        "recent": lambda w, n: [w // 4, w - 8, w - 1],
        "sinks": lambda w, n: [0, 8, w // 4],
    },
    "dca": {
        "chunk_size": lambda w, n: [w // 4, w // 2, 3 * w // 4],
        "local_window": lambda w, n: [1, w // 8, w // 2],
        "max_position": lambda w, n: [w // 2 - 1, 3 * w // 4, w - 1],
        "mscale_coef": lambda w, n: [0.0, 0.1],
        "variant": lambda w, n: ["paper", "official"],
    },
    "lm_infinite": {
        "n_local": lambda w, n: [w // 4, w // 2, w],
        "limit_distance": lambda w, n: [1, w // 2, w],
        "n_global": lambda w, n: [0, 100],
    },
    "rerope": {
        "window": lambda w, n: [w // 8, w // 2, w - 1],
        "leaky_k": lambda w, n: [4.5, 8.0, 16.0],
        "logn": lambda w, n: [True, False],
    },
    "string": {
        "shift": lambda w, n: [w // 8, w // 2, w - 1],
        "local": lambda w, n: [0, 16, w // 4],
        "mscale": lambda w, n: [1.0],
        "variant": lambda w, n: ["paper", "official"],
    },
    "dpe": {
        "window": lambda w, n: [1, w // 8, w // 2],
        "scale_factors": lambda w, n: [(n // w + 1,), (n // w + 1, 2 * n // w, 4 * n // w, 8 * n // w)],
        "dimension_groups": lambda w, n: [(), (0, 8)],  # window_base: 8 frequencies; one factor by default
        "variant": lambda w, n: ["paper", "official"],
    },
    "ms_poe": {  # within-window by design (positions d / r, r >= min_ratio): checked at N = W
        "min_ratio": lambda w, n: [1.0, 1.2],
        "max_ratio": lambda w, n: [1.8, 3.0],
        "head_order": lambda w, n: ["normal", "index"],
        "skip_layers": lambda w, n: [0, 2],
        "variant": lambda w, n: ["official", "paper"],
    },
    "lampe": {
        "s1": lambda w, n: [0, w // 8, w // 2],
        "s2": lambda w, n: [1, w // 16, w // 4],
        "L": lambda w, n: [w // 2, w],
        "a": lambda w, n: [0.0, 0.001],
        "b": lambda w, n: [0.0, -1.0],
        "U_L": lambda w, n: [w // 4, w // 2, 3 * w // 4],
        "U_a": lambda w, n: [1e-5, 1e-2],
        "U_b": lambda w, n: [-5.0, 0.0, 5.0],
        "U_short": lambda w, n: [w // 4],
        "U_short_below": lambda w, n: [w, 8 * w],
        "m": lambda w, n: [w // 4, w // 2, w - 1],
        "U": lambda w, n: [w // 8, w // 2],
        "variant": lambda w, n: ["paper", "official"],
        "mscale": lambda w, n: [1.0],
        "identity_within_window": lambda w, n: [True, False],
        "remap_each_step": lambda w, n: [True, False],
    },
}
_FACTOR: dict[str, Values] = {
    "factor": lambda w, n: [1.0, 4.0],
    "model_scaling": lambda w, n: ["keep", "replace"],
}
_BY_PARTS: dict[str, Values] = {**_FACTOR, "beta_fast": lambda w, n: [16.0], "beta_slow": lambda w, n: [2.0]}
VALUES.update(
    {
        "linear": _FACTOR,
        "ntk": _FACTOR,
        "dynamic_ntk": _FACTOR,
        "yarn": {**_BY_PARTS, "attention_factor": lambda w, n: [1.0, 1.2]},
        "mrrope": {
            **_BY_PARTS,
            "variant": lambda w, n: ["uni", "pro"],
            "attention_factor": lambda w, n: [0.0, 1.2],
        },
        "ntk_by_parts": _BY_PARTS,
        "llama3": {
            **_FACTOR,
            "low_freq_factor": lambda w, n: [2.0],
            "high_freq_factor": lambda w, n: [8.0],
        },
        "longrope": {
            **_FACTOR,
            "long": lambda w, n: [True, False],
            "short_factor": lambda w, n: ["1,1,1,1,1,1,1,1"],  # window_base: head_dim 16, 8 frequencies
            "long_factor": lambda w, n: [",".join(["2"] * 8)],
            "attention_factor": lambda w, n: [1.1],
        },
        "cope": {
            "low": lambda w, n: [0, 4, 20],
            "clip": lambda w, n: ["cosine", "hard"],
            "model_scaling": lambda w, n: ["keep", "replace"],
        },
    }
)

# Position methods whose positions pass the window by design, with the largest position they reach:
# * lm_infinite puts its global keys at distance limit_distance = n_local, the window by default (the
#   official code's ceiling, one past the largest distance seen in training): at most W;
# * string is meant for inputs within the window (beyond, its shifted band reaches N - 1 - S + W_local):
#   checked at N = W instead.
AT_MOST_WINDOW = {"lm_infinite"}
WITHIN_WINDOW_ONLY = {"string", "ms_poe"}

WINDOWS = (256, 4096)
FACTORS = (2, 4)


def test_every_parameter_has_values():
    """A new method or parameter must be added to VALUES (the property test then covers it)."""
    for name in METHODS.names():
        fields = {f.name for f in dataclasses.fields(METHODS.get(name))} - {"infoscale"}  # every method's
        assert set(VALUES.get(name, {"?": lambda w, n: []})) == fields, name


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("factor", FACTORS)
@pytest.mark.parametrize("name", sorted(VALUES))
def test_derived_defaults_keep_positions_within_the_window(name, factor, window):
    """Each parameter set alone: the method resolves, validates, plans on window_base, and a position
    method's largest relative position stays below the window (the by-design exceptions above)."""
    if name not in METHODS:
        pytest.skip(f"{name} is not registered")
    length = window if name in WITHIN_WINDOW_ONLY else factor * window
    base = window_base(window)
    for param, values in VALUES[name].items():
        for value in values(window, factor * window):
            resolved = resolve_method(name, window, length, params={param: value})
            method = resolved.method
            if param not in ("short_factor", "long_factor"):  # text lists, parsed by the method
                assert getattr(method, param) == resolved.explicit[param], (param, value)
            if not isinstance(method, PositionMethod):
                method.plan(base, length, length)  # frequency methods keep true positions by design
                assert resolved.warning is None
                continue
            largest = method.largest_position(base, length)
            bound = window if name in AT_MOST_WINDOW else window - 1
            assert largest <= bound, f"{resolved.label} at {length} (W {window}): largest position {largest}"
            if name not in AT_MOST_WINDOW:
                assert resolved.warning is None, resolved.warning
