"""InfoScale (``--param infoscale=true``): the factor against the official formula written out here, its
composition with a method's own query scale, the patched model against the same method given that scale
by hand, the identity of runs without it, and its refusal on ``rope``."""

from __future__ import annotations

import math

import pytest
import torch

from lampe_eval.backends.hf.patch import apply_method, new_cache
from lampe_eval.errors import LampeEvalError
from lampe_eval.methods import METHODS, create_method
from lampe_eval.methods.base import RopeBase
from lampe_eval.methods.infoscale import infoscale_factor
from lampe_eval.testing import tiny_llama

WINDOW = 64
HEAD_DIM = 16


def official(keys: int, head_dim: int, trained: int) -> float:
    """layer.py: InfoScale = (1 - l^(-2/d))^0.5 / (1 - L^(-2/d))^0.5, here held at 1 up to L keys."""
    value = (1 - keys ** (-2 / head_dim)) ** 0.5 / (1 - trained ** (-2 / head_dim)) ** 0.5
    return max(1.0, value)


def test_factor_is_the_official_formula_and_one_inside_the_window() -> None:
    factor = infoscale_factor(64, 8192)
    i = torch.tensor([0, 100, 8190, 8191, 8192, 4 * 8192 - 1, 16 * 8192 - 1])
    expected = [official(int(n) + 1, 64, 8192) for n in i]
    assert factor(i).tolist() == pytest.approx(expected, rel=1e-6)
    assert expected[:4] == [1.0] * 4 and expected[4] > 1.0
    assert expected[5] == pytest.approx(1.0632, abs=1e-4) and expected[6] == pytest.approx(1.1204, abs=1e-4)


def test_infoscale_multiplies_the_methods_own_query_scale() -> None:
    base = RopeBase.plain(WINDOW, 4, 2, HEAD_DIM)
    plain = create_method("rerope", WINDOW, 4 * WINDOW, logn=True)
    scaled = create_method("rerope", WINDOW, 4 * WINDOW, logn=True, infoscale=True)
    i = torch.arange(4 * WINDOW)
    own = plain.attention_plan(base, 4 * WINDOW, 4 * WINDOW, None).query_scale
    both = scaled.attention_plan(base, 4 * WINDOW, 4 * WINDOW, None).query_scale
    assert own is not None and both is not None
    expected = own(i) * torch.tensor([official(int(n) + 1, HEAD_DIM, WINDOW) for n in i])
    assert torch.allclose(both(i), expected, rtol=1e-6)


@pytest.mark.parametrize("name", ["yarn", "mrrope", "lampe", "selfextend", "rerope"])
def test_patched_model_equals_the_method_with_the_scale_given_by_hand(name: str) -> None:
    """The model patched with ``infoscale=true`` = the same method whose plans get the factor from the
    formula above, prefill and 8 cached decode steps; queries inside the window are untouched."""
    model = tiny_llama(window=WINDOW, layers=2, heads=4, kv_heads=2, head_dim=HEAD_DIM)
    ids = torch.randint(0, 128, (1, 3 * WINDOW), generator=torch.Generator().manual_seed(2))
    extended = {"logn": True} if name == "rerope" else {}
    with_infoscale = create_method(name, WINDOW, 4 * WINDOW, infoscale=True, **extended)
    by_hand = create_method(name, WINDOW, 4 * WINDOW, **extended)
    own_plan = by_hand.attention_plan

    def hand_plan(base, context_length, kv_len, total_length):  # type: ignore[no-untyped-def]
        plan = own_plan(base, context_length, kv_len, total_length)
        own = plan.query_scale
        table = torch.tensor([official(n + 1, HEAD_DIM, WINDOW) for n in range(8 * WINDOW)])
        plan.query_scale = lambda i: table[i.long()] * (own(i) if own is not None else 1.0)
        return plan

    object.__setattr__(by_hand, "attention_plan", hand_plan)
    outputs = []
    for method in (with_infoscale, by_hand, create_method(name, WINDOW, 4 * WINDOW, **extended)):
        with apply_method(model, method), torch.no_grad():
            prefill = model(ids).logits
            cache = new_cache(model, ids.shape[1] + 8)
            step = model(ids, past_key_values=cache)
            tokens = [int(step.logits[0, -1].argmax())]
            decode = []
            for _ in range(8):
                out = model(torch.tensor([[tokens[-1]]]), past_key_values=cache)
                decode.append(out.logits[0, -1])
                tokens.append(int(out.logits[0, -1].argmax()))
            outputs.append((prefill, torch.stack(decode)))
    (mine, mine_decode), (hand, hand_decode), (without, _) = outputs
    assert torch.allclose(mine, hand, atol=1e-5) and torch.allclose(mine_decode, hand_decode, atol=1e-5)
    assert torch.equal(mine[:, :WINDOW], without[:, :WINDOW])  # l <= window: factor 1, the same numbers
    assert (mine[:, WINDOW:] - without[:, WINDOW:]).abs().max() > 1e-4  # past the window it acts


def test_runs_without_it_keep_their_identity_and_rope_refuses_it() -> None:
    for name in METHODS.names():
        assert "infoscale" not in create_method(name, 8192, 32768).params(), name
    assert create_method("yarn", 8192, 32768, infoscale=True).params()["infoscale"] is True
    assert "infoscale=True" in create_method("lampe", 8192, 32768, infoscale=True).label()
    with pytest.raises(LampeEvalError, match="unmodified model") as err:
        create_method("rope", 8192, 32768, infoscale="true")
    assert "\n" not in str(err.value)
    assert math.isfinite(infoscale_factor(128, 131072)(torch.tensor([10**6])).item())
