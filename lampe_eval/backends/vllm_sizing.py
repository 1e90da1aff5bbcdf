"""How much of vLLM's paged KV cache a method's token takes, and how many sequences of a length fit.

A patched layer's cache holds, per token and key head, ``copies`` rotated keys and one value
(:mod:`.vllm_attention`): ``copies + 1`` head dims where plain RoPE holds two. The arithmetic here is the
one vLLM's ``AttentionSpec.page_size_bytes`` does for that spec, summed over the layers; the docs' memory
table (docs/vllm.md) is printed by :func:`memory_table` and a test holds the two equal.
"""

from __future__ import annotations

from ..memory import GIB, LLAMA_3_8B, QWEN2_7B, ModelShape, kv_bytes_per_token, sequence_kv_bytes


def sequences_that_fit(
    kv_bytes: int, shape: ModelShape, copies: int, length: int, dtype_bytes: int = 2
) -> int:
    """Sequences of ``length`` tokens a KV cache of ``kv_bytes`` holds at once."""
    return kv_bytes // sequence_kv_bytes(shape, copies, length, dtype_bytes)


def kv_budget(gpu_bytes: int, shape: ModelShape, utilization: float = 0.9, activations: int = 4 * GIB) -> int:
    """The KV cache vLLM leaves on a GPU of ``gpu_bytes``: ``utilization`` of it less the bf16 weights and
    an activation peak (``activations``: an estimate; vLLM measures it by a profile run)."""
    return max(0, int(gpu_bytes * utilization) - int(shape.parameters * 2) - activations)


ONE_COPY = "rope, frequency methods, DCA, STRING, StreamingLLM, Ms-PoE, dynamic NTK"
TWO_COPIES = "LaMPE, SelfExtend, ReRoPE, LM-Infinite, DPE"


def memory_table(gpu_bytes: int = 80 * 10**9, lengths: tuple[int, ...] = (32 * 1024, 128 * 1024)) -> str:
    """The docs' table: KV bytes per token and sequences that fit, per model and key copies."""
    header = "| model | key copies (methods) | KV per token | " + " | ".join(
        f"{n // 1024}K sequences" for n in lengths
    )
    lines = [header + " |", "|---|---|---|" + "---|" * len(lengths)]
    for shape in (LLAMA_3_8B, QWEN2_7B):
        budget = kv_budget(gpu_bytes, shape)
        for copies, who in ((1, ONE_COPY), (2, TWO_COPIES)):
            fits = " | ".join(str(sequences_that_fit(budget, shape, copies, n)) for n in lengths)
            per_token = kv_bytes_per_token(shape, copies) // 1024
            lines.append(f"| {shape.name} | {copies} ({who}) | {per_token} KiB | {fits} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(memory_table())
