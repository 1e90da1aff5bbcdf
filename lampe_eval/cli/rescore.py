"""``lampe-eval rescore``: every record's scores recomputed from its stored output with the current
scorers, no model loaded (runs :mod:`lampe_eval.tools.rescore`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..errors import LampeEvalError
from ..options import split_list
from .common import fail, print_line, say_error
from .params import import_option


def rescore_command(
    store: Path = typer.Argument(..., help="Results directory (its records.jsonl) or a records file."),
    imports: Annotated[
        list[str] | None, import_option("Module(s) to import first, e.g. one registering your own benchmark.")
    ] = None,
) -> None:
    """Recompute every record's scores from its stored output (prediction, log-probabilities) with the
    current scorers, without loading a model; records whose scores change are rewritten in place (the file
    replaced at once under the store's lock).

    Example: lampe-eval rescore results/imported
    """
    from ..runner.checks import import_plugins
    from ..tools.rescore import rescore_store

    try:
        import_plugins(split_list(imports))
        outcome = rescore_store(store)
    except LampeEvalError as err:
        fail(str(err))
    for benchmark, unable in sorted(outcome.unable.items()):
        say_error(
            "warning:",
            f"{benchmark}: {unable.count} record(s) cannot be rescored from their stored output and are kept "
            f"as they are: {unable.reason}",
        )
    skipped = outcome.problems.summary()
    if skipped:  # lines that are no record: not rescored, kept as they are
        say_error("warning:", f"{outcome.path}: {skipped.removeprefix('skipped ')} kept as they are")
    print_line(f"rescored {outcome.records} records: {outcome.changed} changed ({outcome.path})")
