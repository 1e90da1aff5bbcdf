"""``lampe-eval import``: predictions made by another harness into a results store, scored by lampe-eval's
scorers (runs :mod:`lampe_eval.tools.imports`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..errors import LampeEvalError
from ..lengths import parse_lengths
from ..options import split_list
from .common import fail, parse_key_values, print_line
from .params import import_option, out_option


def import_command(
    files: list[Path] = typer.Argument(..., help="Prediction files (JSON lines) of one task at one length."),
    bench: str = typer.Option(..., "--bench", help="Benchmark whose scorer scores them: {benchmarks}."),
    task: str = typer.Option(..., "--task", help="Its task."),
    length: str = typer.Option(..., "--len", "-l", help="Context length the predictions were made at (32k)."),
    model: str = typer.Option(..., "--model", "-m", help="Model that made them (its name in reports)."),
    method: str = typer.Option(
        ..., "--method", help="Method that made them (rope, lampe, ... or a name of yours)."
    ),
    fields: list[str] = typer.Option(
        None,
        "--field",
        help="NAME=KEY: where the file keeps prediction, references, id, score (its own), prompt, "
        "prompt_tokens, or a meta key the scorer reads (e.g. all_classes); amends a recognised format.",
    ),
    skip_bad_lines: bool = typer.Option(
        False, "--skip-bad-lines", help="Skip (and count) lines that are not JSON or lack a field."
    ),
    out: Annotated[Path, out_option("Results directory to add the records to.")] = Path("results/default"),
    imports: Annotated[
        list[str] | None, import_option("Module(s) to import first, e.g. one registering your own benchmark.")
    ] = None,
) -> None:
    """Read predictions made elsewhere (RULER's, LongBench's, LongBench v2's or InfiniteBench's official
    prediction files, or any JSON lines with --field) into a results store as ordinary records, scored by
    lampe-eval's own scorers; `lampe-eval report` then treats them like its own runs.

    Example: lampe-eval import pred/vt.jsonl --bench ruler --task vt --len 4k -m M --method rope
    """
    from ..runner.checks import import_plugins
    from ..tools.imports import ImportRequest, describe_job, import_predictions

    try:
        import_plugins(split_list(imports))
        lengths = parse_lengths(length)
        if len(lengths) != 1:
            raise LampeEvalError(f"--len takes one length (the files are of one length), got {length!r}")
        request = ImportRequest(
            files=tuple(files),
            benchmark=bench,
            task=task,
            length=lengths[0],
            model=model,
            method=method,
            out=out,
            fields=parse_key_values(fields, "--field"),
            skip_bad_lines=skip_bad_lines,
        )
        outcome = import_predictions(request, echo=print_line)
    except LampeEvalError as err:
        fail(str(err))
    already = f"; {outcome.already} already there" if outcome.already else ""
    print_line(
        f"imported {outcome.written} record(s) of {describe_job(request)} into {outcome.store}{already}"
    )
    if outcome.bad_lines:
        print_line(f"skipped {outcome.bad_lines} bad line(s)")
    if outcome.score_key:
        print_line(
            f"the file's own score ({outcome.score_key}) differs from lampe-eval's on {outcome.differing} of "
            f"{outcome.compared} sample(s)"
        )
    if outcome.task_score:
        metric, value = next(iter(outcome.task_score.items()))
        print_line(f"{bench}/{task}: {metric} {value:.2f} over {outcome.samples} sample(s)")
