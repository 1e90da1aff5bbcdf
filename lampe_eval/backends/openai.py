"""``--backend openai --endpoint URL[,URL...]``: the benchmarks' requests sent to OpenAI-compatible
endpoints that speak vLLM's extensions (``lampe-eval serve``, ``vllm serve``): the exact prompt tokens
(a token-id ``prompt``), the new tokens back (``return_token_ids``), greedy with the model's end tokens
(``ignore_eos`` + ``stop_token_ids``, as the vLLM backend asks its engine) and, for perplexity, each prompt
token's log-probability (``prompt_logprobs``). A server that answers without them is refused in one
line: text alone cannot give the records the other backends write.

The method is the server's: before a job runs, ``GET /lampe`` must name the job's method with the same
parameters (``lampe-eval serve --method M --len L`` with the job's method and length); a server without
``/lampe`` (plain ``vllm serve``) runs the unpatched model, so only ``rope`` is accepted there. Requests
go to the endpoints in turn, ``--batch-size`` at once per endpoint. A connection error, a 5xx or a 429 is
tried again (1, 2, 4, 8 s apart); after the last try the request goes to the next endpoint (a server killed
mid-run leaves the others the work), and once every endpoint is down the run stops with one line, the
sample is not recorded, and a rerun resumes it.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Hashable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import torch

from ..errors import LampeEvalError
from ..methods.base import Method, RopeBase
from ..models import LoadedModel
from ..prompts import prompt_ids
from ..settings import RunSettings
from .base import (
    BACKENDS,
    BaseBackend,
    Generation,
    GenerationRequest,
    NLLRequest,
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


@BACKENDS.register("openai")
class OpenAIBackend(BaseBackend):
    """A client of OpenAI-compatible endpoints serving the model (see the module docstring)."""

    placement = Placement.REMOTE

    def __init__(self, lm: LoadedModel, endpoints: Sequence[str], batch_size: int = 1) -> None:
        super().__init__(lm, batch_size)
        self.endpoints = [url.rstrip("/") for url in endpoints]
        self.served: list[dict[str, Any] | None] = [served_method(url) for url in self.endpoints]
        self._eos = directory_eos_ids(lm.extra.get("source"), lm.tokenizer)  # what the HF backend stops at
        self._model = self._model_name()

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
    def load(
        cls, model: str, settings: RunSettings, device: str | None, device_map: str | None
    ) -> LoadedModel:
        """The tokenizer and config (prompts are built and counted here); the server holds the weights."""
        from ..models import load_for_engine

        return load_for_engine(model)

    @classmethod
    def create(cls, lm: LoadedModel, settings: RunSettings) -> OpenAIBackend:
        return cls(lm, settings.endpoints, batch_size=settings.batch_size)

    # ---------------------------------------------------------------------------------- method
    def install(self, method: Method) -> Any:
        return self._checked(method)

    @contextmanager
    def _checked(self, method: Method) -> Iterator[None]:
        """The job's method must be what every endpoint serves."""
        wanted = json.loads(json.dumps(method.params(), sort_keys=True, default=str))
        for url, served in zip(self.endpoints, self.served, strict=True):
            if served is None and method.kind != "baseline":
                raise LampeEvalError(
                    f"{url} serves the model without a method (no /lampe): only --method rope runs there; "
                    f"serve {method.name} with lampe-eval serve --method {method.name}"
                )
            if served is not None and (served["method"], served["params"]) != (method.name, wanted):
                raise LampeEvalError(
                    f"{url} serves {served.get('label', served['method'])}, this job asks for "
                    f"{method.label()}: serve the job's method with the job's length (lampe-eval serve "
                    "--method M --len L)"
                )
        yield

    def rope_base(self) -> RopeBase:
        return rope_base_from_config(self.lm.extra["config"], self.lm.pretraining_window)

    def describe(self) -> dict[str, Any]:
        served = next((s for s in self.served if s is not None), None)
        return {
            "backend": self.name,
            "backend_version": (served or {}).get("vllm_version") or "unknown",
            "dtype": "-",
            "device": "remote",
            "kernel": "vllm-lampe" if served else "-",
            "settings": f"{len(self.endpoints)} endpoint(s), greedy, token ids",
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
            url = self.endpoints[(first + step) % len(self.endpoints)]
            try:
                return call(url, request)
            except EndpointDown as error:
                down.append(str(error))
        raise EndpointDown(down[0] if len(down) == 1 else f"every endpoint is down: {'; '.join(down)}")

    def _generate_one(self, url: str, request: GenerationRequest) -> Generation:
        ids = (
            list(request.input_ids)
            if request.input_ids is not None
            else prompt_ids(self.lm.tokenizer, request.prompt)
        )
        start = time.perf_counter()
        answer = post(
            f"{url}/v1/completions",
            {
                "model": self._model,
                "prompt": [ids],
                "max_tokens": max(1, request.max_new_tokens),
                "min_tokens": request.min_new_tokens,
                "temperature": 0.0,
                "ignore_eos": True,  # the end tokens are ours: the model's and the request's
                "stop_token_ids": sorted(self._eos | set(request.stop_token_ids)),
                "return_token_ids": True,
            },
        )
        seconds = time.perf_counter() - start
        tokens = answer["choices"][0].get("token_ids")
        if tokens is None:
            raise LampeEvalError(f"{url} returned no token ids (return_token_ids): use a vLLM server")
        eos = self._eos | set(request.stop_token_ids)
        kept, text = finish(torch.tensor(tokens, dtype=torch.long), eos, request.stop, self.lm.tokenizer)
        return Generation(text, len(ids), int(kept.shape[0]), seconds, tuple(kept.tolist()))

    def _nll_one(self, url: str, request: NLLRequest) -> TokenNLL:
        ids = list(request.input_ids)
        start = time.perf_counter()
        answer = post(
            f"{url}/v1/completions",
            {
                "model": self._model,
                "prompt": [ids],
                "max_tokens": 1,
                "temperature": 0.0,
                "prompt_logprobs": 0,
            },
        )
        rows = answer["choices"][0].get("prompt_logprobs")
        if rows is None:
            raise LampeEvalError(f"{url} returned no prompt_logprobs: perplexity needs a vLLM server")
        logprobs = [float(row[str(token)]["logprob"]) for row, token in zip(rows[1:], ids[1:], strict=True)]
        return nll_sums(logprobs, request.tail_from, time.perf_counter() - start)

    def _model_name(self) -> str:
        """The model name the first endpoint serves (``/v1/models``)."""
        listing = get(f"{self.endpoints[0]}/v1/models")
        names = [m["id"] for m in listing.get("data", [])]
        if not names:
            raise LampeEvalError(f"{self.endpoints[0]}/v1/models lists no model")
        return str(names[0])


# ------------------------------------------------------------------------------------ HTTP
def served_method(url: str) -> dict[str, Any] | None:
    """What ``lampe-eval serve`` at ``url`` runs (``GET /lampe``); None for a server without it."""
    try:
        return get(f"{url}/lampe")
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
                return dict(json.load(answer))
        except urllib.error.HTTPError as error:
            detail = _message(error)
            if error.code != 429 and error.code < 500:
                raise LampeEvalError(f"{request.full_url}: HTTP {error.code}: {detail}") from None
            problem = f"HTTP {error.code}: {detail}"
        except (urllib.error.URLError, ConnectionError, TimeoutError) as error:
            problem = str(getattr(error, "reason", error))
        if wait is not None:
            time.sleep(wait)
    raise EndpointDown(f"{request.full_url}: {problem} (after {len(RETRY_SECONDS) + 1} tries)")


class EndpointDown(LampeEvalError):
    """An endpoint that stayed unreachable (or busy) through every try of a request."""


def _message(error: urllib.error.HTTPError) -> str:
    """The server's one-line reason (an OpenAI-style error body, else its first line)."""
    try:
        body = json.loads(error.read() or b"{}")
        message = body.get("error", {}).get("message") if isinstance(body.get("error"), dict) else None
        text = str(message or body.get("message") or body.get("detail") or error.reason)
    except (ValueError, AttributeError):
        text = str(error.reason)
    return text.strip().splitlines()[0][:300] if text.strip() else str(error.code)
