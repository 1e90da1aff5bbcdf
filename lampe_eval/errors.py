"""User-facing errors: the CLI prints their message on one line and exits non-zero."""


class LampeEvalError(Exception):
    """Base class for errors caused by bad input (not bugs)."""


class UnknownNameError(LampeEvalError, KeyError):
    """A method, benchmark, task or model preset name that is not registered."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class UnsupportedModelError(LampeEvalError):
    """The model's architecture cannot be patched by this method."""


class MissingDataError(LampeEvalError):
    """A dataset or file that a benchmark needs is not available."""


def unknown(kind: str, name: str, known: list[str] | tuple[str, ...]) -> UnknownNameError:
    """An UnknownNameError that lists what is available."""
    return UnknownNameError(f"unknown {kind} {name!r}; choose one of: {', '.join(sorted(known))}")
