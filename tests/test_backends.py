"""The inference seam: benchmarks send requests to a backend, one generation path, batching for every
benchmark.

- every generation path (the plain one, LongBench samsum's newline stop, L-Eval's fact question, LongBench
  v2's chain of thought, lm-eval's ``generate_until``) tells the method its budget (prompt + new tokens),
  which LaMPE's ``identity_within_window`` decides on;
- ``--batch-size 4`` gives the records of batch size 1 on LongBench, L-Eval and LongBench v2 data whose
  prompts share token counts (so batches really form);
- only ``lampe_eval/backends/`` touches a model object.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest

from lampe_eval.backends import GenerationRequest
from lampe_eval.backends.hf import HFBackend
from lampe_eval.backends.rounds import evaluate_one, evaluate_samples
from lampe_eval.benchmarks import SampleContext, get_benchmark
from lampe_eval.benchmarks import leval as le
from lampe_eval.benchmarks import longbench as lb
from lampe_eval.benchmarks import longbench_v2 as v2
from lampe_eval.methods import create_method
from lampe_eval.methods.lampe import LaMPE
from lampe_eval.models import LoadedModel
from lampe_eval.runner.experiment import Experiment
from lampe_eval.runner.jobs import Job
from lampe_eval.runner.local import run
from lampe_eval.runner.store import ResultStore
from lampe_eval.testing import tiny_llama
from tests.fakebackend import ScriptedBackend

FIXTURES = Path(__file__).parents[1] / "lampe_eval" / "resources" / "fixtures"
PACKAGE = Path(__file__).parents[1] / "lampe_eval"
WINDOW = 256


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


@pytest.fixture(autouse=True)
def _short_budgets(monkeypatch: pytest.MonkeyPatch) -> None:
    """LongBench's 64-512, L-Eval's 512 and LongBench v2's 1024 + 128 new tokens cut to a few (a random
    model never stops)."""
    leval_config, v2_config, lb_config = le.load_config(), v2.load_config(), lb.load_config()
    datasets = {n: dataclasses.replace(d, max_new_tokens=7) for n, d in lb_config.datasets.items()}
    short_lb = dataclasses.replace(lb_config, datasets=datasets)
    monkeypatch.setattr(lb, "load_config", lambda: short_lb)
    monkeypatch.setattr(le, "load_config", lambda: dataclasses.replace(leval_config, max_new_tokens=6))
    short = dataclasses.replace(v2_config, max_new_tokens=4, cot_max_new_tokens=5)
    monkeypatch.setattr(v2, "load_config", lambda: short)


def tiny_smollm(tokenizer: Any) -> LoadedModel:
    """A tiny random Llama with SmolLM2's tokenizer and a 256-token window (prompts pass it)."""
    model = tiny_llama(window=WINDOW, vocab=len(tokenizer), seed=1)
    return LoadedModel("tiny-smollm", model, tokenizer, WINDOW, True)


# ------------------------------------------------------------------------------ the budget on every path
def spy_budgets(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, int | None]]:
    seen: list[tuple[int, int, int | None]] = []
    original = LaMPE.plan_with_budget

    def spy(self: LaMPE, base: Any, context_length: int, kv_len: int, total_length: int | None) -> Any:
        seen.append((context_length, kv_len, total_length))
        return original(self, base, context_length, kv_len, total_length)

    monkeypatch.setattr(LaMPE, "plan_with_budget", spy)
    return seen


PATHS = [  # (benchmark, task, options, new tokens per request)
    ("longbench", "trec", {}, [7]),
    ("longbench", "samsum", {}, [7]),  # the newline stop, at least one token
    ("leval", "sci_fi", {}, [6, 6]),  # the answer and the fact question
    ("longbench_v2", "longbench_v2", {"cot": True}, [5, 4]),  # the reasoning, then the answer
]


@pytest.mark.parametrize("bench_name,task,options,budgets", PATHS)
def test_every_generation_path_tells_the_method_its_budget(
    smollm2_tokenizer: Any,
    monkeypatch: pytest.MonkeyPatch,
    bench_name: str,
    task: str,
    options: dict,
    budgets,
) -> None:
    seen = spy_budgets(monkeypatch)
    lm = tiny_smollm(smollm2_tokenizer)
    bench = get_benchmark(bench_name)
    ctx = SampleContext(lm=lm, length=2048, limit=1, options={"fixture": True, **options})
    (sample,) = list(bench.samples(task, ctx))
    backend = HFBackend(lm)
    requests: list[GenerationRequest] = []
    original = backend.generate
    monkeypatch.setattr(backend, "generate", lambda rs: requests.extend(rs) or original(rs))
    with backend.install(create_method("lampe", WINDOW, 2048, identity_within_window=True)):
        evaluate_one(backend, bench.evaluate(sample, ctx))
    assert [r.max_new_tokens for r in requests] == budgets
    starts = {c for c, _, _ in seen}
    assert len(starts) == len(requests)  # one prefill per request
    for context_length, _, total in seen:  # every plan knows prompt + budget
        (budget,) = [r.max_new_tokens for r in requests if backend.batch_key(r)[1] == context_length]
        assert total == context_length + budget
    if task == "samsum":
        assert requests[0].min_new_tokens == 1 and len(requests[0].stop_token_ids) == 1


def test_lm_eval_generate_until_tells_the_method_its_budget(monkeypatch: pytest.MonkeyPatch, smollm2) -> None:
    pytest.importorskip("lm_eval")
    from lm_eval.api.instance import Instance

    from lampe_eval.integrations.lm_eval import LampeLM

    seen = spy_budgets(monkeypatch)
    lm = LampeLM(pretrained="smollm2-135m", method="lampe", length="16k", device="cpu")
    try:
        request = Instance(
            "generate_until", {}, ("The book of Genesis begins", {"until": ["\n\n"], "max_gen_toks": 5}), 0
        )
        lm.generate_until([request])
    finally:
        lm.patch.remove()
    prompt = len(lm.tok_encode("The book of Genesis begins"))
    assert seen and {(c, t) for c, _, t in seen} == {(prompt, prompt + 5)}


# ----------------------------------------------------------------------------- batching for every benchmark
def numbered(record: dict[str, Any], field: str, i: int) -> dict[str, Any]:
    """The record with one digit changed in ``field`` (the same token count, other content)."""
    text = record[field]
    return {**record, field: f"Record {i}. " + text if isinstance(text, str) else text}


def write_variants(directory: Path, name: str, records: list[dict[str, Any]], field: str, ids: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    variants = []
    for i in range(1, 5):
        for r in records:
            variant = numbered(r, field, i)
            if ids:
                variant[ids] = f"{r.get(ids, 'r')}-{i}"
            variants.append(variant)
    (directory / name).write_text("".join(json.dumps(v) + "\n" for v in variants))


def read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


CASES = [  # (benchmark, tasks, options, fixture files and the field that gets a digit, id field)
    ("longbench", ["samsum", "trec"], {}, "longbench", "context", "_id"),
    ("leval", ["sci_fi", "coursera"], {}, "leval", "input", ""),
    ("longbench_v2", ["longbench_v2"], {}, "longbench_v2", "question", "_id"),
    ("longbench_v2", ["longbench_v2"], {"cot": True}, "longbench_v2", "question", "_id"),
]


@pytest.mark.parametrize("bench_name,tasks,options,folder,field,ids", CASES)
def test_batch_size_4_gives_the_records_of_batch_size_1(
    tmp_path: Path,
    smollm2_tokenizer: Any,
    bench_name: str,
    tasks: list[str],
    options: dict,
    folder,
    field,
    ids,
) -> None:
    data = tmp_path / "data"
    option_dir = {"longbench": "longbench_dir", "leval": "leval_dir", "longbench_v2": "longbench_v2_dir"}
    for task in tasks:
        name = "data.json" if bench_name == "longbench_v2" else f"{task}.jsonl"
        records = read(FIXTURES / folder / f"{task}.jsonl")
        if bench_name == "longbench_v2":
            variants = []
            for i in range(1, 5):
                variants += [{**numbered(r, field, i), "_id": f"{r['_id']}-{i}"} for r in records]
            data.mkdir(exist_ok=True)
            (data / name).write_text(json.dumps(variants))
        else:
            write_variants(data, name, records, field, ids)
    model = tiny_smollm(smollm2_tokenizer)
    jobs = [
        Job(
            "tiny",
            "lampe",
            bench_name,
            task,
            1024,
            {},
            options={option_dir[bench_name]: str(data), **options},
        )
        for task in tasks
    ]
    outs = {}
    for batch in (1, 4):
        out = tmp_path / f"b{batch}"
        run(Experiment.from_jobs(jobs, out, load=lambda name: model, batch_size=batch)).raise_for_failures()
        outs[batch] = [r.to_json() for r in ResultStore(out).unique_records()]
    assert len(outs[1]) == len(outs[4]) >= 8
    assert max(r["batch_size"] for r in outs[4]) > 1  # batches really formed
    assert {r["batch_size"] for r in outs[1]} == {1}

    def same(record: dict[str, Any]) -> tuple[Any, ...]:
        output = {k: v for k, v in record["output"].items() if k != "seconds"}
        return (record["key"], output, record["scores"], record["prompt_tokens"], record["prompt_hash"])

    assert sorted(map(same, outs[4])) == sorted(map(same, outs[1]))


def test_rounds_of_many_samples_are_batched_by_key(lm: LoadedModel) -> None:
    """A scripted backend: two-round samples interleave, each gets its own answers in order."""
    bench = get_benchmark("longbench_v2")
    ctx = SampleContext(lm=lm, length=4096, options={"fixture": True, "cot": True})
    samples = list(bench.samples("longbench_v2", ctx))
    replies = [f"reasoning {i}" for i in range(len(samples))] + ["(A)"] * len(samples)
    backend = ScriptedBackend(lm, replies, batch_size=len(samples))
    done = list(evaluate_samples(backend, samples, lambda s: bench.evaluate(s, ctx)))
    assert sorted(d.output["response_cot"] for d in done) == sorted(replies[: len(samples)])
    assert {d.batch_size for d in done} == {len(samples)}
    assert [r.max_new_tokens for r in backend.requests] == [5] * len(samples) + [4] * len(samples)


# ------------------------------------------------------------------------------------- the architecture
MODEL_USE = re.compile(r"\blm\.model\b|\.model\.generate\(|(?<!\.)\b(apply_method|rope_base|new_cache)\(")
# where a model object may be touched: the backends, the loader, the patch itself; lm-eval's HFLM drives the
# model it is handed (it gets it from the backend)
ALLOWED = {"backends", "models", "integrations/lm_eval.py"}


def test_only_backends_touch_the_model_object() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative in ALLOWED or relative.split("/")[0] in ALLOWED:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if MODEL_USE.search(line) and not line.lstrip().startswith("#"):
                found.append(f"{relative}:{number}: {line.strip()}")
    assert not found, found
