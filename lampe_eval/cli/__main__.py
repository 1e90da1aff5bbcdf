"""``python -m lampe_eval.cli`` = the ``lampe-eval`` command (as when the CLI was one module)."""

from . import main

main()
