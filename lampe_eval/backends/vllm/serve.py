"""``lampe-eval serve``: vLLM's OpenAI-compatible server (completions, chat completions, token-id prompts,
``echo`` + ``logprobs``, ``prompt_logprobs``, ``/tokenize``, ``/tokenizer_info``: whatever vLLM's server
offers) with a method installed in every worker before the first request is taken. The engine is the one
:class:`~.backend.VLLMBackend` starts (same arguments, same environment, its keys in vLLM's paged cache), so a
served answer is the in-process backend's. Each request gets its own plan in the worker, from its prompt
length and its ``max_tokens`` (:mod:`.attention`): requests arrive in any order, any number at once.

**``--len L`` means L** (:func:`length_refusal`): a prompt of more than L tokens, or a prompt plus
``max_tokens`` beyond L + the generation room (``--gen-room``), is an HTTP 400 naming L and the request's
numbers, never a ``max_tokens`` shortened in silence; the engine is sized for L + the room (rounded up to
vLLM's block multiple). vLLM's own count of the prompt's tokens decides (the check wraps the
``get_max_tokens`` its serving layers call).

**Every 4xx is one sentence** in the OpenAI error shape (:func:`one_sentence`: vLLM's validation dumps
and its context-length messages rewritten). ``GET /lampe`` answers what the server runs (model, method,
its resolved parameters and those given, the length, versions), for a client to record; ``GET
/v1/models`` carries the same beside its list (``"lampe"``).
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

from ...methods.base import Method
from ...settings import SERVE_GEN_ROOM
from ..plans import method_key_copies
from .backend import VLLMBackend
from .checks import check_installed, vllm_version
from .constants import MIDDLEWARE
from .engine import model_length

INFO: dict[str, Any] = {}  # what GET /lampe answers (set before the server starts)
# vLLM's serving modules that size a request's max_tokens (``get_max_tokens``): the length check wraps it
MAX_TOKENS_USERS = (
    "vllm.entrypoints.openai.completion.serving",
    "vllm.entrypoints.openai.chat_completion.serving",
    "vllm.entrypoints.openai.chat_completion.batch_serving",
    "vllm.entrypoints.openai.responses.serving",
)


@dataclass(frozen=True)
class ServeSettings:
    host: str = "127.0.0.1"
    port: int = 8000
    max_len: int = 8192  # --len: the longest prompt served
    gen_room: int = SERVE_GEN_ROOM  # prompt + max_tokens may reach max_len + gen_room
    api_key: str | None = None
    served_name: str | None = None  # the model's name in the API (default: the --model given)
    given: dict[str, str] = field(default_factory=dict)  # the -p parameters, as given

    @property
    def longest(self) -> int:
        """The longest prompt + generation served."""
        return self.max_len + self.gen_room


def length_refusal(prompt: int, max_tokens: int | None, max_len: int, room: int) -> str | None:
    """Why a request of ``prompt`` tokens asking for ``max_tokens`` new ones exceeds ``--len max_len``
    (with ``room`` tokens of generation room), in one sentence; None when it fits."""
    if prompt > max_len:
        return (
            f"This server's --len is {max_len} tokens and this prompt has {prompt} tokens: send at most "
            f"{max_len} prompt tokens (or serve with a larger --len)."
        )
    if max_tokens is not None and prompt + max_tokens > max_len + room:
        return (
            f"This server serves a prompt plus max_tokens of at most {max_len + room} tokens (--len "
            f"{max_len} + --gen-room {room}) and this request asks for {prompt} + {max_tokens} = "
            f"{prompt + max_tokens}: ask for at most {max_len + room - prompt} new tokens (or serve with a "
            "larger --gen-room)."
        )
    return None


def limit_max_tokens(original: Callable[..., int], max_len: int, room: int) -> Callable[..., int]:
    """vLLM's ``get_max_tokens`` held to ``--len``: a request beyond it is refused (:func:`length_refusal`)
    instead of having its ``max_tokens`` cut to the engine's length; one without ``max_tokens`` gets
    vLLM's default within ``max_len + room``."""
    from vllm.exceptions import VLLMValidationError

    def get_max_tokens(
        max_model_len: int,
        max_tokens: int | None,
        input_length: int,
        default_sampling_params: dict,
        override_max_tokens: int | None = None,
        truncate_prompt_tokens: int | None = None,
    ) -> int:
        prompt = input_length
        if truncate_prompt_tokens is not None:  # the prompt as vLLM truncates it
            prompt = min(prompt, max_len if truncate_prompt_tokens == -1 else truncate_prompt_tokens)
        why = length_refusal(prompt, max_tokens, max_len, room)
        if why:
            parameter = "prompt" if prompt > max_len else "max_tokens"
            raise VLLMValidationError(why, parameter=parameter)
        return original(
            max_len + room,
            max_tokens,
            input_length,
            default_sampling_params,
            override_max_tokens,
            truncate_prompt_tokens=truncate_prompt_tokens,
        )

    return get_max_tokens


def hold_to_length(max_len: int, room: int) -> None:
    """Every serving module that sizes ``max_tokens`` checks the length first (:func:`limit_max_tokens`);
    a vLLM whose completions API sizes it elsewhere is refused rather than served unchecked."""
    from vllm.entrypoints.serve.utils import api_utils

    original: Callable[..., int] = api_utils.get_max_tokens
    patched = []
    for name in MAX_TOKENS_USERS:
        try:
            module = importlib.import_module(name)
        except ImportError:  # a serving module this vLLM does not have
            continue
        if getattr(module, "get_max_tokens", None) is original:
            setattr(module, "get_max_tokens", limit_max_tokens(original, max_len, room))  # noqa: B010
            patched.append(name)
    if MAX_TOKENS_USERS[0] not in patched:
        raise RuntimeError(f"vLLM's completions API no longer sizes max_tokens through {original.__module__}")


# ---------------------------------------------------------------------------- HTTP
async def lampe_http(request: Any, call_next: Any) -> Any:
    """An HTTP middleware (vLLM's ``--middleware``): ``GET /lampe`` answers :data:`INFO`, ``GET /v1/models``
    gets it as a ``"lampe"`` field beside the list, and every 4xx becomes one sentence in the OpenAI error
    shape (:func:`one_sentence`)."""
    from fastapi.responses import JSONResponse

    if request.url.path == "/lampe":
        return JSONResponse(INFO)
    response = await call_next(request)
    status = response.status_code
    if not (request.url.path == "/v1/models" and status == 200) and not 400 <= status < 500:
        return response
    raw = b"".join([chunk async for chunk in response.body_iterator])
    if status == 200:
        return JSONResponse({**json.loads(raw), "lampe": INFO})
    headers = {
        k: v for k, v in response.headers.items() if k.lower() not in ("content-length", "content-type")
    }
    answer = one_sentence(status, raw, INFO.get("max_len"), request.url.path)
    return JSONResponse(answer, status_code=status, headers=headers)


CONTEXT_LENGTH = re.compile(
    r"maximum context length is \d+ tokens\. However, your prompt contains (at least )?(\d+) "
    r"(input tokens|characters)"
)
# the OpenAI client's exception names, as vLLM's errors spell them (its validation errors: "Bad Request")
ERROR_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    409: "ConflictError",
    422: "UnprocessableEntityError",
    429: "RateLimitError",
}
VLLM_PARAMETER = re.compile(r"\s*\((parameter|value)=[^()]*\)\s*$")


def one_sentence(status: int, body: bytes, max_len: int | None, path: str = "") -> dict[str, Any]:
    """A 4xx answer's body as the OpenAI error shape with a one-sentence message: vLLM's validation dumps
    (``N validation errors: {...}``) become "field: what was wrong (got value)", its context-length
    messages name ``--len``, a body of another shape (a plain ``{"detail": ...}``, text) is wrapped."""
    try:
        answer = json.loads(body or b"{}")
    except ValueError:
        answer = {"detail": body.decode(errors="replace")}
    error = answer.get("error") if isinstance(answer, dict) else None
    if not isinstance(error, dict):  # {"error": "Unauthorized"}, {"detail": ...}, text
        detail = error or (answer.get("detail") if isinstance(answer, dict) else answer)
        error = {"message": str(detail or HTTPStatus(status).phrase)}
    message = _sentence(str(error.get("message") or HTTPStatus(status).phrase), max_len)
    if status == 404 and message == "Not Found." and path:
        message = (
            f"This server has no {path} (the OpenAI API is under /v1: /v1/completions, /v1/models, ...)."
        )
    param = str(error.get("param") or "").removeprefix("body").strip(".")
    param = "prompt" if param == "input_tokens" else param  # vLLM's name for an over-long prompt
    return {
        "error": {
            "message": message,
            "type": ERROR_TYPES.get(status, error.get("type") or HTTPStatus(status).phrase),
            "param": param if param and not param.isdigit() else None,
            "code": status,
        }
    }


def _sentence(message: str, max_len: int | None) -> str:
    context = CONTEXT_LENGTH.search(message)
    if context and max_len:
        count, unit = f"{context.group(1) or ''}{context.group(2)}", context.group(3).split()[-1]
        return (
            f"This server's --len is {max_len} tokens and this prompt has {count} {unit}: send at most "
            f"{max_len} prompt tokens (or serve with a larger --len)."
        )
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    first = _validation_sentence(lines) if lines and " validation error" in lines[0] else None
    text = first or (VLLM_PARAMETER.sub("", lines[0]) if lines else message)
    text = " ".join(text.split())
    return text if text.endswith((".", "?", "!")) else f"{text}."


def _validation_sentence(lines: list[str]) -> str | None:
    """``N validation error(s):`` and one dict per line (vLLM's dump of pydantic's errors) as one
    sentence about the first: its field, pydantic's reason and the value given."""
    try:
        first = ast.literal_eval(lines[1])
    except (IndexError, ValueError, SyntaxError):
        return None
    if not isinstance(first, dict):
        return None
    field_name = str(first.get("loc") or "").removeprefix("body").strip(".")
    if first.get("type") == "json_invalid":
        reason = (first.get("ctx") or {}).get("error")
        return "The request body is not valid JSON" + (f" ({reason})" if reason else "")
    value = first.get("input")
    described = (
        isinstance(value, str) and value.startswith("<") and value.endswith(">")
    )  # "<dict of 2 items>"
    shown = f" (got {value if described else repr(value)})" if value not in (None, {}, "") else ""
    shown = shown if len(shown) <= 70 else ""
    where = f"{field_name}: " if field_name else ""
    count = len(lines) - 1
    more = f"; {count - 1} more problem(s) in this request" if count > 1 else ""
    return f"{where}{first.get('msg', 'invalid value')}{shown}{more}"


def serve(backend: VLLMBackend, method: Method, model: str, settings: ServeSettings) -> None:
    """Start the engine with ``method`` in it and serve until SIGINT/SIGTERM (vLLM drains and exits)."""
    import importlib.metadata

    import uvloop
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    model_len = model_length(settings.longest)
    copies = method_key_copies(method, backend.rope_base())
    backend.check_room(model_len, copies)
    backend.engine_environment(copies)
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(
        ["--host", settings.host, "--port", str(settings.port)]
    )
    for key, value in backend.engine_arguments(model_len).items():
        setattr(args, key, value)
    args.served_model_name = [settings.served_name or model]
    args.middleware = [*args.middleware, MIDDLEWARE]
    args.enable_tokenizer_info_endpoint = True  # lm-eval's tokenizer_backend=remote asks GET /tokenizer_info
    args.api_key = [settings.api_key] if settings.api_key else None
    validate_parsed_serve_args(args)
    INFO.clear()
    INFO.update(
        model=settings.served_name or model,
        source=backend.source,
        method=method.name,
        label=method.label(),
        params=method.params(),
        given=dict(settings.given),
        max_len=settings.max_len,
        gen_room=settings.gen_room,
        max_model_len=model_len,
        kernel=backend.kernels().label(),
        lampe_eval_version=importlib.metadata.version("lampe-eval"),
        vllm_version=vllm_version(),
    )
    hold_to_length(settings.max_len, settings.gen_room)
    print(startup_line(INFO, settings), flush=True)
    uvloop.run(_serve(args, backend.install_arguments(method), method))


def startup_line(info: dict[str, Any], settings: ServeSettings) -> str:
    """What the server takes, said once before it starts."""
    return (
        f"serving {info['model']} with {info['label']} on http://{settings.host}:{settings.port}/v1: prompts "
        f"of up to {settings.max_len} tokens (--len), prompt + max_tokens up to {settings.longest} "
        f"(--gen-room {settings.gen_room}); the engine holds {info['max_model_len']}"
    )


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
