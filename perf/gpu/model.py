"""(e) a whole random 8B-shaped model through the Hugging Face backend: generation and loss-pass time and
memory against the estimate; (i) where a decode step's time goes; ``--profile-decode``."""

from __future__ import annotations

import functools
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import SimpleNamespace

import torch

from lampe_eval.backends.hf import HFBackend, chunked_nll_rows
from lampe_eval.memory import GIB
from lampe_eval.methods.resolve import resolve_method
from lampe_eval.models import LoadedModel
from lampe_eval.settings import RunSettings
from lampe_eval.testing import shaped_config
from perf.gpu.common import DIM, HKV, HQ, WINDOW, Row, held

# ------------------------------------------------------------------------------------------------ (e)
MODEL_METHODS = "rope,lampe,selfextend,dca,rerope,string,yarn"
ESTIMATE_TOLERANCE = 0.15  # the estimate may sit this far below the measured peak before the check warns


@dataclass(frozen=True)
class ModelShapeArgs:
    """The random model of (e): Llama-3-8B's layer, vocabulary and RoPE, fewer layers."""

    layers: int = 4
    heads: int = HQ
    kv_heads: int = HKV
    dim: int = DIM
    intermediate: int = 14336
    vocab: int = 128256
    window: int = WINDOW


def random_model(shape: ModelShapeArgs, device: str, dtype: torch.dtype, where: str) -> LoadedModel:
    """A random Llama of ``shape`` on ``device``, its config saved in ``where`` (the directory is the model's
    name: the estimate reads its config there, as for any local model)."""
    from transformers import AutoModelForCausalLM

    config = shaped_config(
        layers=shape.layers,
        heads=shape.heads,
        kv_heads=shape.kv_heads,
        head_dim=shape.dim,
        window=shape.window,
        rope_theta=500000.0,
        vocab=shape.vocab,
        intermediate_size=shape.intermediate,
    )
    config.save_pretrained(where)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.config._attn_implementation = "sdpa"
    tokenizer = SimpleNamespace(pad_token_id=0, eos_token_id=0)  # ids only: nothing is decoded to text
    return LoadedModel(where, model.eval(), tokenizer, shape.window, chat_template=False)


@contextmanager
def random_backend(
    shape: ModelShapeArgs, device: str, length: int
) -> Iterator[tuple[LoadedModel, HFBackend, torch.Tensor]]:
    """The random model of (e), (i) and ``--profile-decode`` (bf16 on CUDA, else fp32) behind the Hugging
    Face backend, and ``length`` random token ids on ``device``."""
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    with tempfile.TemporaryDirectory() as where:
        lm = random_model(shape, device, dtype, where)
        ids = torch.randint(100, shape.vocab, (1, length), generator=torch.Generator().manual_seed(2))
        yield lm, HFBackend(lm), ids.to(device)


class TokenClock:
    """A ``generate`` streamer: the time of each new token (the first ``put`` is the prompt; each later one
    comes after the token reached the host, so no extra synchronisation is needed)."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        if self.prompt_seen:
            self.times.append(time.perf_counter())
        self.prompt_seen = True

    def end(self) -> None:
        pass


@torch.no_grad()
def measure_model(
    rows: dict[str, Row],
    length: int,
    methods: list[str],
    *,
    shape: ModelShapeArgs = ModelShapeArgs(),
    new_tokens: int = 16,
    repeats: int = 2,
    device: str = "cuda",
) -> list[str]:
    """(e) at one length: generation (prompt of ``length - new_tokens``, greedy, best of ``repeats``) and a
    loss pass over ``length`` tokens per method. Returns warnings: an estimate more than
    ``ESTIMATE_TOLERANCE`` below the measured peak (a run the refusal lets through could run out)."""
    label = f"{length // 1024}K" if length >= 1024 else str(length)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    settings = RunSettings(device=device, dtype=str(dtype).removeprefix("torch."))
    warnings = []
    with random_backend(shape, device, length) as (lm, backend, ids):
        reference: dict[str, float] = {}
        for name in methods:
            method = resolve_method(name, shape.window, length).method
            guess = HFBackend.memory_estimate(lm.name, method, length, settings)
            assert guess is not None, "the random model's config is readable: an estimate exists"
            prefill_s, decode_s, generation = float("inf"), float("inf"), 0
            prompt = ids[:, : length - new_tokens]
            with backend.install(method):
                for _ in range(repeats):
                    clock = TokenClock()
                    start = time.perf_counter()
                    generate = functools.partial(
                        backend.generate_ids, prompt, length, new_tokens, new_tokens, set(), streamer=clock
                    )
                    _, used = held(generate, device)
                    prefill_s = min(prefill_s, clock.times[0] - start)
                    decode_s = min(decode_s, (clock.times[-1] - clock.times[0]) / (len(clock.times) - 1))
                    generation = max(generation, used)
                _, loss = held(lambda: chunked_nll_rows(lm.model, ids, chunk=1024), device)
            reference.setdefault("prefill", prefill_s)
            reference.setdefault("decode", decode_s)
            row = rows.setdefault(name, Row(name))
            row.cells[f"prefill {label} s (x rope)"] = (
                f"{prefill_s:.2f} ({prefill_s / reference['prefill']:.2f}x)"
            )
            row.cells[f"decode {label} ms (x rope)"] = (
                f"{decode_s * 1e3:.1f} ({decode_s / reference['decode']:.2f}x)"
            )
            for phase, estimated, measured in (
                ("generation", guess.generation - guess.weights, generation),
                ("loss pass", guess.scoring - guess.weights, loss),
            ):
                row.cells[f"{phase} {label} GiB est/meas"] = (
                    f"{estimated / GIB:.3g}/{measured / GIB:.3g} ({estimated / measured:.2f})"
                )
                if estimated < (1 - ESTIMATE_TOLERANCE) * measured:
                    warnings.append(
                        f"{name} {label} {phase}: estimate {estimated / GIB:.2f} GiB, measured "
                        f"{measured / GIB:.2f} GiB"
                    )
    return warnings


class ProfileAfterPrefill:
    """A ``generate`` streamer that profiles the decode steps only: the profiler starts when the first new
    token reaches the host (after the prefill) and stops at the end."""

    def __init__(self) -> None:
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.profiler = torch.profiler.profile(activities=activities)
        self.puts = 0

    def put(self, value: torch.Tensor) -> None:
        self.puts += 1
        if self.puts == 2:
            self.profiler.start()

    def end(self) -> None:
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.profiler.stop()


@torch.no_grad()
def profile_decode(names: list[str], length: int, shape: ModelShapeArgs, rows: int = 15) -> None:
    """Where a whole-model decode step's GPU time goes (``--profile-decode NAME``): the kernels of 16 decode
    steps after a prompt of ``length`` - 17 tokens, heaviest first."""
    with random_backend(shape, "cuda", length) as (_, backend, ids):
        prompt = ids[:, : length - 17]
        for name in names:
            with backend.install(resolve_method(name, shape.window, length).method):
                backend.generate_ids(prompt, length, 17, 17, set())  # warm
                streamer = ProfileAfterPrefill()
                backend.generate_ids(prompt, length, 17, 17, set(), streamer=streamer)
            print(f"profile: {name}, 16 decode steps at {length // 1024}K, {shape.layers} layers")
            table = streamer.profiler.key_averages().table(sort_by="self_cuda_time_total", row_limit=rows)
            print(table)


# ------------------------------------------------------------------------------------------------ (i)
def device_work(profiler: torch.profiler.profile) -> tuple[float, int]:
    """The GPU's busy time (s) and kernel launches a profile saw (from its device events)."""
    device_events = [e for e in profiler.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return sum(e.time_range.elapsed_us() for e in device_events) / 1e6, len(device_events)


@torch.no_grad()
def decode_breakdown(
    rows: dict[str, Row],
    length: int,
    methods: list[str],
    *,
    shape: ModelShapeArgs,
    new_tokens: int = 16,
    device: str = "cuda",
) -> None:
    """(i) at one length: per decoded token, the wall time (best of 2 generations) and the GPU's busy time
    and kernel launches (one more generation, its ``new_tokens`` decode steps profiled; ``device``: the
    tests run it on CPU, where the GPU columns read 0)."""
    label = f"{length // 1024}K" if length >= 1024 else str(length)
    with random_backend(shape, device, length) as (_, backend, ids):
        prompt = ids[:, : length - new_tokens - 1]
        tokens = new_tokens + 1
        for name in methods:
            method = resolve_method(name, shape.window, length).method
            wall = float("inf")
            with backend.install(method):
                for _ in range(2):
                    clock = TokenClock()
                    backend.generate_ids(prompt, length, tokens, tokens, set(), streamer=clock)
                    wall = min(wall, (clock.times[-1] - clock.times[0]) / (len(clock.times) - 1))
                profiled = ProfileAfterPrefill()
                backend.generate_ids(prompt, length, tokens, tokens, set(), streamer=profiled)
            busy, launches = device_work(profiled.profiler)
            row = rows.setdefault(name, Row(name))
            row.cells[f"decode {label} ms/token: wall / GPU busy"] = (
                f"{wall * 1e3:.1f} / {busy / new_tokens * 1e3:.1f}"
            )
            row.cells[f"launches/token {label}"] = f"{launches / new_tokens:.0f}"
