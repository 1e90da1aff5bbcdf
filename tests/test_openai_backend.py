"""``--backend openai`` against a fake OpenAI-compatible server (a thread on 127.0.0.1, no model): what it
sends, what it reads back, and its faults: a 5xx or a 429 is tried again, a 4xx is one line with the
server's reason, an unreachable endpoint is one line after the last try, a server without ``/lampe`` runs
``rope`` only, a server that takes no token ids gets text prompts checked by both tokenizers (perplexity
through ``echo`` + ``logprobs``), and the settings it cannot honour are refused before anything loads; a
run through the CLI against a server that goes down mid-run keeps its finished samples and resumes. The
real server: tests/test_serve.py."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from lampe_eval.backends import openai as remote
from lampe_eval.backends.base import GenerationRequest, NLLRequest
from lampe_eval.backends.openai import OpenAIBackend
from lampe_eval.errors import LampeEvalError
from lampe_eval.methods import create_method
from lampe_eval.settings import RunSettings


class Fake:
    """What the fake server answers: ``failures`` 5xx answers first, ``lampe`` for GET /lampe (None: 404),
    and the completions it returns; ``seen`` holds the bodies it received."""

    def __init__(self) -> None:
        self.failures = 0
        self.down_after: int | None = None  # answer this many completions, then 503 for good
        self.text_only: Any = None  # a tokenizer: answer as a server without vLLM's extensions
        self.echo = True  # (text only) answer echo + logprobs
        self.lampe: dict[str, Any] | None = None
        self.token_ids: list[int] | None = [11, 12, 2, 13]
        self.status = 200
        self.version: str | None = None  # GET /version (None: 404)
        self.prefix = ""  # the API's path before /v1 (a server behind a proxy's path)
        self.seen: list[dict[str, Any]] = []
        self.paths: list[str] = []  # every path asked for


@pytest.fixture
def fake():
    yield from fake_server()


def fake_server():
    """A fake server on a free port: yields its state, then shuts down."""
    state = Fake()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def reply(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            state.paths.append(self.path)
            if self.path == f"{state.prefix}/v1/models":
                self.reply(200, {"data": [{"id": "served"}]})
            elif self.path == "/lampe" and state.lampe is not None:
                self.reply(200, state.lampe)
            elif self.path == "/version" and state.version is not None:
                self.reply(200, {"version": state.version})
            else:
                self.reply(404, {"detail": "Not Found"})

        def do_POST(self) -> None:
            state.paths.append(self.path)
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path != f"{state.prefix}/v1/completions":
                self.reply(404, {"detail": "Not Found"})
                return
            state.seen.append(body)
            if state.down_after is not None:
                state.failures = 1 if state.down_after <= 0 else 0
                state.down_after -= 1
            if state.failures:
                state.failures -= 1
                self.reply(503, {"error": {"message": "busy"}})
                return
            if state.status != 200:
                self.reply(state.status, {"error": {"message": "This model's maximum context length is 4"}})
                return
            if state.text_only is not None:
                self.reply(*text_answer(state, body))
                return
            ids = body["prompt"][0]
            choice: dict[str, Any] = {"text": "", "token_ids": state.token_ids}
            if body.get("prompt_logprobs") is not None:
                choice["prompt_logprobs"] = [None] + [{str(t): {"logprob": -0.5}} for t in ids[1:]]
            self.reply(200, {"choices": [choice]})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"  # type: ignore[attr-defined]
    yield state
    server.shutdown()


def text_answer(state: Fake, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """A server of the plain completions API: text prompts only (its tokenizer counts them), no vLLM
    fields, ``echo`` + ``logprobs`` when ``state.echo``."""
    if not isinstance(body["prompt"], str) or "return_token_ids" in body:
        return 400, {"error": {"message": "prompt must be a string"}}
    count = len(state.text_only(body["prompt"])["input_ids"])
    usage = {"prompt_tokens": count, "completion_tokens": 2}
    if body.get("echo"):
        if not state.echo:
            return 400, {"error": {"message": "echo is not supported"}}
        logprobs = {"token_logprobs": [None] + [-0.25] * (count - 1)}
        return 200, {"choices": [{"text": body["prompt"], "logprobs": logprobs}], "usage": usage}
    return 200, {"choices": [{"text": " Paris.\nNext"}], "usage": usage}


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch):
    monkeypatch.setattr(remote, "RETRY_SECONDS", (0, 0))


def test_generation_sends_the_tokens_and_reads_the_tokens_back(fake, lm):
    backend = OpenAIBackend(lm, [fake.url])
    with backend.install(create_method("rope", 8192, 8192)):
        (got,) = backend.generate([GenerationRequest("", 4, input_ids=(5, 6, 7), stop_token_ids=(13,))])
    sent = fake.seen[-1]
    assert sent["prompt"] == [[5, 6, 7]] and sent["model"] == "served" and sent["temperature"] == 0
    assert sent["ignore_eos"] and sent["return_token_ids"] and 13 in sent["stop_token_ids"]
    assert got.token_ids == (11, 12, 2) and got.prompt_tokens == 3  # cut at SmolLM2's end token (2)


def test_perplexity_reads_each_prompt_tokens_log_probability(fake, lm):
    (nll,) = OpenAIBackend(lm, [fake.url]).token_nll([NLLRequest((1, 2, 3, 4, 5))])
    assert fake.seen[-1]["prompt_logprobs"] == 0
    assert nll.tokens == 4 and nll.nll_sum == pytest.approx(2.0) and nll.tokens_tail == 1


def test_a_5xx_is_tried_again_and_a_4xx_is_one_line(fake, lm):
    backend = OpenAIBackend(lm, [fake.url])
    fake.seen.clear()  # the dialect probe
    fake.failures = 2
    assert backend.generate([GenerationRequest("", 4, input_ids=(5,))])[0].token_ids == (11, 12, 2)
    assert len(fake.seen) == 3
    fake.status = 400
    with pytest.raises(LampeEvalError, match="HTTP 400: This model's maximum context length is 4") as error:
        backend.generate([GenerationRequest("", 4, input_ids=(5,))])
    assert "\n" not in str(error.value) and len(fake.seen) == 4  # not tried again


def test_an_endpoint_that_stays_down_is_one_line_after_the_last_try(fake, lm):
    fake.failures = 10
    with pytest.raises(LampeEvalError, match=r"HTTP 503: busy \(after 3 tries\)"):
        OpenAIBackend(lm, [fake.url]).generate([GenerationRequest("", 4, input_ids=(5,))])
    with pytest.raises(LampeEvalError, match=r"after 3 tries"):
        OpenAIBackend(lm, ["http://127.0.0.1:9"])  # nothing listens there


def test_the_method_must_be_the_servers(fake, lm):
    lampe = create_method("lampe", 1024, 4096)
    with (
        pytest.raises(
            LampeEvalError, match="without a method .no /lampe., this job asks for lampe: only rope"
        ),
        OpenAIBackend(lm, [fake.url]).install(lampe),
    ):
        pass
    fake.lampe = {"method": "lampe", "label": lampe.label(), "params": json.loads(json.dumps(lampe.params()))}
    with OpenAIBackend(lm, [fake.url]).install(lampe):
        pass
    selfextend = create_method("selfextend", 1024, 4096)
    with (
        pytest.raises(LampeEvalError, match="asks for selfextend"),
        OpenAIBackend(lm, [fake.url]).install(selfextend),
    ):
        pass


def test_a_server_that_accepted_token_ids_and_returns_none_is_one_line(fake, lm):
    backend = OpenAIBackend(lm, [fake.url])  # the probe had token ids
    fake.token_ids = None
    with pytest.raises(LampeEvalError, match="returned no token ids"):
        backend.generate([GenerationRequest("", 4, input_ids=(5,))])


def test_a_server_without_token_ids_gets_the_prompt_text_checked_by_both_tokenizers(fake, lm):
    fake.text_only = lm.tokenizer
    backend = OpenAIBackend(lm, [fake.url])
    assert not backend.endpoints[0].token_ids and "text prompts" in backend.describe()["settings"]
    ids = tuple(lm.tokenizer("The capital of France is")["input_ids"])
    with backend.install(create_method("rope", 8192, 8192)):
        (got,) = backend.generate([GenerationRequest("", 8, input_ids=ids, stop=("\n",))])
    sent = fake.seen[-1]
    assert (
        sent["prompt"] == "The capital of France is" and sent["stop"] == ["\n"] and "ignore_eos" not in sent
    )
    assert got.text == " Paris."  # cut at the stop string; the tokens are the answer read back
    assert got.token_ids == tuple(lm.tokenizer.encode(" Paris.\nNext"))
    (by_text,) = backend.generate([GenerationRequest("The capital of France is", 8)])  # a text request
    assert fake.seen[-1]["prompt"] == "The capital of France is" and by_text.prompt_tokens == len(ids)
    fake.text_only = lambda text: {"input_ids": [0, *lm.tokenizer(text)["input_ids"]]}  # another tokenizer
    with pytest.raises(LampeEvalError, match="counted 6 prompt tokens where lampe-eval's tokenizer gives 5"):
        backend.generate([GenerationRequest("", 8, input_ids=ids)])


def test_perplexity_from_a_text_server_reads_echo_and_logprobs_or_is_refused(fake, lm):
    fake.text_only = lm.tokenizer
    ids = tuple(lm.tokenizer("one two three four")["input_ids"])
    (nll,) = OpenAIBackend(lm, [fake.url]).token_nll([NLLRequest(ids)])
    sent = fake.seen[-1]
    assert sent["echo"] is True and sent["logprobs"] == 0 and sent["max_tokens"] == 0
    assert nll.tokens == len(ids) - 1 and nll.nll_sum == pytest.approx(0.25 * (len(ids) - 1))
    fake.echo = False
    with pytest.raises(LampeEvalError, match="perplexity needs echo . logprobs") as error:
        OpenAIBackend(lm, [fake.url]).token_nll([NLLRequest(ids)])
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (RunSettings(backend="openai"), "needs --endpoint"),
        (RunSettings(backend="openai", endpoints=("localhost:8000",)), "give an http:// or https:// URL"),
        (RunSettings(backend="openai", endpoints=("http://x",), dtype="bf16"), "--dtype sets up a local"),
    ],
)
def test_settings_it_cannot_honour_are_refused(settings, message):
    with pytest.raises(LampeEvalError, match=message):
        OpenAIBackend.check_settings(settings)


@pytest.fixture
def second(fake):
    """A second fake endpoint serving the same model (a fresh server on another port)."""
    gen = fake_server()
    state = next(gen)
    yield state
    next(gen, None)


def test_several_endpoints_share_the_requests_and_one_down_leaves_the_others_the_work(fake, second, lm):
    """Requests go to the endpoints in turn; an endpoint that stays down (a server killed mid-run) hands
    its requests to the others; with every endpoint down the line names them all."""
    backend = OpenAIBackend(lm, [fake.url, second.url], batch_size=2)
    fake.seen.clear(), second.seen.clear()  # the dialect probes
    requests = [GenerationRequest("", 4, input_ids=(5, i)) for i in range(4)]
    assert [g.token_ids for g in backend.generate(requests)] == [(11, 12, 2)] * 4
    assert len(fake.seen) == len(second.seen) == 2
    second.failures = 100  # down for good
    assert [g.token_ids for g in backend.generate(requests)] == [(11, 12, 2)] * 4
    assert len(fake.seen) == 2 + 4  # its own two and the two the dead one could not serve
    fake.failures = 100
    with pytest.raises(LampeEvalError, match="every endpoint is down") as error:
        backend.generate(requests[:1])
    assert "\n" not in str(error.value)


def test_a_run_whose_server_goes_down_keeps_its_samples_and_resumes_and_another_server_recomputes(
    fake, tmp_path
):
    """Through the CLI, two jobs of three samples: the server answers one sample, then stays down: that job
    ends with one line, the other is not tried (one line at once), the finished sample is kept; a rerun with
    the server back computes the other five only; a server of another release recomputes the six, saying
    so once per job."""
    from typer.testing import CliRunner

    from lampe_eval.cli import app

    rope = create_method("rope", 4096, 4096)
    fake.lampe = {"method": "rope", "label": rope.label(), "params": rope.params(), "vllm_version": "0.32.0"}
    fake.lampe["lampe_eval_version"] = "1.0"
    out = tmp_path / "R"
    args = ["run", "--model", "smollm2-135m", "--method", "rope", "--bench", "ruler"]
    args += ["--task", "niah_single_1,niah_single_2", "--len", "4k", "--limit", "3"]
    args += ["--backend", "openai", "--endpoint", fake.url, "--out", str(out), "--no-progress"]

    def run() -> tuple[int, str, list[dict[str, Any]]]:
        result = CliRunner().invoke(app, args)
        lines = (out / "records.jsonl").read_text().splitlines() if (out / "records.jsonl").exists() else []
        return result.exit_code, result.output, [json.loads(line) for line in lines]

    fake.down_after = 1  # one sample (a server with /lampe is not probed)
    code, output, records = run()
    failed = [line for line in output.splitlines() if line.startswith("failed:")]
    assert code != 0 and len(records) == 1 and len(failed) == 2, output
    assert "HTTP 503: busy (after 3 tries)" in failed[0] and "not run: " in failed[1]
    assert len(fake.seen) == 1 + 3  # one answer, three tries; the second job sent nothing
    fake.down_after, fake.failures = None, 0  # the server is back
    code, output, records = run()
    assert code == 0 and len(records) == 6  # nothing twice
    assert len({(r["task"], r["index"]) for r in records}) == 6
    engine = records[0]["engine"]
    assert "serving rope" in engine["settings"] and engine["backend_version"] == "0.32.0"
    code, output, records = run()
    assert code == 0 and len(records) == 6 and "computed again" not in output  # the same server resumes
    fake.lampe["lampe_eval_version"] = "1.1"
    code, output, records = run()
    warned = [line for line in output.splitlines() if "computed again" in line]
    assert code == 0 and len(records) == 12 and len(warned) == 2 and "lampe-eval 1.1" in warned[0], output


# ------------------------------------------------------------------ endpoints as OpenAI clients name them
@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/", "/v1/completions"])
def test_an_endpoint_is_a_server_root_or_its_openai_base_url(fake, lm, suffix):
    """``http://host:port`` and the base URL every OpenAI client uses (``.../v1``, with or without a
    slash, or a request URL of it) reach the same API; the URL is recorded as given."""
    given = fake.url + suffix
    backend = OpenAIBackend(lm, [given])
    with backend.install(create_method("rope", 8192, 8192)):
        (got,) = backend.generate([GenerationRequest("", 4, input_ids=(5, 6))])
    assert got.token_ids == (11, 12, 2) and fake.paths[-1] == "/v1/completions"
    assert not any("/v1/v1" in path for path in fake.paths)
    assert backend.describe()["endpoint_urls"] == [given]


def test_a_base_url_under_a_path_is_found_and_one_that_answers_neither_way_is_one_line(fake, lm):
    fake.prefix = "/proxy"
    backend = OpenAIBackend(lm, [f"{fake.url}/proxy/v1"])
    assert backend.endpoints[0].api == f"{fake.url}/proxy/v1"
    with pytest.raises(LampeEvalError) as error:
        OpenAIBackend(lm, [f"{fake.url}/elsewhere"])
    message = str(error.value)
    assert "\n" not in message and f"{fake.url}/elsewhere/v1/models" in message
    assert f"{fake.url}/elsewhere/models" in message and "http://host:port/v1" in message


def test_a_foreign_servers_version_is_read_from_its_version_path(fake, lm):
    assert OpenAIBackend(lm, [fake.url]).describe()["backend_version"] == "unknown"  # none said
    fake.version = "0.11.2"
    assert OpenAIBackend(lm, [fake.url]).describe()["backend_version"] == "0.11.2"
    rope = create_method("rope", 4096, 4096)
    fake.lampe = {"method": "rope", "label": "rope", "params": rope.params(), "vllm_version": "0.32.0"}
    assert OpenAIBackend(lm, [fake.url]).describe()["backend_version"] == "0.32.0"  # /lampe's wins


def test_without_method_a_run_takes_what_the_server_runs(fake):
    settings = RunSettings(backend="openai", endpoints=(f"{fake.url}/v1",))
    assert OpenAIBackend.default_method(settings) == ("rope", {})  # no /lampe: the unpatched model
    fake.lampe = {"method": "lampe", "label": "lampe(s1=32)", "params": {}, "given": {"s1": "32"}}
    assert OpenAIBackend.default_method(settings) == ("lampe", {"s1": "32"})
    with pytest.raises(LampeEvalError, match="needs --endpoint"):
        OpenAIBackend.default_method(RunSettings(backend="openai"))


def test_a_method_or_parameters_the_server_does_not_run_is_one_short_line(fake, lm):
    served = create_method("lampe", 1024, 4096)
    params = json.loads(json.dumps(served.params()))
    fake.lampe = {"method": "lampe", "label": served.label(), "params": params, "max_len": 4096}
    backend = OpenAIBackend(lm, [fake.url])
    for method, expected in (
        (create_method("selfextend", 1024, 4096), "serves lampe, this job asks for selfextend: serve it"),
        (create_method("lampe", 1024, 4096, s1=128), "serves lampe at --len 4096 with "),
    ):
        with pytest.raises(LampeEvalError) as error, backend.install(method):
            pass
        message = str(error.value)
        assert expected in message and "--method " + method.name in message, message
        assert "leave out --method" in message and len(message) < 400 and "\n" not in message
    with (
        pytest.raises(LampeEvalError, match="s1=64 .job: 128."),
        backend.install(create_method("lampe", 1024, 4096, s1=128)),
    ):
        pass


def test_a_job_that_fails_before_it_starts_is_named_by_its_label(tmp_path):
    """No server at all: the failure line names the job (model | method | benchmark/task | length)."""
    from typer.testing import CliRunner

    from lampe_eval.cli import app

    args = [
        "run",
        "--model",
        "smollm2-135m",
        "--method",
        "rope",
        "--bench",
        "ruler",
        "--task",
        "niah_single_1",
    ]
    args += ["--len", "4k", "--limit", "1", "--backend", "openai", "--endpoint", "http://127.0.0.1:9"]
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "R"), "--no-progress"])
    failed = [line for line in result.output.splitlines() if line.startswith(("failed:", "FAILED"))]
    assert result.exit_code != 0 and failed, result.output
    assert all("smollm2-135m | rope | ruler/niah_single_1 | 4k: " in line for line in failed), failed
