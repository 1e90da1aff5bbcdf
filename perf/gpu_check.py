"""One-command check of the GPU path (``make gpu-check``): correctness first, then speed and memory.

(a) every method's attention on random inputs (4K on CUDA, bf16): the engine on its kernel backend
    (``lampe_eval/attention/kernels.py``) against the portable fp32 path and against the dense oracle
    (rows at the start, middle and end of the sequence), and a prefill continued from the middle against
    the whole prefill's rows;
(b) a Llama-shaped random model, patched with every method whose mapping is the identity at this
    length, against the unpatched model (equal within bf16 rounding);
(c) prefill and one decode step of every method against plain FlashAttention (the same kernel, one
    causal call) at 32K and 128K with an 8B-shaped layer (32 query / 8 KV heads, head_dim 128);
(d) peak GPU memory of each prefill above its inputs;
(e) a whole random model (``--model-layers`` Llama-3-8B-shaped layers, the full vocabulary) through the
    Hugging Face backend's ``generate`` and its PG-19 loss pass, at the (c) lengths: prefill time and decode
    ms/token against plain RoPE, and the peak memory above the weights against ``lampe_eval/memory.py``'s
    estimate (what ``--dry-run`` prints and what refuses a run that cannot fit);
(f) the causal kernels this GPU offers the unpatched model; (g) the vLLM backend's paged attention code;
(h) every model family (``FAMILY_EXAMPLES``: Qwen3, OLMo 2, Phi-3, Gemma 3, StableLM and Phi-4-mini's
    partial rotary), small and random, patched with each position method on the GPU against the same
    patched model in fp32 on the CPU (itself checked against the dense oracle by the tests);
(i) where a whole-model decode step's time goes: wall time per token against the GPU's busy time per
    token and its kernel launches (a step far above its busy time is bound by the host's launches).

It prints one table and exits 1 when (a), (b), (g) or (h) fails, or a part crashes. Without CUDA it says
so, runs (a), (b) (smaller shapes, fp32) and (h) on CPU and exits 0 when they pass.

    python perf/gpu_check.py [--lengths 32k,128k] [--check-length 4096] [--repeats 3]
                             [--model-layers 4] [--model-methods rope,lampe,...]

The parts live in ``perf/gpu/`` (``correctness.py``: (a), (b), (h); ``speed.py``: (c), (d), (f);
``model.py``: (e), (i); ``paged.py``: (g); ``report.py``: the table and the parts' crash handling;
``run.py``: this command line). On a GPU machine with the dev install, ``pytest -m gpu`` runs the
correctness parts as tests (``tests/test_gpu.py``, the same functions); this script needs no pytest.
"""

from __future__ import annotations

import sys
from pathlib import Path

# run as a file (python3 perf/gpu_check.py): the checkout's root on the path, so that `perf.gpu` imports
if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perf.gpu.run import main  # noqa: E402 - after the path is set

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
