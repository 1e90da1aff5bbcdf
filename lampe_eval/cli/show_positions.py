"""``lampe-eval show-positions``: the relative-position maps of methods, drawn to a PNG (no model loaded)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..errors import LampeEvalError
from ..lengths import format_length, parse_lengths
from ..options import split_list
from .common import console, fail, parse_key_values, print_line
from .params import length_option, method_option, model_option, out_option, param_option

if TYPE_CHECKING:
    from ..methods import Method
    from ..report.positions import PositionMap


def show_positions_command(
    method: Annotated[list[str], method_option("Method(s), comma-separated, drawn side by side: {methods}.")],
    length: Annotated[str, length_option("Input length L: 16k, 32768.")],
    window: str | None = typer.Option(
        None,
        "--window",
        help="Pretraining window W (default: the model's; another W ignores method_configs).",
    ),
    model: Annotated[
        str, model_option("Model whose window and method_configs apply (none is loaded).")
    ] = "smollm2-135m",
    bench: str | None = typer.Option(
        None, "--bench", help="Use method_configs' settings for this benchmark."
    ),
    param: Annotated[list[str] | None, param_option("Method parameter key=value (one method).")] = None,
    out: Annotated[Path, out_option("PNG to write.")] = Path("positions.png"),
    resolution: int = typer.Option(
        384, "--resolution", help="Rows and columns of the heat map (sampled beyond, 16-4096)."
    ),
) -> None:
    """Draw the relative-position matrix and the last query's positions of one or several methods.

    The positions come from the plan the attention engine runs for an L-token prefill (the method's
    segments); beyond --resolution tokens the heat map samples rows and columns, the last row is exact.

    Example: lampe-eval show-positions --method rope,selfextend,lampe --len 32k --window 8k
    """
    from ..models import known_window
    from ..report.positions import draw, position_map

    try:
        names = split_list(method)
        overrides = parse_key_values(param, "--param")
        if overrides and len(names) > 1:
            raise LampeEvalError("--param applies to one method: draw the methods separately")
        if not 16 <= resolution <= 4096:
            raise LampeEvalError(f"--resolution must be between 16 and 4096, got {resolution}")
        n = parse_lengths([length])[0]
        own = known_window(model)
        w = parse_lengths([window])[0] if window else own
        if w is None:
            raise LampeEvalError(f"the window of {model!r} is unknown without loading it: give --window")
        configured = w == own  # method_configs hold settings for the model's own window only
        methods = _methods(names, w, n, model, bench, overrides, configured)
        shown = ", ".join(f"{k}={v}" for k, v in overrides.items())
        maps = [position_map(m, w, n, f"{m.name}({shown})" if shown else m.name, resolution) for m in methods]
        draw(maps, out)
    except LampeEvalError as err:
        fail(str(err))
    _say_maps(maps, w)
    if not configured:
        print_line(
            f"(W = {format_length(w)} is not {model}'s window: the methods' defaults for W, not its "
            "method_configs)"
        )
    console.print(f"wrote {out}", highlight=False)


def _methods(
    names: list[str],
    window: int,
    length: int,
    model: str,
    bench: str | None,
    overrides: dict[str, str],
    configured: bool,
) -> list[Method]:
    """The named methods for this window and length (method_configs' settings when ``configured``)."""
    from ..methods import METHODS, resolve_method

    methods = []
    for name in names:
        METHODS.get(name)  # an unknown name: one line with the closest one
        resolved = resolve_method(
            name, window, length, model=model, benchmark=bench, params=overrides, configs=configured
        )
        methods.append(resolved.method)
    return methods


def _say_maps(maps: list[PositionMap], window: int) -> None:
    """Per map, the largest relative position the last query sees, and whether it is beyond the window."""
    for pm in maps:
        beyond = "  (>= W: the model extrapolates)" if pm.largest >= window else ""
        if pm.kind == "frequency":  # YaRN, NTK, ...: the positions stay, the rotation frequencies change
            beyond = "  (positions kept: the method scales the frequencies instead)"
        print_line(f"{pm.label}: the last query sees relative positions up to {pm.largest:.0f}{beyond}")
