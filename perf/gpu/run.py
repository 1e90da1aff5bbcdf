"""One-command check of the GPU path (``make gpu-check``): correctness first, then speed and memory.

The command line of ``perf/gpu_check.py`` (its docstring says what each part checks): parts in order, each
through :func:`perf.gpu.report.part`, their tables, the failures on stderr, the exit status."""

from __future__ import annotations

import argparse
import functools
import sys

import torch

from lampe_eval.attention import kernels
from lampe_eval.lengths import parse_length
from perf.gpu.common import ONLY, ORACLE_ROWS, Row
from perf.gpu.correctness import FAMILY_METHODS, check_attention, check_families, check_model, check_sizes
from perf.gpu.model import MODEL_METHODS, ModelShapeArgs, decode_breakdown, measure_model, profile_decode
from perf.gpu.paged import PAGED_METHODS, measure_paged
from perf.gpu.report import CRASHES, each_length, failures, part, print_table
from perf.gpu.speed import kernel_survey, measure_speed, profile_prefill, window_support


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="32k,128k", help="(c) lengths (CUDA only)")
    parser.add_argument(
        "--check-length", type=int, default=None, help="(a) length (4096 on CUDA, 512 on CPU)"
    )
    parser.add_argument(
        "--model-length", type=int, default=None, help="(b) length (2048 on CUDA, 256 on CPU)"
    )
    parser.add_argument("--oracle-rows", type=int, default=ORACLE_ROWS, help="(a) oracle rows per probe")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profile", default="", help="(CUDA) methods whose longest prefill to profile")
    parser.add_argument("--methods", default="", help="only these methods (default: every method)")
    parser.add_argument("--profile-decode", default="", help="(CUDA) methods whose model decode to profile")
    parser.add_argument("--model-layers", type=int, default=4, help="(e) the random model's layers")
    parser.add_argument("--model-methods", default=MODEL_METHODS, help="(e) and (i) methods, rope first")
    parser.add_argument("--model-repeats", type=int, default=2, help="(e) generations per method (best)")
    parser.add_argument("--skip", default="", help="parts to skip, e.g. c,e,f")
    args = parser.parse_args(argv)
    ONLY[:] = [name for name in args.methods.split(",") if name]
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    sizes = check_sizes(cuda)
    dtype = sizes.dtype
    where = torch.cuda.get_device_name() if cuda else "CPU (no CUDA device: parts (c)-(g) and (i) skipped)"
    print(f"device: {where}")
    paged_label = kernels.describe(device, dtype, kernels.Features(paged=True, head_dim=128))  # 8B head dim
    setting = f"{kernels.ENV}={kernels.override()}"
    print(f"kernels: {kernels.describe(device, dtype)}; vLLM's paged cache: {paged_label} ({setting})")
    if cuda:
        print(f"FlashAttention window_size on this build: {window_support(device)}")
    skip = set(args.skip.split(","))
    run = {name: name not in skip and (cuda or name in "abh") for name in "abcdefghi"}
    lengths = [parse_length(x) for x in args.lengths.split(",")]
    rows: dict[str, Row] = {}
    length = args.check_length or sizes.attention_length
    tol = sizes.tol
    if run["a"]:
        part("a", lambda: check_attention(rows, length, device, dtype, tol, args.oracle_rows))
    if run["b"]:
        part("b", lambda: check_model(rows, args.model_length or sizes.model_length, device, dtype, tol))
    if run["f"]:
        part("f", each_length(lambda length: kernel_survey(length, args.repeats), lengths))
    if run["c"]:
        part("c", each_length(lambda length: measure_speed(rows, length, args.repeats), lengths))
        for name in filter(None, args.profile.split(",")):
            part("profile", functools.partial(profile_prefill, name, max(lengths)))
    if cuda and args.profile_decode:
        decode_shape = ModelShapeArgs(layers=args.model_layers)
        names = args.profile_decode.split(",")
        part("profile decode", lambda: profile_decode(names, max(lengths), decode_shape))
    print_table(rows)
    tables = [rows]
    model_methods = args.model_methods.split(",")
    shape = ModelShapeArgs(layers=args.model_layers)
    if run["e"]:
        model_rows: dict[str, Row] = {}
        print(f"(e) a random model, {shape.layers} Llama-3-8B-shaped layers, vocabulary {shape.vocab}, bf16:")

        def whole_model() -> None:
            for length in lengths:
                for warning in measure_model(
                    model_rows, length, model_methods, shape=shape, repeats=args.model_repeats
                ):
                    print("WARNING: memory estimate low:", warning)
                torch.cuda.empty_cache()  # the last length's model and cache

        part("e", whole_model)
        print_table(model_rows)
    if run["g"]:
        paged_rows: dict[str, Row] = {}
        print("(g) the vLLM backend's paged attention (8B-shaped layer, blocks of 16, 4 rows decoding):")
        methods = args.methods or PAGED_METHODS
        paged = each_length(lambda n: measure_paged(paged_rows, n, args.repeats, methods=methods), lengths)
        part("g", paged)
        print_table(paged_rows)
        tables.append(paged_rows)
    if run["h"]:
        family_rows: dict[str, Row] = {}
        print(f"(h) model families, patched on {device} in bf16 against fp32 on the CPU:")
        family_methods = args.methods or FAMILY_METHODS
        part("h", lambda: check_families(family_rows, device, torch.bfloat16, methods=family_methods))
        print_table(family_rows)
        tables.append(family_rows)
    if run["i"]:
        decode_rows: dict[str, Row] = {}
        print(f"(i) where a decode step's time goes ({shape.layers} Llama-3-8B-shaped layers, bf16):")
        part(
            "i", each_length(lambda n: decode_breakdown(decode_rows, n, model_methods, shape=shape), lengths)
        )
        print_table(decode_rows)
    failed = failures(*tables)
    for failure in failed + CRASHES:
        print("FAILED", failure, file=sys.stderr)
    if not cuda:
        print("no CUDA device: (a), (b) and (h) ran on CPU; (c)-(g) and (i) need a GPU")
    return 1 if failed or CRASHES else 0
