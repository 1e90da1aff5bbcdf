"""``lampe-eval serve``: a method-patched model behind vLLM's OpenAI-compatible API
(:mod:`lampe_eval.backends.vllm.serve`)."""

from __future__ import annotations

from typing import Annotated

import typer

from ..errors import LampeEvalError
from ..lengths import parse_lengths
from ..settings import SERVE_GEN_ROOM
from .common import fail, parse_key_values, say_error
from .params import Dtype, ModelName, length_option, method_option, param_option


def serve_command(
    model: ModelName = "smollm2-135m",
    method: Annotated[str, method_option("Method installed for every request ({methods}).")] = "rope",
    param: Annotated[list[str] | None, param_option("Method parameter key=value (repeatable).")] = None,
    length: Annotated[
        str | None,
        length_option(
            "Longest prompt served, the length the method plans for (default: the model's window)."
        ),
    ] = None,
    gen_room: int = typer.Option(
        SERVE_GEN_ROOM,
        "--gen-room",
        help="New tokens a prompt of --len tokens may still ask for: prompt + max_tokens <= --len + this.",
    ),
    window: int | None = typer.Option(
        None, "--window", help="Pretraining window the method plans with (default: the model's own)."
    ),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (0.0.0.0: every interface)."),
    port: int = typer.Option(8000, "--port", help="Port to listen on."),
    api_key: str | None = typer.Option(None, "--api-key", help="Key clients must send (vLLM's --api-key)."),
    served_name: str | None = typer.Option(
        None, "--served-model-name", help="The model's name in the API (default: --model)."
    ),
    batch_size: int = typer.Option(16, "--batch-size", "-b", help="Sequences the engine runs at once."),
    kv_cache_gib: float | None = typer.Option(
        None, "--kv-cache-gib", help="The engine's KV cache in GiB (default: vLLM sizes it)."
    ),
    tensor_parallel: int = typer.Option(
        1, "--tensor-parallel-size", "-tp", help="GPUs the model's heads are split over (vLLM's option)."
    ),
    dtype: Dtype = None,
) -> None:
    """Serve a model with a method installed, through vLLM's OpenAI-compatible API (completions, chat
    completions, token-id prompts, echo and logprobs); GET /lampe says what runs. Each request is planned
    from its own prompt length and max_tokens; a prompt over --len tokens, or prompt + max_tokens over
    --len + --gen-room, is an HTTP 400 naming both numbers.

    Example: lampe-eval serve --model smollm2-135m --method lampe --len 16k --port 8000
    (then, e.g., curl localhost:8000/v1/completions -d '{"model": "smollm2-135m", "prompt": "Hi"}')
    """
    from ..backends.vllm import VLLMBackend
    from ..backends.vllm.serve import ServeSettings, serve
    from ..memory import GIB
    from ..methods.resolve import resolve_method
    from ..models import load_for_engine, resolve_source
    from ..settings import RunSettings

    try:
        if not 0 < port < 65536:
            raise LampeEvalError(f"--port {port}: choose 1-65535")
        if batch_size < 1:
            raise LampeEvalError("--batch-size must be at least 1")
        if gen_room < 1:
            raise LampeEvalError(
                f"--gen-room {gen_room}: at least 1 (perplexity at --len tokens asks for one new token)"
            )
        resolve_source(model)
        params = parse_key_values(param, "--param")
        if tensor_parallel < 1:
            raise LampeEvalError("--tensor-parallel-size must be at least 1")
        VLLMBackend.check_model(model, [method], RunSettings(backend="vllm", gpus_per_worker=tensor_parallel))
        if window is not None and window < 1:
            raise LampeEvalError(f"--window {window}: must be at least 1")
        lm = load_for_engine(model, pretraining_window=window)  # the engine loads the weights itself
        max_len = parse_lengths(length)[0] if length else lm.pretraining_window
        resolved = resolve_method(method, lm.pretraining_window, max_len, model=model, params=params)
        if resolved.warning:
            say_error("warning:", resolved.warning)
        kv_bytes = int(kv_cache_gib * GIB) if kv_cache_gib is not None else None
        backend = VLLMBackend(
            lm, batch_size=batch_size, dtype=dtype, kv_cache_bytes=kv_bytes, tensor_parallel=tensor_parallel
        )
        where = ServeSettings(
            host=host,
            port=port,
            max_len=max_len,
            gen_room=gen_room,
            api_key=api_key,
            served_name=served_name,
            given=params,
        )
        serve(backend, resolved.method, model, where)
    except LampeEvalError as err:
        fail(str(err))
