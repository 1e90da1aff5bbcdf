"""``lampe-eval serve``: vLLM's OpenAI-compatible server (completions, chat completions, token-id prompts,
``echo`` + ``logprobs``, ``prompt_logprobs``: whatever vLLM's server offers) with a method installed in every
worker before the first request is taken. The engine is the one :class:`~.vllm.VLLMBackend` starts (same
arguments, same environment, its keys in vLLM's paged cache), so a served answer is the in-process
backend's. Each request gets its own plan in the worker, from its prompt length and its ``max_tokens``
(:mod:`.vllm_attention`): requests arrive in any order, any number at once. A prompt longer than the
server's length gets vLLM's own HTTP 400, and the server keeps serving. ``GET /lampe`` answers what the
server runs (model, method, its resolved parameters, versions), for a client to record; ``GET /v1/models``
carries the same beside its list (``"lampe"``).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from ..methods.base import Method
from .plans import method_key_copies
from .vllm import VLLMBackend, check_installed, model_length, vllm_version

INFO: dict[str, Any] = {}  # what GET /lampe answers (set before the server starts)


@dataclass(frozen=True)
class ServeSettings:
    host: str = "127.0.0.1"
    port: int = 8000
    max_len: int = 8192  # the longest prompt + generation served
    api_key: str | None = None
    served_name: str | None = None  # the model's name in the API (default: the --model given)


async def lampe_info(request: Any, call_next: Any) -> Any:
    """An HTTP middleware (vLLM's ``--middleware``): ``GET /lampe`` answers :data:`INFO`, and ``GET
    /v1/models`` gets it as a ``"lampe"`` field beside the list."""
    from fastapi.responses import JSONResponse

    if request.url.path == "/lampe":
        return JSONResponse(INFO)
    response = await call_next(request)
    if request.url.path != "/v1/models" or response.status_code != 200:
        return response
    body = json.loads(b"".join([chunk async for chunk in response.body_iterator]))
    return JSONResponse({**body, "lampe": INFO})


def served_model_length(longest: int) -> int:
    """The engine's length for prompts + generations of up to ``longest`` tokens: one more, since a
    perplexity request of ``longest`` tokens asks for one new token (vLLM counts it)."""
    return model_length(longest + 1)


def serve(backend: VLLMBackend, method: Method, model: str, settings: ServeSettings) -> None:
    """Start the engine with ``method`` in it and serve until SIGINT/SIGTERM (vLLM drains and exits)."""
    import importlib.metadata

    import uvloop
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    model_len = served_model_length(settings.max_len)
    copies = method_key_copies(method, backend.rope_base())
    backend.check_room(model_len, copies)
    backend.engine_environment(copies)
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(
        ["--host", settings.host, "--port", str(settings.port)]
    )
    for key, value in backend.engine_arguments(model_len).items():
        setattr(args, key, value)
    args.served_model_name = [settings.served_name or model]
    args.middleware = [*args.middleware, f"{__name__}.lampe_info"]
    args.api_key = [settings.api_key] if settings.api_key else None
    validate_parsed_serve_args(args)
    INFO.clear()
    INFO.update(
        model=settings.served_name or model,
        source=backend.source,
        method=method.name,
        label=method.label(),
        params=method.params(),
        max_model_len=model_len,
        lampe_eval_version=importlib.metadata.version("lampe-eval"),
        vllm_version=vllm_version(),
    )
    uvloop.run(_serve(args, backend.install_arguments(method), method))


async def _serve(args: Any, install: tuple[str, str, str, int], method: Method) -> None:
    """vLLM's ``run_server`` with the method installed between the engine's start and the first request."""
    from vllm.entrypoints.launchers.api_server.entry import build_and_serve, build_async_engine_client
    from vllm.entrypoints.launchers.launcher import setup_server

    listen_address, sock = setup_server(args, reuse_port=False)
    async with build_async_engine_client(args) as engine:
        check_installed(method, await engine.collective_rpc("lampe_install", args=install))
        shutdown: asyncio.Task = await build_and_serve(engine, listen_address, sock, args)
    try:
        await shutdown
    finally:
        sock.close()
