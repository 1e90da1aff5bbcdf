"""A patched model whose layers accelerate placed with a device map (``--device-map``, ``--gpus-per-worker``).

No second device exists here, so the layers are dispatched with accelerate's own hooks over an explicit
per-layer map on CPU, one layer offloaded to disk: its weights sit on the "meta" device until the hook
loads them for the forward, so a patched forward that bypassed the hooks would fail, not pass silently.
"""

import pytest
import torch

from lampe_eval.backends.hf.patch import apply_method
from lampe_eval.errors import LampeEvalError
from lampe_eval.methods import create_method
from lampe_eval.testing import tiny_llama

accelerate = pytest.importorskip("accelerate")

WINDOW = 64
LAYERS = 3


def device_map() -> dict[str, str]:
    placed = {"model.embed_tokens": "cpu", "model.rotary_emb": "cpu", "model.norm": "cpu", "lm_head": "cpu"}
    placed.update({f"model.layers.{i}": "cpu" for i in range(LAYERS)})
    placed["model.layers.1"] = "disk"
    return placed


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """(plain model, the same weights dispatched by accelerate with hooks on every block)."""
    plain = tiny_llama(window=WINDOW, layers=LAYERS, heads=4, kv_heads=2, head_dim=16)
    dispatched = tiny_llama(window=WINDOW, layers=LAYERS, heads=4, kv_heads=2, head_dim=16)
    dispatched.load_state_dict(plain.state_dict())
    dispatched = accelerate.dispatch_model(
        dispatched, device_map(), offload_dir=str(tmp_path_factory.mktemp("offload")), force_hooks=True
    )
    return plain, dispatched


@torch.no_grad()
def run(model, ids):
    return model(ids).logits, model.generate(
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, do_sample=False, pad_token_id=0
    )


def test_patched_dispatched_model_equals_the_patched_single_device_model(models):
    plain, dispatched = models
    attention = dispatched.model.layers[1].self_attn
    assert attention.q_proj.weight.device.type == "meta"  # offloaded: only the hook brings the weights
    ids = torch.randint(0, 128, (1, 120))
    method = create_method("lampe", WINDOW, 128)
    with apply_method(plain, method):
        expected_logits, expected_tokens = run(plain, ids)
    calls = []
    original = attention._hf_hook.pre_forward
    attention._hf_hook.pre_forward = lambda module, *a, **k: calls.append(1) or original(module, *a, **k)
    with apply_method(dispatched, method):
        logits, tokens = run(dispatched, ids)
    assert calls, "accelerate's hook on the attention layer did not run"
    assert torch.allclose(logits, expected_logits, atol=1e-5, rtol=1e-5)
    assert torch.equal(tokens, expected_tokens)
    # removal leaves accelerate's wrapper in place and the unpatched model behind it
    with torch.no_grad():
        unpatched = dispatched(ids).logits
        assert torch.allclose(unpatched, plain(ids).logits, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(unpatched, logits, atol=1e-3)


def test_double_patching_a_dispatched_model_is_refused(models):
    _, dispatched = models
    with (
        apply_method(dispatched, create_method("lampe", WINDOW, 160)),
        pytest.raises(LampeEvalError, match="already patched"),
    ):
        apply_method(dispatched, create_method("dca", WINDOW, 160))
