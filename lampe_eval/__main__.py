"""``python -m lampe_eval`` = the ``lampe-eval`` command."""

from .cli import main

main()
