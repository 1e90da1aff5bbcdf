"""``lampe-eval serve`` (vLLM's OpenAI-compatible server with LaMPE in every worker) against a client this
project did not write, on a model beyond Llama: a random Qwen3 (per-head query/key norms before RoPE, run
by vLLM's own ``Qwen3Attention``) saved in a local directory. The ``openai`` package's client gets the
Hugging Face backend's greedy tokens for a token-id prompt (so the family runs on both backends with the
same arithmetic), 32 requests of different lengths from 4 clients at once get what each gets alone, a
prompt too long or a malformed request gets an HTTP 400 and the server keeps serving (so it does when a
client leaves mid-request), ``GET /lampe`` (and ``/v1/models``) names the method and its parameters, and
SIGTERM ends the server. (Phi-3 gave the HF backend's tokens for lampe, selfextend, dca and yarn when
checked by hand the same way; OLMo 2 is refused on vLLM: vLLM 0.32 runs it through its Transformers
fallback.)"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

pytest.importorskip("vllm")
openai = pytest.importorskip("openai")

from typer.testing import CliRunner  # noqa: E402

from lampe_eval.backends.base import GenerationRequest  # noqa: E402
from lampe_eval.backends.hf import HFBackend  # noqa: E402
from lampe_eval.cli import app  # noqa: E402
from lampe_eval.methods.resolve import resolve_method  # noqa: E402
from lampe_eval.models import load_model  # noqa: E402
from tests.helpers.random_models import save_random_model  # noqa: E402

pytestmark = pytest.mark.slow
WINDOW, LONGEST, NEW = 256, 1024, 8  # the random model's window: LaMPE's segments are all active at 600


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory, smollm2_tokenizer) -> str:
    """A random Qwen3 of 2 layers with SmolLM2's vocabulary and tokenizer (``save_random_model``)."""
    return save_random_model(str(tmp_path_factory.mktemp("qwen3")), smollm2_tokenizer, WINDOW, "qwen3")


@pytest.fixture(scope="module")
def server(qwen3, tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("serve") / "server.log"  # a file: a full pipe would stall the server
    command = [sys.executable, "-m", "lampe_eval", "serve", "--model", qwen3, "--method", "lampe"]
    command += ["--served-model-name", "qwen3", "--len", str(LONGEST), "--port", str(port)]
    command += ["--batch-size", "4"]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    output = log.open("w")
    process = subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the server exited: {log.read_text()[-3000:]}")
        try:
            urllib.request.urlopen(f"{base}/health", timeout=2)
            break
        except OSError:
            time.sleep(2)
    else:
        process.kill()
        pytest.fail("the server did not answer /health in 400 s")
    yield base, process
    try:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                pytest.fail("SIGTERM did not end the server in 60 s")
    finally:
        output.close()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server[0]}/v1", api_key="unused", max_retries=0, timeout=300)


def ids(length: int, seed: int = 4) -> list[int]:
    return torch.randint(100, 40000, (length,), generator=torch.Generator().manual_seed(seed)).tolist()


def served(client, prompt: list[int]) -> list[int]:
    """Greedy tokens for a token-id prompt (end tokens ignored: the count is fixed)."""
    answer = client.completions.create(
        model="qwen3",
        prompt=[prompt],
        max_tokens=NEW,
        temperature=0,
        extra_body={"return_token_ids": True, "ignore_eos": True},
    )
    return list(answer.choices[0].token_ids)


def test_get_lampe_names_the_method_and_its_parameters(server):
    info = json.load(urllib.request.urlopen(f"{server[0]}/lampe"))
    method = resolve_method("lampe", WINDOW, LONGEST).method
    assert info["method"] == "lampe" and info["model"] == "qwen3" and info["max_model_len"] >= LONGEST
    assert info["params"] == json.loads(json.dumps(method.params(), default=str))
    assert info["lampe_eval_version"] and "0.32" in info["vllm_version"]


def test_the_openai_client_gets_the_hf_backends_tokens(client, qwen3):
    hf = HFBackend(load_model(qwen3, device="cpu", dtype="float32"))
    prompt = ids(600)
    method = resolve_method("lampe", WINDOW, LONGEST, base=hf.rope_base()).method
    with hf.install(method):
        request = GenerationRequest("", NEW, input_ids=tuple(prompt), min_new_tokens=NEW)
        expected = list(hf.generate([request])[0].token_ids)
    assert served(client, prompt) == expected


def test_32_requests_from_4_clients_at_once_get_what_each_gets_alone(server):
    """32 prompts of 40-970 tokens, sent by 4 clients at once (8 each, the server batching 4): no plan
    crosses requests."""
    prompts = [ids(length, seed) for seed, length in enumerate(range(40, 1000, 30))]
    clients = [openai.OpenAI(base_url=f"{server[0]}/v1", api_key="-", max_retries=0) for _ in range(4)]
    alone = [served(clients[0], p) for p in prompts]
    with ThreadPoolExecutor(4) as pool:
        parts = list(pool.map(lambda k: [served(clients[k], p) for p in prompts[k::4]], range(4)))
    together: list[list[int]] = [[] for _ in prompts]
    for k, part in enumerate(parts):
        together[k::4] = part
    assert len(prompts) == 32 and together == alone


def test_v1_models_carries_what_runs(server):
    listing = json.load(urllib.request.urlopen(f"{server[0]}/v1/models"))
    assert listing["data"][0]["id"] == "qwen3" and listing["lampe"]["method"] == "lampe"


def test_a_malformed_request_is_a_400_and_a_client_gone_mid_request_stops_nothing(server, client):
    for body in (
        b"{not json",
        json.dumps({"model": "qwen3", "prompt": [[5, 6]], "max_tokens": "x"}).encode(),
    ):
        request = urllib.request.Request(
            f"{server[0]}/v1/completions", data=body, headers={"Content-Type": "application/json"}
        )
        with pytest.raises(urllib.error.HTTPError) as error:
            urllib.request.urlopen(request, timeout=60)
        assert error.value.code == 400
    host, port = server[0].removeprefix("http://").split(":")
    long_one = {"model": "qwen3", "prompt": [ids(900)], "max_tokens": 100, "ignore_eos": True}
    gone = http.client.HTTPConnection(host, int(port), timeout=60)
    gone.request("POST", "/v1/completions", json.dumps(long_one), {"Content-Type": "application/json"})
    gone.sock.close()  # the client leaves before the answer
    assert len(served(client, ids(100))) == NEW and server[1].poll() is None


def test_a_prompt_too_long_is_a_400_and_the_server_keeps_serving(client):
    with pytest.raises(
        openai.BadRequestError, match=f"--len is {LONGEST} tokens and this prompt has 5000 tokens"
    ):
        served(client, ids(5000))
    assert len(served(client, ids(100))) == NEW


def answer(base: str, body: dict | bytes, path: str = "/v1/completions") -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_len_means_len_and_max_tokens_is_never_cut_in_silence(server):
    """``serve --len L``: a prompt of L tokens is answered, L + 1 is refused, and a prompt plus max_tokens
    beyond L + the generation room (64) is refused with the request's numbers, not answered short."""
    base, room = server[0], 64
    cases = [(LONGEST, 16, 200), (LONGEST, room, 200), (LONGEST + 1, 1, 400), (LONGEST - 100, 200, 400)]
    cases += [(LONGEST, room + 1, 400), (3000, 1, 400)]
    for prompt, new, status in cases:
        body = {"model": "qwen3", "prompt": [ids(prompt)], "max_tokens": new, "ignore_eos": True}
        code, got = answer(base, body)
        assert code == status, (prompt, new, got)
        if status == 200:
            assert got["usage"]["prompt_tokens"] == prompt and got["usage"]["completion_tokens"] == new
            continue
        message = got["error"]["message"]
        assert (
            got["error"]["code"] == 400 and got["error"]["type"] == "BadRequestError" and "\n" not in message
        )
        assert str(LONGEST) in message and str(prompt) in message, message
        if prompt <= LONGEST:
            assert f"{prompt} + {new} = {prompt + new}" in message and str(LONGEST + room) in message
    code, got = answer(base, {"model": "qwen3", "prompt": [ids(LONGEST - 5)]})  # no max_tokens: vLLM's 16
    assert code == 200 and got["usage"]["completion_tokens"] <= 16
    info = json.load(urllib.request.urlopen(f"{base}/lampe"))
    assert (info["max_len"], info["gen_room"]) == (LONGEST, room)


def test_every_malformed_request_is_one_sentence_in_the_openai_error_shape(server):
    bodies: list[dict | bytes] = [
        b"{not json",
        {"model": "qwen3", "prompt": [[5, 6]], "max_tokens": "x"},
        {"model": "qwen3", "prompt": "hi", "max_tokens": -1},
        {"model": "qwen3", "prompt": "hi", "temperature": "hot"},
        {"model": "qwen3"},
        {"model": "qwen3", "prompt": {"a": 1}},
        {"model": "qwen3", "prompt": "hi", "top_p": 2},
        {"model": "qwen3", "prompt": [[999999999]]},
        {"model": "nope", "prompt": "hi"},
    ]
    for body in bodies:
        code, got = answer(server[0], body)
        error = got["error"]
        assert (
            400 <= code < 500 and error["code"] == code and set(error) == {"message", "type", "param", "code"}
        )
        message = error["message"]
        assert "\n" not in message and len(message) < 250 and message.endswith("."), message
        assert "{'type'" not in message and "validation error" not in message, message
    code, got = answer(server[0], {"model": "qwen3", "messages": "hi"}, "/v1/chat/completions")
    assert code == 400 and got["error"]["message"].startswith("messages: "), got
    code, got = answer(server[0], b"{}", "/v1/nothing")
    assert code == 404 and "/v1/nothing" in got["error"]["message"], got


def test_lm_evals_remote_tokenizer_reads_the_servers_tokenizer(server, qwen3):
    """lm-eval's ``tokenizer_backend=remote`` asks ``GET /tokenizer_info`` (vLLM's, turned on by serve),
    then ``/tokenize`` and ``/detokenize``: the served tokenizer's ids."""
    from lm_eval.utils import RemoteTokenizer

    from lampe_eval.models import load_for_engine

    remote = RemoteTokenizer(f"{server[0]}/v1/completions")
    text = "The quick brown fox jumps over the lazy dog."
    expected = load_for_engine(qwen3).tokenizer.encode(text, add_special_tokens=False)
    assert remote.encode(text) == expected and remote.decode(expected) == text
    assert remote.eos_token


# ------------------------------------------------- --backend openai: lampe-eval's benchmarks on the server
@pytest.mark.parametrize("bench", ["ruler", "pg19"])
def test_run_against_the_server_writes_the_hf_backends_records(server, qwen3, tmp_path, bench):
    records = {}
    for backend in ("hf", "openai"):
        out = tmp_path / backend
        args = ["run", "--model", qwen3, "--method", "lampe", "--bench", bench, "--len", str(LONGEST)]
        args += ["--limit", "1", "--backend", backend, "--out", str(out), "--no-progress"]
        args += ["--task", "niah_single_1"] if bench == "ruler" else ["--opt", "pg19_source=offline"]
        args += ["--endpoint", server[0]] if backend == "openai" else []
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        records[backend] = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    (a,), (b,) = records["hf"], records["openai"]
    assert b["engine"]["backend"] == "openai" and b["engine"]["device"] == "remote"
    assert (b["key"], b["prompt_hash"], b["resolved_params"]) == (
        a["key"],
        a["prompt_hash"],
        a["resolved_params"],
    )
    if bench == "ruler":
        assert b["output"]["prediction"] == a["output"]["prediction"] and b["scores"] == a["scores"]
    else:  # perplexity: the same tokens, log-probabilities within fp32 summation order
        assert b["output"]["tokens"] == a["output"]["tokens"]
        for name, value in a["scores"].items():
            assert b["scores"][name] == pytest.approx(value, rel=1e-4)


def test_a_run_without_method_at_the_openai_base_url_evaluates_what_the_server_runs(server, qwen3, tmp_path):
    """``--endpoint .../v1`` (as OpenAI clients name it) and no ``--method``: the server's LaMPE is run and
    recorded, the records those of ``--method lampe`` against its root URL."""
    records = {}
    for name, extra in (("given", ["--method", "lampe"]), ("served", [])):
        out = tmp_path / name
        endpoint = server[0] if extra else f"{server[0]}/v1/"
        args = ["run", "--model", qwen3, "--bench", "ruler", "--task", "niah_single_1", "--len", str(LONGEST)]
        args += [
            "--limit",
            "1",
            "--backend",
            "openai",
            "--endpoint",
            endpoint,
            "--out",
            str(out),
            "--no-progress",
        ]
        result = CliRunner().invoke(app, [*args, *extra])
        assert result.exit_code == 0, result.output
        records[name] = json.loads((out / "records.jsonl").read_text().splitlines()[0])
    a, b = records["given"], records["served"]
    assert b["method"] == "lampe" and b["engine"]["endpoint_urls"] == [f"{server[0]}/v1/"]
    for field in ("key", "prompt_hash", "resolved_params", "variant_params", "scores"):
        assert a[field] == b[field], field
    assert a["output"]["prediction"] == b["output"]["prediction"]


def test_a_job_whose_method_the_server_does_not_run_is_refused_in_one_line(server, qwen3, tmp_path):
    args = ["run", "--model", qwen3, "--method", "selfextend", "--bench", "pg19", "--len", str(LONGEST)]
    args += ["--limit", "1", "--backend", "openai", "--endpoint", server[0], "--out", str(tmp_path / "R")]
    args += ["--opt", "pg19_source=offline"]
    result = CliRunner().invoke(app, [*args, "--no-progress"])
    assert result.exit_code != 0 and "serves lampe, this job asks for selfextend" in result.output


def test_the_text_dialect_gives_what_token_ids_give(server, qwen3):
    """``--backend openai``'s path for servers without vLLM's extensions (text prompts checked by both
    tokenizers, ``echo`` + ``logprobs``), run against this server: the same text and log-probabilities as
    its token-id path."""
    from lampe_eval.backends.base import NLLRequest
    from lampe_eval.backends.openai import OpenAIBackend
    from lampe_eval.models import load_for_engine

    lm = load_for_engine(qwen3)
    ids = tuple(lm.tokenizer("The quick brown fox jumps over the lazy dog. " * 30)["input_ids"])
    request = GenerationRequest("", NEW, input_ids=ids)
    exact, text = (OpenAIBackend(lm, [server[0]], token_ids=flag) for flag in (True, False))
    got = exact.generate([request])[0]
    assert got.text.strip() and got.text == text.generate([request])[0].text
    (a,), (b,) = exact.token_nll([NLLRequest(ids)]), text.token_nll([NLLRequest(ids)])
    assert a.tokens == b.tokens == len(ids) - 1 and b.nll_sum == pytest.approx(a.nll_sum, rel=1e-5)


# ---------------------------------------------------------- a harness this project did not write: lm-eval
def docs_lm_eval_model_args() -> list[str]:
    """The ``--model_args`` of docs/serving.md's ``lm_eval --model local-completions`` command lines."""
    from pathlib import Path

    page = (Path(__file__).parents[1] / "docs" / "serving.md").read_text().replace("\\\n", " ")
    lines = [line for line in page.splitlines() if line.startswith("lm_eval --model local-completions")]
    return [line.split("--model_args", 1)[1].split()[0] for line in lines]


def served_model_args(documented: str, base: str, local: str) -> str:
    """A documented ``--model_args`` aimed at this test's server: its URL, name, tokenizer and length."""
    values = dict(item.split("=", 1) for item in documented.split(","))
    values["base_url"] = values["base_url"].replace("http://127.0.0.1:8000", base)
    values["model"], values["max_length"] = "qwen3", str(LONGEST)
    if "tokenizer" in values:
        values["tokenizer"] = local
    return ",".join(f"{key}={value}" for key, value in values.items())


def test_the_docs_give_both_lm_eval_command_lines():
    documented = docs_lm_eval_model_args()
    assert len(documented) == 2 and "tokenizer_backend=remote" in documented[1], documented


@pytest.mark.parametrize("line", [0, 1], ids=["local-tokenizer", "remote-tokenizer"])
def test_lm_evals_local_completions_gets_what_lm_eval_gets_in_process(server, qwen3, line):
    """lm-evaluation-harness's own OpenAI-compatible client (``local-completions``, with the model_args of
    docs/serving.md's command lines: a local tokenizer, then the server's through
    ``tokenizer_backend=remote``) against the server gives the greedy answers that lm-eval's in-process run
    of the same method gives (``--model lampe``)."""
    pytest.importorskip("tenacity")  # lm-eval's API models need it
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    import lampe_eval.integrations.lm_eval  # noqa: F401 - registers --model lampe

    from .helpers.lm_eval_tasks import TASK_DIR, responses

    common = {
        "tasks": ["lampe_fixture_gen"],
        "task_manager": TaskManager(include_path=str(TASK_DIR), include_defaults=False),
        "log_samples": True,
        "bootstrap_iters": 0,
    }
    model_args = served_model_args(docs_lm_eval_model_args()[line], server[0], qwen3)
    served = simple_evaluate(model="local-completions", model_args=model_args, **common)
    local = simple_evaluate(
        model="lampe", model_args=f"pretrained={qwen3},method=lampe,length={LONGEST}", device="cpu", **common
    )
    assert served is not None and local is not None
    got, expected = responses(served, "lampe_fixture_gen"), responses(local, "lampe_fixture_gen")
    assert len(got) == len(expected) > 0 and got == expected
    assert any(str(answer).strip("[]' ") for answer in got), got  # not only empty answers


def test_serves_gen_room_default_is_the_one_its_help_shows():
    import inspect

    from lampe_eval.backends.vllm.serve import ServeSettings
    from lampe_eval.cli.serve import serve_command

    option = inspect.signature(serve_command).parameters["gen_room"].default
    assert option.default == ServeSettings().gen_room == 64
