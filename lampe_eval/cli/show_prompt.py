"""``lampe-eval show-prompt``: exactly what the model receives for one sample (no weights loaded)."""

from __future__ import annotations

import itertools
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from ..errors import LampeEvalError
from ..lengths import format_length, parse_lengths
from ..options import split_list
from .common import err_console, fail, parse_key_values
from .params import import_option, length_option, model_option, opt_option

if TYPE_CHECKING:
    from ..benchmarks.base import Benchmark, Sample
    from ..models import LoadedModel


def show_prompt_command(
    bench: Annotated[str, typer.Option("--bench", "-b", help="Benchmark: {benchmarks}.")],
    task: Annotated[str, typer.Option("--task", "-t", help="Task of the benchmark.")],
    length: Annotated[str, length_option("Context length of the job: 4k, 16384.")],
    model: Annotated[str, model_option("Model whose tokenizer and template apply.")] = "smollm2-135m",
    index: int = typer.Option(
        0, "--index", "-i", help="Which sample (its position in the job; records' index)."
    ),
    limit: int | None = typer.Option(
        None, "--limit", "-n", help="The run's --limit, if it had one (default: index + 1)."
    ),
    seed: int = typer.Option(0, help="The run's --seed (generated data)."),
    opt: Annotated[list[str] | None, opt_option("The run's benchmark options key=value.")] = None,
    data_dir: str | None = typer.Option(None, help="The run's --data-dir."),
    imports: Annotated[list[str] | None, import_option("Module(s) registering your own benchmark.")] = None,
    raw: bool = typer.Option(False, "--raw", help="Print the prompt alone, without the description."),
) -> None:
    """Print exactly what the model receives for one sample (after the chat template and truncation).

    The sample is built by the benchmark's own code with the model's tokenizer (no weights are loaded).
    The prompt goes to stdout as it is; its description (token count, where it was cut, its hash, which
    records store as prompt_hash) goes to stderr.

    Example: lampe-eval show-prompt --bench longbench --task qasper --len 4k --opt fixture=true
    """
    from ..benchmarks.base import BENCHMARKS, SampleContext, options_by_benchmark
    from ..models import load_tokenizer
    from ..runner.checks import import_plugins

    try:
        if index < 0 or (limit is not None and limit <= index):
            raise LampeEvalError(f"--index must be >= 0 and below --limit, got {index} (limit {limit})")
        import_plugins(split_list(imports))
        benchmark = BENCHMARKS.get(bench)()
        benchmark.check_task(task)
        n = parse_lengths([length])[0]
        options = options_by_benchmark([bench], parse_key_values(opt, "--opt"))[bench]
        benchmark.check_job(task, n, options, data_dir)
        lm = load_tokenizer(model)
        ctx = SampleContext(lm, n, limit or index + 1, seed, data_dir, options)
        sample = next(itertools.islice(benchmark.samples(task, ctx), index, None), None)
        if sample is None:
            raise LampeEvalError(f"{bench}/{task} at {format_length(n)} has no sample {index}")
    except LampeEvalError as err:
        fail(str(err))
    if not raw:
        _describe(sample, benchmark, lm, f"{bench}/{task} at {format_length(n)}", index)
    sys.stdout.write(sample.prompt)
    sys.stdout.flush()


def _describe(sample: Sample, benchmark: Benchmark, lm: LoadedModel, job: str, index: int) -> None:
    """The sample's description on stderr: its tokens, where it was cut, its hash and fingerprint."""
    from ..benchmarks.sample_cache import tokenizer_fingerprint
    from ..prompts import prompt_token_count

    if sample.input_ids is not None:
        tokens, fed = len(sample.input_ids), "token ids (shown decoded)"
    else:
        tokens, fed = prompt_token_count(lm.tokenizer, sample.prompt), "text"
        added = tokens - len(lm.tokenizer(sample.prompt, add_special_tokens=False)["input_ids"])
        if added:  # e.g. a BOS token the tokenizer puts in front: part of what the model receives
            fed += f", plus {added} special token(s) the tokenizer adds"
    fingerprint = sample.fingerprint(tokenizer_fingerprint(lm.tokenizer))
    budget = f"up to {sample.max_new_tokens} new tokens" if sample.max_new_tokens else "no generation"
    for line in (
        f"{job} | {lm.name} | sample {index} (id {sample.sample_id})",
        f"tokens: {tokens} ({fed}; {len(sample.prompt)} characters; {budget})",
        f"cut: {benchmark.describe_cut(sample)}",
        f"prompt hash: {sample.prompt_hash()} | sample fingerprint: {fingerprint}",
        "--- the prompt follows on stdout, exactly ---",
    ):
        err_console.print(line, highlight=False, markup=False, soft_wrap=True)
