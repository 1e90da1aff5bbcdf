"""Options shared by several commands, defined once, and help texts that list registry entries.

A help text may name a list in braces (``{methods}``, ``{benchmarks}``, ``{models}``, ``{backends}``,
``{report_formats}``, ``{default_model}``): :class:`RegistryHelpCommand` fills it in from the registry when
the help is shown, not at start-up, because the registries import torch (seconds; ``lampe-eval --help``
and every command's parsing stay without it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

import typer
from typer.core import TyperCommand
from typer.models import OptionInfo

if TYPE_CHECKING:
    from typer._click import Context  # typer's own click: the context its commands take


def _methods() -> str:
    from ..methods import METHODS

    return ", ".join(METHODS.names())


def _benchmarks() -> str:
    from ..benchmarks import BENCHMARKS

    return ", ".join(BENCHMARKS.names())


def _models() -> str:
    from ..models import PRESETS

    return ", ".join(PRESETS)


def _default_model() -> str:
    from ..models import DEFAULT_MODEL

    return DEFAULT_MODEL


def _backends() -> str:
    from ..backends import BACKEND_NAMES

    return " or ".join(BACKEND_NAMES)


def _report_formats() -> str:
    """The formats to choose, each with the file it writes, and those written always."""
    from ..report import REPORT_FORMATS

    def named(formats: list[str]) -> str:
        return ", ".join(f"{name} ({REPORT_FORMATS.get(name).files[0]})" for name in formats)

    chosen = [name for name in REPORT_FORMATS.names() if not REPORT_FORMATS.get(name).always]
    always = [name for name in REPORT_FORMATS.names() if REPORT_FORMATS.get(name).always]
    return f"{named(chosen)}; comma-separate. {named(always)} comes always"


HELP_LISTS: dict[str, Callable[[], str]] = {
    "methods": _methods,
    "benchmarks": _benchmarks,
    "models": _models,
    "default_model": _default_model,
    "backends": _backends,
    "report_formats": _report_formats,
}


class _Lists(dict[str, str]):
    """The lists a help text names, each computed on first use."""

    def __missing__(self, key: str) -> str:
        self[key] = HELP_LISTS[key]()
        return self[key]


class RegistryHelpCommand(TyperCommand):
    """A command whose options' help may name registry lists (``{methods}``), filled in when shown."""

    def get_help(self, ctx: Context) -> str:
        lists = _Lists()
        for param in self.params:
            text = getattr(param, "help", None)
            if text and "{" in text:
                param.help = text.format_map(lists)  # type: ignore[attr-defined]
        return super().get_help(ctx)


# ------------------------------------------------------------------ options whose help differs per command
def model_option(help: str = "Preset ({models}), HF id, local dir or .gguf.") -> OptionInfo:
    return typer.Option("--model", "-m", help=help)


def method_option(help: str) -> OptionInfo:
    return typer.Option("--method", help=help)


def length_option(help: str) -> OptionInfo:
    return typer.Option("--len", "-l", help=help)


def param_option(help: str) -> OptionInfo:
    return typer.Option("--param", "-p", help=help)


def opt_option(help: str) -> OptionInfo:
    return typer.Option("--opt", help=help)


def import_option(help: str) -> OptionInfo:
    return typer.Option("--import", help=help)


def out_option(help: str) -> OptionInfo:
    return typer.Option("--out", "-o", help=help)


# ------------------------------------------------------------------ options declared the same everywhere
ModelName = Annotated[str, model_option()]
Device = Annotated[str | None, typer.Option(help="cpu, cuda, cuda:1 (default: cuda if available).")]
Dtype = Annotated[str | None, typer.Option(help="auto (bf16 on CUDA, fp32 on CPU), fp32, bf16, fp16.")]
Progress = Annotated[bool, typer.Option("--progress/--no-progress", help="Live progress bars.")]
BackendName = Annotated[str, typer.Option("--backend", help="Inference backend: {backends}.")]


# ------------------------------------------------------------ the tools' own options (fit, dpe-select)
# With --opt, --out, --device, --dtype and --backend they fill the fields every tool request shares
# (lampe_eval.tools.common.ToolRequest; cli.common.tool_request_fields).
def method_config_option(method: str) -> OptionInfo:
    """``--config``: the file a tool writes ``method``'s settings for the model to."""
    return typer.Option(
        help=f"Config to write (default: $LAMPE_EVAL_HOME/method_configs/{method}-MODEL.yaml)."
    )


def write_option(help: str) -> OptionInfo:
    return typer.Option("--write/--no-write", help=help)
