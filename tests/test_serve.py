"""``lampe-eval serve`` (vLLM's OpenAI-compatible server with LaMPE in every worker) against clients this
project did not write: the ``openai`` package's client gets the Hugging Face backend's greedy tokens for a
token-id prompt, requests of different lengths sent at once get what each gets alone, a prompt too long
gets an HTTP 400 and the server keeps serving, ``GET /lampe`` names the method and its parameters, and
SIGTERM ends the server."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("vllm")
openai = pytest.importorskip("openai")

from lampe_eval.backends.base import GenerationRequest  # noqa: E402
from lampe_eval.backends.hf import HFBackend  # noqa: E402
from lampe_eval.methods.resolve import resolve_method  # noqa: E402

pytestmark = pytest.mark.slow
WINDOW, LONGEST, NEW = 1024, 2048, 12  # SmolLM2 taken for a 1K window: every LaMPE segment is active


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server():
    port = free_port()
    command = [sys.executable, "-m", "lampe_eval", "serve", "--model", "smollm2-135m", "--method", "lampe"]
    command += ["--window", str(WINDOW), "--len", "2k", "--port", str(port), "--batch-size", "4"]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the server exited: {process.stdout.read()[-3000:]}")
        try:
            urllib.request.urlopen(f"{base}/health", timeout=2)
            break
        except OSError:
            time.sleep(2)
    else:
        process.kill()
        pytest.fail("the server did not answer /health in 400 s")
    yield base, process
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            pytest.fail("SIGTERM did not end the server in 60 s")


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server[0]}/v1", api_key="unused", max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def kjv_ids(smollm2) -> list[int]:
    from lampe_eval.data.corpus import _print_kjv

    return list(smollm2.tokenizer(_print_kjv()[:40_000])["input_ids"])


def served(client, ids: list[int]) -> list[int]:
    """Greedy tokens for a token-id prompt (end tokens ignored: the count is fixed)."""
    answer = client.completions.create(
        model="smollm2-135m",
        prompt=[ids],
        max_tokens=NEW,
        temperature=0,
        extra_body={"return_token_ids": True, "ignore_eos": True},
    )
    return list(answer.choices[0].token_ids)


def test_get_lampe_names_the_method_and_its_parameters(server):
    info = json.load(urllib.request.urlopen(f"{server[0]}/lampe"))
    method = resolve_method("lampe", WINDOW, LONGEST).method
    assert info["method"] == "lampe" and info["model"] == "smollm2-135m" and info["max_model_len"] >= LONGEST
    assert info["params"] == json.loads(json.dumps(method.params(), default=str))
    assert info["lampe_eval_version"] and "0.32" in info["vllm_version"]


def test_the_openai_client_gets_the_hf_backends_tokens(client, smollm2, kjv_ids):
    from tests.test_vllm import assert_same_greedy_tokens

    hf = HFBackend(dataclasses.replace(smollm2, pretraining_window=WINDOW))
    prompt = kjv_ids[:1500]
    method = resolve_method("lampe", WINDOW, LONGEST, base=hf.rope_base()).method
    with hf.install(method):
        request = GenerationRequest("", NEW, input_ids=tuple(prompt), min_new_tokens=NEW)
        expected = hf.generate([request])[0].token_ids
    assert_same_greedy_tokens(hf, method, prompt, expected, tuple(served(client, prompt)))


def test_requests_sent_at_once_get_what_each_gets_alone(client, kjv_ids):
    spans = ((0, 1800), (50, 300), (9, 1100), (7, 40))
    prompts = [kjv_ids[start : start + length] for start, length in spans]
    alone = [served(client, p) for p in prompts]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda p: served(client, p), prompts))
    assert together == alone


def test_a_prompt_too_long_is_a_400_and_the_server_keeps_serving(client, kjv_ids):
    with pytest.raises(openai.BadRequestError, match="maximum context length"):
        served(client, kjv_ids[:6000])
    assert len(served(client, kjv_ids[:100])) == NEW
