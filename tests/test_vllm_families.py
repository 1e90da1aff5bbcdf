"""A family beyond Llama on the vLLM backend: a random Qwen3 (per-head query/key norms before RoPE, in
vLLM's own ``Qwen3Attention``) with LaMPE gives the Hugging Face backend's greedy tokens. Qwen3's norms run
inside vLLM's layer before its rotary embedding, which the patch makes a pass-through, so the keys the
method rotates and caches are the normalised ones on both backends. (Phi-3 gave the same tokens for
lampe, selfextend, dca and yarn when checked by hand the same way; OLMo 2 is refused: vLLM 0.32 runs it
through its Transformers fallback.)"""

from __future__ import annotations

import os

import pytest
import torch

pytest.importorskip("vllm")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

from lampe_eval.backends.base import GenerationRequest  # noqa: E402
from lampe_eval.backends.hf import HFBackend  # noqa: E402
from lampe_eval.backends.vllm import VLLMBackend  # noqa: E402
from lampe_eval.methods.resolve import resolve_method  # noqa: E402
from lampe_eval.models import load_for_engine, load_model, tiny_llama  # noqa: E402

pytestmark = pytest.mark.slow
WINDOW, PROMPT = 256, 600


def random_qwen3(where: str, tokenizer) -> None:
    """2 layers, 4 query / 2 KV heads of dim 64 (vLLM's CPU attention takes 64 and up), SmolLM2's
    vocabulary and tokenizer; weights and norms drawn so that no token is a near tie."""
    net = tiny_llama(window=WINDOW, head_dim=64, vocab=len(tokenizer), model_type="qwen3")
    generator = torch.Generator().manual_seed(3)
    for name, parameter in net.named_parameters():
        if "norm" in name:
            parameter.data = torch.rand(parameter.shape, generator=generator) + 0.5
        else:
            parameter.data = torch.randn(parameter.shape, generator=generator) * 0.2
    net.save_pretrained(where)
    tokenizer.save_pretrained(where)


def test_qwen3_with_lampe_gives_the_hf_backends_tokens(tmp_path, smollm2_tokenizer):
    where = str(tmp_path / "qwen3")
    random_qwen3(where, smollm2_tokenizer)
    hf = HFBackend(load_model(where, device="cpu", dtype="float32"))
    ids = torch.randint(100, 40000, (PROMPT,), generator=torch.Generator().manual_seed(4)).tolist()
    request = GenerationRequest("", 8, input_ids=tuple(ids))
    method = resolve_method("lampe", WINDOW, PROMPT, base=hf.rope_base()).method
    with hf.install(method):
        expected = hf.generate([request])[0].token_ids
    engine = VLLMBackend(load_for_engine(where), batch_size=1, dtype="fp32", max_batched_tokens=256)
    try:
        with engine.install(method):
            got = engine.generate([request])[0].token_ids
    finally:
        engine.close()
    assert got == expected
