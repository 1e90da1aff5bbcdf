"""The vLLM backend against the Hugging Face backend on a real model: for each method, whether vLLM's
greedy tokens equal the HF backend's, and the largest difference of their prompt log-probabilities (fp32,
one KJV prompt). The CI tests check the same on random models (tests/test_vllm*.py); this runs a real
checkpoint, e.g. Gemma 3 270M, whose local layers keep vLLM's own attention (docs/model-families.md).
``--random-family NAME`` instead saves a random two-layer model of
``lampe_eval.testing.FAMILY_EXAMPLES[NAME]`` (SmolLM2's vocabulary, head dim 64, weights drawn as the tests
draw them) and compares on it: with ``--methods rope`` it shows whether vLLM's own model for a family gives
transformers' outputs at all.

    python perf/backend_agreement.py [--model gemma3-270m | --random-family olmo2] [--window 1024]
        [--prompt 1600] [--new-tokens 16] [--methods rope,lampe,selfextend,yarn]
"""

from __future__ import annotations

import argparse
import os
import tempfile


def save_random_family(name: str, window: int, where: str) -> str:
    """A random two-layer model of family example ``name`` with SmolLM2's tokenizer, saved in ``where``."""
    from lampe_eval.models import load_tokenizer
    from lampe_eval.testing import save_random_checkpoint, tiny_family

    tokenizer = load_tokenizer("smollm2-135m").tokenizer
    net = tiny_family(name, vary_norms=False, head_dim=64, window=window, vocab=len(tokenizer))
    return save_random_checkpoint(net, where, tokenizer, seed=7)


def main() -> None:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--model", default="gemma3-270m")
    parser.add_argument("--random-family", help="a random model of this FAMILY_EXAMPLES entry instead")
    parser.add_argument("--window", type=int, default=1024, help="the window the methods plan with")
    parser.add_argument("--prompt", type=int, default=1600, help="prompt tokens")
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--methods", default="rope,lampe,selfextend,yarn")
    args = parser.parse_args()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")

    import torch

    from lampe_eval.backends.base import GenerationRequest
    from lampe_eval.backends.hf import HFBackend
    from lampe_eval.backends.vllm import VLLMBackend
    from lampe_eval.data.corpus import _print_kjv
    from lampe_eval.methods.resolve import resolve_method
    from lampe_eval.models import load_for_engine, load_model

    if args.random_family:
        args.model = save_random_family(args.random_family, args.window, tempfile.mkdtemp())
    lm = load_model(args.model, pretraining_window=args.window, dtype="float32")
    hf = HFBackend(lm)
    ids = list(lm.tokenizer(_print_kjv()[: 40 * args.prompt])["input_ids"][: args.prompt])
    request = GenerationRequest("", args.new_tokens, input_ids=tuple(ids))
    engine = load_for_engine(args.model, pretraining_window=args.window)
    backend = VLLMBackend(engine, batch_size=1, dtype="fp32")  # engines in their own processes
    title = f"a random {args.random_family}" if args.random_family else args.model
    print(f"{title}, window {args.window}, prompt {args.prompt}, {args.new_tokens} new tokens, fp32\n")
    print("| method | same greedy tokens | max prompt log-probability difference |\n|---|---|---|")
    try:
        for name in args.methods.split(","):
            length = args.prompt + args.new_tokens
            method = resolve_method(name, args.window, length, base=hf.rope_base()).method
            with hf.install(method):
                expected = hf.generate([request])[0].token_ids
                with torch.no_grad():
                    logits = lm.model(torch.tensor([ids])).logits[0, :-1].float()
                own = torch.log_softmax(logits, -1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
            with backend.install(method):
                got = backend.generate([request])[0].token_ids
                theirs = torch.tensor(backend.prompt_logprobs(ids))
            print(f"| {name} | {got == expected} | {(theirs - own).abs().max().item():.1e} |", flush=True)
    finally:
        backend.close()


if __name__ == "__main__":
    main()
