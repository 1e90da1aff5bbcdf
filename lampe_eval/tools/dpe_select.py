"""``lampe-eval dpe-select``: DPE's own search for its per-model settings (Lu et al. 2025, arXiv 2504.18857;
official code ``LuLuLuyi/DPE`` @ 46b85de; docs/methods.md 7.3).

Two steps, as the official README's "Apply DPE to New Models" describes them:

1. **Effective relative distance per dimension group** (``effective_length_detection/run_niah_detect.sh``
   and ``inference.py``): the head_dim / 2 RoPE frequencies are split into equal groups (8 officially).
   Every group but one runs at the base factor (test length // pretraining window) * 2; the detected group
   runs each factor of the grid test length // l for l = test length, test length / 2, ... down to 1024.
   Each setting answers the 4-needle NIAH (RULER's ``niah_multivalue`` here, the official generator's
   task); the best-scoring factor of each group is its scale factor.
2. **Key dimensions** (``dimension_selection/sample_qk.py``, ``qk_2_norm_select_dim.py``): over plain
   text at lengths from the window halving down to 2048, the mean over tokens of |q_f| * |k_f| (the 2-norm
   of frequency f's rotary pair in the query and in the key, before RoPE) per layer, head and frequency;
   the official ``select_topk_dim`` option scales only the top-k frequencies of each (layer, head). Plans
   here are shared by every layer, so this step is provenance: a side file in the output folder and a
   summary in the config, not a parameter.

The detection's probes are ordinary runner jobs (``dpe`` with the setting's parameters on RULER's
``niah_multivalue``; the answer's NLL is RULER's ``--opt score=answer_nll``): records with their engine in
``OUT/records.jsonl``, resumed like ``run``, on any backend; the choice reads them back from the store.

Differences from the official procedure are listed in docs/methods.md 7.3 (the probe's score: the
answer's NLL by default, a CPU-sized probe; detection with every frequency scaled).

The code, by concern: the request and its checks (:mod:`.dpe_request`), the detection grid, the probes'
scores and the factor choice (:mod:`.dpe_grid`), the key dimensions (:mod:`.dpe_dimensions`), the report,
the config and the summary (:mod:`.dpe_report`); this module runs the search: the detection's settings
as runner jobs, and both steps on one loaded model (:func:`run_select`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..lengths import format_length
from ..runner.experiment import ExperimentSpec, GridSpec, RunSettings
from .common import job_records, load_backend, on_model, resolve_jobs, short_hash
from .dpe_dimensions import (
    DIMENSION_FLOOR,
    OFFICIAL_TOPK_SHARE,
    DimensionSelection,
    measure_dimensions,
    write_dimensions,
)
from .dpe_grid import (
    TASK,
    DetectionGrid,
    Probe,
    base_factor,
    choose_factors,
    detection_factors,
    equal_groups,
    score_table,
)
from .dpe_report import SelectOutcome, SelectReport, summary_lines, write_config
from .dpe_request import SCORE_OPTIONS, SelectRequest

if TYPE_CHECKING:
    from ..backends import Backend
    from ..models import LoadedModel
    from ..records import SampleRecord
    from ..runner.events import Event


# ------------------------------------------------------------------------------------------ probes
@dataclass(frozen=True)
class Detection:
    """The detection as it runs: the grid of settings, the group boundaries, DPE's other parameters, the
    test length; each setting is an ordinary job (``dpe`` on RULER's 4-value NIAH)."""

    grid: DetectionGrid
    boundaries: tuple[int, ...]
    local_window: int
    variant: str
    length: int
    window: int  # the model's pretraining window

    def params(self, setting: tuple[int, ...]) -> dict[str, Any]:
        return {
            "window": self.local_window,
            "scale_factors": list(setting),
            "dimension_groups": list(self.boundaries),
            "variant": self.variant,
        }

    def spec(self, request: SelectRequest, out: Path) -> ExperimentSpec:
        """Every setting on ``request.samples`` samples, scored as ``--score`` asks (a RULER option)."""
        methods = [("dpe", self.params(setting)) for setting in self.grid.settings()]
        grid = GridSpec([request.model], methods, [("ruler", [TASK])], [self.length], use_configs=False)
        return ExperimentSpec(
            f"dpe-select-{Path(request.model).name}",
            [grid],
            out=str(out),
            limit=request.samples,
            seed=request.seed,
            options={**request.options, **SCORE_OPTIONS[request.score]},
        )


def plan_detection(request: SelectRequest, window: int, frequencies: int) -> Detection:
    """The request's grid on a model of ``window`` tokens and ``frequencies`` RoPE frequencies."""
    from ..methods.dpe import DPE

    length = request.length or 2 * window
    grid = DetectionGrid(
        request.groups,
        request.base or base_factor(length, window),
        tuple(sorted(set(request.factors))) if request.factors else detection_factors(length),
    )
    local = request.local_window or int(DPE.default_params(window, length, {})["window"])
    boundaries = equal_groups(frequencies, request.groups)
    return Detection(grid, boundaries, local, request.variant, length, window)


def probe_of(record: SampleRecord, setting: tuple[int, ...]) -> Probe:
    """A stored RULER record as a probe: the answer's NLL, or the string-match score and prediction."""
    from ..benchmarks.ruler.benchmark import ANSWER_NLL

    scores, output = record.scores, record.output
    if ANSWER_NLL in scores:
        return Probe(setting, record.index, scores[ANSWER_NLL], int(output["tokens"]), seconds=record.seconds)
    match = next(iter(scores.values()))
    tokens = int(output["new_tokens"])
    return Probe(setting, record.index, None, tokens, match, str(output["prediction"]), record.seconds)


def probe_file(out: Path, model: str, identity: Mapping[str, Any]) -> Path:
    return out / f"dpe-probes-{Path(model).name}-{short_hash(dict(identity))}.jsonl"


def probe_echo(
    settings: Mapping[str, tuple[int, ...]], kind: str, echo: Callable[[str], None]
) -> Callable[[Event], None]:
    """The run's events as lines: each probe measured (its setting, sample and score), each warning."""
    from ..runner.events import Stored, Warned

    def on_event(event: Event) -> None:
        if isinstance(event, Stored):
            job_key, _, sample = event.key.partition(":")
            value = next(iter(event.scores.values()))
            shown = f"{value:.4f}" if kind == "nll" else f"{value:.0f}"
            echo(f"  {list(settings[job_key])} sample {sample}: {kind} {shown} ({event.seconds:.0f}s)")
        elif isinstance(event, Warned):
            echo(f"warning: {event.message}")

    return on_event


def run_probes(
    request: SelectRequest,
    detection: Detection,
    settings: RunSettings,
    out: Path,
    echo: Callable[[str], None],
) -> list[Probe]:
    """Every setting of the detection as runner jobs into ``out`` (a rerun computes only what is missing),
    read back from the store as probes, in the grid's order."""
    from ..runner.local import run
    from ..runner.store import RECORDS_FILE, ResultStore

    experiment = detection.spec(request, out).build(settings)
    resolve_jobs(experiment.jobs, detection.window)
    by_key = {job.key(): tuple(job.method_params["scale_factors"]) for job in experiment.jobs}
    grid = detection.grid
    echo(
        f"detection: {len(by_key)} settings x {request.samples} sample(s) of ruler/{TASK} at "
        f"{format_length(detection.length)} (base factor {grid.base}, factors {list(grid.factors)}, groups "
        f"{list(detection.boundaries)}) -> {out / RECORDS_FILE}"
    )
    run(experiment, on_event=probe_echo(by_key, request.score, echo)).raise_for_failures()
    stored = job_records(ResultStore(out), by_key, request.samples)
    order = {setting: i for i, setting in enumerate(grid.settings())}
    return [
        probe_of(r, setting) for setting in sorted(stored, key=order.__getitem__) for r in stored[setting]
    ]


# --------------------------------------------------------------------------------------------- run
def run_select(request: SelectRequest, *, echo: Callable[[str], None] = print) -> SelectOutcome:
    """Both steps on one loaded model; the probes are ordinary jobs whose records are kept in ``out`` (a
    rerun with the same settings measures only what is missing). Inputs are checked before the model
    loads."""
    from ..models import known_window, resolve_source
    from ..runner.checks import check_settings, prepare_output

    settings = request.settings()
    request.check_run()
    check_settings(settings)
    resolve_source(request.model)
    request.check(known_window(request.model))
    began = time.perf_counter()
    backend = load_backend(request.model, settings)
    lm = backend.lm
    request.check(lm.pretraining_window)
    detection = plan_detection(request, lm.pretraining_window, backend.rope_base().inv_freq.numel())
    out = prepare_output(request.out)
    dims, files = key_dimensions(request, backend, out, echo)
    probes = run_probes(request, detection, on_model(settings, lm), out, echo)
    path = probe_file(out, lm.name, probe_identity(request, detection, lm))
    path.write_text("".join(json.dumps(asdict(p)) + "\n" for p in probes))
    files.append(path)
    table = score_table(probes, request.score, request.samples)
    choices = choose_factors(detection.grid, table, request.score, detection.boundaries)
    report = SelectReport(
        model=lm.name,
        window=lm.pretraining_window,
        frequencies=detection.boundaries[-1],
        local_window=detection.local_window,
        length=detection.length,
        variant=request.variant,
        score=request.score,
        samples=request.samples,
        boundaries=detection.boundaries,
        grid=detection.grid,
        choices=choices,
        dims=dims,
        seconds=time.perf_counter() - began,
    )
    for line in summary_lines(report):
        echo(line)
    if request.write:
        files.append(write_config(request.config_target("dpe", lm.name), report, request))
        echo(f"config -> {files[-1]}")
    return SelectOutcome(report, files)


def key_dimensions(
    request: SelectRequest, backend: Backend, out: Path, echo: Callable[[str], None]
) -> tuple[DimensionSelection | None, list[Path]]:
    """Step 2 (unless ``--no-dims``) and its side files."""
    if not request.dimensions:
        return None, []
    frequencies = backend.rope_base().inv_freq.numel()
    dim_lengths = request.dim_lengths or _halving(backend.lm.pretraining_window, DIMENSION_FLOOR)
    topk = min(request.topk or max(1, round(OFFICIAL_TOPK_SHARE * frequencies)), frequencies)
    echo(f"key dimensions: lengths {', '.join(map(format_length, dim_lengths))}, top {topk}")
    dims = measure_dimensions(backend, dim_lengths, request.dim_samples, topk, request.options, echo)
    return dims, write_dimensions(out, backend.lm.name, dims)


def probe_identity(request: SelectRequest, detection: Detection, lm: LoadedModel) -> dict[str, Any]:
    """What names the probe file (the settings its probes were measured with)."""
    return {
        "model": lm.name,
        "length": detection.length,
        "window": detection.local_window,
        "variant": request.variant,
        "score": request.score,
        "seed": request.seed,
        "boundaries": detection.boundaries,
        "task": TASK,
        "options": request.options,
    }


def _halving(start: int, floor: int) -> list[int]:
    out, n = [], start
    while n >= floor:
        out.append(n)
        n //= 2
    return out or [start]
