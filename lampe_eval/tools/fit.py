"""``lampe-eval fit``: LaMPE's mapping-length sweep and sigmoid fit (paper Section 3.1, Figure 2).

For each input length l, LaMPE runs with a fixed mapping length m (``m=...``, positions remapped even
when l is within the window) over a grid of m from window/8 to 3/4 of the window (the paper's cap,
Appendix A); PG-19-protocol perplexity (:mod:`lampe_eval.benchmarks.pg19`, same passages for every m)
picks the optimal m per l. Then m(l) = L / (1 + exp(-(a*l + b))) is fitted to the optimal points
(scipy ``curve_fit``) and ``method_configs/lampe-<model>.yaml`` gets ``params: {L, a, b, s1, s2}`` plus the
sweep data. The paper's two observations are checked as data: a V-shaped PPL(m) for short inputs
(minimum strictly inside the grid) and a monotonically decreasing one for long inputs.

The sweep runs through the runner as ordinary jobs (``lampe`` with ``m=...`` and
``identity_within_window=false`` on ``pg19``, built by ``ExperimentSpec.build`` as ``run``'s are, on any
backend): every passage is a record in ``OUT/records.jsonl`` with its provenance and engine, an interrupted
or staged sweep resumes, ``lampe-eval report`` sees the points, and the fit reads them back from the store
(``OUT/sweep-<model>-<tag>.jsonl`` lists the points it used).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..errors import LampeEvalError
from ..lengths import format_length
from ..runner.experiment import Experiment, ExperimentSpec, GridSpec, RunSettings
from ..runner.store import ResultStore
from .common import ToolRequest, job_records, load_backend, on_model, resolve_jobs, short_hash

if TYPE_CHECKING:
    from ..runner.events import Event
    from ..runner.local import RunResult


class Tracker(Protocol):
    """A progress display for the sweep (``RunProgress``): open while the run runs, fed its events."""

    def __enter__(self) -> object: ...

    def __exit__(self, *exc: object) -> None: ...

    def __call__(self, event: Event) -> None: ...


PATTERN_V = "v-shaped"
PATTERN_DECREASING = "monotonically decreasing"
PATTERN_INCREASING = "monotonically increasing"
PATTERN_OTHER = "other"


@dataclass
class SweepPoint:
    """PPL of LaMPE at a fixed (input length l, mapping length m) over the same passages."""

    length: int
    m: int
    ppl: float
    ppl_last_quarter: float
    nll: float
    tokens: int
    passages: int
    seconds: float = 0.0


@dataclass
class SigmoidFit:
    """m(l) = L / (1 + exp(-(a*l + b))), l and m in tokens."""

    L: float
    a: float
    b: float
    rmse: float
    fixed_L: bool = False

    def __call__(self, l: float | np.ndarray) -> float | np.ndarray:
        return sigmoid(np.asarray(l, dtype=float), self.L, self.a, self.b)


@dataclass
class FitReport:
    model: str
    window: int
    s1: int
    s2: int
    points: list[SweepPoint]
    optimal: dict[int, int]
    patterns: dict[int, str]
    fit: SigmoidFit
    extra: dict[str, Any] = field(default_factory=dict)


def sigmoid(l: np.ndarray, L: float, a: float, b: float) -> np.ndarray:
    return L / (1.0 + np.exp(-(a * l + b)))


def mapping_grid(window: int, length: int, points: int = 6) -> list[int]:
    """``points`` mapping lengths evenly spaced from window/8 to 3/4 of the window, capped at ``length``."""
    if points < 2:
        raise LampeEvalError("fit: the grid needs at least 2 mapping lengths")
    lo, hi = window / 8, 3 * window / 4
    grid = sorted({min(length, round(lo + (hi - lo) * i / (points - 1))) for i in range(points)})
    return grid


def classify(ms: Sequence[int], ppls: Sequence[float], rel_tol: float = 0.002) -> str:
    """The shape of PPL(m): V-shaped (minimum strictly inside, both ends higher), monotonically decreasing
    or increasing (every step within ``rel_tol`` of monotone), else other."""
    order = np.argsort(ms)
    y = np.asarray(ppls, dtype=float)[order]
    if len(y) < 3 or not np.all(np.isfinite(y)):
        return PATTERN_OTHER
    steps = np.diff(y) / y[:-1]
    if np.all(steps <= rel_tol):
        return PATTERN_DECREASING
    if np.all(steps >= -rel_tol):
        return PATTERN_INCREASING
    best = int(np.argmin(y))
    if 0 < best < len(y) - 1 and np.all(steps[:best] <= rel_tol) and np.all(steps[best:] >= -rel_tol):
        return PATTERN_V
    return PATTERN_OTHER


def optimal_mapping(points: Sequence[SweepPoint]) -> dict[int, int]:
    """The m of lowest PPL for each input length."""
    best: dict[int, SweepPoint] = {}
    for p in points:
        if p.length not in best or p.ppl < best[p.length].ppl:
            best[p.length] = p
    return {l: best[l].m for l in sorted(best)}


def patterns_of(points: Sequence[SweepPoint]) -> dict[int, str]:
    by_length: dict[int, list[SweepPoint]] = {}
    for p in points:
        by_length.setdefault(p.length, []).append(p)
    return {l: classify([p.m for p in ps], [p.ppl for p in ps]) for l, ps in sorted(by_length.items())}


def fit_sigmoid(
    lengths: Sequence[float], mappings: Sequence[float], window: int, *, L: float | None = None
) -> SigmoidFit:
    """Least-squares fit of m(l) = L / (1 + exp(-(a l + b))) to the optimal points.

    The fit runs in units of the window (l/W, m/W) for conditioning. ``L`` given: only (a, b) are
    fitted. With fewer than 4 distinct lengths L is fixed at 3/4 of the window (the paper's cap), since
    three parameters would interpolate the points exactly.
    """
    from scipy.optimize import curve_fit

    x = np.asarray(lengths, dtype=float) / window
    y = np.asarray(mappings, dtype=float) / window
    if len(x) < 2:
        raise LampeEvalError("fit: need optimal mapping lengths at two input lengths at least")
    fixed = L is not None or len(set(x.tolist())) < 4
    cap = (L if L is not None else 0.75 * window) / window
    # start: the curve through the lowest and highest point (logits clipped inside (0, cap))
    lo, hi = (
        np.clip(y[np.argmin(x)], 0.02 * cap, 0.98 * cap),
        np.clip(y[np.argmax(x)], 0.02 * cap, 0.98 * cap),
    )
    if math.isclose(x.max(), x.min()):
        a0, b0 = 1.0, float(np.log(lo / (cap - lo)))
    else:
        z_lo, z_hi = np.log(lo / (cap - lo)), np.log(hi / (cap - hi))
        a0 = float(max((z_hi - z_lo) / (x.max() - x.min()), 1e-3))
        b0 = float(z_lo - a0 * x.min())
    try:
        if fixed:
            (a, b), _ = curve_fit(
                lambda t, a, b: sigmoid(t, cap, a, b),
                x,
                y,
                p0=[a0, b0],
                bounds=([0.0, -50.0], [100.0, 50.0]),
                maxfev=20000,
            )
            Lw = cap
        else:
            (Lw, a, b), _ = curve_fit(
                sigmoid,
                x,
                y,
                p0=[max(cap, y.max() * 1.02), a0, b0],
                bounds=([y.max() * 0.999, 0.0, -50.0], [1.0, 100.0, 50.0]),
                maxfev=20000,
            )
    except (RuntimeError, ValueError) as err:
        raise LampeEvalError(f"fit: the sigmoid fit did not converge: {err}") from err
    residual = sigmoid(x, Lw, a, b) - y
    rmse = float(np.sqrt(np.mean(residual**2)) * window)
    return SigmoidFit(L=float(Lw * window), a=float(a / window), b=float(b), rmse=rmse, fixed_L=fixed)


# ---------------------------------------------------------------------------------------------- sweep
@dataclass
class FitRequest(ToolRequest):
    """What ``lampe-eval fit`` was asked (parameters and options as text or YAML data; checked here);
    ``options`` are PG-19's, the shared fields are :class:`~lampe_eval.tools.common.ToolRequest`'s."""

    model: str
    lengths: list[int] | None = None  # default: 1, 1.5, 2 and 3 x the window
    points: int = 6
    grid: list[int] | None = None  # explicit mapping lengths (overrides points)
    passages: int = 1
    params: dict[str, Any] = field(default_factory=dict)  # other LaMPE parameters
    fixed_L: float | None = None
    out: Path = field(default=Path("results/fit"), kw_only=True)

    def sweep(self) -> Sweep:
        """The sweep's identity, its parameters and PG-19 options checked and typed (one line each)."""
        from ..benchmarks.base import options_by_benchmark
        from ..methods import METHODS

        fixed = [k for k in self.params if k in SWEEP_FIXED]
        if fixed:
            raise LampeEvalError(f"fit sets {', '.join(fixed)} itself: drop --param {fixed[0]}")
        params = METHODS.get("lampe").typed_params(self.params)
        options = options_by_benchmark(["pg19"], self.options)["pg19"]
        return Sweep(self.model, params, options, self.passages)

    def mappings(self, window: int, length: int) -> list[int]:
        """The mapping lengths measured at ``length``: the explicit grid, else :func:`mapping_grid`."""
        if self.grid:
            return sorted({min(m, length) for m in self.grid})
        return mapping_grid(window, length, self.points)


@dataclass
class FitOutcome:
    report: FitReport | None
    failures: list[dict[str, Any]]
    files: list[Path] = field(default_factory=list)


SWEEP_FIXED = ("m", "identity_within_window")  # what the sweep sets itself


@dataclass(frozen=True)
class Sweep:
    """The identity of a sweep: the model, LaMPE's other (typed) parameters, the PG-19 options and the
    passages per point. Its jobs are LaMPE with a fixed m (also inside the window) on PG-19."""

    model: str
    params: dict[str, Any]
    options: dict[str, Any]
    passages: int

    def spec(self, mappings: Mapping[int, Sequence[int]], out: Path | None = None) -> ExperimentSpec:
        """The experiment of the (l, m) points: one grid per input length l, its mapping lengths m."""
        grids = [
            GridSpec(
                [self.model],
                [("lampe", {**self.params, "m": int(m), "identity_within_window": False}) for m in ms],
                [("pg19", ["pg19"])],
                [length],
                use_configs=False,
            )
            for length, ms in mappings.items()
        ]
        name = f"fit-{Path(self.model).name}"
        return ExperimentSpec(
            name, grids, out=str(out) if out else None, limit=self.passages, options=dict(self.options)
        )

    def points(self, store: ResultStore, lengths: Sequence[int], settings: RunSettings) -> list[SweepPoint]:
        """Every complete (l, m) point of this sweep in the store: the requested lengths, any m (stages
        with other grids add up). ``settings`` build the points' jobs (those of the run)."""
        from ..benchmarks.base import aggregate

        candidates: dict[int, set[int]] = {}
        for record in store.unique_records():
            m = record.resolved_params.get("m")
            mine = (record.model, record.method, record.benchmark) == (self.model, "lampe", "pg19")
            if mine and isinstance(m, int) and m > 0 and record.length in lengths:
                candidates.setdefault(record.length, set()).add(m)
        if not candidates:
            return []
        jobs = self.spec({length: sorted(ms) for length, ms in candidates.items()}).build(settings).jobs
        by_key = {job.key(): (job.length, int(job.method_params["m"])) for job in jobs}
        out = []
        for (length, m), items in sorted(job_records(store, by_key, self.passages).items()):
            agg = aggregate("pg19", "pg19", [r.scores for r in items])
            out.append(
                SweepPoint(
                    length=length,
                    m=m,
                    ppl=agg["ppl"],
                    ppl_last_quarter=agg["ppl_last_quarter"],
                    nll=agg["nll"],
                    tokens=int(agg["tokens"]),
                    passages=len(items),
                    seconds=sum(float(r.seconds or 0.0) for r in items),
                )
            )
        return out

    def file_name(self, lampe_params: dict[str, Any]) -> str:
        tag = short_hash([lampe_params, self.passages, self.options])
        return f"sweep-{Path(self.model).name}-{tag}.jsonl"


def run_fit(
    request: FitRequest,
    *,
    progress: Callable[[int], Tracker] | None = None,
    echo: Callable[[str], None] = print,
) -> FitOutcome:
    """The sweep as ordinary runner jobs (resumable, provenance-stamped records in ``out``, on the
    request's backend), then the fit from the stored records, the plot and the config. Inputs are
    checked before the model loads."""
    from ..methods import resolve_method
    from ..models import resolve_source
    from ..runner.checks import check_settings, prepare_output
    from ..runner.store import RECORDS_FILE

    sweep = request.sweep()
    settings = request.settings()
    check_settings(settings)
    resolve_source(request.model)  # an unknown model, or one that asks for its own code: before any output
    out = prepare_output(request.out)
    lm = load_backend(request.model, settings).lm
    settings = on_model(settings, lm)
    window = lm.pretraining_window
    lengths = request.lengths or [window, window * 3 // 2, 2 * window, 3 * window]
    lampe_params = resolve_method("lampe", window, max(lengths), params=sweep.params, configs=False).params
    spec = sweep.spec({length: request.mappings(window, length) for length in lengths}, out)
    experiment = spec.build(settings)
    resolve_jobs(experiment.jobs, window)
    sweep_file = out / sweep.file_name(lampe_params)
    echo(f"sweep -> {out / RECORDS_FILE} (window {window}, lengths {', '.join(map(format_length, lengths))})")
    result = _run(experiment, progress)
    points = sweep.points(ResultStore(out), lengths, settings)
    sweep_file.write_text("".join(json.dumps(asdict(p)) + "\n" for p in points))
    for point in points:
        echo(
            f"  l={format_length(point.length)} m={point.m}: ppl={point.ppl:.3f} "
            f"(last quarter {point.ppl_last_quarter:.3f}) {point.seconds:.0f}s"
        )
    if result.failures:
        return FitOutcome(None, result.failures, [sweep_file])
    report = analyse(
        request.model, window, int(lampe_params["s1"]), int(lampe_params["s2"]), points, L=request.fixed_L
    )
    extra = {
        "command": request.command,
        "passages": request.passages,
        "mscale": lampe_params.get("mscale"),
        "pg19_options": sweep.options,
    }
    return FitOutcome(report, [], [sweep_file, *write_outputs(request, report, extra, out, echo)])


def _run(experiment: Experiment, progress: Callable[[int], Tracker] | None) -> RunResult:
    """The runner on the experiment, with the caller's progress display (a context manager that takes
    the run's events) when given."""
    from contextlib import nullcontext

    from ..runner.local import run

    tracker = progress(len(experiment.jobs)) if progress else None
    with tracker or nullcontext():
        return run(experiment, on_event=tracker)


def write_outputs(
    request: FitRequest, report: FitReport, extra: dict[str, Any], out: Path, echo: Callable[[str], None]
) -> list[Path]:
    """The summary lines, the plot and (unless ``--no-write``) the config."""
    for line in summary_lines(report):
        echo(line)
    files = [plot(report, out / f"lampe-{Path(request.model).name}.png")]
    echo(f"plot -> {files[-1]}")
    if request.write:
        files.append(write_config(request.config_target("lampe", request.model), report, extra))
        echo(f"config -> {files[-1]}")
    return files


def analyse(
    model: str, window: int, s1: int, s2: int, points: list[SweepPoint], *, L: float | None = None
) -> FitReport:
    optimal = optimal_mapping(points)
    fit = fit_sigmoid(list(optimal), list(optimal.values()), window, L=L)
    return FitReport(model, window, s1, s2, points, optimal, patterns_of(points), fit)


# --------------------------------------------------------------------------------------------- outputs
def config_document(report: FitReport, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The YAML mapping for ``method_configs/lampe-<model>.yaml`` (``params`` is what runs read)."""
    fit = report.fit
    return {
        "params": {
            "L": round(fit.L, 3),
            "a": float(f"{fit.a:.6e}"),
            "b": round(fit.b, 6),
            "s1": report.s1,
            "s2": report.s2,
        },
        "fit": {
            "model": report.model,
            "window": report.window,
            "formula": "m(l) = L / (1 + exp(-(a*l + b))), l and m in tokens; clamped to [s1+s2+1, l]",
            "rmse_tokens": round(fit.rmse, 2),
            "L_fixed_at_three_quarters_window": fit.fixed_L,
            "optimal_m": {int(l): int(m) for l, m in report.optimal.items()},
            "fitted_m": {int(l): round(float(fit(l)), 1) for l in report.optimal},
            "patterns": {int(l): p for l, p in report.patterns.items()},
            **(extra or {}),
        },
        "sweep": [
            {
                "l": p.length,
                "m": p.m,
                "ppl": round(p.ppl, 4),
                "ppl_last_quarter": round(p.ppl_last_quarter, 4),
                "passages": p.passages,
            }
            for p in sorted(report.points, key=lambda p: (p.length, p.m))
        ],
    }


def write_config(path: Path, report: FitReport, extra: dict[str, Any] | None = None) -> Path:
    import yaml

    path.parent.mkdir(parents=True, exist_ok=True)
    header = (
        f"# LaMPE sigmoid fitted by `lampe-eval fit` for {report.model} (window {report.window}).\n"
        "# `params` is what runs read; `fit` and `sweep` are provenance (PPL per (l, m)).\n"
    )
    body = yaml.safe_dump(config_document(report, extra), sort_keys=False, default_flow_style=None, width=100)
    path.write_text(header + body)
    return path


def plot(report: FitReport, path: Path) -> Path:
    """Figure 2 of the paper: PPL vs m per input length (left), optimal m and the fitted sigmoid (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    by_length: dict[int, list[SweepPoint]] = {}
    for p in report.points:
        by_length.setdefault(p.length, []).append(p)
    for length, ps in sorted(by_length.items()):
        ps = sorted(ps, key=lambda p: p.m)
        label = f"l={format_length(length)} ({report.patterns.get(length, '?')})"
        left.plot([p.m for p in ps], [p.ppl for p in ps], marker="o", label=label)
        best = min(ps, key=lambda p: p.ppl)
        left.scatter([best.m], [best.ppl], s=90, facecolors="none", edgecolors="black", zorder=3)
    left.set_xlabel("mapping length m (tokens)")
    left.set_ylabel("PPL")
    ppls = [p.ppl for p in report.points if math.isfinite(p.ppl)]
    if ppls and max(ppls) > 3 * min(ppls):  # exploding curves: log scale; else plain ticks
        left.set_yscale("log")
    left.set_title(f"{report.model}: PPL vs mapping length")
    left.legend(fontsize=8)
    ls = np.array(sorted(report.optimal))
    xs = np.linspace(0, max(ls.max() * 1.3, 2 * report.window), 200)
    right.plot(
        xs, report.fit(xs), label=f"fit L={report.fit.L:.0f}, a={report.fit.a:.3e}, b={report.fit.b:.3f}"
    )
    right.scatter(ls, [report.optimal[l] for l in ls], color="C3", zorder=3, label="optimal m (sweep)")
    right.axhline(0.75 * report.window, color="gray", ls=":", lw=1, label="3/4 window")
    right.set_xlabel("input length l (tokens)")
    right.set_ylabel("optimal mapping length m")
    right.set_title("length-aware mapping: scaled sigmoid")
    right.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def summary_lines(report: FitReport) -> list[str]:
    fit = report.fit
    lines = [
        f"fit: L={fit.L:.1f} a={fit.a:.6e} b={fit.b:.4f} (rmse {fit.rmse:.0f} tokens"
        + (", L fixed at 3/4 window)" if fit.fixed_L else ")"),
    ]
    by_length: dict[int, list[SweepPoint]] = {}
    for p in report.points:
        by_length.setdefault(p.length, []).append(p)
    for length, ps in sorted(by_length.items()):
        curve = ", ".join(f"{p.m}:{p.ppl:.3f}" for p in sorted(ps, key=lambda p: p.m))
        lines.append(
            f"l={format_length(length)}: optimal m={report.optimal[length]}, "
            f"fitted m={float(fit(length)):.0f}, {report.patterns[length]} [m:ppl {curve}]"
        )
    return lines
