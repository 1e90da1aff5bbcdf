"""Time each method's attention against plain causal SDPA, and measure its peak memory.

One layer's attention (prefill), head_dim 64, 9 query / 3 KV heads (SmolLM2's shape), fp32 on CPU
(bf16 on CUDA). Each method is configured for 2x extrapolation (pretraining window = L / 2), so
every segment of every method is non-empty. Each (method, length) runs in a fresh subprocess: its
peak resident memory above the inputs is the method's working memory.

    python perf/attention_speed.py [--lengths 4096,8192,16384] [--repeats 3] [--methods ...]

On a shared machine, ``--threads 1 --clock cpu`` times the process's CPU time on one thread instead, and
``--rounds N`` runs the whole method list N times, interleaved: each round's ratios are to that round's SDPA
(a paired measurement, so a machine that slows down for a while slows both), the table gives the medians
and the range of the ratios. ``--kernel-time`` (CPU) adds the attention kernel calls' own CPU time in one
warm prefill (``torch.profiler``), over SDPA's one call: the share of a method's time that is the kernel's
work on its segments rather than the rotations, copies and merges around them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

HQ, HKV, DIM = 9, 3, 64


def measure(
    method: str, length: int, repeats: int, threads: int = 0, clock: str = "wall", kernel_time: bool = False
) -> dict:
    """Runs in the child process."""
    import resource
    import time

    import torch

    if threads > 0:
        torch.set_num_threads(threads)
    now = time.process_time if clock == "cpu" else time.perf_counter

    from lampe_eval.attention import segmented_attention
    from lampe_eval.attention.rope import apply_rope
    from lampe_eval.methods import RopeBase, create_method

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    torch.manual_seed(0)
    q = torch.randn(1, HQ, length, DIM, device=device, dtype=dtype)
    k = torch.randn(1, HKV, length, DIM, device=device, dtype=dtype)
    v = torch.randn(1, HKV, length, DIM, device=device, dtype=dtype)
    inv_freq = 1.0 / (1e5 ** (torch.arange(0, DIM, 2, device=device).float() / DIM))
    window = length // 2

    if method == "sdpa":
        pos = torch.arange(length, device=device)

        def run():
            return torch.nn.functional.scaled_dot_product_attention(
                apply_rope(q, pos, inv_freq), apply_rope(k, pos, inv_freq), v, is_causal=True, enable_gqa=True
            )
    else:
        base = RopeBase.plain(window, HQ, HKV, DIM, theta=1e5, device=device)
        extra = {"identity_within_window": False} if method == "lampe" else {}
        plan = create_method(method, window, length, **extra).plan(base, length, length)

        def run():
            return segmented_attention(q, k, v, plan, 0, DIM**-0.5)

    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, inputs included
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base_cuda = torch.cuda.memory_allocated()
    run()  # warm-up
    times = []
    for _ in range(repeats):
        start = now()
        run()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(now() - start)
    if device == "cuda":
        peak_mb = (torch.cuda.max_memory_allocated() - base_cuda) / 2**20
    else:  # growth of the peak resident set above what the process held with its inputs
        peak_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base_rss) / 1024
    from lampe_eval.attention.counts import count

    _, counts = count(run)  # attention kernels and host syncs of one warm prefill
    kernel_seconds = _kernel_seconds(run) if kernel_time else None
    return {
        "method": method,
        "length": length,
        "seconds": min(times),
        "peak_mb": peak_mb,
        "device": device,
        "kernels": counts.attention,
        "syncs": counts.syncs,
        "kernel_seconds": kernel_seconds,
    }


def _kernel_seconds(run) -> float:
    """The attention kernels' own CPU time in one call of ``run`` (``torch.profiler``, self time)."""
    from torch.profiler import ProfilerActivity, profile

    from lampe_eval.attention.counts import is_attention

    with profile(activities=[ProfilerActivity.CPU]) as profiled:
        run()
    return sum(e.self_cpu_time_total for e in profiled.key_averages() if is_attention(e.key)) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="4096,8192,16384")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--methods",
        default="sdpa,rope,lampe,selfextend,dca,rerope,string,lm_infinite,streamingllm,ntk,yarn,dynamic_ntk,"
        "linear,ntk_by_parts,llama3,longrope,dpe,ms_poe",
    )
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument(
        "--clock", choices=["wall", "cpu"], default="wall", help="cpu: the process's CPU time"
    )
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds (paired ratios, medians)")
    parser.add_argument(
        "--kernel-time", action="store_true", help="the attention kernels' own time, x SDPA's (profiler)"
    )
    parser.add_argument("--child", nargs=6, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        method, length, repeats, threads, clock, kernel_time = args.child
        found = measure(method, int(length), int(repeats), int(threads), clock, kernel_time == "1")
        print(json.dumps(found))
        return
    lengths = [int(x) for x in args.lengths.split(",")]
    methods = args.methods.split(",")
    if "sdpa" not in methods:
        methods.insert(0, "sdpa")  # the reference of every ratio
    rounds: list[dict[tuple[str, int], dict]] = []
    for number in range(args.rounds):
        rows: dict[tuple[str, int], dict] = {}
        for length in lengths:
            for method in methods:
                rows[(method, length)] = child(method, length, args)
                seconds = rows[(method, length)]["seconds"]
                print(f"  round {number + 1}: {method:>12} @ {length:>6}: {seconds:.3f} s", file=sys.stderr)
        rounds.append(rows)
    device = rounds[0][("sdpa", lengths[0])]["device"]
    print(
        f"\nAttention of one layer, {HQ} q / {HKV} kv heads, head_dim {DIM}, window = L/2, device {device}, "
        f"threads {args.threads or 'default'}, {args.clock} clock, {args.rounds} round(s)"
    )
    print(
        "seconds (ratio to causal SDPA, best of repeats; with rounds: medians, and the range of the paired "
        "ratios); peak MB = working memory above the inputs; kernels/syncs = attention kernel calls and host "
        "syncs of one prefill; kernel s = the attention kernels' own time in one prefill (x SDPA's)\n"
    )
    columns = ["time (x SDPA)", "peak MB", "kernels/syncs"]
    columns += ["kernel s (x SDPA)"] if args.kernel_time else []
    header = "| method | " + " | ".join(f"{n // 1024}K {c}" for n in lengths for c in columns)
    print(header + " |")
    print("|" + "---|" * (1 + len(columns) * len(lengths)))
    for method in methods:
        cells = []
        for length in lengths:
            seconds = [r[(method, length)]["seconds"] for r in rounds]
            ratios = [r[(method, length)]["seconds"] / r[("sdpa", length)]["seconds"] for r in rounds]
            spread = f", {min(ratios):.2f}-{max(ratios):.2f}" if len(rounds) > 1 else ""
            last = rounds[-1][(method, length)]
            cells += [
                f"{statistics.median(seconds):.3f} ({statistics.median(ratios):.2f}x{spread})",
                f"{last['peak_mb']:.0f}",
                f"{last['kernels']}/{last['syncs']}",
            ]
            if args.kernel_time:
                own, sdpa = last["kernel_seconds"], rounds[-1][("sdpa", length)]["kernel_seconds"]
                cells.append(f"{own:.3f} ({own / sdpa:.2f}x)")
        print(f"| {method} | " + " | ".join(cells) + " |")


def child(method: str, length: int, args: argparse.Namespace) -> dict:
    """One (method, length) measured in a fresh process."""
    out = subprocess.run(
        [sys.executable, __file__, "--child", method, str(length), str(args.repeats)]
        + [str(args.threads), args.clock, "1" if args.kernel_time else "0"],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
