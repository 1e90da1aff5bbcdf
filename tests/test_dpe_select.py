"""`lampe-eval dpe-select`: DPE's detection grid, the factor choice, the q/k 2-norm ranking, the config it
writes, and the command end to end on a tiny model."""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from typer.testing import CliRunner

from lampe_eval.backends.hf import HFBackend
from lampe_eval.cli import app
from lampe_eval.errors import LampeEvalError
from lampe_eval.method_configs import params_from_config
from lampe_eval.methods import resolve_method
from lampe_eval.models import LoadedModel
from lampe_eval.testing import tiny_llama
from lampe_eval.tools.dpe_dimensions import DimensionSelection, pair_norms, qk_contribution, top_dimensions
from lampe_eval.tools.dpe_grid import (
    DetectionGrid,
    Probe,
    base_factor,
    choose_factors,
    detection_factors,
    equal_groups,
    score_table,
)
from lampe_eval.tools.dpe_report import SelectReport, config_document


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_the_official_grid():
    # run_niah_detect.sh for Llama-3-8B: TEST_MAX_LENGTH 131072, PRETRAIN_LENGTH 8192
    assert detection_factors(131072) == (1, 2, 4, 8, 16, 32, 64, 128)
    assert base_factor(131072, 8192) == 32
    assert detection_factors(16384) == (1, 2, 4, 8, 16) and base_factor(16384, 8192) == 4
    assert detection_factors(10240) == (1, 2, 4, 8) and base_factor(10240, 8192) == 2
    assert equal_groups(64, 8) == (0, 8, 16, 24, 32, 40, 48, 56, 64)
    assert equal_groups(32, 4) == (0, 8, 16, 24, 32)
    with pytest.raises(LampeEvalError):
        equal_groups(8, 9)
    grid = DetectionGrid(groups=3, base=2, factors=(1, 2, 4))
    assert grid.setting(1, 4) == (2, 4, 2)
    # the all-base setting once (it is every group's factor-2 probe), then 2 new settings per group
    assert grid.settings() == [(2, 2, 2), (1, 2, 2), (4, 2, 2), (2, 1, 2), (2, 4, 2), (2, 2, 1), (2, 2, 4)]


def _probes(table: dict[tuple[int, ...], list[float]]) -> list[Probe]:
    return [
        Probe(setting, i, nll=v, tokens=10, match=100.0 - 10 * v)
        for setting, values in table.items()
        for i, v in enumerate(values)
    ]


def test_factor_choice_on_a_constructed_score_table():
    grid = DetectionGrid(groups=2, base=2, factors=(1, 2, 4, 8))
    nll = {  # group 0 is best at 8, group 1 at 1 (means over two samples); the base setting is (2, 2)
        (2, 2): [1.0, 1.2],
        (1, 2): [1.5, 1.5],
        (4, 2): [0.9, 0.9],
        (8, 2): [0.5, 0.7],
        (2, 1): [0.2, 0.4],
        (2, 4): [1.1, 1.1],
        (2, 8): [3.0, 3.0],
    }
    probes = _probes(nll)
    table = score_table(probes, "nll", samples=2)
    assert table[(8, 2)] == pytest.approx(0.6)
    choices = choose_factors(grid, table, "nll", (0, 4, 8))
    assert [c.factor for c in choices] == [8, 1]
    assert choices[0].scores == {1: 1.5, 2: pytest.approx(1.1), 4: 0.9, 8: pytest.approx(0.6)}
    assert choices[1].frequencies == (4, 8)
    # the string-match score (higher is better) picks the same factors here
    matches = score_table(probes, "generate", 2)
    assert [c.factor for c in choose_factors(grid, matches, "generate", (0, 4, 8))] == [8, 1]
    # ties: the base factor when it is among the best, else the smallest
    flat = {setting: 0.0 for setting in nll}
    assert [c.factor for c in choose_factors(grid, flat, "generate", (0, 4, 8))] == [2, 2]
    no_base = {**flat, (2, 2): -1.0}
    assert [c.factor for c in choose_factors(grid, no_base, "generate", (0, 4, 8))] == [1, 1]
    # a setting measured on fewer samples than asked is missing, and the choice says so
    partial = score_table(probes[:-1], "nll", samples=2)
    assert (2, 8) not in partial
    with pytest.raises(LampeEvalError, match="group 1 at factor 8"):
        choose_factors(grid, partial, "nll", (0, 4, 8))


def test_qk_two_norm_ranking_on_constructed_states():
    torch.manual_seed(0)
    tokens, head_dim = 5, 8  # 4 frequencies: pairs (f, f + 4)
    q = torch.zeros(tokens, 2, head_dim)
    k = torch.zeros(tokens, 1, head_dim)
    q[:, 0, 2], q[:, 0, 6] = 3.0, 4.0  # head 0: |q_2| = 5
    q[:, 0, 1] = 1.0  # |q_1| = 1
    q[:, 1, 3] = 2.0  # head 1: |q_3| = 2
    q[:, 1, 0] = 10.0  # |q_0| = 10, but its key is 0
    k[:, 0, :] = torch.tensor([0.0, 1.0, 1.0, 3.0, 0.0, 0.0, 0.0, 4.0])  # |k| = 0, 1, 1, 5
    assert torch.allclose(pair_norms(q)[0, 0], torch.tensor([0.0, 1.0, 5.0, 0.0]))
    contribution = qk_contribution(q, k)  # the one key head serves both query heads
    assert torch.allclose(contribution, torch.tensor([[0.0, 1.0, 5.0, 0.0], [0.0, 0.0, 0.0, 10.0]]))
    top = top_dimensions(contribution[None], 1)
    assert top.tolist() == [[[2], [3]]]
    dims = DimensionSelection([16], 1, 2, contribution[None, None, None])
    assert dims.shares() == [0.0, 0.5, 1.0, 0.5] and dims.group_shares((0, 2, 4)) == [0.25, 0.75]
    with pytest.raises(LampeEvalError, match="3 query heads for 2 key heads"):
        qk_contribution(torch.ones(2, 3, 4), torch.ones(2, 2, 4))


def test_the_backend_hands_over_pre_rope_queries_and_keys():
    model = tiny_llama(layers=2, heads=4, kv_heads=2, head_dim=8, window=64, vocab=32, seed=2)
    lm = LoadedModel("tiny", model, None, 64, False)
    seen: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    ids = list(range(1, 11))
    HFBackend(lm).attention_inputs(ids, lambda layer, q, k: seen.__setitem__(layer, (q, k)))
    assert sorted(seen) == [0, 1]
    q, k = seen[0]
    assert q.shape == (10, 4, 8) and k.shape == (10, 2, 8)
    hidden = model.model.layers[0].input_layernorm(model.model.embed_tokens(torch.tensor([ids])))
    expected = model.model.layers[0].self_attn.q_proj(hidden)[0].view(10, 4, 8)
    assert torch.allclose(q, expected, atol=1e-6)  # the projection's output: no rotation applied


def _report() -> SelectReport:
    grid = DetectionGrid(groups=4, base=2, factors=(1, 2, 4, 8))
    table = {s: float(sum(s)) for s in grid.settings()}  # lower NLL for smaller factors: s=1 everywhere
    choices = choose_factors(grid, table, "nll", (0, 8, 16, 24, 32))
    groups = (0, 8, 16, 24, 32)
    return SelectReport("tiny", 8192, 32, 1024, 10240, "official", "nll", 1, groups, grid, choices)


def test_the_config_round_trips_into_a_valid_dpe_method(tmp_path):
    from lampe_eval.tools.dpe_report import write_config

    report = _report()
    assert report.scale_factors == [1, 1, 1, 1]
    path = write_config(tmp_path / "dpe-tiny.yaml", report)
    text = path.read_text()
    assert text.startswith("# DPE settings found by `lampe-eval dpe-select`") and "46b85de" in text
    data = yaml.safe_load(text)
    assert data == {**config_document(report), "selection": data["selection"]}
    params = params_from_config(data)
    assert params == {
        "variant": "official",
        "window": 1024,
        "scale_factors": [1, 1, 1, 1],
        "dimension_groups": [0, 8, 16, 24, 32],
    }
    method = resolve_method("dpe", 8192, 16384, params=params, configs=False).method
    method.validate()
    assert method.frequency_factors(32).tolist() == [1.0] * 32
    assert data["selection"]["scores"]["group 3 (frequencies 24-31)"] == {1: 7.0, 2: 8.0, 4: 10.0, 8: 14.0}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--score", "bleu"], "--score must be one of nll, generate"),
        (["--groups", "0"], "--groups, --samples and --dim-samples must be at least 1"),
        (["--factors", "1,x"], "--factors must be integers"),
        (["--factors", "0,2"], "--factors must be integers >= 1"),
        (["--len", "4k"], "--len 4k is within the model's 8k window"),
        (["--len", "12q"], "bad length '12q'"),
        (["--variant", "fast"], "--variant must be official or paper"),
        (["--dim-len", "0"], "bad length '0'"),
    ],
)
def test_bad_input_is_one_line_before_any_load(args, message, monkeypatch, tmp_path):
    import lampe_eval.models

    monkeypatch.setattr(lampe_eval.models, "load_model", lambda *a, **k: pytest.fail("loaded a model"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    result = CliRunner().invoke(app, ["dpe-select", *args, "--out", str(tmp_path / "o")])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], result.output


def test_the_command_end_to_end_on_a_tiny_model(tmp_path, monkeypatch, one_thread, smollm2_tokenizer):
    import lampe_eval.models

    model = tiny_llama(layers=2, heads=4, kv_heads=2, head_dim=16, window=256, vocab=len(smollm2_tokenizer))
    lm = LoadedModel("tiny", model, smollm2_tokenizer, 256, True)
    monkeypatch.setattr(lampe_eval.models, "load_model", lambda name, **kw: lm)
    monkeypatch.setattr(lampe_eval.models, "resolve_source", lambda name: (name, None))
    monkeypatch.setattr(lampe_eval.models, "known_window", lambda name: 256)
    config = tmp_path / "dpe-tiny.yaml"
    out = tmp_path / "out"
    args = ["dpe-select", "--model", "tiny", "--len", "512", "--groups", "2", "--factors", "1,4"]
    args += ["--samples", "1", "--dim-len", "64,32", "--dim-samples", "2", "--topk", "3"]
    args += ["--opt", "essay=offline", "--out", str(out), "--config", str(config)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    data = yaml.safe_load(config.read_text())
    params = data["params"]
    assert params["dimension_groups"] == [0, 4, 8] and params["window"] == 32  # dpe's w for a 256 window
    assert data["selection"]["base_factor"] == 4 and data["selection"]["detect_factors"] == [1, 4]
    for scores in data["selection"]["scores"].values():  # each group's factor is its lowest answer NLL
        assert set(scores) == {1, 4}
    chosen = [min(s, key=s.get) for s in data["selection"]["scores"].values()]
    assert params["scale_factors"] == chosen
    resolve_method("dpe", 256, 512, params=params_from_config(data), configs=False).method.validate()
    norms = torch.load(out / "qk_2_norm-tiny.pt")
    assert norms.shape == (2, 2, 2, 4, 8)  # lengths, samples, layers, heads, frequencies
    dims = json.loads((out / "dpe-dims-tiny.json").read_text())
    assert dims["topk"] == 3 and len(dims["top_per_layer_head"][0][0]) == 3
    probes = (next(out.glob("dpe-probes-tiny-*.jsonl"))).read_text().splitlines()
    assert len(probes) == 3  # (4, 4), (1, 4), (4, 1): one sample each
    # each probe is an ordinary job's record: dpe with the setting on ruler/niah_multivalue, its engine
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert sorted(r["resolved_params"]["scale_factors"] for r in records) == [[1, 4], [4, 1], [4, 4]]
    for record in records:
        assert (record["method"], record["benchmark"], record["task"], record["length"]) == (
            "dpe",
            "ruler",
            "niah_multivalue",
            512,
        )
        assert record["options"]["score"] == "answer_nll" and record["engine"]["backend"] == "hf"
    by_setting = {tuple(r["resolved_params"]["scale_factors"]): r["scores"]["answer_nll"] for r in records}
    assert {tuple(p["factors"]): p["nll"] for p in map(json.loads, probes)} == by_setting
    # a rerun measures nothing again
    monkeypatch.setattr(
        "lampe_eval.benchmarks.ruler.benchmark.RulerBenchmark.evaluate",
        lambda *a, **k: pytest.fail("re-measured"),
    )
    again = CliRunner().invoke(app, [*args, "--no-dims"])
    assert again.exit_code == 0, again.output


def test_what_the_tool_sets_or_the_backend_cannot_do_is_one_line_before_any_load(monkeypatch, tmp_path):
    import lampe_eval.models
    from lampe_eval.tools.dpe_request import SelectRequest
    from lampe_eval.tools.dpe_select import run_select

    monkeypatch.setattr(lampe_eval.models, "load_model", lambda *a, **k: pytest.fail("loaded a model"))
    monkeypatch.setattr(lampe_eval.models, "load_for_engine", lambda *a, **k: pytest.fail("loaded a model"))
    out = tmp_path / "o"
    with pytest.raises(LampeEvalError, match="sets the RULER option score itself"):
        run_select(SelectRequest(options={"score": "answer_nll"}, out=out))
    with pytest.raises(LampeEvalError, match="the vllm backend cannot hand over queries and keys"):
        run_select(SelectRequest(backend="vllm", out=out))
    with pytest.raises(LampeEvalError, match="--backend 'nope'"):
        run_select(SelectRequest(backend="nope", dimensions=False, out=out))
    assert not out.exists()
