"""Frequency methods against transformers' own rope types (inv_freq and logits), and their composition
with a model's own rope scaling (a tiny config carrying Llama-3.1's ``llama3``, one carrying ``longrope``)."""

import copy
import dataclasses
import math

import pytest
import torch
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from lampe_eval.backends.hf.patch import apply_method
from lampe_eval.backends.rope_config import rope_base
from lampe_eval.errors import LampeEvalError
from lampe_eval.methods import METHODS, RopeBase, create_method
from lampe_eval.methods.frequency import plain_frequencies
from lampe_eval.methods.longrope import yarn_ramp
from lampe_eval.model_facts import ModelFacts
from tests.helpers.frequency import DIM, LLAMA3, THETA, WINDOW, llama3_twin, logits, plain_llama, twin


def hf_init(model, rope_parameters: dict, max_positions: int | None = None, seq_len: int | None = None):
    config = twin(model, rope_parameters, max_positions).config
    return ROPE_INIT_FUNCTIONS[rope_parameters["rope_type"]](config, torch.device("cpu"), seq_len=seq_len)


@pytest.fixture(scope="module")
def plain():
    return plain_llama()


@pytest.fixture(scope="module")
def llama3_model(plain):
    """A tiny model shipping Llama-3.1's scaling (window = max_position_embeddings = 1024)."""
    return llama3_twin(plain)


_rng = torch.Generator().manual_seed(0)
SHORT = (1 + torch.rand(DIM // 2, generator=_rng)).tolist()
LONG = (1 + 6 * torch.rand(DIM // 2, generator=_rng)).sort().values.tolist()

# method, its parameters, transformers' rope config for the same thing, max_position_embeddings, length
SAME_AS_TRANSFORMERS = [
    ("linear", {"factor": 4.0}, {"rope_type": "linear", "factor": 4.0}, WINDOW, 150),
    ("dynamic_ntk", {"factor": 2.0}, {"rope_type": "dynamic", "factor": 2.0}, WINDOW, 150),
    ("yarn", {"factor": 4.0}, {"rope_type": "yarn", "factor": 4.0}, 4 * WINDOW, 150),
    (
        "ntk_by_parts",
        {"factor": 4.0},
        {"rope_type": "yarn", "factor": 4.0, "attention_factor": 1.0},
        4 * WINDOW,
        150,
    ),
    (
        "llama3",
        {"factor": 4.0, "low_freq_factor": 1.5, "high_freq_factor": 3.0},
        {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.5, "high_freq_factor": 3.0},
        4 * WINDOW,
        150,
    ),
    (
        "longrope",
        {"factor": 4.0, "long": True, "short_factor": SHORT, "long_factor": LONG},
        {"rope_type": "longrope", "factor": 4.0, "short_factor": SHORT, "long_factor": LONG},
        4 * WINDOW,
        150,
    ),
    (
        "longrope",
        {"factor": 4.0, "long": False, "short_factor": SHORT, "long_factor": LONG},
        {"rope_type": "longrope", "factor": 4.0, "short_factor": SHORT, "long_factor": LONG},
        4 * WINDOW,
        50,
    ),
]


@pytest.mark.parametrize("name,params,hf_params,max_positions,length", SAME_AS_TRANSFORMERS)
def test_frequencies_and_logits_equal_transformers_own_rope_type(
    plain, name, params, hf_params, max_positions, length
):
    hf_params = {**hf_params, "original_max_position_embeddings": WINDOW}
    method = create_method(name, WINDOW, None, **params)
    inv_freq, attention = method.frequencies(rope_base(plain), length)
    ref_inv, ref_attention = hf_init(plain, hf_params, max_positions, seq_len=length)
    assert torch.equal(inv_freq, ref_inv.float()), name
    assert attention == pytest.approx(ref_attention, rel=1e-12), name
    ids = torch.randint(0, 128, (1, length), generator=torch.Generator().manual_seed(length))
    with apply_method(plain, method):
        ours = logits(plain, ids)
    assert (ours - logits(twin(plain, hf_params, max_positions), ids)).abs().max() < 1e-4, name


def test_llama3_on_a_llama3_8b_shape_gives_llama3_1_frequencies():
    """Llama-3.1-8B's config (factor 8, low 1, high 4, L0 8192, theta 5e5, head_dim 128) from Llama-3-8B's
    plain RoPE: pairs 0-28 unchanged, 35-63 divided by 8, 29-34 blended."""
    from transformers import LlamaConfig

    config = LlamaConfig(
        hidden_size=4096, num_attention_heads=32, head_dim=128, max_position_embeddings=8192,
        rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
    )  # fmt: skip
    plain_inv = plain_frequencies(500000.0, 128)
    base = RopeBase.from_facts(ModelFacts.from_config(config), plain_inv, 1.0)
    inv_freq, attention = create_method("llama3", 8192, None, factor=8.0).frequencies(base, 100)
    llama31 = copy.deepcopy(config)
    llama31.rope_parameters = {"rope_type": "llama3", "rope_theta": 500000.0, **LLAMA3}
    llama31.rope_parameters["original_max_position_embeddings"] = 8192
    llama31.max_position_embeddings = 131072
    assert torch.equal(inv_freq, ROPE_INIT_FUNCTIONS["llama3"](llama31, torch.device("cpu"))[0])
    assert attention == 1.0
    assert torch.equal(inv_freq[:29], plain_inv[:29])
    assert torch.allclose(inv_freq[35:], plain_inv[35:] / 8)
    assert ((inv_freq[29:35] < plain_inv[29:35]) & (inv_freq[29:35] > plain_inv[29:35] / 8)).all()


def test_longrope_defaults_are_its_search_start_from_yarn(plain):
    """Without factors: long = 1 + (s - 1) * YaRN's ramp (LongRoPE's evolution/search.py), short = 1,
    attention factor sqrt(1 + ln s / ln L0)."""
    s = 4.0
    ramp = yarn_ramp(DIM, THETA, WINDOW)
    yarn_inv, _ = hf_init(
        plain, {"rope_type": "yarn", "factor": s, "original_max_position_embeddings": WINDOW}, 4 * WINDOW
    )
    theta = plain_frequencies(THETA, DIM)
    assert torch.allclose(yarn_inv, theta * (1 - ramp) + theta / s * ramp)  # the ramp is YaRN's
    assert 0 < ramp.sum() < DIM // 2  # some kept, some interpolated
    base = rope_base(plain)
    long_inv, attention = create_method("longrope", WINDOW, 4 * WINDOW).frequencies(base, 10)
    assert torch.allclose(long_inv, theta / (1 + (s - 1) * ramp))
    assert attention == pytest.approx(math.sqrt(1 + math.log(s) / math.log(WINDOW)))
    short_inv, short_attention = create_method("longrope", WINDOW, WINDOW).frequencies(base, 10)
    assert torch.equal(short_inv, theta) and short_attention == 1.0  # within the window: plain RoPE


# --- composition with the model's own scaling (Llama-3.1's llama3) --------------------------------


def test_rope_base_is_the_model_s_own_llama3_frequencies(llama3_model):
    own, _ = ROPE_INIT_FUNCTIONS["llama3"](llama3_model.config, torch.device("cpu"))
    base = rope_base(llama3_model)
    assert base.window == 1024 and torch.equal(base.inv_freq, own)
    assert not torch.allclose(own, plain_frequencies(THETA, DIM))  # the scaling does something here


def test_linear_divides_the_model_s_own_frequencies(llama3_model):
    base = rope_base(llama3_model)
    method = create_method("linear", 1024, None, factor=2.0)
    inv_freq, attention = method.frequencies(base, 150)
    assert torch.equal(inv_freq, base.inv_freq / 2) and attention == 1.0
    ids = torch.randint(0, 128, (1, 150), generator=torch.Generator().manual_seed(1))
    reference = twin(llama3_model, {"rope_type": "llama3", **LLAMA3}, 1024)
    # transformers' own rotary, at the composed frequencies
    reference.model.rotary_emb.inv_freq = base.inv_freq / 2
    with apply_method(llama3_model, method):
        ours = logits(llama3_model, ids)
    assert (ours - logits(reference, ids)).abs().max() < 1e-4


def test_ntk_raises_rope_theta_under_the_model_s_own_llama3_scaling(llama3_model):
    """What transformers computes when rope_theta is edited in a llama3 config (frequencies and logits)."""
    theta = THETA * 2.0 ** (DIM / (DIM - 2))
    edited = twin(llama3_model, {"rope_type": "llama3", **LLAMA3, "rope_theta": theta}, 1024)
    method = create_method("ntk", 1024, None, factor=2.0)
    inv_freq, _ = method.frequencies(rope_base(llama3_model), 150)
    assert torch.equal(inv_freq, ROPE_INIT_FUNCTIONS["llama3"](edited.config, torch.device("cpu"))[0])
    ids = torch.randint(0, 128, (1, 150), generator=torch.Generator().manual_seed(2))
    with apply_method(llama3_model, method):
        ours = logits(llama3_model, ids)
    assert (ours - logits(edited, ids)).abs().max() < 1e-4


def test_dynamic_ntk_raises_rope_theta_under_the_model_s_own_scaling(llama3_model):
    base = rope_base(llama3_model)
    method = create_method("dynamic_ntk", 1024, None, factor=2.0)
    assert torch.equal(method.frequencies(base, 1000)[0], base.inv_freq)  # within the window: the model's own
    theta = THETA * ((2.0 * 3000 / 1024) - 1.0) ** (DIM / (DIM - 2))
    config = twin(llama3_model, {"rope_type": "llama3", **LLAMA3, "rope_theta": theta}, 1024).config
    expected = ROPE_INIT_FUNCTIONS["llama3"](config, torch.device("cpu"))[0]
    assert torch.equal(method.frequencies(base, 3000)[0], expected)


@pytest.mark.parametrize("name", ["yarn", "ntk_by_parts", "llama3", "longrope"])
def test_rope_type_methods_refuse_to_drop_the_model_s_own_scaling(llama3_model, name):
    ids = torch.randint(0, 128, (1, 20))
    with apply_method(llama3_model, create_method(name, 1024, 2048)), pytest.raises(LampeEvalError) as err:
        logits(llama3_model, ids)
    message = str(err.value)
    assert "\n" not in message and "'llama3'" in message and "model_scaling=replace" in message
    # asked explicitly, they replace it: the same frequencies as on the plain model
    replaced = create_method(name, 1024, 2048, model_scaling="replace")
    # the methods read the RopeBase's facts, not its config (which still says llama3)
    plain_base = dataclasses.replace(
        rope_base(llama3_model), rope_parameters={"rope_type": "default", "rope_theta": THETA}
    )
    assert torch.equal(
        replaced.frequencies(rope_base(llama3_model), 20)[0],
        create_method(name, 1024, 2048).frequencies(plain_base, 20)[0],
    )


@pytest.mark.parametrize("name", [m for m in METHODS.names() if METHODS.get(m).kind == "frequency"])
def test_no_frequency_method_drops_the_model_s_own_scaling_silently(llama3_model, name):
    base = rope_base(llama3_model)
    try:
        kept, _ = create_method(name, 1024, 2048).frequencies(base, 1500)
    except LampeEvalError:
        return  # refused, with a reason
    replaced, _ = create_method(name, 1024, 2048, model_scaling="replace").frequencies(base, 1500)
    assert not torch.allclose(kept, replaced), name


# --- a model that ships longrope (Phi-3 style) ----------------------------------------------------


@torch.no_grad()
def test_longrope_takes_the_factors_a_model_ships(plain):
    shipped = {
        "rope_type": "longrope",
        "short_factor": SHORT,
        "long_factor": LONG,
        "original_max_position_embeddings": 32,
    }
    model = twin(plain, shipped, max_positions=128)  # factor 128 / 32 = 4: attention sqrt(1 + ln 4 / ln 32)
    base = rope_base(model)
    assert base.window == 32
    for length, target in ((20, 32), (90, 128)):  # within L0: short factors; beyond: long ones
        ids = torch.randint(0, 128, (1, length), generator=torch.Generator().manual_seed(length))
        reference = logits(model, ids)  # transformers' own longrope
        method = create_method("longrope", base.window, target)
        assert method.long == (length > 32)
        _, attention = method.frequencies(base, length)
        assert attention == pytest.approx(math.sqrt(1 + math.log(4) / math.log(32)))
        with apply_method(model, method):
            assert (logits(model, ids) - reference).abs().max() < 1e-4, length


def test_bad_parameters_are_one_line_errors(plain):
    base = rope_base(plain)
    with pytest.raises(LampeEvalError, match="needs 8 values"):
        create_method("longrope", WINDOW, 256, long_factor=[1.0, 2.0]).frequencies(base, 10)
    with pytest.raises(LampeEvalError, match="low_freq_factor < high_freq_factor"):
        create_method("llama3", WINDOW, 256, low_freq_factor=4.0, high_freq_factor=4.0)
    with pytest.raises(LampeEvalError, match="model_scaling"):
        create_method("yarn", WINDOW, 256, model_scaling="drop")
    assert create_method("longrope", WINDOW, 256, long_factor="1,2,3").long_factor == (1.0, 2.0, 3.0)
