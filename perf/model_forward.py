"""Time and peak memory of one patched forward of the embedded SmolLM2 at a given length (CPU).

    python perf/model_forward.py --method lampe --len 16k

Runs the decoder only (no L x vocab logits) on real token ids (the tokenizer's vocabulary cycled),
and prints the forward time and the process's peak resident memory.
"""

from __future__ import annotations

import argparse
import resource
import time

import torch

from lampe_eval.backends.hf.patch import apply_method
from lampe_eval.lengths import parse_length
from lampe_eval.methods import create_method
from lampe_eval.models import load_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", default="lampe")
    parser.add_argument("--len", dest="length", default="16k")
    args = parser.parse_args()
    length = parse_length(args.length)
    lm = load_model("smollm2-135m", device="cpu")
    ids = (torch.arange(length) % 30000 + 1000)[None]
    method = create_method(args.method, lm.pretraining_window, length)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    with apply_method(lm.model, method), torch.inference_mode():
        start = time.perf_counter()
        hidden = lm.model.model(ids).last_hidden_state
        seconds = time.perf_counter() - start
    assert torch.isfinite(hidden).all()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(
        f"{method.label()} @ {length}: forward {seconds:.1f} s, "
        f"peak RSS {peak:.2f} GiB (model loaded: {before:.2f} GiB)"
    )


if __name__ == "__main__":
    main()
