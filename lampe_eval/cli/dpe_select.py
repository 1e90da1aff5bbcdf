"""``lampe-eval dpe-select``: DPE's own search for its scale factors and key dimensions
(runs :mod:`lampe_eval.tools.dpe_select`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..errors import LampeEvalError
from ..lengths import parse_lengths
from ..options import split_list
from .common import console, fail, tool_request_fields
from .params import (
    BackendName,
    Device,
    Dtype,
    ModelName,
    length_option,
    method_config_option,
    opt_option,
    out_option,
    write_option,
)


def dpe_select_command(
    model: ModelName = "smollm2-135m",
    length: Annotated[
        str | None, length_option("Test length of the detection (default: 2 x the pretraining window).")
    ] = None,
    groups: int = typer.Option(8, "--groups", help="Equal groups of the head_dim / 2 frequencies."),
    factors: str | None = typer.Option(
        None,
        "--factors",
        help="Factors tried per group, e.g. 1,2,4,8 (default: len // l, l halving to 1K).",
    ),
    base: int | None = typer.Option(
        None, "--base-factor", help="Factor of the other groups (default: (len // window) * 2)."
    ),
    window: int | None = typer.Option(None, "--window", "-w", help="DPE's local window w (default: dpe's)."),
    variant: str = typer.Option("official", "--variant", help="dpe variant: official or paper."),
    samples: int = typer.Option(4, "--samples", "-n", help="NIAH samples per setting."),
    score: str = typer.Option("nll", "--score", help="nll (answer NLL, one pass) or generate (match)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the NIAH samples."),
    dim_lengths: str | None = typer.Option(
        None, "--dim-len", help="Lengths of the key-dimension pass (default: window halving to 2k)."
    ),
    dim_samples: int = typer.Option(2, "--dim-samples", help="Text samples per key-dimension length."),
    topk: int | None = typer.Option(None, "--topk", help="Key dimensions per head (default: 3/4 of them)."),
    dimensions: bool = typer.Option(True, "--dims/--no-dims", help="Run the key-dimension pass."),
    opt: Annotated[
        list[str] | None, opt_option("RULER option key=value (essay=..., essay_file=...).")
    ] = None,
    out: Annotated[Path, out_option("Probes (resumable) and key-dimension files.")] = Path(
        "results/dpe-select"
    ),
    config: Annotated[Path | None, method_config_option("dpe")] = None,
    write: Annotated[bool, write_option("Write the config.")] = True,
    device: Device = None,
    dtype: Dtype = None,
    backend: BackendName = "hf",
) -> None:
    """DPE's own search (LuLuLuyi/DPE): a scale factor per dimension group from NIAH detection, and the
    key dimensions from the q/k 2-norms (docs/methods.md 7.3).

    Example: lampe-eval dpe-select --model smollm2-135m --len 10k --groups 4 --samples 1
    """
    from ..tools.dpe_request import SelectRequest
    from ..tools.dpe_select import run_select

    try:
        request = SelectRequest(
            model=model,
            length=parse_lengths(length)[0] if length else None,
            groups=groups,
            factors=_int_list(factors, "--factors") if factors else None,
            base=base,
            local_window=window,
            variant=variant,
            samples=samples,
            score=score,
            seed=seed,
            dim_lengths=parse_lengths(dim_lengths) if dim_lengths else None,
            dim_samples=dim_samples,
            topk=topk,
            dimensions=dimensions,
            **tool_request_fields(
                "dpe-select",
                opt=opt,
                out=out,
                config=config,
                write=write,
                device=device,
                dtype=dtype,
                backend=backend,
            ),
        )
        request.check(None)
        run_select(request, echo=lambda line: console.print(line, highlight=False))
    except LampeEvalError as err:
        fail(str(err))


def _int_list(text: str, what: str) -> list[int]:
    try:
        return [int(v) for v in split_list([text])]
    except ValueError as err:
        raise LampeEvalError(f"{what} must be integers separated by commas, got {text!r}") from err
