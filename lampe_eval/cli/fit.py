"""``lampe-eval fit``: LaMPE's mapping-length sweep and the sigmoid fit m(l) (runs
:mod:`lampe_eval.tools.fit`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..errors import LampeEvalError
from ..lengths import parse_lengths
from .common import console, fail, parse_key_values, say_error, say_failures, tool_request_fields
from .params import (
    BackendName,
    Device,
    Dtype,
    ModelName,
    Progress,
    length_option,
    method_config_option,
    opt_option,
    out_option,
    param_option,
    write_option,
)

if TYPE_CHECKING:
    from ..runner.progress import RunProgress


def fit_command(
    model: ModelName = "smollm2-135m",
    length: Annotated[
        list[str] | None,
        length_option("Input lengths l (default: 1, 1.5, 2 and 3 x the pretraining window)."),
    ] = None,
    points: int = typer.Option(
        6, "--points", help="Mapping lengths per l, evenly from window/8 to 3/4 window."
    ),
    grid: str | None = typer.Option(
        None, "--grid", help="Explicit mapping lengths, e.g. 1k,2k,4k (overrides --points)."
    ),
    passages: int = typer.Option(1, "--passages", "-n", help="PG-19 passages per (l, m)."),
    param: Annotated[list[str] | None, param_option("Other LaMPE parameters, e.g. s1=512, mscale=1.")] = None,
    opt: Annotated[
        list[str] | None, opt_option("PG-19 option key=value (pg19_dataset=..., pg19_dir=...).")
    ] = None,
    fixed_L: float | None = typer.Option(
        None, "--L", help="Keep the sigmoid maximum L fixed (tokens); fit a, b."
    ),
    out: Annotated[Path, out_option("Results directory of the sweep (resumable) and the plot.")] = Path(
        "results/fit"
    ),
    config: Annotated[Path | None, method_config_option("lampe")] = None,
    write: Annotated[bool, write_option("Write the fitted config.")] = True,
    device: Device = None,
    dtype: Dtype = None,
    backend: BackendName = "hf",
    progress: Progress = True,
) -> None:
    """LaMPE's mapping-length sweep (PPL vs m per input length l) and the sigmoid fit m(l) (paper Sec. 3.1).

    The sweep runs as ordinary jobs (lampe with m=... on pg19) into OUT/records.jsonl: resumable, and
    visible to `lampe-eval report`.

    Example: lampe-eval fit --model smollm2-135m --len 4k,8k,12k,16k --points 6 --passages 1
    """
    from ..runner.progress import RunProgress
    from ..tools.fit import FitRequest, run_fit

    tracker: RunProgress | None = None

    def start(jobs: int) -> RunProgress:
        nonlocal tracker
        tracker = RunProgress(console, jobs, enabled=progress)
        return tracker

    try:
        if passages < 1 or points < 2:
            raise LampeEvalError("--passages must be at least 1 and --points at least 2")
        request = FitRequest(
            model=model,
            lengths=parse_lengths(length) if length else None,
            points=points,
            grid=parse_lengths(grid) if grid else None,
            passages=passages,
            params=parse_key_values(param, "--param"),
            fixed_L=fixed_L,
            **tool_request_fields(
                "fit",
                opt=opt,
                out=out,
                config=config,
                write=write,
                device=device,
                dtype=dtype,
                backend=backend,
            ),
        )
        outcome = run_fit(request, progress=start, echo=lambda line: console.print(line, highlight=False))
    except KeyboardInterrupt:
        saved = tracker.samples if tracker else 0
        say_error(
            "interrupted:", f"{saved} new sample(s) are saved in {out}; rerun the same command to resume"
        )
        raise typer.Exit(130) from None
    except LampeEvalError as err:
        fail(str(err))
    say_failures(outcome.failures)
