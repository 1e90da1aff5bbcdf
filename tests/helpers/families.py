"""The model-family tests' shared setup (from ``tests/test_families.py``, shared with
``tests/test_moe_families.py`` and ``tests/test_families_guide.py``): a tiny random model of a family, its
logits, the dense oracle run inside the family's own attention code, and a family swapped into the registry
for a while."""

import importlib
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from transformers.modeling_utils import AttentionInterface

from lampe_eval.attention.reference import oracle_attention
from lampe_eval.backends.hf.patch import attention_layers
from lampe_eval.backends.rope_config import rope_base
from lampe_eval.families import FAMILIES, AttentionFamily, family_of_config
from lampe_eval.testing import tiny_family

WINDOW = 32
LENGTH = 80  # 2.5x the window: every method's segments are active


def tiny(model_type: str):
    """A random 2-layer model of the family (4 query / 2 KV heads, head dim 16), norms away from 1."""
    return tiny_family(model_type, window=WINDOW, head_dim=16)


@torch.no_grad()
def logits(net, ids):
    return net(ids).logits


@torch.no_grad()
def oracle_logits(net, method, ids, monkeypatch):
    """The family's own forward, its RoPE left out and the method's positions applied by the dense oracle
    in the layers the method changes; the other layers (a method's skipped layers, Gemma 3's local ones)
    run the family's own RoPE and attention."""
    module = importlib.import_module(type(net).__module__)  # the family's modeling code
    base, n = rope_base(net), ids.shape[1]
    plan = method.plan(base, n, n)
    family = family_of_config(net.config)
    changed = set(method.patched_layers(net.config.num_hidden_layers)) & set(family.global_layers(net.config))
    own_rope, own_attention = module.apply_rotary_pos_emb, AttentionInterface._global_mapping["sdpa"]
    if net.config._attn_implementation == "eager":  # Gemma 2: SDPA would drop its soft-capping
        own_attention = module.eager_attention_forward
    inside: list[int] = []  # the changed layer under way

    def rope(q, k, cos, sin, *args, **kwargs):
        return (q, k) if inside else own_rope(q, k, cos, sin, *args, **kwargs)

    def attention(layer, query, key, value, attention_mask, scaling=None, softcap=None, **kwargs):
        if not inside:
            return own_attention(
                layer, query, key, value, attention_mask, scaling=scaling, softcap=softcap, **kwargs
            )
        out = oracle_attention(query, key, value, plan, 0, scaling, softcap=softcap)
        return out.transpose(1, 2).to(query.dtype), None

    monkeypatch.setattr(module, "apply_rotary_pos_emb", rope)
    monkeypatch.setitem(AttentionInterface._global_mapping, "sdpa", attention)
    if hasattr(module, "eager_attention_forward"):
        monkeypatch.setattr(module, "eager_attention_forward", attention)

    def enter(*_) -> None:
        inside.append(1)

    def leave(*_) -> None:
        inside.pop()

    hooks = []
    for layer in attention_layers(net):
        if layer.layer_idx in changed:
            hooks += [layer.register_forward_pre_hook(enter), layer.register_forward_hook(leave)]
    try:
        return logits(net, ids)
    finally:
        for hook in hooks:
            hook.remove()
        monkeypatch.undo()


@contextmanager
def family_replaced(family: AttentionFamily) -> Iterator[None]:
    """``family`` registered in place of the registered family of its name for the ``with``; afterwards the
    registry as it was, order included (the order shows in messages: the supported model types)."""
    before = FAMILIES.values()

    def load(families: list[AttentionFamily]) -> None:
        for name in FAMILIES.names():
            FAMILIES.remove(name)
        for entry in families:
            FAMILIES.add(entry)

    load([family if f.name == family.name else f for f in before])
    try:
        yield
    finally:
        load(before)
