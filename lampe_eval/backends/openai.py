"""``--backend openai --endpoint URL[,URL...]``: the benchmarks' requests sent to OpenAI-compatible
endpoints. A server that speaks vLLM's extensions (``lampe-eval serve``, ``vllm serve``) gets the exact
prompt tokens (a token-id ``prompt``), gives the new tokens back (``return_token_ids``), runs greedy with
the model's end tokens (``ignore_eos`` + ``stop_token_ids``, as the vLLM backend asks its engine) and, for
perplexity, each prompt token's log-probability (``prompt_logprobs``). Any other server (one that refuses
token-id prompts or answers without token ids: found by one probe request) gets the prompt's text,
checked twice: lampe-eval's tokenizer gives back the prompt's exact tokens from that text, and the
server's count of prompt tokens (``usage``) is that length; perplexity there reads ``echo`` +
``logprobs``, and a server that offers neither is refused for it in one line.

An endpoint is a server's root (``http://host:8000``) or its OpenAI base URL (``http://host:8000/v1``, as
every OpenAI client names it): :func:`locate` finds the API once (``GET .../models``) and a URL that answers
neither way is one line naming the paths tried. The method is the server's: a run without ``--method``
evaluates what ``GET /lampe`` says the first endpoint runs (``rope`` for a server without it:
:meth:`OpenAIBackend.default_method`); before a job runs, ``/lampe`` must name the job's method with the same
parameters, else one short line names both and the ``serve`` command that would match; a server without
``/lampe`` (plain ``vllm serve``) runs the unpatched model, so only ``rope`` is accepted there. The
records' engine identity holds the served model, the served method and the server's versions (a foreign
server's from ``GET /version``): a resume against another server recomputes, with one warning. Requests
go to the endpoints in turn, ``--batch-size`` at once per endpoint. A connection error, a 5xx or a 429 is
tried again (1, 2, 4, 8 s apart); after the last try the request goes to the next endpoint (a server
killed mid-run leaves the others the work), and once every endpoint is down the job stops with one line,
the sample is not recorded, the run's later jobs fail at once with that line (``BackendGone``), and a
rerun resumes them.
"""

from __future__ import annotations

import http.client
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Hashable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import BackendGone, LampeEvalError
from ..methods.base import Method, RopeBase
from ..models import LoadedModel
from ..prompts import prompt_ids
from ..records import EARLIER_ENGINE_KERNEL
from ..settings import RunSettings
from .base import (
    BACKENDS,
    Generation,
    GenerationRequest,
    NLLRequest,
    OwnWeightsBackend,
    Placement,
    Request,
    TokenNLL,
    nll_sums,
)
from .rope_config import rope_base_from_config
from .text import directory_eos_ids, finish

API_KEY = "OPENAI_API_KEY"  # sent as the bearer token when set (lampe-eval serve --api-key)
RETRY_SECONDS = (1, 2, 4, 8)  # waits between the tries of one request
TIMEOUT = 3600  # seconds one request may take (a long prefill on a busy server)


@dataclass(frozen=True)
class Endpoint:
    """One server: its URL as given, its OpenAI base URL (``api``: ``.../v1`` as found by :func:`locate`),
    what ``GET /lampe`` says it runs (None: a server without it), whether it takes token-id prompts and
    returns token ids (vLLM's extensions) and its version (``/lampe``'s vLLM, else ``GET /version``)."""

    url: str
    api: str
    served: dict[str, Any] | None
    token_ids: bool
    version: str | None = None

    @property
    def root(self) -> str:
        """The server's root (``/lampe``, ``/version``)."""
        return server_root(self.api)


@BACKENDS.register("openai")
class OpenAIBackend(OwnWeightsBackend):
    """A client of OpenAI-compatible endpoints serving the model (see the module docstring)."""

    placement = Placement.REMOTE

    def __init__(
        self,
        lm: LoadedModel,
        endpoints: Sequence[str],
        batch_size: int = 1,
        token_ids: bool | None = None,
    ) -> None:
        """``token_ids`` None: each endpoint's dialect is probed; True/False: taken as said."""
        super().__init__(lm, batch_size)
        apis = [(url, locate(url)) for url in endpoints]
        self._model = model_name(apis[0][1])
        self._eos = directory_eos_ids(lm.extra.get("source"), lm.tokenizer)  # what the HF backend stops at
        self.endpoints = [self._endpoint(url, api, token_ids) for url, api in apis]
        bos = lm.tokenizer.bos_token_id
        self._adds_bos = bos is not None and prompt_ids(lm.tokenizer, "")[:1] == [bos]  # as servers do

    def _endpoint(self, url: str, api: str, token_ids: bool | None) -> Endpoint:
        served = served_method(server_root(api))
        if token_ids is None:
            token_ids = served is not None or self._takes_token_ids(api)
        version = served.get("vllm_version") if served else server_version(server_root(api))
        return Endpoint(url, api, served, token_ids, version)

    def _takes_token_ids(self, api: str) -> bool:
        """One probe request: a token-id prompt of one token, asking for the new token's id back."""
        probe = {"model": self._model, "prompt": [[self._probe_token()]], "max_tokens": 1, "temperature": 0.0}
        try:
            answer = post(f"{api}/completions", {**probe, "return_token_ids": True})
        except EndpointDown:
            raise
        except LampeEvalError:  # a 4xx: the server refuses token-id prompts or vLLM's fields
            return False
        return answer.get("choices", [{}])[0].get("token_ids") is not None

    def _probe_token(self) -> int:
        tokenizer = self.lm.tokenizer
        return int(
            tokenizer.bos_token_id if tokenizer.bos_token_id is not None else prompt_ids(tokenizer, "Hi")[0]
        )

    # ------------------------------------------------------------------------- before loading
    @classmethod
    def check_settings(cls, settings: RunSettings) -> None:
        if not settings.endpoints:
            raise LampeEvalError("--backend openai needs --endpoint URL (e.g. http://127.0.0.1:8000)")
        bad = [url for url in settings.endpoints if not url.startswith(("http://", "https://"))]
        if bad:
            raise LampeEvalError(f"--endpoint {bad[0]!r}: give an http:// or https:// URL")
        local = {
            "--dtype": settings.dtype,
            "--device": settings.device,
            "--kv-cache-gib": settings.kv_cache_gib,
        }
        given = [flag for flag, value in local.items() if value is not None]
        if given:
            raise LampeEvalError(f"{'/'.join(given)} sets up a local model: the endpoint's server decides it")

    @classmethod
    def default_method(cls, settings: RunSettings) -> tuple[str, dict[str, Any]]:
        """What the first endpoint serves (``GET /lampe``: its method and the parameters its ``serve`` was
        given), ``rope`` for a server without ``/lampe``: a run without ``--method`` evaluates that."""
        cls.check_settings(settings)
        served = served_method(server_root(locate(settings.endpoints[0])))
        if served is None:
            return "rope", {}
        return str(served["method"]), dict(served.get("given") or {})

    @classmethod
    def create(cls, lm: LoadedModel, settings: RunSettings) -> OpenAIBackend:
        return cls(lm, settings.endpoints, batch_size=settings.batch_size)

    # ---------------------------------------------------------------------------------- method
    def install(self, method: Method) -> Any:
        return self._checked(method)

    @contextmanager
    def _checked(self, method: Method) -> Iterator[None]:
        """The job's method must be what every endpoint serves."""
        for endpoint in self.endpoints:
            why = method_mismatch(endpoint.url, endpoint.served, method, self.lm.name)
            if why:
                raise LampeEvalError(why)
        yield

    def rope_base(self) -> RopeBase:
        return rope_base_from_config(self.lm.extra["config"], self.lm.pretraining_window)

    def describe(self) -> dict[str, Any]:
        """What made the numbers: the served model, the method the server runs and its versions (the
        engine identity compares ``backend_version`` and ``settings``); the endpoints' count is not in it."""
        first = self.endpoints[0]
        served = first.served or {}
        running = served.get("label") or "no method (a server without /lampe)"
        version = served.get("lampe_eval_version")
        prompts = "token ids" if all(e.token_ids for e in self.endpoints) else "text prompts"
        return {
            "backend": self.name,
            "backend_version": first.version or "unknown",
            "dtype": "-",
            "device": "remote",
            # the server's kernels as it reports them (a server before they were reported: "vllm-lampe")
            "kernel": served.get("kernel", EARLIER_ENGINE_KERNEL) if served else "-",
            "settings": f"{self._model} serving {running}"
            + (f", lampe-eval {version}" if version else "")
            + f", greedy, {prompts}",
            "endpoints": len(self.endpoints),
            "endpoint_urls": [endpoint.url for endpoint in self.endpoints],  # as given
        }

    def batch_key(self, request: Request) -> Hashable:
        return "nll" if isinstance(request, NLLRequest) else "generate"

    # ------------------------------------------------------------------------------ requests
    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        return self._spread(self._generate_one, requests)

    def token_nll(self, requests: Sequence[NLLRequest]) -> list[TokenNLL]:
        return self._spread(self._nll_one, requests)

    def _spread(self, call: Any, requests: Sequence[Any]) -> list[Any]:
        """``call(endpoint, request)`` per request: the endpoints in turn, ``batch_size`` at once each."""
        jobs = [(i % len(self.endpoints), r) for i, r in enumerate(requests)]
        if len(jobs) == 1:
            return [self._failover(call, *jobs[0])]
        with ThreadPoolExecutor(self.batch_size * len(self.endpoints)) as pool:
            return list(pool.map(lambda job: self._failover(call, *job), jobs))

    def _failover(self, call: Any, first: int, request: Any) -> Any:
        """``call`` on endpoint ``first``; if it stays down through every try, on the next endpoints (each
        serves the same model and method): one line once every endpoint is down."""
        down = []
        for step in range(len(self.endpoints)):
            try:
                return call(self.endpoints[(first + step) % len(self.endpoints)], request)
            except EndpointDown as error:
                down.append(str(error))
        raise EndpointDown(down[0] if len(down) == 1 else f"every endpoint is down: {'; '.join(down)}")

    def _generate_one(self, endpoint: Endpoint, request: GenerationRequest) -> Generation:
        ids = (
            list(request.input_ids)
            if request.input_ids is not None
            else prompt_ids(self.lm.tokenizer, request.prompt)
        )
        eos = self._eos | set(request.stop_token_ids)
        body: dict[str, Any] = {
            "model": self._model,
            "max_tokens": max(1, request.max_new_tokens),
            "temperature": 0.0,
        }
        start = time.perf_counter()
        if endpoint.token_ids:
            body |= {
                "prompt": [ids],
                "min_tokens": request.min_new_tokens,
                "ignore_eos": True,  # the end tokens are ours: the model's and the request's
                "stop_token_ids": sorted(eos),
                "return_token_ids": True,
            }
            choice = post(f"{endpoint.api}/completions", body)["choices"][0]
            tokens = choice.get("token_ids")
            if tokens is None:
                raise LampeEvalError(f"{endpoint.url} returned no token ids (return_token_ids)")
        else:  # the server's own end tokens; the text read back into tokens with lampe-eval's tokenizer
            own = request.prompt if request.input_ids is None else None
            body |= {"prompt": self._prompt_text(own, ids)}
            body |= {"stop": list(request.stop)[:4]} if request.stop else {}  # the API takes up to 4
            answer = post(f"{endpoint.api}/completions", body)
            self._check_prompt_count(endpoint, answer, len(ids))
            tokens = self.lm.tokenizer.encode(
                answer["choices"][0].get("text") or "", add_special_tokens=False
            )
        seconds = time.perf_counter() - start
        kept, text = finish(torch.tensor(tokens, dtype=torch.long), eos, request.stop, self.lm.tokenizer)
        return Generation(text, len(ids), int(kept.shape[0]), seconds, tuple(kept.tolist()))

    def _nll_one(self, endpoint: Endpoint, request: NLLRequest) -> TokenNLL:
        ids = list(request.input_ids)
        start = time.perf_counter()
        if endpoint.token_ids:
            logprobs = self._prompt_logprobs(endpoint, ids)
        else:
            logprobs = self._echo_logprobs(endpoint, ids)
        return nll_sums(logprobs, request.tail_from, time.perf_counter() - start)

    def _prompt_logprobs(self, endpoint: Endpoint, ids: list[int]) -> list[float]:
        """Each prompt token's log-probability after the first (vLLM's ``prompt_logprobs``)."""
        body = {"model": self._model, "prompt": [ids], "max_tokens": 1, "temperature": 0.0}
        answer = post(f"{endpoint.api}/completions", {**body, "prompt_logprobs": 0})
        rows = answer["choices"][0].get("prompt_logprobs")
        if rows is None:
            raise LampeEvalError(f"{endpoint.url} returned no prompt_logprobs: perplexity needs them")
        return [float(row[str(token)]["logprob"]) for row, token in zip(rows[1:], ids[1:], strict=True)]

    def _echo_logprobs(self, endpoint: Endpoint, ids: list[int]) -> list[float]:
        """The same from a text prompt, through the completions API's ``echo`` + ``logprobs``."""
        body = {"model": self._model, "prompt": self._prompt_text(None, ids), "max_tokens": 0}
        try:
            answer = post(f"{endpoint.api}/completions", {**body, "echo": True, "logprobs": 0})
        except EndpointDown:
            raise
        except LampeEvalError as error:
            raise LampeEvalError(
                f"perplexity needs echo + logprobs, which {endpoint.url} refused ({error})"
            ) from None
        logprobs = (answer["choices"][0].get("logprobs") or {}).get("token_logprobs")
        if not logprobs:
            raise LampeEvalError(
                f"{endpoint.url} returned no echo + logprobs: perplexity needs a server that offers them "
                "(or prompt_logprobs with token-id prompts, as vLLM's)"
            )
        if len(logprobs) != len(ids):
            raise _other_tokenizer(endpoint.url, len(logprobs), len(ids))
        return [float(x) for x in logprobs[1:]]

    def _prompt_text(self, own: str | None, ids: list[int]) -> str:
        """The text a server turns into ``ids`` (adding the start token itself, as servers do): ``own``,
        the text ``ids`` were tokenized from, else the ids decoded; refused in one line when lampe-eval's
        own tokenizer does not give ``ids`` back from it (tokenized again only when decoded or changed)."""
        tokenizer = self.lm.tokenizer
        text = own or tokenizer.decode(ids, skip_special_tokens=False)
        bos = tokenizer.bos_token
        if bos and text.startswith(bos) and self._adds_bos:
            text = text[len(bos) :]  # the server adds it
        if text != own and prompt_ids(tokenizer, text) != ids:
            raise LampeEvalError(
                "this prompt's tokens do not survive decoding to text and encoding again, and the endpoint "
                "takes text prompts only: serve the model with vLLM (token-id prompts)"
            )
        return text

    def _check_prompt_count(self, endpoint: Endpoint, answer: dict[str, Any], expected: int) -> None:
        counted = (answer.get("usage") or {}).get("prompt_tokens")
        if counted is not None and int(counted) != expected:
            raise _other_tokenizer(endpoint.url, int(counted), expected)


def _other_tokenizer(url: str, served: int, expected: int) -> LampeEvalError:
    return LampeEvalError(
        f"{url} counted {served} prompt tokens where lampe-eval's tokenizer gives {expected}: the server "
        "tokenizes differently (another model or tokenizer?); serve the --model given here"
    )


def method_mismatch(url: str, served: dict[str, Any] | None, method: Method, model: str) -> str | None:
    """Why ``method`` cannot run against a server that runs ``served`` (``/lampe``; None: no method), in one
    short line naming both and the ``serve`` command that would match; None when they are the same."""
    if served is None:
        if method.kind == "baseline":
            return None
        return (
            f"{url} serves the model without a method (no /lampe), this job asks for {method.name}: only "
            f"rope runs there; serve it with lampe-eval serve --model {model} --method {method.name}"
        )
    wanted = json.loads(json.dumps(method.params(), sort_keys=True, default=str))
    name, params = str(served["method"]), served.get("params") or {}
    serve = f"serve it with lampe-eval serve --model {model} --method {method.name} --len <the job's length>"
    if name != method.name:
        return f"{url} serves {name}, this job asks for {method.name}: {serve}, or leave out --method"
    differ = sorted(key for key in wanted.keys() | params.keys() if wanted.get(key) != params.get(key))
    if not differ:
        return None
    shown = ", ".join(f"{key}={params.get(key)} (job: {wanted.get(key)})" for key in differ[:3])
    more = f" and {len(differ) - 3} more" if len(differ) > 3 else ""
    length = f" at --len {served['max_len']}" if served.get("max_len") else ""
    return f"{url} serves {name}{length} with {shown}{more}: {serve} and its -p, or leave out --method"


# ------------------------------------------------------------------------------------ HTTP
API_SUFFIXES = ("/chat/completions", "/completions", "/models")  # a request's URL given for the API's


def locate(given: str) -> str:
    """The OpenAI base URL of the server at ``given``: a server root (``http://host:8000``: ``/v1`` is
    added) or a base URL (``http://host:8000/v1``, with or without a trailing slash, or one of its request
    URLs); the first of those whose ``/models`` answers. One line naming the paths tried when none does."""
    url = given.rstrip("/")
    for suffix in API_SUFFIXES:
        url = url.removesuffix(suffix) if url.endswith(f"/v1{suffix}") else url
    bases = [url] if url.endswith("/v1") else [f"{url}/v1", url]
    tried = []
    for base in bases:
        try:
            get(f"{base}/models")
        except EndpointDown:
            raise
        except LampeEvalError as error:
            if "HTTP 404" not in str(error):
                raise
            tried.append(f"{base}/models")
            continue
        return base
    raise LampeEvalError(
        f"--endpoint {given}: no OpenAI-compatible API there ({' and '.join(tried)} answered HTTP 404); "
        "give the server's root (http://host:port) or its base URL (http://host:port/v1)"
    )


def server_root(api: str) -> str:
    """The server's root for an OpenAI base URL (where ``/lampe`` and ``/version`` live)."""
    return api.removesuffix("/v1")


def model_name(api: str) -> str:
    """The model name the endpoint serves (``/models``)."""
    listing = get(f"{api}/models")
    names = [m["id"] for m in listing.get("data", [])]
    if not names:
        raise LampeEvalError(f"{api}/models lists no model")
    return str(names[0])


def served_method(root: str) -> dict[str, Any] | None:
    """What ``lampe-eval serve`` at ``root`` runs (``GET /lampe``); None for a server without it."""
    return _optional(f"{root}/lampe")


def server_version(root: str) -> str | None:
    """A foreign server's version (vLLM's ``GET /version``); None when it has no such path."""
    answer = _optional(f"{root}/version")
    version = (answer or {}).get("version")
    return str(version) if version else None


def _optional(url: str) -> dict[str, Any] | None:
    """``GET url``; None when the server does not have it (a 404)."""
    try:
        return get(url)
    except EndpointDown:
        raise
    except LampeEvalError as error:
        if "HTTP 404" in str(error):
            return None
        raise


def get(url: str) -> dict[str, Any]:
    return _call(urllib.request.Request(url, headers=_headers()))


def post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    data = json.dumps(body).encode()
    return _call(
        urllib.request.Request(url, data=data, headers={**_headers(), "Content-Type": "application/json"})
    )


def _headers() -> dict[str, str]:
    key = os.environ.get(API_KEY)
    return {"Authorization": f"Bearer {key}"} if key else {}


def _call(request: urllib.request.Request) -> dict[str, Any]:
    """One request, tried again after a connection error, a 5xx or a 429; one line after the last try."""
    problem = ""
    for wait in (*RETRY_SECONDS, None):
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT) as answer:
                return _json(request.full_url, answer.read())
        except urllib.error.HTTPError as error:
            detail = _message(error)
            if error.code != 429 and error.code < 500:
                raise LampeEvalError(f"{request.full_url}: HTTP {error.code}: {detail}") from None
            problem = f"HTTP {error.code}: {detail}"
        except (urllib.error.URLError, ConnectionError, TimeoutError, http.client.HTTPException) as error:
            problem = str(getattr(error, "reason", error))
        if wait is not None:
            time.sleep(wait)
    raise EndpointDown(f"{request.full_url}: {problem} (after {len(RETRY_SECONDS) + 1} tries)")


def _json(url: str, body: bytes) -> dict[str, Any]:
    try:
        answer = json.loads(body)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise LampeEvalError(f"{url}: the answer is not a JSON object (an OpenAI-compatible server's API?)")
    return answer


class EndpointDown(BackendGone):
    """An endpoint that stayed unreachable (or busy) through every try of a request: when no other endpoint
    takes the request, the worker's later jobs are not tried (a rerun resumes them)."""


def _message(error: urllib.error.HTTPError) -> str:
    """The server's one-line reason (an OpenAI-style error body, else its first line)."""
    try:
        body = json.loads(error.read() or b"{}")
        message = body.get("error", {}).get("message") if isinstance(body.get("error"), dict) else None
        text = str(message or body.get("message") or body.get("detail") or error.reason)
    except (ValueError, AttributeError):
        text = str(error.reason)
    return text.strip().splitlines()[0][:300] if text.strip() else str(error.code)
