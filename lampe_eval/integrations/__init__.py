"""Bridges to other evaluation tools (optional extras; each module imports its tool)."""

from __future__ import annotations

import sys


def lm_eval_cli() -> None:
    """``lampe-lm-eval``: lm-evaluation-harness's own command line with ``--model lampe`` registered.

    lm-eval 0.4.13 resolves ``--model`` only against models imported by lm-eval itself, so this
    imports :mod:`lampe_eval.integrations.lm_eval` (whose ``@register_model("lampe")`` runs) and then
    hands every argument to lm-eval's ``cli_evaluate`` unchanged. Errors a user caused (a bad model
    argument, a missing extra) print one line and exit 2.
    """
    from ..errors import LampeEvalError

    try:
        from .lm_eval import run_cli  # importing it registers the model type

        run_cli()
    except LampeEvalError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
