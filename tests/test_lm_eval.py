"""The ``lampe`` model type for lm-evaluation-harness, offline on the embedded SmolLM2.

Three local tasks (tests/fixtures/lm_eval: multiple choice, generation, rolling perplexity) run through
lm-eval's Python API: ``--model lampe`` with ``method=rope`` must give exactly what lm-eval's plain ``hf``
model gives on the same weights (the embedded model's fp32 copy), and ``method=lampe`` must run and
change the log-likelihoods.
"""

from __future__ import annotations

import functools
import logging
import math
import sys
from pathlib import Path
from typing import Any

import pytest
from lm_eval import simple_evaluate
from lm_eval.api.registry import Registry, get_model
from lm_eval.tasks import TaskManager

from lampe_eval.errors import LampeEvalError
from lampe_eval.integrations import lm_eval as lampe_lm_eval
from lampe_eval.integrations import lm_eval_cli
from lampe_eval.integrations.lm_eval import LampeLM, resolve_method
from lampe_eval.method_configs import load_method_params
from tests.helpers.lm_eval_tasks import TASK_DIR, responses

ROOT = Path(__file__).resolve().parent.parent
TASKS = ["lampe_fixture_mc", "lampe_fixture_gen", "lampe_fixture_ppl"]
LAMPE_ARGS = "param_m=32,param_s1=8,param_s2=4,param_identity_within_window=false"


def evaluate(model: str, model_args: str, batch_size: int = 1) -> dict[str, Any]:
    results = simple_evaluate(
        model=model,
        model_args=model_args,
        tasks=TASKS,
        task_manager=TaskManager(include_path=str(TASK_DIR), include_defaults=False),
        device="cpu",
        batch_size=batch_size,
        log_samples=True,
        bootstrap_iters=0,
    )
    assert results is not None
    return results


def loglikelihoods(results: dict[str, Any], task: str) -> list[float]:
    out: list[float] = []
    for resps in responses(results, task):
        out.extend(r[0] if isinstance(r, (list, tuple)) else r for r in resps)
    return out


@pytest.fixture(scope="module")
def hf_results(smollm2: Any) -> dict[str, Any]:
    """lm-eval's own hf model on the embedded model's de-quantised fp32 copy (the smollm2 fixture made it)."""
    from lampe_eval.models import _embedded_cache

    return evaluate("hf", f"pretrained={_embedded_cache()},dtype=float32")


@pytest.fixture(scope="module")
def rope_results(smollm2: Any) -> dict[str, Any]:
    return evaluate("lampe", "pretrained=smollm2-135m,method=rope")


@pytest.fixture(scope="module")
def lampe_results(smollm2: Any) -> dict[str, Any]:
    # Contexts of 40-130 tokens, far inside the 8K window: a fixed mapping length of 32 with a small
    # head and tail makes LaMPE remap them. Batch size 4 is asked for and must be forced to 1.
    return evaluate("lampe", f"pretrained=smollm2-135m,method=lampe,{LAMPE_ARGS}", batch_size=4)


def test_registered_in_lm_eval() -> None:
    assert get_model("lampe") is LampeLM


def test_entry_point_resolves_to_the_model_type() -> None:
    """lm-eval versions that discover ``lm_eval.models`` entry points register ours as a placeholder
    and materialise it on first use; the declared target must be this class."""
    tomllib = pytest.importorskip("tomllib")
    from importlib.metadata import EntryPoint

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    target = project["entry-points"]["lm_eval.models"]["lampe"]
    registry: Registry[Any] = Registry("model")
    registry.register("lampe", target=EntryPoint(name="lampe", value=target, group="lm_eval.models"))
    assert registry.get("lampe") is LampeLM
    assert project["scripts"]["lampe-lm-eval"] == "lampe_eval.integrations:lm_eval_cli"


def test_method_parameters_resolve_like_the_runner() -> None:
    """method default < method_configs/ (model, length, benchmark) < param_ overrides."""
    from_file = load_method_params("lampe", "smollm2-135m", 16384)
    assert from_file, "expected method_configs/lampe-smollm2-135m.yaml"
    params = resolve_method("smollm2-135m", "lampe", 8192, 16384, None, {"s1": 8}).params()
    assert params["s1"] == 8
    assert all(params[k] == v for k, v in from_file.items() if k != "s1")
    # a by_benchmark block applies only when its benchmark is named
    pg19 = load_method_params("lampe", "llama3-8b-instruct", 8192, "leval")
    plain = load_method_params("lampe", "llama3-8b-instruct", 8192)
    assert pg19 != plain
    with_block = resolve_method("llama3-8b-instruct", "lampe", 8192, 8192, "leval").params()
    assert all(with_block[k] == v for k, v in pg19.items())
    # no config file: the method's own defaults for (window, length)
    assert resolve_method("some/model", "yarn", 4096, 16384).params()["factor"] == 4.0


def no_load(*args: Any, **kwargs: Any) -> None:
    raise AssertionError("the model must not load")


@pytest.mark.parametrize(
    ("model_args", "message"),
    [
        ({"method": "nope"}, "unknown method 'nope'"),
        ({"method": "lampe", "param_window": 8}, "has no parameter window"),
        ({"method": "lampe", "lenght": "16k"}, "unknown model argument 'lenght'"),
        ({"revision": "v2"}, "'revision' is not supported"),
        ({"length": "16q"}, "bad length"),
        ({"pretrained": "no-such-preset"}, "unknown model"),
        ({"method": "lampe", "param_s1": 9000}, r"must exceed s1 \+ s2"),
    ],
)
def test_bad_arguments_fail_before_loading(
    monkeypatch: pytest.MonkeyPatch, model_args: dict[str, Any], message: str
) -> None:
    monkeypatch.setattr(lampe_lm_eval, "load_model", no_load)
    with pytest.raises(LampeEvalError, match=message):
        LampeLM(**model_args)


def test_cli_hands_over_to_lm_eval_and_reports_errors_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``lampe-lm-eval`` is lm-eval's command line with the model type registered: lm-eval parses the
    arguments and builds ``--model lampe`` from ``--model_args``; a bad one ends in one line, exit 2."""
    import lm_eval.__main__
    import lm_eval.tasks

    monkeypatch.setattr(lm_eval.__main__, "setup_logging", lambda: None)  # it reconfigures logging globally
    # the fixture tasks only: indexing lm-eval's ~15,000 built-in tasks takes seconds
    monkeypatch.setattr(lm_eval.tasks, "TaskManager", functools.partial(TaskManager, include_defaults=False))
    monkeypatch.setattr(lampe_lm_eval, "load_model", no_load)
    argv = ["lampe-lm-eval", "--model", "lampe", "--model_args", "method=lampe,lenght=16k"]
    argv += ["--tasks", "lampe_fixture_ppl", "--include_path", str(TASK_DIR), "--device", "cpu"]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exited:
        lm_eval_cli()
    assert exited.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("error: unknown model argument 'lenght' for --model lampe")


def test_a_model_that_asks_for_its_own_code_is_refused_before_it_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``pretrained=`` a directory whose config maps the Auto classes to its own modules: one line, exit
    2, through lm-eval's command line, and none of the modules is imported (they would create ``marker``)."""
    import lm_eval.__main__
    import lm_eval.tasks

    from tests.helpers.remote_code import refused, remote_code_model

    model, marker = remote_code_model(tmp_path)
    with pytest.raises(LampeEvalError, match="lampe-eval never executes a model's own code"):
        LampeLM(pretrained=str(model))
    monkeypatch.setattr(lm_eval.__main__, "setup_logging", lambda: None)
    monkeypatch.setattr(lm_eval.tasks, "TaskManager", functools.partial(TaskManager, include_defaults=False))
    argv = ["lampe-lm-eval", "--model", "lampe", "--model_args", f"pretrained={model},method=lampe"]
    argv += ["--tasks", "lampe_fixture_ppl", "--include_path", str(TASK_DIR), "--device", "cpu"]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exited:
        lm_eval_cli()
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    refused(err.strip().splitlines()[-1], model)
    assert not marker.exists()


@pytest.mark.slow
def test_rope_equals_lm_eval_hf(hf_results: dict[str, Any], rope_results: dict[str, Any]) -> None:
    for task in TASKS:
        assert responses(rope_results, task) == responses(hf_results, task), task
        assert rope_results["results"][task] == hf_results["results"][task], task
    assert len(responses(rope_results, "lampe_fixture_mc")) == 4
    assert all(len(r[0]) > 0 for r in responses(rope_results, "lampe_fixture_gen")[1:])


@pytest.mark.slow
def test_lampe_runs_and_changes_loglikelihoods(
    rope_results: dict[str, Any], lampe_results: dict[str, Any]
) -> None:
    config = lampe_results["config"]
    assert config["lampe_method"] == "lampe"
    assert {k: config["lampe_method_params"][k] for k in ("m", "s1", "s2")} == {"m": 32, "s1": 8, "s2": 4}
    assert config["lampe_method_params"]["identity_within_window"] is False
    for task in ("lampe_fixture_mc", "lampe_fixture_ppl"):
        ours, plain = loglikelihoods(lampe_results, task), loglikelihoods(rope_results, task)
        assert len(ours) == len(plain) > 0
        assert all(math.isfinite(x) for x in ours)
        assert max(abs(a - b) for a, b in zip(ours, plain, strict=True)) > 0.1, task
    # generation ran through the patched decode path: one text per document
    gen = responses(lampe_results, "lampe_fixture_gen")
    assert len(gen) == 3 and all(isinstance(r[0], str) for r in gen)


def test_patched_methods_force_batch_size_one(caplog: pytest.LogCaptureFixture, smollm2: Any) -> None:
    with caplog.at_level(logging.WARNING, logger="lm_eval.models.lampe"):
        lm = LampeLM(pretrained="smollm2-135m", method="lampe", length="16k", batch_size=8, device="cpu")
    try:
        assert lm.batch_size == 1
        assert "batch_size 8 -> 1" in caplog.text
        assert lm.max_length == 16384  # lm-eval must not truncate inputs to the 8K window
    finally:
        lm.patch.remove()
