"""The ``lampe-eval`` command line (typer + rich): ``list``, ``run``, ``report``, ``fit``, ``dpe-select``,
``serve``, ``data check`` / ``data fetch`` (a grid's data ahead of a run), ``import`` (predictions made
elsewhere into a results store) and ``rescore`` (a store's scores recomputed), and the inspection commands
``show-prompt`` (what the model receives) and ``show-positions`` (position maps).

One module per command; :mod:`.common` holds the consoles and the one-line errors, :mod:`.params` the
options several commands share and the help lists generated from the registries. Every command turns its
options into the objects the library takes (``run`` and ``fit`` an
:class:`~lampe_eval.runner.experiment.Experiment`) and prints; errors a user can cause are one line on
stderr (``error: ...``, never wrapped) with exit code 2, before any model loads.
"""

from __future__ import annotations

import sys

import typer

from ..errors import LampeEvalError
from .common import console, err_console, fail, parse_key_values, say_error
from .data import data_app
from .dpe_select import dpe_select_command
from .fit import fit_command
from .import_predictions import import_command
from .listing import list_command
from .params import RegistryHelpCommand
from .report import report_command
from .rescore import rescore_command
from .run import run_command
from .serve import serve_command
from .show_positions import show_positions_command
from .show_prompt import show_prompt_command

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Evaluate training-free long-context extension methods (LaMPE, SelfExtend, DCA, ...) "
    "on RoPE language models.",
)
for _name, _command in (
    ("list", list_command),
    ("run", run_command),
    ("report", report_command),
    ("import", import_command),
    ("rescore", rescore_command),
    ("show-prompt", show_prompt_command),
    ("show-positions", show_positions_command),
    ("fit", fit_command),
    ("dpe-select", dpe_select_command),
    ("serve", serve_command),
):
    app.command(_name, cls=RegistryHelpCommand)(_command)
app.add_typer(data_app, name="data")


def main(argv: list[str] | None = None) -> None:
    """The console script: every error a user can cause is one line (typer's usage errors too)."""
    try:
        code = app(args=argv, prog_name="lampe-eval", standalone_mode=False)
    except LampeEvalError as err:
        say_error("error:", str(err))
        sys.exit(2)
    except Exception as err:
        if not (hasattr(err, "format_message") and hasattr(err, "exit_code")):
            raise  # a bug: show the traceback
        if type(err).__name__ == "NoArgsIsHelpError":  # `lampe-eval` alone: the help
            typer.echo(err.format_message())
            sys.exit(0)
        say_error("error:", err.format_message())  # a usage error (unknown option, bad value)
        sys.exit(err.exit_code)
    sys.exit(code or 0)


__all__ = ["app", "console", "err_console", "fail", "main", "parse_key_values", "say_error"]
