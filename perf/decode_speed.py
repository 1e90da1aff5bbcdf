"""Whole-model greedy generation of the embedded SmolLM2-135M: prefill time, decode ms/token and KV-cache
bytes of every method against the unpatched model.

Each method is configured for 2x extrapolation (the model's window is taken to be half the prompt), so
every segment of every method is active while decoding. Each (method, length) point runs in a fresh
subprocess. One ``generate`` call per point, timed per token with a streamer: prefill = time to the first
new token (prefill + 1 token), decode = (time for N tokens - time for 1) / (N - 1). KV-cache bytes are
those the patched attention holds after the last step (rotated key copies included), against the plain
cache (keys + values) of the unpatched model at the same length.

    python perf/decode_speed.py [--lens 4k,16k] [--methods rope,lampe,...] [--new-tokens 32]

A method may carry parameters: ``lampe:remap_each_step=true``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

DEFAULT_METHODS = (
    "rope,lampe,selfextend,dca,rerope,string,lm_infinite,streamingllm,ntk,yarn,linear,ntk_by_parts,llama3,"
    "longrope,dynamic_ntk,dpe,ms_poe,lampe:remap_each_step=true"
)


def parse_spec(spec: str) -> tuple[str, dict[str, str]]:
    """``name:key=value:key=value`` -> (name, {key: value})."""
    name, *pairs = spec.split(":")
    return name, dict(pair.split("=", 1) for pair in pairs)


def measure(spec: str, length: int, new_tokens: int, threads: int, clock_name: str) -> dict:
    """Runs in the child process."""
    import time

    import torch
    from transformers.generation.streamers import BaseStreamer

    from lampe_eval.backends.hf import HFBackend
    from lampe_eval.backends.hf.patch import kv_cache_bytes
    from lampe_eval.methods import create_method
    from lampe_eval.models import load_model

    now = time.process_time if clock_name == "cpu" else time.perf_counter

    class TokenClock(BaseStreamer):
        """Records the time of every generated token (the first ``put`` is the prompt)."""

        def __init__(self) -> None:
            self.times: list[float] = []
            self.prompt_seen = False

        def put(self, value: torch.Tensor) -> None:
            if self.prompt_seen:
                self.times.append(now())
            self.prompt_seen = True

        def end(self) -> None:
            pass

    torch.set_grad_enabled(False)
    if threads > 0:
        torch.set_num_threads(threads)
    lm = load_model("smollm2-135m", device="cpu", dtype="float32")
    window = length // 2
    name, params = parse_spec(spec)
    if name == "lampe":
        params.setdefault("identity_within_window", "false")
    method = create_method(name, window, length, **params)
    ids = (torch.arange(length) % 30000 + 1000)[None]
    clock = TokenClock()
    lm.pretraining_window = window  # the method sees a window of half the prompt
    backend = HFBackend(lm)
    with backend.install(method):
        start = now()
        out = backend.generate_ids(  # the call every generation request makes
            ids,
            length + new_tokens,
            new_tokens,
            min_new_tokens=new_tokens,  # never stop early at an end-of-text token
            streamer=clock,
            return_dict_in_generate=True,
        )
        cache_bytes = kv_cache_bytes(out.past_key_values)
    config = lm.model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    cached = length + new_tokens - 1  # the last token is never fed back
    plain = 2 * config.num_hidden_layers * config.num_key_value_heads * cached * head_dim * 4
    times = clock.times
    return {
        "spec": spec,
        "length": length,
        "prefill_s": times[0] - start,
        "decode_ms": (times[-1] - times[0]) / (len(times) - 1) * 1000,
        "new_tokens": len(times),
        "cache_bytes": cache_bytes,
        "plain_bytes": plain,
    }


def length_arg(text: str) -> int:
    text = text.strip().lower()
    return int(float(text[:-1]) * 1024) if text.endswith("k") else int(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lens", default="4k,16k", help="prompt lengths, e.g. 4k,16k")
    parser.add_argument("--methods", default=DEFAULT_METHODS, help="comma-separated; rope is the reference")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="cpu: the process's CPU time, not wall time (steadier on a shared machine; with --threads 1)",
    )
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        spec, length, new_tokens, threads, clock = args.child
        print(json.dumps(measure(spec, int(length), int(new_tokens), int(threads), clock)))
        return
    if args.new_tokens < 2:
        parser.error("--new-tokens must be >= 2 (decode time is measured between tokens)")
    lengths = [length_arg(x) for x in args.lens.split(",")]
    specs = args.methods.split(",")
    if "rope" not in specs:
        specs.insert(0, "rope")
    rows: dict[tuple[str, int], dict] = {}
    for length in lengths:
        for spec in specs:
            child = [sys.executable, __file__, "--child", spec, str(length), str(args.new_tokens)]
            child += [str(args.threads), args.clock]
            out = subprocess.run(child, capture_output=True, text=True)
            if out.returncode != 0:
                print(out.stderr[-2000:], file=sys.stderr)
                raise SystemExit(f"{spec} @ {length} failed")
            row = rows[(spec, length)] = json.loads(out.stdout.strip().splitlines()[-1])
            print(
                f"  {spec:>30} @ {length:>6}: prefill {row['prefill_s']:.2f} s, "
                f"decode {row['decode_ms']:.1f} ms/token, cache {row['cache_bytes'] / 2**20:.1f} MiB",
                file=sys.stderr,
                flush=True,
            )
    for length in lengths:
        ref = rows[("rope", length)]
        print(
            f"\nSmolLM2-135M, fp32 CPU, prompt {length} tokens, window {length // 2} (2x extrapolation), "
            f"greedy, {args.new_tokens} new tokens, threads {args.threads or 'default'}, {args.clock} clock"
        )
        print("| method | prefill + 1 token s (x rope) | decode ms/token (x rope) | KV cache MiB (x plain) |")
        print("|---|---|---|---|")
        for spec in specs:
            row = rows[(spec, length)]
            print(
                f"| {spec} | {row['prefill_s']:.2f} ({row['prefill_s'] / ref['prefill_s']:.2f}x) "
                f"| {row['decode_ms']:.1f} ({row['decode_ms'] / ref['decode_ms']:.2f}x) "
                f"| {row['cache_bytes'] / 2**20:.1f} ({row['cache_bytes'] / row['plain_bytes']:.2f}x) |"
            )


if __name__ == "__main__":
    main()
