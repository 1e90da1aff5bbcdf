"""`lampe-eval fit`: the mapping grid, pattern detection, the sigmoid fit and the command end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import yaml
from typer.testing import CliRunner

from lampe_eval.cli import app
from lampe_eval.method_configs import params_from_config
from lampe_eval.methods import create_method
from lampe_eval.models import LoadedModel
from lampe_eval.testing import tiny_llama
from lampe_eval.tools.fit import (
    PATTERN_DECREASING,
    PATTERN_INCREASING,
    PATTERN_OTHER,
    PATTERN_V,
    SweepPoint,
    classify,
    fit_sigmoid,
    mapping_grid,
    optimal_mapping,
    sigmoid,
)

W = 8192
LENGTHS = np.array([4096, 8192, 12288, 16384, 24576, 32768, 49152], dtype=float)


def test_fit_recovers_known_parameters():
    L, a, b = 6144.0, 1.2e-4, -2.0
    fit = fit_sigmoid(LENGTHS, sigmoid(LENGTHS, L, a, b), W)
    assert not fit.fixed_L
    assert pytest.approx(L, rel=1e-4) == fit.L and fit.a == pytest.approx(a, rel=1e-4)
    assert fit.b == pytest.approx(b, abs=1e-4) and fit.rmse < 1e-3
    # the official Llama-3 shape (a = 1.049e-4, b = -2.467, L = 6204): another point of the space
    official = (6204.409, 1.0493097e-4, -2.4666380)
    fit = fit_sigmoid(LENGTHS, sigmoid(LENGTHS, *official), W)
    assert (fit.L, fit.a, fit.b) == pytest.approx(official, rel=1e-3)


def test_fit_with_noise_and_with_few_points():
    L, a, b = 5000.0, 2.0e-4, -3.0
    rng = np.random.default_rng(0)
    noisy = sigmoid(LENGTHS, L, a, b) + rng.normal(0, 30, len(LENGTHS))
    fit = fit_sigmoid(LENGTHS, noisy, W)
    assert pytest.approx(L, rel=0.05) == fit.L and fit.a == pytest.approx(a, rel=0.15) and 10 < fit.rmse < 60
    # three lengths: L is fixed at 3/4 of the window and (a, b) fitted
    three = LENGTHS[1:4]
    fit = fit_sigmoid(three, sigmoid(three, 0.75 * W, a, b), W)
    assert fit.fixed_L and fit.L == 0.75 * W and (fit.a, fit.b) == pytest.approx((a, b), rel=1e-4)
    fit = fit_sigmoid(LENGTHS, sigmoid(LENGTHS, 4000.0, a, b), W, L=4000.0)
    assert fit.fixed_L and (fit.a, fit.b) == pytest.approx((a, b), rel=1e-4)


def test_mapping_grid_spans_an_eighth_to_three_quarters_of_the_window():
    assert mapping_grid(W, 16384) == [1024, 2048, 3072, 4096, 5120, 6144]
    assert mapping_grid(W, 4096) == [1024, 2048, 3072, 4096]  # capped at the input length
    assert mapping_grid(256, 1024, points=3) == [32, 112, 192]


def test_pattern_classification():
    ms = [1024, 2048, 3072, 4096, 5120, 6144]
    assert classify(ms, [9.0, 7.5, 7.1, 7.0, 7.3, 8.0]) == PATTERN_V
    assert classify(ms, [12.0, 9.0, 8.0, 7.5, 7.4, 7.3]) == PATTERN_DECREASING
    assert classify(ms, [7.0, 7.1, 7.3, 7.9, 9.0, 12.0]) == PATTERN_INCREASING
    assert classify(ms, [7.0, 9.0, 7.1, 9.0, 7.2, 9.0]) == PATTERN_OTHER
    assert classify(ms[::-1], [12.0, 9.0, 8.0, 7.5, 7.4, 7.3][::-1]) == PATTERN_DECREASING  # order-free
    short, long = [9.0, 7.5, 7.1, 7.0, 7.3, 8.0], [12.0, 9.0, 8.0, 7.5, 7.4, 7.3]
    points = [SweepPoint(8192, m, p, p, 0.0, 1, 1) for m, p in zip(ms, short, strict=True)]
    points += [SweepPoint(16384, m, p, p, 0.0, 1, 1) for m, p in zip(ms, long, strict=True)]
    assert optimal_mapping(points) == {8192: 4096, 16384: 6144}


class CharTokenizer:
    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        return {"input_ids": [2 + ord(c) % 126 for c in text]}

    def decode(self, ids: list[int]) -> str:
        return "".join(chr(i - 2) for i in ids)


@pytest.fixture
def one_thread():
    """Tiny models run ~10x faster on one thread than on two contended ones."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_fit_command_end_to_end_on_a_tiny_model(tmp_path, monkeypatch, one_thread):
    import lampe_eval.models

    books = tmp_path / "books"
    books.mkdir()
    rng = np.random.default_rng(1)
    words = ["the", "king", "went", "down", "to", "sea", "and", "said", "unto", "them"]
    (books / "a.txt").write_text(" ".join(rng.choice(words, 400)))
    lm = LoadedModel("tiny", tiny_llama(window=256, seed=3), CharTokenizer(), 256, False)
    loads = []
    monkeypatch.setattr(lampe_eval.models, "load_model", lambda name, **kw: loads.append(name) or lm)
    monkeypatch.setattr(lampe_eval.models, "resolve_source", lambda name: (name, None))  # "tiny" is known
    config = tmp_path / "lampe-tiny.yaml"
    args = ["fit", "--model", "tiny", "--len", "256,320,384", "--points", "3", "--opt", f"pg19_dir={books}"]
    args += ["--out", str(tmp_path / "out"), "--config", str(config)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert loads == ["tiny"]

    data = yaml.safe_load(config.read_text())
    params = data["params"]
    assert set(params) == {"L", "a", "b", "s1", "s2"} and (params["s1"], params["s2"]) == (16, 4)
    sweep = data["sweep"]
    lengths = {256, 320, 384}
    assert sorted({(p["l"], p["m"]) for p in sweep}) == [
        (l, m) for l in sorted(lengths) for m in (32, 112, 192)
    ]
    assert all(np.isfinite(p["ppl"]) and p["ppl"] > 1 for p in sweep)
    assert set(data["fit"]["patterns"]) == lengths and set(data["fit"]["optimal_m"]) == lengths
    for l, m in data["fit"]["optimal_m"].items():  # the optimum is the grid point of lowest PPL
        assert m == min((p for p in sweep if p["l"] == l), key=lambda p: p["ppl"])["m"]
    resolved = params_from_config(data)
    method = create_method("lampe", 256, 1024, **resolved)  # the runner reads the file like this
    assert method.params()["L"] == params["L"]
    png = next((tmp_path / "out").glob("*.png"))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # the sweep file: a stage with another grid only measures the new m, and a rerun only re-fits
    sweep_file = next((tmp_path / "out").glob("sweep-*.jsonl"))
    lines = sweep_file.read_text().splitlines()
    assert len(lines) == 9 and json.loads(lines[0])["passages"] == 1
    staged = [*args, "--grid", "64"]  # overrides --points: one new m per length
    assert CliRunner().invoke(app, staged).exit_code == 0
    assert len(sweep_file.read_text().splitlines()) == 12
    assert len(yaml.safe_load(config.read_text())["sweep"]) == 12  # cached points of other grids count
    monkeypatch.setattr(
        "lampe_eval.benchmarks.pg19.PG19.evaluate", lambda *a, **k: pytest.fail("re-evaluated")
    )
    again = CliRunner().invoke(app, staged)
    assert again.exit_code == 0, again.output
    assert len(sweep_file.read_text().splitlines()) == 12


def test_a_bad_backend_is_one_line_before_any_load(monkeypatch, tmp_path):
    import lampe_eval.models
    from lampe_eval.errors import LampeEvalError
    from lampe_eval.tools.fit import FitRequest, run_fit

    monkeypatch.setattr(lampe_eval.models, "load_model", lambda *a, **k: pytest.fail("loaded a model"))
    with pytest.raises(LampeEvalError, match="--backend 'nope': choose one of hf, vllm"):
        run_fit(FitRequest("smollm2-135m", backend="nope", out=tmp_path / "o"))
    assert not (tmp_path / "o").exists()


def test_the_sweep_runs_on_the_requested_backend(tmp_path, monkeypatch, one_thread):
    """``backend=vllm``: the model is loaded for the engine and the runner's worker builds that backend
    (here an HF backend named vllm: the wiring, not the engine); the records carry its name."""
    import lampe_eval.backends.vllm
    import lampe_eval.models
    from lampe_eval.backends.hf import HFBackend
    from lampe_eval.tools.fit import FitRequest, run_fit

    class Named(HFBackend):
        name = "vllm"

    books = tmp_path / "books"
    books.mkdir()
    (books / "a.txt").write_text(" ".join(["the king went down to the sea"] * 60))
    lm = LoadedModel("tiny", tiny_llama(window=256, seed=3), CharTokenizer(), 256, False)
    made = []
    engine = lampe_eval.backends.vllm.VLLMBackend
    monkeypatch.setattr(engine, "check_settings", classmethod(lambda cls, settings: None))
    monkeypatch.setattr(lampe_eval.models, "load_model", lambda *a, **k: pytest.fail("loaded for hf"))
    monkeypatch.setattr(lampe_eval.models, "load_for_engine", lambda name: lm)
    monkeypatch.setattr(lampe_eval.models, "resolve_source", lambda name: (name, None))

    def create(cls, lm, settings):
        made.append(cls.name)
        return Named(lm, settings.batch_size)

    monkeypatch.setattr(engine, "create", classmethod(create))
    request = FitRequest("tiny", lengths=[256, 320], grid=[64], options={"pg19_dir": str(books)}, write=False)
    request.backend, request.out = "vllm", tmp_path / "out"
    outcome = run_fit(request, echo=lambda line: None)
    assert made == ["vllm", "vllm"] and outcome.report is not None  # the tool's load, the runner's worker
    records = [json.loads(line) for line in (tmp_path / "out" / "records.jsonl").read_text().splitlines()]
    assert len(records) == 2 and {r["engine"]["backend"] for r in records} == {"vllm"}
