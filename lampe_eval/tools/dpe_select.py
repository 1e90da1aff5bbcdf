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
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch

from ..errors import LampeEvalError
from ..lengths import format_length
from ..runner.experiment import ExperimentSpec, GridSpec, RunSettings
from .common import ToolRequest, job_records, load_backend, on_model, resolve_jobs, short_hash

if TYPE_CHECKING:
    from ..backends import Backend
    from ..models import LoadedModel
    from ..records import SampleRecord
    from ..runner.events import Event

TASK = "niah_multivalue"  # RULER's 4-value NIAH: the official detection task (4 needles, one key)
OFFICIAL_GROUPS = 8  # run_niah_detect.sh: num_parts=8
DETECT_FLOOR = 1024  # run_niah_detect.sh: detected lengths halve down to 1024
DIMENSION_FLOOR = 2048  # qk_2_norm_select_dim.py: lengths from the pretraining length down to 2048
OFFICIAL_TOPK_SHARE = 0.75  # README / run_niah_detect.sh: top 48 of 64 frequencies
SCORES = ("nll", "generate")
# the RULER options that give each --score: the answer's NLL, or RULER's own greedy answer and string match
SCORE_OPTIONS: dict[str, dict[str, str]] = {"nll": {"score": "answer_nll"}, "generate": {}}
# the backends that hand over a layer's queries and keys before RoPE (``attention_inputs``)
ATTENTION_INPUT_BACKENDS = ("hf",)


@runtime_checkable
class AttentionInputs(Protocol):
    """A backend that hands over each attention layer's queries and keys before RoPE."""

    def attention_inputs(
        self, input_ids: Sequence[int], visit: Callable[[int, torch.Tensor, torch.Tensor], None]
    ) -> float: ...


# --------------------------------------------------------------------------------------- the grid
def equal_groups(frequencies: int, count: int) -> tuple[int, ...]:
    """Boundaries of ``count`` equal groups over ``frequencies`` (as ``dpe``'s empty dimension_groups)."""
    if count < 1 or count > frequencies:
        raise LampeEvalError(f"dpe-select: {count} dimension groups for {frequencies} RoPE frequencies")
    return tuple(round(g * frequencies / count) for g in range(count + 1))


def detection_factors(length: int, floor: int = DETECT_FLOOR) -> tuple[int, ...]:
    """run_niah_detect.sh's detecting factors: length // l for l = length, length // 2, ... >= floor."""
    factors = []
    l = length
    while l >= floor:
        factors.append(length // l)
        l //= 2
    return tuple(sorted(set(factors))) or (1,)


def base_factor(length: int, window: int) -> int:
    """run_niah_detect.sh's factor of the groups not under detection: (length / window) * 2 (integers)."""
    return max(1, length // window) * 2


@dataclass(frozen=True)
class DetectionGrid:
    """The settings the detection measures: every group at ``base`` but one, which runs each of
    ``factors`` in turn."""

    groups: int
    base: int
    factors: tuple[int, ...]

    def setting(self, group: int, factor: int) -> tuple[int, ...]:
        return tuple(factor if g == group else self.base for g in range(self.groups))

    def settings(self) -> list[tuple[int, ...]]:
        """The distinct settings, the all-base one first (a group at the base factor is that setting)."""
        out = [self.setting(0, self.base)]
        for group in range(self.groups):
            for factor in self.factors:
                candidate = self.setting(group, factor)
                if candidate not in out:
                    out.append(candidate)
        return out


# ------------------------------------------------------------------------------------- the scores
@dataclass
class Probe:
    """One NIAH sample under one setting: the answer's NLL (nats per token) and, when generated, the
    string-match score (0-100) and the prediction."""

    factors: tuple[int, ...]
    sample: int
    nll: float | None
    tokens: int
    match: float | None = None
    prediction: str | None = None
    seconds: float = 0.0

    def score(self, kind: str) -> float:
        value = self.nll if kind == "nll" else self.match
        if value is None:
            raise LampeEvalError(f"dpe-select: probe {self.factors} has no {kind} score")
        return value


@dataclass
class GroupChoice:
    """A dimension group's detected factor, with the score of each factor tried."""

    group: int
    frequencies: tuple[int, int]  # [first, last + 1) of the head_dim / 2 frequencies
    factor: int
    scores: dict[int, float]


def higher_is_better(kind: str) -> bool:
    return kind != "nll"


def score_table(probes: Sequence[Probe], kind: str, samples: int) -> dict[tuple[int, ...], float]:
    """Mean score over the first ``samples`` samples of each setting measured on all of them."""
    by_setting: dict[tuple[int, ...], dict[int, float]] = {}
    for probe in probes:
        if probe.sample < samples:
            by_setting.setdefault(tuple(probe.factors), {})[probe.sample] = probe.score(kind)
    return {k: sum(v.values()) / len(v) for k, v in by_setting.items() if len(v) == samples}


def choose_factors(
    grid: DetectionGrid, table: Mapping[tuple[int, ...], float], kind: str, boundaries: Sequence[int]
) -> list[GroupChoice]:
    """Each group's best factor ("by sorting these results", README). Ties (within 1e-9) go to the base
    factor when it is among the best, else to the smallest factor."""
    better = higher_is_better(kind)
    choices = []
    for group in range(grid.groups):
        scores = {}
        for factor in grid.factors:
            setting = grid.setting(group, factor)
            if setting not in table:
                raise LampeEvalError(f"dpe-select: no score for group {group} at factor {factor}")
            scores[factor] = table[setting]
        best = max(scores.values()) if better else min(scores.values())
        tied = [f for f, s in scores.items() if abs(s - best) <= 1e-9]
        factor = grid.base if grid.base in tied else min(tied)
        span = (int(boundaries[group]), int(boundaries[group + 1]))
        choices.append(GroupChoice(group, span, factor, scores))
    return choices


# ------------------------------------------------------------------------------ the key dimensions
def pair_norms(states: torch.Tensor) -> torch.Tensor:
    """[L, heads, head_dim] -> [L, heads, head_dim / 2]: the 2-norm of each frequency's rotary pair
    (f, f + head_dim / 2), the rotate-half layout (``calculate_2_norm`` in qk_2_norm_select_dim.py)."""
    half = states.shape[-1] // 2
    return torch.sqrt(states[..., :half].float() ** 2 + states[..., half:].float() ** 2)


def qk_contribution(query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    """Mean over tokens of |q_f| * |k_f| per query head and frequency ([heads, head_dim / 2]); the key
    heads are repeated to the query heads as attention shares them (``repeat_kv``)."""
    q, k = pair_norms(query), pair_norms(key)
    if q.shape[1] % k.shape[1]:
        raise LampeEvalError(f"dpe-select: {q.shape[1]} query heads for {k.shape[1]} key heads")
    k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    return (q * k).mean(dim=0)


def top_dimensions(norms: torch.Tensor, k: int) -> torch.Tensor:
    """The ``k`` frequencies of largest contribution per (layer, head): [layers, heads, k], descending
    (``dimension_selection`` in dpe_for_llama.py, after its mean over lengths and samples)."""
    return torch.topk(norms, k=k, dim=-1).indices


def selection_shares(top: torch.Tensor, frequencies: int) -> list[float]:
    """The share of (layer, head) pairs that select each frequency."""
    counts = torch.zeros(frequencies)
    counts.index_add_(0, top.flatten(), torch.ones(top.numel()))
    return [round(float(c) / (top.shape[0] * top.shape[1]), 4) for c in counts]


@dataclass
class DimensionSelection:
    lengths: list[int]
    samples: int
    topk: int
    norms: torch.Tensor  # [lengths, samples, layers, heads, F], as qk_2_norm_selected_dim.pt
    seconds: float = 0.0

    @property
    def mean(self) -> torch.Tensor:
        return self.norms.mean(dim=(0, 1))

    def top(self) -> torch.Tensor:
        return top_dimensions(self.mean, self.topk)

    def shares(self) -> list[float]:
        return selection_shares(self.top(), self.norms.shape[-1])

    def group_shares(self, boundaries: Sequence[int]) -> list[float]:
        """Per group: the share of its frequencies' slots that were selected (1: all, always)."""
        shares = self.shares()
        return [
            round(sum(shares[a:b]) / (b - a), 4) for a, b in zip(boundaries, boundaries[1:], strict=False)
        ]


# ------------------------------------------------------------------------------------ the request
@dataclass
class SelectRequest(ToolRequest):
    """What ``lampe-eval dpe-select`` was asked; :meth:`check` raises one-line errors before any load.
    ``options`` are RULER's (essay=..., essay_file=...), the shared fields are
    :class:`~lampe_eval.tools.common.ToolRequest`'s."""

    model: str = "smollm2-135m"
    length: int | None = None  # test length (TEST_MAX_LENGTH); default 2 x the pretraining window
    groups: int = OFFICIAL_GROUPS
    factors: list[int] | None = None  # default: detection_factors(length)
    base: int | None = None  # default: base_factor(length, window)
    local_window: int | None = None  # DPE's w; default: dpe's default for the window
    variant: str = "official"
    samples: int = 4
    score: str = "nll"
    seed: int = 0
    dim_lengths: list[int] | None = None  # default: the window halving down to 2048
    dim_samples: int = 2
    topk: int | None = None  # default: 3/4 of the frequencies (48 of 64)
    dimensions: bool = True
    out: Path = field(default=Path("results/dpe-select"), kw_only=True)

    def check_run(self) -> None:
        """What the tools set themselves and what the backend cannot do: one line each, before any load."""
        if "score" in self.options:
            raise LampeEvalError(
                "dpe-select sets the RULER option score itself: drop --opt score (use --score)"
            )
        if self.dimensions and self.backend not in ATTENTION_INPUT_BACKENDS:
            raise LampeEvalError(
                f"dpe-select: the {self.backend} backend cannot hand over queries and keys before RoPE "
                f"(the key-dimension pass): use --backend {ATTENTION_INPUT_BACKENDS[0]}, or --no-dims"
            )

    def check(self, window: int | None) -> None:
        if self.score not in SCORES:
            raise LampeEvalError(f"--score must be one of {', '.join(SCORES)}, got {self.score!r}")
        if self.variant not in ("official", "paper"):
            raise LampeEvalError(f"--variant must be official or paper, got {self.variant!r}")
        if self.groups < 1 or self.samples < 1 or self.dim_samples < 1:
            raise LampeEvalError("--groups, --samples and --dim-samples must be at least 1")
        if self.factors is not None and (not self.factors or min(self.factors) < 1):
            raise LampeEvalError("--factors must be integers >= 1")
        if self.base is not None and self.base < 1:
            raise LampeEvalError("--base-factor must be at least 1")
        if self.topk is not None and self.topk < 1:
            raise LampeEvalError("--topk must be at least 1")
        if self.local_window is not None and self.local_window < 1:
            raise LampeEvalError("--window must be at least 1")
        if window and self.length is not None and self.length <= window:
            raise LampeEvalError(
                f"--len {format_length(self.length)} is within the model's {format_length(window)} window: "
                "the detection needs a test length beyond it"
            )


@dataclass
class SelectReport:
    model: str
    window: int
    frequencies: int
    local_window: int
    length: int
    variant: str
    score: str
    samples: int
    boundaries: tuple[int, ...]
    grid: DetectionGrid
    choices: list[GroupChoice]
    dims: DimensionSelection | None = None
    seconds: float = 0.0

    @property
    def scale_factors(self) -> list[int]:
        return [c.factor for c in self.choices]


@dataclass
class SelectOutcome:
    report: SelectReport
    files: list[Path]


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


def measure_dimensions(
    backend: Backend,
    lengths: Sequence[int],
    samples: int,
    topk: int,
    options: Mapping[str, Any],
    echo: Callable[[str], None],
) -> DimensionSelection:
    """Step 2 on plain essay text (RULER's haystack, no chat template): sample i of length n is the
    text's tokens [i * n, (i + 1) * n)."""
    from ..benchmarks.ruler.haystack import load_essay_haystack

    if not isinstance(backend, AttentionInputs):
        raise LampeEvalError(
            f"dpe-select: the {backend.name} backend cannot hand over queries and keys before RoPE"
        )
    tokenizer = backend.lm.tokenizer
    essay = load_essay_haystack(None, dict(options))
    need = max(lengths) * samples
    words = need
    ids: list[int] = []
    while len(ids) < need:
        ids = list(tokenizer(" ".join(essay.sentences(words)), add_special_tokens=True)["input_ids"])
        words *= 2
    table: torch.Tensor | None = None
    start = time.perf_counter()
    for li, length in enumerate(lengths):
        for si in range(samples):
            per_layer: dict[int, torch.Tensor] = {}

            def visit(layer: int, q: torch.Tensor, k: torch.Tensor) -> None:
                per_layer[layer] = qk_contribution(q, k)  # noqa: B023 - called within this iteration

            seconds = backend.attention_inputs(ids[si * length : (si + 1) * length], visit)
            stacked = torch.stack([per_layer[i] for i in sorted(per_layer)])  # [layers, heads, F]
            if table is None:
                table = torch.zeros(len(lengths), samples, *stacked.shape)
            table[li, si] = stacked
            echo(f"  key dimensions: {format_length(length)} sample {si}: {seconds:.0f}s")
    assert table is not None
    return DimensionSelection(list(lengths), samples, topk, table, time.perf_counter() - start)


# --------------------------------------------------------------------------------------------- run
def run_select(request: SelectRequest, *, echo: Callable[[str], None] = print) -> SelectOutcome:
    """Both steps on one loaded model; the probes are ordinary jobs whose records are kept in ``out`` (a
    rerun with the same settings measures only what is missing). Inputs are checked before the model
    loads."""
    from ..models import known_window, resolve_source
    from ..runner.experiment import check_settings, prepare_output

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


# ----------------------------------------------------------------------------------------- outputs
def write_dimensions(out: Path, model: str, dims: DimensionSelection) -> list[Path]:
    """``qk_2_norm-<model>.pt`` ([lengths, samples, layers, heads, F], the official file's layout) and
    ``dpe-dims-<model>.json`` (the top-k frequencies per layer and head, and their shares)."""
    name = Path(model).name
    tensor_file = out / f"qk_2_norm-{name}.pt"
    torch.save(dims.norms, tensor_file)
    json_file = out / f"dpe-dims-{name}.json"
    document = {
        "lengths": dims.lengths,
        "samples": dims.samples,
        "topk": dims.topk,
        "shape": list(dims.norms.shape),
        "frequency_share": dims.shares(),
        "top_per_layer_head": dims.top().tolist(),
    }
    json_file.write_text(json.dumps(document) + "\n")
    return [tensor_file, json_file]


def config_document(report: SelectReport, request: SelectRequest | None = None) -> dict[str, Any]:
    """The YAML mapping for ``method_configs/dpe-<model>.yaml``: ``params`` (what runs read) and
    ``selection`` (provenance, ignored by runs)."""
    grid = report.grid
    selection: dict[str, Any] = {
        "model": report.model,
        "window": report.window,
        "frequencies": report.frequencies,
        "test_length": report.length,
        "task": f"ruler/{TASK}",
        "samples": report.samples,
        "score": report.score
        + (" (answer NLL, nats/token: lower is better)" if report.score == "nll" else " (string match)"),
        "base_factor": grid.base,
        "detect_factors": list(grid.factors),
        "scores": {
            f"group {c.group} (frequencies {c.frequencies[0]}-{c.frequencies[1] - 1})": {
                int(f): round(float(s), 4) for f, s in c.scores.items()
            }
            for c in report.choices
        },
        "seconds": round(report.seconds),
    }
    if report.dims is not None:
        dims = report.dims
        selection["key_dimensions"] = {
            "lengths": dims.lengths,
            "samples": dims.samples,
            "topk": dims.topk,
            "group_share_selected": dims.group_shares(report.boundaries),
            "note": "top-k per layer and head; not a parameter (plans are shared by every layer)",
        }
    if request is not None and request.command:
        selection["command"] = request.command
    return {
        "params": {
            "variant": report.variant,
            "window": report.local_window,
            "scale_factors": report.scale_factors,
            "dimension_groups": list(report.boundaries),
        },
        "selection": selection,
    }


def write_config(path: Path, report: SelectReport, request: SelectRequest | None = None) -> Path:
    import yaml

    from ..runner.worker import git_revision

    path.parent.mkdir(parents=True, exist_ok=True)
    date = _dt.date.today().isoformat()
    command = request.command if request is not None and request.command else "lampe-eval dpe-select"
    header = (
        f"# DPE settings found by `lampe-eval dpe-select` for {report.model} (window {report.window}, "
        f"{report.frequencies} RoPE frequencies),\n"
        f"# the procedure of LuLuLuyi/DPE @ 46b85de (docs/methods.md 7.3), {date}, lampe-eval "
        f"{git_revision()}.\n# Command: {command}\n"
        f"# Settings: ruler/{TASK} at {format_length(report.length)}, {report.samples} sample(s), score "
        f"{report.score}, base factor {report.grid.base}, factors {list(report.grid.factors)}, "
        f"{len(report.choices)} groups.\n"
        "# `params` is what runs read; `selection` is provenance.\n"
    )
    body = yaml.safe_dump(
        config_document(report, request), sort_keys=False, default_flow_style=None, width=100
    )
    path.write_text(header + body)
    return path


def summary_lines(report: SelectReport) -> list[str]:
    lines = [
        f"scale_factors {report.scale_factors} over groups {list(report.boundaries)} "
        f"(w {report.local_window}, {report.variant}; {report.seconds:.0f}s)"
    ]
    for c in report.choices:
        table = ", ".join(
            f"{f}:{s:.4f}" if math.isfinite(s) else f"{f}:{s}" for f, s in sorted(c.scores.items())
        )
        lines.append(f"  group {c.group} [{c.frequencies[0]}, {c.frequencies[1]}): s={c.factor}  [{table}]")
    if report.dims is not None:
        shares = report.dims.group_shares(report.boundaries)
        lines.append(f"  key dimensions: share selected per group {shares} (top {report.dims.topk})")
    return lines
