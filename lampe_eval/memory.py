"""How much memory a job holds at its peak: the weights, the KV cache with the method's rotated key copies,
and the largest transient of a prefill (or of a loss pass), from the model's config alone.

Both backends size with it: the Hugging Face backend refuses a run whose estimate exceeds the device's
memory before any model loads, the vLLM backend sizes its paged cache with :func:`kv_bytes_per_token`, and
``lampe-eval run --dry-run`` prints the estimate. ``perf/memory_estimate.py`` checks it against the
allocator's peak measured by ``torch.profiler`` (docs/memory.md).

The arithmetic, per sequence of ``n`` tokens in ``b`` bytes per element (docs/memory.md):

* **KV cache**: every layer's values (``n`` rows) and keys: ``n`` rows of the primary copy, plus, for a
  method with several key maps, each side copy's rows still reachable after the prompt (LaMPE's second copy
  holds almost every key, SelfExtend's neighbour band a window's worth) with its buffer's spare room; a
  sliding-window layer (Gemma 2/3), which no method changes, holds one window of keys and values at most.
* **Prefill**: the larger of a layer's MLP (its input and residual, the gate and up projections, their
  product: ``4 hidden + 3 intermediate``) and its attention (queries, keys, values, every rotated key copy,
  the output and the accumulators of a patched layer), plus the cos/sin tables alive through the pass (the
  model's, and a patched layer's plan's: one pair per key copy and per query segment).
* **Loss pass** (PG-19): the decoder's last hidden states and one chunk of logits in fp32 with its
  log-softmax.
* **Eager attention** (a soft-capped model, Gemma 2, which transformers' SDPA path would run without its
  cap: loaded with ``eager``): every layer that keeps its own attention materialises its ``n x n`` scores,
  two arrays of them per query head at once (the scores, then their fp32 softmax; 8 bytes an element at
  most), beside the causal and the sliding-window masks (``n x n`` each).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GIB = 1 << 30
LOSS_CHUNK = 1024  # positions per block of logits in a loss pass (backends/hf/backend.py chunked_nll_rows)


@dataclass(frozen=True)
class ModelShape:
    """What a decoder's memory depends on (its config's sizes and its parameter count)."""

    name: str
    layers: int
    key_heads: int
    head_dim: int
    parameters: float
    heads: int = 0  # 0: as many query heads as key heads
    hidden: int = 0  # 0: heads x head_dim
    intermediate: int = 0  # the MLP's width (0: 4 x hidden)
    vocab: int = 0
    soft_capped: bool = False  # logits soft-capped (Gemma 2): the Hugging Face backend loads it with eager
    local_layers: int = 0  # sliding-window layers (Gemma 2/3): a method leaves them alone, their cache slides
    local_window: int = 0  # their window: the most keys such a layer's cache holds

    @classmethod
    def from_config(cls, name: str, config: Any, parameters: float | None = None) -> ModelShape:
        """The shape of a transformers config (:class:`~lampe_eval.model_facts.ModelFacts`); ``parameters``
        None: counted on the meta device."""
        from .model_facts import ModelFacts

        facts = ModelFacts.from_config(config)
        if not (facts.layers and facts.hidden and facts.head_dim):
            raise ValueError(f"{name}: the config gives no layers, hidden size or heads")
        return cls(
            name=name,
            layers=facts.layers,
            key_heads=facts.kv_heads,
            head_dim=facts.head_dim,
            parameters=count_parameters(facts.text) if parameters is None else parameters,
            heads=facts.heads,
            hidden=facts.hidden,
            intermediate=facts.intermediate or 4 * facts.hidden,
            vocab=facts.vocab,
            soft_capped=facts.soft_capped,
            local_layers=facts.local_layers,
            local_window=facts.sliding_window if facts.local_layers else 0,
        )

    @property
    def query_width(self) -> int:
        return (self.heads or self.key_heads) * self.head_dim

    @property
    def key_width(self) -> int:
        return self.key_heads * self.head_dim

    @property
    def hidden_width(self) -> int:
        return self.hidden or self.query_width

    @property
    def mlp_width(self) -> int:
        return self.intermediate or 4 * self.hidden_width


def count_parameters(config: Any) -> int:
    """The parameters of the causal LM a config describes, built on the meta device (no memory, no
    weights read; tied embeddings counted once)."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def kv_bytes_per_token(shape: ModelShape, copies: int, dtype_bytes: int = 2) -> int:
    """Bytes of cache one token takes in the layers that see every key when every key copy is kept for
    every token (vLLM's paged cache): ``copies`` rotated keys and one value per layer and key head (plain
    RoPE: 2 head dims)."""
    return (shape.layers - shape.local_layers) * shape.key_width * (copies + 1) * dtype_bytes


def local_kv_elements(shape: ModelShape, length: int) -> int:
    """Elements of cache the sliding-window layers hold for a sequence of ``length`` tokens (one key copy:
    no method changes them): a key and a value for the tokens of one window at most."""
    return shape.local_layers * shape.key_width * 2 * min(length, shape.local_window)


def sequence_kv_bytes(shape: ModelShape, copies: int, length: int, dtype_bytes: int = 2) -> int:
    """Bytes of cache one sequence of ``length`` tokens takes: :func:`kv_bytes_per_token` for each token,
    and :func:`local_kv_elements` in the sliding-window layers."""
    return (
        kv_bytes_per_token(shape, copies, dtype_bytes) * length
        + local_kv_elements(shape, length) * dtype_bytes
    )


@dataclass(frozen=True)
class KeyRows:
    """What a method keeps per sequence: the key rows one layer's cache holds after the prompt (over all
    key copies), the copies a prefill rotates at once, and the cos/sin tables of ``length`` rows its plan
    keeps through a forward pass (one per key copy and per query segment; none for the unpatched model)."""

    rows: int
    copies: int = 1
    tables: int = 0


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes a job holds at its peak, in parts (all for the whole batch)."""

    weights: int
    kv_cache: int  # a generation's cache at its last token: values and keys with their copies
    prefill: int  # a layer's largest transient during the prefill of the batch
    loss: int  # a loss pass after the decoder: hidden states and one chunk of logits
    loss_keeps_cache: bool = False  # an engine scoring prompts through its KV cache (vLLM's prompt logprobs)
    key_copies: int = 1
    batch: int = 1
    kv_budget: int | None = None  # an engine's own KV cache (vLLM), when set before it starts

    @property
    def sequences_that_fit(self) -> int | None:
        """Sequences of this length the engine's KV cache holds at once (None: no budget set)."""
        if self.kv_budget is None:
            return None
        return self.kv_budget * self.batch // self.kv_cache if self.kv_cache else None

    @property
    def generation(self) -> int:
        return self.weights + self.kv_cache + self.prefill

    @property
    def scoring(self) -> int:
        return self.weights + (self.kv_cache if self.loss_keeps_cache else 0) + max(self.prefill, self.loss)

    @property
    def total(self) -> int:
        """The larger of a generation's and a loss pass's peak (a job may run either)."""
        return max(self.generation, self.scoring)

    def peak(self, loss_only: bool = False) -> int:
        """The peak of a job that generates (or, ``loss_only``, only scores a loss pass)."""
        return self.scoring if loss_only else self.total

    def describe(self, loss_only: bool = False) -> str:
        copies = f" ({self.key_copies} key copies)" if self.key_copies > 1 else ""
        cache = f" + KV cache {gib(self.kv_cache)}{copies}"
        if loss_only:
            activations = gib(max(self.prefill, self.loss))
            cache = cache if self.loss_keeps_cache else ""
            text = f"{gib(self.scoring)} GiB: weights {gib(self.weights)}{cache} + a loss pass {activations}"
        else:
            text = f"{gib(self.total)} GiB: weights {gib(self.weights)}{cache} + prefill {gib(self.prefill)}"
            text += f"; a loss pass {gib(self.scoring)}" if self.scoring > self.generation else ""
        if self.kv_budget is not None:
            fit = self.sequences_that_fit
            text += f"; {fit} sequence(s) fit in the engine's {gib(self.kv_budget)} GiB KV cache"
        return text


def gib(size: int) -> str:
    return f"{size / GIB:.2f}"


def estimate(
    shape: ModelShape,
    length: int,
    *,
    batch: int = 1,
    dtype_bytes: int = 2,
    keys: KeyRows | None = None,
    prefill_tokens: int | None = None,
    logits_rows: int = LOSS_CHUNK,
    loss_keeps_cache: bool = False,
    eager_attention: bool = False,
) -> MemoryEstimate:
    """The peak of ``batch`` sequences of ``length`` tokens (prompt and generation). ``keys``: the method's
    key rows (None: plain RoPE, one copy); ``prefill_tokens``: tokens a forward pass takes at once (an
    engine's chunked prefill; None: the whole sequence); ``logits_rows``: the positions whose fp32 logits a
    loss pass holds at once; ``loss_keeps_cache``: a loss pass that runs through the KV cache;
    ``eager_attention``: the model's own layers materialise their scores (a soft-capped model on the
    Hugging Face backend)."""
    keys = keys or KeyRows(length)
    full = (shape.layers - shape.local_layers) * shape.key_width * (length + keys.rows)
    kv = batch * (full + local_kv_elements(shape, length)) * dtype_bytes
    tokens = batch * min(length, prefill_tokens or length)
    mlp = 4 * shape.hidden_width + 3 * shape.mlp_width
    attention = 4 * shape.hidden_width + 3 * shape.query_width + (2 + keys.copies) * shape.key_width
    accumulators = 2 * shape.query_width * 4 if keys.copies > 1 else 0  # fp32 output + merge (engine.py)
    tables = 2 * shape.head_dim * (1 + keys.tables)  # the model's cos/sin and the plan's, alive all along
    per_token = attention * dtype_bytes + accumulators
    if eager_attention:  # scores and their softmax per query head, and the two masks, for n keys a token
        keys_seen, heads = min(length, prefill_tokens or length), shape.heads or shape.key_heads
        per_token += keys_seen * (heads * 2 * max(dtype_bytes, 4) + 2 * dtype_bytes)
    prefill = tokens * (max(mlp * dtype_bytes, per_token) + tables * dtype_bytes)
    logits = min(length, logits_rows) * shape.vocab * (2 * 4 + (dtype_bytes if dtype_bytes != 4 else 0))
    loss = batch * length * shape.hidden_width * dtype_bytes + logits
    return MemoryEstimate(
        weights=int(shape.parameters * dtype_bytes),
        kv_cache=kv,
        prefill=prefill,
        loss=loss,
        loss_keeps_cache=loss_keeps_cache,
        key_copies=keys.copies,
        batch=batch,
    )


def hf_key_rows(method: Any, base: Any, length: int) -> KeyRows:
    """The key rows the Hugging Face backend's cache keeps per layer (``attention/kv_cache.py``): the
    primary copy holds every key; each side copy holds the keys a later query still sees through it, in a
    buffer with spare room. A method with one key map (plain RoPE, frequency methods, DCA, STRING) or one
    that rotates keys again at each step (dynamic NTK) keeps one copy."""
    from .attention.kv_cache import KeyBuffer
    from .methods.base import FrequencyMethod

    if method.kind == "baseline":
        return KeyRows(length)
    plan = method.plan_with_budget(base, length, length, length)
    tables = len(plan.segments) + len(plan.key_groups()[1])
    if isinstance(method, FrequencyMethod) or not method.fixed_key_positions():
        return KeyRows(length, 1, tables)
    reach = plan.reach(length)
    primary = reach.index(min(reach))
    side = sum(KeyBuffer.capacity(length - first) for copy, first in enumerate(reach) if copy != primary)
    return KeyRows(length + side, len(reach), tables)


def device_memory(device: str, count: int = 1) -> int | None:
    """Bytes of memory of ``count`` devices of kind ``device`` (a GPU's total memory, or this machine's
    RAM for ``cpu``); None when unknown."""
    import os

    import torch

    kind, _, index = device.partition(":")
    if kind == "cuda" and torch.cuda.is_available():
        first = int(index or 0)
        found = range(first, min(first + count, torch.cuda.device_count()))
        return sum(torch.cuda.get_device_properties(i).total_memory for i in found) or None
    if kind == "cpu" and hasattr(os, "sysconf"):
        try:
            return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
        except (ValueError, OSError):
            return None
    return None


# the shapes of the docs' tables (their config.json; parameters as their model cards count them)
LLAMA_3_8B = ModelShape(
    "Llama-3-8B", 32, 8, 128, 8.03e9, heads=32, hidden=4096, intermediate=14336, vocab=128256
)
QWEN2_7B = ModelShape("Qwen2-7B", 28, 4, 128, 7.62e9, heads=28, hidden=3584, intermediate=18944, vocab=152064)


def estimate_table(
    methods: tuple[str, ...] = ("rope", "lampe", "selfextend"),
    lengths: tuple[int, ...] = (32 * 1024, 128 * 1024),
    batches: tuple[int, ...] = (1, 2),
) -> str:
    """docs/memory.md's table: the Hugging Face backend's estimate (bf16) of a generation's peak, for the
    docs' shapes (window 8192, the methods' defaults for that window and length)."""
    from .methods.resolve import resolve_method, window_base

    window = 8192
    lines = [
        "| model | method | length | batch | weights | KV cache | prefill | peak |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for shape in (LLAMA_3_8B, QWEN2_7B):
        for name in methods:
            for length in lengths:
                method = resolve_method(name, window, length).method
                keys = hf_key_rows(method, window_base(window), length)
                for batch in batches:
                    e = estimate(shape, length, batch=batch, keys=keys)
                    lines.append(
                        f"| {shape.name} | {name} | {length // 1024}K | {batch} | {gib(e.weights)} | "
                        f"{gib(e.kv_cache)} | {gib(e.prefill)} | {gib(e.total)} GiB |"
                    )
    return "\n".join(lines)


if __name__ == "__main__":
    print(estimate_table())
