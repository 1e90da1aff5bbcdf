"""What an inference backend is: requests in, results out (in the spirit of lm-eval's ``LM`` and HELMET's
``generate_batch``).

Benchmarks build requests and score results; only a backend touches the model. A benchmark's
``evaluate`` is a generator of *rounds*: it yields a list of requests, receives their results in the same
order, and may yield again (L-Eval's fact question, LongBench v2's chain of thought) before it returns the
sample's output. :func:`lampe_eval.backends.rounds.evaluate_samples` drives many samples' rounds at once and
hands the backend batches of requests it can run together (``Backend.batch_key``), so ``--batch-size``
batches every benchmark alike.
"""

from __future__ import annotations

from collections.abc import Generator, Hashable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..methods.base import Method, RopeBase
from ..models import LoadedModel


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
