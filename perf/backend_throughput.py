"""Generation throughput of the backends on the embedded SmolLM2-135M (fp32), greedy, KJV text:
the Hugging Face backend one request at a time, the Hugging Face backend with ``--batch-size N``, and the
vLLM backend (continuous batching), and ``--backend openai`` against a local ``lampe-eval serve`` of the
same method (the HTTP layer's cost: its engine is the vLLM backend's), for ``rope`` and ``lampe``.

Three workloads: decode-heavy (16 prompts of 256 tokens, 128 new tokens each), LongBench-shaped (16
prompts of 4K tokens, 128 new tokens) and mixed (one 8K prompt and 15 of 512 tokens, 128 new tokens: every
decode step batches one long row with short ones). The model's window is taken to be half the longest
prompt, and methods are resolved as ``lampe-eval run`` and ``serve`` resolve them (SmolLM2's
method_configs at that length): LaMPE's three segments are active in the LongBench-shaped prompts and the
mixed workload's long one; below 2 x s1 = 1,024 tokens (the decode-heavy prompts, the mixed workload's
short ones) its plan is one causal segment, so on CPU those rows decode through vLLM's own kernel.
Tokens per second = new tokens / wall time of the whole workload (the vLLM engine's and the servers'
start-up excluded, the engine's timed apart); the ratio is to the first backend
of ``--backends`` (HF batch 1 by default), and so are the greedy tokens (a differing prompt is counted).
``--repeats N`` runs every method and backend in N interleaved rounds and reports median seconds (and the
range), since one run of a shared machine can be 20 % slow; a comment line gives each method's time over
the first method's on each backend.

    python perf/backend_throughput.py [--workloads decode,longbench,mixed] [--methods rope,lampe]
        [--prompts 16] [--new-tokens 128] [--batch-size 16] [--backends hf1,hfn,vllm,openai] [--repeats 1]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator

WORKLOADS = {"decode": (256, 256), "longbench": (4096, 4096), "mixed": (8192, 512)}  # first prompt, others


def prompts(tokenizer, count: int, lengths: tuple[int, int]) -> list[tuple[int, ...]]:
    """``count`` prompts of KJV text: the first of ``lengths[0]`` tokens, the others of ``lengths[1]``."""
    from lampe_eval.data.corpus import _print_kjv

    longest = max(lengths)
    ids = tokenizer(_print_kjv()[: 8 * longest * count + 200_000])["input_ids"]
    step = max(1, (len(ids) - longest) // count)
    return [tuple(ids[i * step : i * step + lengths[min(i, 1)]]) for i in range(count)]


@contextlib.contextmanager
def served(method: str, window: int, length: int, batch_size: int) -> Iterator[str]:
    """``lampe-eval serve`` of SmolLM2 with ``method`` on a free local port, until the block ends."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [sys.executable, "-m", "lampe_eval", "serve", "--model", "smollm2-135m", "--method", method]
    command += ["--window", str(window), "--len", str(length), "--batch-size", str(batch_size)]
    command += ["--dtype", "fp32", "--port", str(port)]
    with tempfile.TemporaryFile("w+") as log:
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            for _ in range(300):
                if server.poll() is not None:
                    log.seek(0)
                    raise SystemExit(f"lampe-eval serve exited: {log.read()[-2000:]}")
                try:
                    urllib.request.urlopen(f"{url}/health", timeout=2)
                    break
                except OSError:
                    time.sleep(2)
            yield url
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=120)


def timed(backend, requests) -> tuple[float, list]:
    start = time.perf_counter()
    out = backend.generate(requests)
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="decode,longbench")
    parser.add_argument("--methods", default="rope,lampe")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument(
        "--backends",
        default="hf1,hfn,vllm",
        help="hf1: HF batch 1, hfn: HF batched, vllm, openai (a local lampe-eval serve, one per method)",
    )
    parser.add_argument("--repeats", type=int, default=1, help="rounds of every run; seconds are medians")
    args = parser.parse_args()

    import dataclasses

    from lampe_eval.backends.base import GenerationRequest
    from lampe_eval.backends.hf import HFBackend
    from lampe_eval.backends.openai import OpenAIBackend
    from lampe_eval.backends.vllm import VLLMBackend, vllm_version
    from lampe_eval.methods.resolve import resolve_method
    from lampe_eval.models import load_for_engine, load_model

    lm = load_model("smollm2-135m", device="cpu", dtype="fp32")
    print(f"SmolLM2-135M fp32, {vllm_version()}, {args.prompts} prompts, {args.new_tokens} new tokens")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")  # the in-process engine's and each server's
    first = {"hf1": "HF batch 1", "hfn": "HF batched", "vllm": "vLLM", "openai": "openai"}[
        args.backends.split(",")[0]
    ]
    header = (
        "workload",
        "method",
        "backend",
        "seconds",
        "new tokens/s",
        f"x {first}",
        f"same tokens as {first}",
    )
    print("| " + " | ".join(header) + " |")
    print("|---|---|---|---|---|---|---|")
    for workload in args.workloads.split(","):
        length = max(WORKLOADS[workload])
        window = length // 2
        ids = prompts(lm.tokenizer, args.prompts, WORKLOADS[workload])
        requests = [GenerationRequest("", args.new_tokens, input_ids=p) for p in ids]
        half = dataclasses.replace(lm, pretraining_window=window)
        engine_lm = load_for_engine("smollm2-135m", pretraining_window=window)
        vllm = VLLMBackend(engine_lm, batch_size=args.batch_size, dtype="fp32")
        start = time.perf_counter()
        vllm.start(length + args.new_tokens)
        print(f"<!-- {workload}: vLLM engine start {time.perf_counter() - start:.1f} s -->")
        hf1, hfn = HFBackend(half, 1), HFBackend(half, args.batch_size)
        backends = {
            "hf1": ("hf, batch 1", hf1),
            "hfn": (f"hf, batch {args.batch_size}", hfn),
            "vllm": ("vllm", vllm),
            "openai": ("openai (local serve)", None),
        }
        names = args.methods.split(",")
        methods = {  # as `lampe-eval run` and `serve` resolve them: with the model's method_configs
            n: resolve_method(n, window, length, model="smollm2-135m", base=hf1.rope_base()).method
            for n in names
        }
        servers = contextlib.ExitStack()
        clients = {}
        if "openai" in args.backends.split(","):  # a server per method, started before any timing
            for name in names:
                url = servers.enter_context(served(name, window, length, args.batch_size))
                clients[name] = OpenAIBackend(engine_lm, [url], batch_size=args.batch_size)
        runs: dict[tuple[str, str], list[tuple[float, list]]] = {}
        for _ in range(args.repeats):  # rounds of every method and backend: slow spells hit them alike
            for name in names:
                for key in args.backends.split(","):
                    label, backend = backends[key]
                    backend = clients[name] if key == "openai" else backend
                    assert backend is not None  # "openai": the client of the server started above
                    with backend.install(methods[name]):
                        if backend is vllm:  # a method keeping other key copies starts it again: not timed
                            vllm.start(length + args.new_tokens)
                        runs.setdefault((name, label), []).append(timed(backend, requests))
        seconds = {run: statistics.median(t for t, _ in results) for run, results in runs.items()}
        for name in names:
            labels = [backends[key][0] for key in args.backends.split(",")]
            reference = runs[(name, labels[0])][0][1]
            for label in labels:
                out = runs[(name, label)][0][1]
                tokens = sum(g.new_tokens for g in out)
                # every repeat's tokens are compared, not only the first's
                same = min(
                    sum(a.token_ids == b.token_ids for a, b in zip(o, reference, strict=True))
                    for _, o in runs[(name, label)]
                )
                took = seconds[(name, label)]
                spread = [t for t, _ in runs[(name, label)]]
                shown = (
                    f"{took:.1f}" if len(spread) == 1 else f"{took:.1f} ({min(spread):.1f}-{max(spread):.1f})"
                )
                print(
                    f"| {workload} ({length}) | {name} | {label} | {shown} | {tokens / took:.1f} | "
                    f"{seconds[(name, labels[0])] / took:.2f}x | {same}/{len(out)} |",
                    flush=True,
                )
        for label in (backends[key][0] for key in args.backends.split(",")):
            for name in names[1:]:  # time of each method over the first one's (rope), on one backend
                ratio = seconds[(name, label)] / seconds[(names[0], label)]
                print(f"<!-- {workload}, {label}: {name} takes {ratio:.2f}x the time of {names[0]} -->")
        vllm.close()
        servers.close()


if __name__ == "__main__":  # vLLM spawns its engine process
    main()
