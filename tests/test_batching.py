"""``--batch-size N``: samples of one job with equal token counts run together, with the results of N = 1.

Exact equality is the claim (no padding, so every method's positions are those of a lone sequence; the
CPU kernels are called per sequence where their reduction order would depend on the batch).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

from lampe_eval.backends import GenerationRequest
from lampe_eval.backends.hf import HFBackend
from lampe_eval.errors import LampeEvalError
from lampe_eval.methods import create_method
from lampe_eval.runner.experiment import Experiment, RunSettings
from lampe_eval.runner.jobs import Job
from lampe_eval.runner.local import gpu_groups, make_handles, run
from lampe_eval.runner.store import ResultStore
from lampe_eval.runner.worker import WorkerConfig
from tests.fakebench import CharTokenizer, load_tiny_chars

VARYING = ("seconds", "time", "batch_size", "worker")  # how long, when and how it ran: not results


class GenTokenizer(CharTokenizer):
    pad_token_id = None
    eos_token_id = 0


def results(out) -> dict[str, tuple[Any, Any]]:
    return {r.key: (r.output, r.scores) for r in ResultStore(out).unique_records()}


def strip(outputs: dict[str, tuple[Any, Any]]) -> dict[str, tuple[Any, Any]]:
    return {k: ({n: v for n, v in o.items() if n not in VARYING}, s) for k, (o, s) in outputs.items()}


def test_pg19_batched_equals_one_at_a_time(tmp_path):
    books = tmp_path / "books"
    books.mkdir()
    for i in range(5):  # five books, one 200-token passage each: batches of 2, 2 and 1
        (books / f"{i}.txt").write_text(
            f"Book {i}. " + "".join(chr(97 + (i * 7 + j * j) % 26) for j in range(400))
        )
    job = Job("tiny", "lampe", "pg19", "pg19", 200, {}, options={"pg19_dir": str(books), "pg19_chunk": 64})
    outs = {}
    for batch in (1, 2):
        out = tmp_path / f"b{batch}"
        experiment = Experiment.from_jobs([job], out, load=load_tiny_chars, batch_size=batch)
        run(experiment).raise_for_failures()
        outs[batch] = results(out)
        sizes = {r.batch_size for r in ResultStore(out).unique_records()}
        assert sizes == ({1} if batch == 1 else {1, 2})
    assert len(outs[1]) == 5
    assert strip(outs[2]) == strip(outs[1])  # every NLL bit for bit


@pytest.mark.parametrize("method", ["rope", "lampe"])
def test_batched_greedy_generation_equals_one_prompt_at_a_time(method):
    lm = load_tiny_chars("tiny")
    lm.tokenizer = GenTokenizer()
    prompts = ["".join(chr(97 + (s * 5 + j * 3) % 26) for j in range(120)) for s in range(3)]
    lone_backend, batch_backend = HFBackend(lm), HFBackend(lm, batch_size=4)
    with lone_backend.install(create_method(method, lm.pretraining_window, 140)):
        (lone,) = lone_backend.generate([GenerationRequest(prompts[0], 12)])
        # make a token this row generates mid-way the end-of-sequence token: the row stops there alone,
        # and must stop there in the batch too (where the other rows go on)
        stop_token = 2 + ord(lone.text[4]) % 126
        lm.model.generation_config.eos_token_id = stop_token
        requests = [GenerationRequest(p, 12) for p in prompts[:2]]
        requests.append(GenerationRequest(prompts[2], 12, stop=(lone.text[1],)))
        # a request of another length and one of another budget run in batches of their own
        requests += [GenerationRequest(prompts[0][:100], 12), GenerationRequest(prompts[1], 9)]
        singles = [lone_backend.generate([r])[0] for r in requests]
        batched = batch_backend.generate(requests)
    assert singles[0].new_tokens < 12  # the stop token did stop the lone generation early
    assert [dataclasses.replace(g, seconds=0) for g in batched] == [
        dataclasses.replace(g, seconds=0) for g in singles
    ]
    keys = [batch_backend.batch_key(r) for r in requests]
    assert keys[0] == keys[1] == keys[2] and len(set(keys)) == 3


def test_settings_are_checked_before_any_model_loads(tmp_path):
    job = Job("tiny", "rope", "pg19", "pg19", 300, {})
    for settings, message in [
        ({"batch_size": 0}, "--batch-size must be at least 1"),
        ({"gpus_per_worker": 0}, "--gpus-per-worker must be at least 1"),
        ({"device_map": "balanced"}, "only 'auto'"),
        ({"device_map": "auto", "device": "cpu"}, "drop --device cpu"),
    ]:
        experiment = Experiment.from_jobs([job], tmp_path, **settings)
        with pytest.raises(LampeEvalError, match=message):
            make_handles(WorkerConfig(), ResultStore(tmp_path), experiment.settings)


def test_gpus_per_worker_groups_the_gpus(monkeypatch, tmp_path):
    assert gpu_groups(["0", "1", "2", "3", "4", "5", "6", "7"], 4, None) == [
        ["0", "1", "2", "3"],
        ["4", "5", "6", "7"],
    ]
    with pytest.raises(LampeEvalError, match="give --gpus a multiple of 4"):
        gpu_groups(["0", "1", "2"], 4, None)
    with pytest.raises(LampeEvalError, match="--workers 3 with 2 group"):
        gpu_groups(["0", "1", "2", "3"], 2, 3)
    started = []

    class Recorder:
        def __init__(self, config, out, name, env, lock):
            started.append((name, env, config.device, config.device_map, config.settings.batch_size))

    monkeypatch.setattr("lampe_eval.runner.local.ProcessHandle", Recorder)
    settings = RunSettings(gpus=("0", "1", "2", "3"), gpus_per_worker=2, batch_size=4)
    make_handles(WorkerConfig(), ResultStore(tmp_path), settings)
    assert started == [
        ("gpu-0-1", {"CUDA_VISIBLE_DEVICES": "0,1"}, "cuda", "auto", 4),
        ("gpu-2-3", {"CUDA_VISIBLE_DEVICES": "2,3"}, "cuda", "auto", 4),
    ]


def test_ray_actors_ask_for_their_gpus(monkeypatch, tmp_path):
    asked = {}

    def fake_ray_handles(config, store, **kwargs):
        asked.update(kwargs, device_map=config.device_map)
        return []

    monkeypatch.setattr("lampe_eval.runner.ray_backend.ray_handles", fake_ray_handles)
    make_handles(WorkerConfig(), ResultStore(tmp_path), RunSettings(ray=True, gpus_per_worker=4))
    assert asked["gpus_per_worker"] == 4 and asked["device_map"] == "auto"


def test_the_cpu_kernel_is_batch_invariant():
    """One-row pieces (decode steps, a block's first row) give each sequence the sums of a lone call."""
    from lampe_eval.attention import kernels

    q, k, v = torch.randn(3, 4, 1, 16), torch.randn(3, 2, 300, 16), torch.randn(3, 2, 300, 16)
    out, lse = kernels.run_piece(q, k, v, 0.25, "full", None, "cpu")
    for b in range(3):
        one = kernels.run_piece(q[b : b + 1], k[b : b + 1], v[b : b + 1], 0.25, "full", None, "cpu")
        assert torch.equal(out[b : b + 1], one[0]) and torch.equal(lse[b : b + 1], one[1])


def test_cli_options_reach_the_workers(tmp_path, capsys, monkeypatch):
    import lampe_eval.models
    from lampe_eval.cli import main

    monkeypatch.setattr(lampe_eval.models, "load_model", lambda name, **kw: load_tiny_chars(name))
    books = tmp_path / "books"
    books.mkdir()
    for i in range(2):
        (books / f"{i}.txt").write_text("".join(chr(97 + (i + j * j) % 26) for j in range(300)))
    args = ["run", "--bench", "pg19", "--len", "200", "--out", str(tmp_path / "R"), "--no-progress"]
    args += ["--opt", f"pg19_dir={books}"]
    with pytest.raises(SystemExit) as info:
        main([*args, "--batch-size", "0"])
    assert info.value.code == 2 and "--batch-size must be at least 1" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main([*args, "--batch-size", "2"])
    assert info.value.code in (0, None)
    assert {r.batch_size for r in ResultStore(tmp_path / "R").unique_records()} == {2}
