"""What an inference backend is: requests in, results out (in the spirit of lm-eval's ``LM`` and HELMET's
``generate_batch``).

Benchmarks build requests and score results; only a backend touches the model. A benchmark's
``evaluate`` is a generator of *rounds*: it yields a list of requests, receives their results in the same
order, and may yield again (L-Eval's fact question, LongBench v2's chain of thought) before it returns the
sample's output. :func:`lampe_eval.backends.rounds.evaluate_samples` drives many samples' rounds at once and
hands the backend batches of requests it can run together (``Backend.batch_key``), so ``--batch-size``
batches every benchmark alike.

What the runner needs of a backend besides requests and results is declared by its class
(:class:`BaseBackend`), registered in :data:`BACKENDS` by name: where its engines live
(:class:`Placement`), the run settings and models it refuses before any model loads, how it loads a
model, ``describe()`` and ``close()``. The runner reads these and never names a backend
(``docs/backends.md``: adding one).
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Generator, Hashable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..errors import LampeEvalError, UnsupportedModelError
from ..families import FAMILIES, family_of_config, text_config
from ..memory import MemoryEstimate
from ..methods.base import Method, RopeBase
from ..models import LoadedModel, known_config
from ..registry import Registry
from ..settings import RunSettings


@dataclass(frozen=True)
class GenerationRequest:
    """Greedy generation after a prompt.

    ``input_ids``: the exact tokens to feed (else the backend tokenizes ``prompt`` as
    :func:`lampe_eval.prompts.prompt_ids` does). ``stop``: strings the text is cut at (after decoding).
    ``stop_token_ids``: tokens that end the generation like EOS (LongBench samsum's newline).
    ``budget``: the sequence length the generation may reach, which a method may decide on (LaMPE's
    ``identity_within_window``); None: prompt + ``max_new_tokens``.
    """

    prompt: str
    max_new_tokens: int
    min_new_tokens: int = 0
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    input_ids: tuple[int, ...] | None = None
    budget: int | None = None

    def total_length(self, prompt_tokens: int) -> int:
        """The length the generation may reach: ``budget``, else prompt + new tokens."""
        return self.budget or prompt_tokens + max(1, self.max_new_tokens)


@dataclass(frozen=True)
class Generation:
    """What a generation request gave: the text (cut at the first stop string), the prompt and new token
    counts, and this request's share of its batch's wall time."""

    text: str
    prompt_tokens: int
    new_tokens: int
    seconds: float
    token_ids: tuple[int, ...] = ()  # the new tokens (through the first end token)

    def output(self) -> dict[str, Any]:
        """The fields every generation benchmark stores in a record's ``output``."""
        return {
            "prediction": self.text,
            "prompt_tokens": self.prompt_tokens,
            "new_tokens": self.new_tokens,
            "seconds": self.seconds,
        }


@dataclass(frozen=True)
class NLLRequest:
    """Next-token negative log-likelihood of every token of ``input_ids`` after the first (one forward
    pass); ``tail_from``: the first predicted position counted in the tail sums (default: the last quarter,
    ``L - L // 4``); ``chunk``: positions per LM-head chunk (memory only: no L x vocab tensor)."""

    input_ids: tuple[int, ...]
    tail_from: int | None = None
    chunk: int = 1024


@dataclass(frozen=True)
class TokenNLL:
    """Summed NLL (fp64) over all predicted tokens and over the tail, with their counts."""

    nll_sum: float
    tokens: int
    nll_sum_tail: float
    tokens_tail: int
    seconds: float = 0.0


Request = GenerationRequest | NLLRequest
Result = Generation | TokenNLL
# A benchmark's evaluation of one sample: yields lists of requests, receives their results, returns the
# sample's output (what the record stores and ``score`` reads).
Rounds = Generator[Sequence[Request], Sequence[Result], dict[str, Any]]


@runtime_checkable
class Backend(Protocol):
    """An inference engine with one model loaded."""

    name: str
    lm: LoadedModel  # the tokenizer and prompt formatting benchmarks build samples with
    batch_size: int  # at most this many requests of one ``batch_key`` run together

    def install(self, method: Method) -> AbstractContextManager[Any]:
        """Apply ``method`` to the model until the context exits (``rope``: nothing)."""
        ...

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        """Greedy generations, one per request, in order."""
        ...

    def token_nll(self, requests: Sequence[NLLRequest]) -> list[TokenNLL]:
        """Token NLL sums, one per request, in order."""
        ...

    def batch_key(self, request: Request) -> Hashable:
        """Requests with equal keys may run in one batch and give what each gives alone."""
        ...

    def rope_base(self) -> RopeBase:
        """The model's own RoPE (methods resolve against it)."""
        ...

    def describe(self) -> dict[str, Any]:
        """What produced the numbers: backend name and version, dtype, device, attention kernel."""
        ...


class Placement(enum.Enum):
    """Where a backend's engines run, which decides the runner's workers."""

    # one engine per worker (inline, one process per GPU or group of GPUs, Ray actors); a worker's group of
    # GPUs (--gpus-per-worker) holds the model spread by the runner (accelerate's device_map)
    PER_DEVICE = "per-device"
    # one engine per worker too, which spreads itself over its worker's GPUs (tensor parallel)
    SELF_PLACED = "self-placed"
    REMOTE = "remote"  # an endpoint elsewhere: one client in the main process, no local device


class BaseBackend(abc.ABC):
    """A registered backend: the :class:`Backend` protocol plus what the runner asks of its class.

    A subclass implements ``load``, ``generate``, ``token_nll`` and ``describe``; the rest has defaults
    (a per-device engine that refuses nothing, runs only the baseline method and has nothing to close)."""

    name: str  # set by ``BACKENDS.register``
    placement: Placement = Placement.PER_DEVICE
    lm: LoadedModel
    batch_size: int

    def __init__(self, lm: LoadedModel, batch_size: int = 1) -> None:
        self.lm = lm
        self.batch_size = max(1, batch_size)

    # ---------------------------------------------------------------- before any model loads
    @classmethod
    def check_settings(cls, settings: RunSettings) -> None:
        """Raise one :class:`LampeEvalError` line for run settings this backend cannot honour."""
        return None  # default: none refused

    @classmethod
    def check_model(cls, name: str, methods: Sequence[str] = (), settings: RunSettings | None = None) -> None:
        """Raise one line for a model name this backend cannot load, or whose attention cannot take one of
        ``methods`` or be placed as ``settings`` ask (called without loading it; a config only loading reads
        is not checked)."""
        why = family_refusal(name, known_config(name), methods)
        if why:
            raise UnsupportedModelError(why)

    @classmethod
    def default_method(cls, settings: RunSettings) -> tuple[str, dict[str, Any]] | None:
        """The method (and the parameters it was given) a run without ``--method`` evaluates: what a
        server runs, for a backend that speaks to one; None: ``rope``."""
        return None  # default: rope

    @classmethod
    def memory_estimate(
        cls, model: str, method: Method, length: int, settings: RunSettings
    ) -> MemoryEstimate | None:
        """What ``settings.batch_size`` sequences of ``length`` tokens with ``method`` hold at their peak,
        from the model's config alone (:mod:`lampe_eval.memory`); None when this backend cannot tell."""
        return None  # default: unknown

    @classmethod
    def memory_refusal(cls, need: MemoryEstimate, loss_only: bool, settings: RunSettings) -> str | None:
        """Why a job of this estimate cannot run with ``settings`` (the end of one line: what it needs,
        what there is, what to change), or None (``loss_only``: the job only scores a loss pass)."""
        return None  # default: not checked

    # ------------------------------------------------------------------------------ lifecycle
    @classmethod
    @abc.abstractmethod
    def load(
        cls, model: str, settings: RunSettings, device: str | None, device_map: str | None
    ) -> LoadedModel:
        """The model (or, for an engine that loads its own weights, its tokenizer and config) for a
        worker on ``device`` (``device_map``: the model spread over the worker's GPUs)."""

    @classmethod
    def create(cls, lm: LoadedModel, settings: RunSettings) -> BaseBackend:
        """The backend on a loaded model (``lm`` from :meth:`load` or the run's own ``load`` hook)."""
        return cls(lm, batch_size=settings.batch_size)

    def close(self) -> None:
        """Release what the engine holds besides Python objects (processes, connections)."""
        return None  # default: nothing held

    # ------------------------------------------------------------------------------- requests
    def install(self, method: Method) -> AbstractContextManager[Any]:
        if method.kind != "baseline":
            raise LampeEvalError(f"the {self.name} backend runs no method but the unmodified model")
        return nullcontext()

    @abc.abstractmethod
    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]: ...

    @abc.abstractmethod
    def token_nll(self, requests: Sequence[NLLRequest]) -> list[TokenNLL]: ...

    def batch_key(self, request: Request) -> Hashable:
        return type(request).__name__  # any requests of one kind run together

    def rope_base(self) -> RopeBase:
        raise UnsupportedModelError(f"the {self.name} backend does not expose the model's RoPE")

    @abc.abstractmethod
    def describe(self) -> dict[str, Any]: ...


class OwnWeightsBackend(BaseBackend):
    """A backend whose engine loads the weights itself, or whose server holds them (``vllm``, ``openai``):
    the worker loads only the tokenizer and config (prompts are built and counted with them), and requests
    reach the engine as token ids."""

    @classmethod
    def load(
        cls, model: str, settings: RunSettings, device: str | None, device_map: str | None
    ) -> LoadedModel:
        """The tokenizer and config (:func:`lampe_eval.models.load_for_engine`): the engine loads the
        weights itself."""
        from ..models import load_for_engine

        return load_for_engine(model)


def _check_backend(cls: type[BaseBackend]) -> None:
    if not (isinstance(cls, type) and issubclass(cls, BaseBackend)):
        raise TypeError(f"{cls!r}: a backend subclasses lampe_eval.backends.BaseBackend")
    if not isinstance(cls.placement, Placement):
        raise TypeError(f"backend {cls.name!r}: placement must be a Placement, got {cls.placement!r}")


BACKENDS: Registry[BaseBackend] = Registry("backend", check=_check_backend)


def family_refusal(name: str, config: Any, methods: Sequence[str]) -> str | None:
    """Why ``methods`` cannot run on model ``name`` of ``config``: a family whose attention no method can
    be installed in, or a config of its family that a method cannot run exactly. None when every method is
    ``rope`` (nothing is installed) or the config is unknown (None: only loading would read it)."""
    if config is None or all(method == "rope" for method in methods):
        return None
    family = family_of_config(config)
    if family is None:
        supported = ", ".join(t for f in FAMILIES.values() for t in f.model_types)
        model_type = getattr(config, "model_type", "?")
        return (
            f"{name}: methods cannot be installed in {model_type!r} models (supported: {supported}); only "
            "--method rope runs on it"
        )
    return family.refusal(text_config(config))


def nll_sums(logprobs: list[float], tail_from: int | None, seconds: float) -> TokenNLL:
    """Summed NLL (fp64) of tokens 1..L-1 from their log-probabilities, and of those at positions
    >= ``tail_from`` (default the last quarter), as :func:`lampe_eval.backends.hf.backend.chunked_nll_rows`
    counts them (the engines that return log-probabilities: vLLM, an endpoint)."""
    length = len(logprobs) + 1
    tail_from = length - length // 4 if tail_from is None else tail_from
    total = -sum(logprobs)
    tail = -sum(logprobs[max(tail_from, 1) - 1 :])
    return TokenNLL(total, length - 1, tail, max(0, length - max(tail_from, 1)), seconds)
