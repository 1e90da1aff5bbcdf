"""A grid from the command line: an experiment file (``--experiment``) or the grid options (``--model``,
``--method``, ``--bench``, ``--task``, ``--len``, ``--param``), as ``run`` and the ``data`` commands take
them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import LampeEvalError
from ..lengths import parse_lengths
from ..options import split_list
from .common import parse_key_values

if TYPE_CHECKING:
    from ..runner.experiment import ExperimentSpec


def spec_of(
    experiment: str | None,
    model: list[str] | None,
    method: list[str] | None,
    bench: list[str] | None,
    task: list[str] | None,
    length: list[str] | None,
    param: list[str] | None,
) -> ExperimentSpec:
    """The experiment file's spec, or the grid options' (not both)."""
    from ..runner.experiment import ExperimentSpec

    if experiment is None:
        return grid_spec(model, method, bench, task, length, param)
    grid = {"--model": model, "--method": method, "--bench": bench, "--task": task, "--len": length}
    given = [name for name, value in {**grid, "--param": param}.items() if value]
    if given:
        raise LampeEvalError(f"--experiment defines the grid: drop {', '.join(given)}")
    return ExperimentSpec.from_file(experiment)


def grid_spec(
    model: list[str] | None,
    method: list[str] | None,
    bench: list[str] | None,
    task: list[str] | None,
    length: list[str] | None,
    param: list[str] | None,
) -> ExperimentSpec:
    """The ``run`` grid options as an experiment spec (checked by its ``build``)."""
    from ..runner.experiment import DEFAULT_MODEL, ExperimentSpec, GridSpec

    lengths = parse_lengths(length or [])
    if not bench:
        raise LampeEvalError("--bench is required (or --experiment FILE)")
    method_names = split_list(method) or ["rope"]
    overrides = parse_key_values(param, "--param")
    if overrides and len(method_names) > 1:
        raise LampeEvalError("--param applies to one method: run the methods separately")
    tasks = split_list(task) or None
    grid = GridSpec(
        models=split_list(model) or [DEFAULT_MODEL],
        methods=[(m, overrides) for m in method_names],
        benchmarks=[(b, tasks) for b in split_list(bench)],
        lengths=lengths,
    )
    return ExperimentSpec(name="default", grids=[grid])
