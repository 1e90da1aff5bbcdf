"""The memory estimate (``lampe_eval/memory.py``, what ``--dry-run`` prints and what refuses a run that
cannot fit) against the allocator's peak measured by ``torch.profiler(profile_memory=True)``, on CPU.

For each method and length: a generation (a prompt of ``length - new`` tokens and ``new`` greedy tokens
through the Hugging Face backend's ``generate``) and a PG-19-style loss pass over ``length`` tokens. The
profiler sees what is allocated after the model loaded, so the weights are left out of both columns; the
estimate's part is its KV cache + prefill (generation) or its larger of prefill and loss (loss pass).

    python perf/memory_estimate.py [--model smollm2-135m] [--methods rope,lampe] [--lens 4k,8k,16k]
"""

from __future__ import annotations

import argparse
import platform
import subprocess

import torch

from lampe_eval.attention.counts import peak_memory
from lampe_eval.backends.hf import HFBackend, chunked_nll_rows
from lampe_eval.lengths import parse_lengths
from lampe_eval.memory import GIB
from lampe_eval.methods.resolve import resolve_method
from lampe_eval.models import load_model
from lampe_eval.settings import RunSettings


def measure(backend: HFBackend, method_name: str, length: int, new: int, settings: RunSettings) -> list[str]:
    """The table rows of one (method, length): generation and loss pass."""
    lm = backend.lm
    method = resolve_method(method_name, lm.pretraining_window, length).method
    guess = HFBackend.memory_estimate(lm.name, method, length, settings)
    if guess is None:
        raise SystemExit(f"{lm.name}: no config readable without loading: no estimate")
    ids = torch.randint(100, 30000, (settings.batch_size, length), generator=torch.Generator().manual_seed(0))
    with backend.install(method):
        _, generation = peak_memory(backend.generate_ids, ids[:, : length - new], length, new, new)
        _, loss = peak_memory(chunked_nll_rows, lm.model, ids, chunk=1024)
    rows = []
    for phase, estimated, measured in (
        ("generation", guess.generation - guess.weights, generation),
        ("loss pass", guess.scoring - guess.weights, loss),
    ):
        rows.append(
            f"| {method_name} | {length} | {phase} | {estimated / GIB:.3f} | {measured / GIB:.3f} "
            f"| {estimated / measured:.2f} |"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--methods", default="rope,lampe,selfextend,dca,yarn")
    parser.add_argument("--lens", default="4k,8k,16k")
    parser.add_argument("--new-tokens", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args()
    torch.manual_seed(0)
    settings = RunSettings(device="cpu", dtype=args.dtype, batch_size=args.batch_size)
    backend = HFBackend(load_model(args.model, device="cpu", dtype=args.dtype), batch_size=args.batch_size)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout
    machine = platform.processor() or platform.machine()
    print(
        f"{args.model}, {args.dtype}, batch {args.batch_size}, {machine}, torch {torch.__version__}, "
        f"commit {commit.strip()}"
    )
    print("| method | length | phase | estimate GiB | measured GiB | estimate / measured |")
    print("|---|---|---|---|---|---|")
    for method in args.methods.split(","):
        for length in parse_lengths(args.lens):
            for row in measure(backend, method, length, args.new_tokens, settings):
                print(row, flush=True)


if __name__ == "__main__":
    main()
