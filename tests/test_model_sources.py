"""Where a model comes from: one remote-code rule for presets, hub ids (first run or cached) and local
copies (an ``auto_map`` is refused only when transformers does not implement what it names), and one line
for a gated or missing hub repository. Local directories and a fake hub cache only: nothing is fetched."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import lampe_eval.models as models
from lampe_eval.errors import LampeEvalError, MissingDataError, UnsupportedModelError
from lampe_eval.testing import save_random_checkpoint, tiny_family

PHI3_ID = "microsoft/Phi-3-mini-4k-instruct"  # the preset phi3-mini-4k-instruct's source
COMMIT = "0123456789abcdef0123456789abcdef01234567"
NEVER_EXECUTES = (
    "lampe-eval never executes a model's own code (no trust_remote_code): convert the model to an "
    "architecture that transformers implements (e.g. save it as LlamaForCausalLM with save_pretrained) "
    "or use a .gguf file"
)
# Phi-3's auto_map on the hub: its own modules, for an architecture transformers implements (phi3)
PHI3_AUTO_MAP = {
    "AutoConfig": "configuration_phi3.Phi3Config",
    "AutoModelForCausalLM": "modeling_phi3.Phi3ForCausalLM",
}
# imported, a module named in an auto_map leaves this file behind: none may ever be
MODULE = "import pathlib\npathlib.Path({marker!r}).write_text('executed')\n"


def tiny_tokenizer() -> Any:
    """A 64-word word-level tokenizer (no download)."""
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    words = ["<unk>", "<s>", "</s>", *(f"w{i}" for i in range(61))]
    backend = Tokenizer(WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )


def edit_json(path: Path, **fields: Any) -> None:
    data = json.loads(path.read_text())
    data.update(fields)
    path.write_text(json.dumps(data))


def with_modules(model: Path, auto_map: dict[str, Any], marker: Path) -> None:
    """The modules an auto_map names, each leaving ``marker`` behind if imported."""
    for ref in auto_map.values():
        for item in ref if isinstance(ref, list) else [ref]:
            if item:
                (model / f"{item.split('.')[0]}.py").write_text(MODULE.format(marker=str(marker)))


@pytest.fixture(scope="module")
def phi3_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Phi-3 whose config.json carries Phi-3's auto_map (and the modules it names)."""
    root = tmp_path_factory.mktemp("phi3")
    where = root / "phi3-mini"
    net = tiny_family("phi3", vocab=64)
    save_random_checkpoint(net, str(where), tiny_tokenizer())
    edit_json(where / "config.json", auto_map=PHI3_AUTO_MAP)
    with_modules(where, PHI3_AUTO_MAP, root / "EXECUTED")
    return where


@pytest.fixture
def phi3(phi3_checkpoint: Path, tmp_path: Path) -> Path:
    """A copy of the checkpoint (a test may change its files), its modules leaving ``EXECUTED`` beside it."""
    copy = Path(shutil.copytree(phi3_checkpoint, tmp_path / "phi3-mini"))
    with_modules(copy, PHI3_AUTO_MAP, tmp_path / "EXECUTED")
    return copy


def executed(model: Path) -> bool:
    return (model.parent / "EXECUTED").exists()


@pytest.fixture
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty Hugging Face cache, offline (as the second run on a machine without the hub)."""
    import huggingface_hub.constants

    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    return cache


def cache_copy(cache: Path, repo_id: str, model: Path) -> Path:
    """``model``'s files as the hub cache holds a downloaded repository (snapshot + refs/main)."""
    folder = cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = folder / "snapshots" / COMMIT
    shutil.copytree(model, snapshot)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(COMMIT)
    return snapshot


# ------------------------------------------------------------------------------------ the rule
@pytest.mark.parametrize(
    ("file", "fields", "why"),
    [
        ("config.json", {"model_type": "phi3", "auto_map": PHI3_AUTO_MAP}, None),
        ("config.json", {"model_type": "llama", "auto_map": {"AutoConfig": "other--configuration.C"}}, None),
        ("config.json", {"model_type": "evil", "auto_map": {}}, None),  # empty: asks for nothing
        ("config.json", {"model_type": "evil"}, None),  # no auto_map: transformers says what it lacks
        (
            "config.json",
            {"model_type": "evil", "auto_map": PHI3_AUTO_MAP},
            "auto_map in config.json: transformers has no model_type 'evil'",
        ),
        ("config.json", {"auto_map": PHI3_AUTO_MAP}, "auto_map in config.json, no model_type"),
        (
            "config.json",
            {"model_type": "t5", "auto_map": {"AutoModelForCausalLM": "modeling_t5.T5ForCausalLM"}},
            "auto_map in config.json: transformers has no causal LM for model_type 't5'",
        ),
        ("config.json", {"model_type": "t5", "auto_map": {"AutoModel": "modeling.M"}}, None),
        (
            "tokenizer_config.json",
            {"tokenizer_class": "LlamaTokenizerFast", "auto_map": {"AutoTokenizer": ["t.Slow", "t.Fast"]}},
            None,
        ),
        (
            "tokenizer_config.json",
            {"tokenizer_class": "PreTrainedTokenizerFast", "auto_map": {"AutoTokenizer": ["t.Slow", None]}},
            None,
        ),
        (
            "tokenizer_config.json",
            {"tokenizer_class": "EvilTokenizer", "auto_map": {"AutoProcessor": "p.P"}},
            None,
        ),
        (
            "tokenizer_config.json",
            {"tokenizer_class": "EvilTokenizer", "auto_map": {"AutoTokenizer": ["t.EvilTokenizer", None]}},
            "auto_map in tokenizer_config.json: transformers has no tokenizer class 'EvilTokenizer'",
        ),
        (
            "tokenizer_config.json",
            {"tokenizer_class": "EvilTokenizer", "auto_map": ["t.EvilTokenizer", None]},  # the old list form
            "auto_map in tokenizer_config.json: transformers has no tokenizer class 'EvilTokenizer'",
        ),
        (
            "tokenizer_config.json",
            {"auto_map": {"AutoTokenizer": ["t.EvilTokenizer", None]}},
            "auto_map in tokenizer_config.json, no tokenizer_class",
        ),
    ],
)
def test_code_is_needed_only_where_transformers_lacks_it(tmp_path, file, fields, why):
    (tmp_path / file).write_text(json.dumps(fields))
    assert models.needs_own_code(tmp_path / file) == why


def test_not_a_json_object_needs_nothing(tmp_path):
    (tmp_path / "config.json").write_text("[1, 2]")
    (tmp_path / "tokenizer_config.json").write_text("{not json")
    assert models.needs_own_code(tmp_path / "config.json") is None
    assert models.needs_own_code(tmp_path / "tokenizer_config.json") is None


# ------------------------------------------------ a Phi-3 with an auto_map: loads with the native classes
def test_a_local_phi3_with_an_auto_map_loads_natively(phi3):
    import torch
    from transformers.models.phi3 import Phi3Config, Phi3ForCausalLM

    assert models.resolve_source(str(phi3)) == (str(phi3), None)
    config = models.known_config(str(phi3))
    assert type(config) is Phi3Config and config.auto_map == PHI3_AUTO_MAP
    assert models.known_window(str(phi3)) == 256
    lm = models.load_model(str(phi3), device="cpu")
    assert type(lm.model) is Phi3ForCausalLM and lm.pretraining_window == 256
    ids = lm.tokenizer("w1 w2 w3", return_tensors="pt").input_ids
    assert ids.tolist() == [[4, 5, 6]]
    with torch.no_grad():
        assert lm.model(ids).logits.shape == (1, 3, 64)
    assert models.load_tokenizer(str(phi3)).tokenizer("w4").input_ids == [7]
    engine = models.load_for_engine(str(phi3))
    assert type(engine.extra["config"]) is Phi3Config and engine.extra["source"] == str(phi3)
    assert not executed(phi3)


def test_a_tokenizer_config_auto_map_with_a_native_class_loads(phi3):
    auto_map = {"AutoTokenizer": ["tokenization_phi3.Phi3Tokenizer", None]}
    edit_json(phi3 / "tokenizer_config.json", tokenizer_class="PreTrainedTokenizerFast", auto_map=auto_map)
    with_modules(phi3, auto_map, phi3.parent / "EXECUTED")
    models.resolve_source(str(phi3))
    assert models.load_tokenizer(str(phi3)).tokenizer("w1").input_ids == [4]
    assert not executed(phi3)


def test_phi3_is_one_model_with_one_answer(phi3, hub_cache):
    """First run (nothing cached), a later run (the files in the cache), the preset, the local copy: all
    load, with transformers' own Phi-3 classes."""
    from transformers.models.phi3 import Phi3Config, Phi3ForCausalLM

    models.check_hub_cache(PHI3_ID)  # the first run: nothing cached yet
    assert models.resolve_source(PHI3_ID) == (PHI3_ID, None)
    snapshot = cache_copy(hub_cache, PHI3_ID, phi3)  # what the first run downloaded
    models.check_hub_cache(PHI3_ID)
    assert models.resolve_source(PHI3_ID) == (PHI3_ID, None)
    assert models.resolve_source("phi3-mini-4k-instruct") == (
        PHI3_ID,
        models.PRESETS["phi3-mini-4k-instruct"],
    )
    assert models.resolve_source(str(snapshot)) == (str(snapshot), None)
    assert type(models.known_config(PHI3_ID)) is Phi3Config
    lm = models.load_model(PHI3_ID, device="cpu")  # offline: from the cache
    assert type(lm.model) is Phi3ForCausalLM and lm.name == PHI3_ID
    preset = models.load_model("phi3-mini-4k-instruct", device="cpu")
    assert type(preset.model) is Phi3ForCausalLM and preset.pretraining_window == 4096
    assert not executed(phi3)  # nor its copy in the cache: the same modules


# -------------------------------------------- code transformers does not have: refused, one line, unread
def refusal(what: str, why: str) -> str:
    return f"{what} asks to run its own code ({why}); {NEVER_EXECUTES}"


@pytest.fixture
def nothing_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    """transformers' loaders fail the test if called: a refusal comes before anything is read."""
    import transformers

    def called(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("transformers was asked to load a model that is refused")

    for auto in ("AutoConfig", "AutoModelForCausalLM", "AutoTokenizer"):
        monkeypatch.setattr(getattr(transformers, auto), "from_pretrained", called)


@pytest.mark.parametrize("loader", ["resolve_source", "known_window", "load_tokenizer", "load_model"])
def test_an_unknown_model_type_with_an_auto_map_is_refused_before_loading(phi3, nothing_loads, loader):
    edit_json(phi3 / "config.json", model_type="evil")
    with pytest.raises(UnsupportedModelError) as refused:
        getattr(models, loader)(str(phi3))
    why = "auto_map in config.json: transformers has no model_type 'evil'"
    assert str(refused.value) == refusal(f"model directory {str(phi3)!r}", why)
    assert "\n" not in str(refused.value) and not executed(phi3)


def test_the_cli_refuses_it_on_one_line(phi3, capsys):
    from tests.helpers.cli import cli, one_line

    edit_json(phi3 / "config.json", model_type="evil")
    args = ["show-prompt", "--bench", "longbench", "--task", "qasper", "--len", "4k", "--opt", "fixture=true"]
    code, out, err = cli(capsys, *args, "--model", str(phi3))
    why = "auto_map in config.json: transformers has no model_type 'evil'"
    assert code == 2 and not out
    assert one_line(err) == "error: " + refusal(f"model directory {str(phi3)!r}", why)


def test_a_tokenizer_that_transformers_lacks_is_refused(phi3, nothing_loads):
    auto_map = {"AutoTokenizer": ["tokenization_evil.EvilTokenizer", None]}
    edit_json(phi3 / "tokenizer_config.json", tokenizer_class="EvilTokenizer", auto_map=auto_map)
    with pytest.raises(UnsupportedModelError) as refused:
        models.load_tokenizer(str(phi3))
    why = "auto_map in tokenizer_config.json: transformers has no tokenizer class 'EvilTokenizer'"
    assert str(refused.value) == refusal(f"model directory {str(phi3)!r}", why)


def test_the_same_rule_for_a_cached_hub_id_and_a_preset(phi3, hub_cache, nothing_loads):
    edit_json(phi3 / "config.json", model_type="evil")
    cache_copy(hub_cache, "org/evil", phi3)
    cache_copy(hub_cache, PHI3_ID, phi3)  # a preset's source, cached with a config transformers lacks
    why = "auto_map in config.json: transformers has no model_type 'evil'"
    with pytest.raises(UnsupportedModelError) as refused:
        models.resolve_source("org/evil")
    assert str(refused.value) == refusal("model 'org/evil'", why)
    with pytest.raises(UnsupportedModelError) as refused:
        models.load_model("phi3-mini-4k-instruct")
    assert str(refused.value) == refusal(f"model {PHI3_ID!r}", why)
    assert not executed(phi3)


def test_a_first_run_checks_the_configs_it_fetched_before_the_weights(phi3, hub_cache, monkeypatch):
    """Nothing cached: transformers fetches the configs with the tokenizer; the same rule then refuses
    the model before its weights are fetched (the later runs refuse it from the cache)."""
    import transformers

    edit_json(phi3 / "config.json", model_type="evil")

    def fetch_tokenizer(source: str, **kwargs: Any) -> Any:
        cache_copy(hub_cache, source, phi3)  # what transformers downloaded
        return object()

    def weights(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the weights were asked for")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", fetch_tokenizer)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", weights)
    with pytest.raises(UnsupportedModelError) as refused:
        models.load_model("org/evil", device="cpu")
    why = "auto_map in config.json: transformers has no model_type 'evil'"
    assert str(refused.value) == refusal("model 'org/evil'", why)


# ------------------------------------------------------------------ gated and missing repositories
def gated_error(repo_id: str, status: int = 401) -> Exception:
    """What transformers raises for a gated repository (utils/hub.py): an OSError raised from
    huggingface_hub's GatedRepoError."""
    import httpx2
    from huggingface_hub.errors import GatedRepoError

    url = f"https://huggingface.co/{repo_id}/resolve/main/config.json"
    response = httpx2.Response(status, request=httpx2.Request("GET", url))
    cause = GatedRepoError(
        f"{status} Client Error. (Request ID: Root=1-abc)\n\nCannot access gated repo for url {url}.\n"
        f"Access to model {repo_id} is restricted. You must have access to it and be authenticated.",
        response=response,
    )
    wrapped = OSError(
        "You are trying to access a gated repo.\nMake sure to have access to it at "
        f"https://huggingface.co/{repo_id}.\n{cause}"
    )
    wrapped.__cause__ = cause
    return wrapped


def not_found_error(repo_id: str) -> Exception:
    import httpx2
    from huggingface_hub.errors import RepositoryNotFoundError

    url = f"https://huggingface.co/api/models/{repo_id}"
    response = httpx2.Response(404, request=httpx2.Request("GET", url))
    cause = RepositoryNotFoundError(
        f"404 Client Error.\n\nRepository Not Found for url: {url}.", response=response
    )
    wrapped = OSError(
        f"{repo_id} is not a local folder and is not a valid model identifier listed on "
        "'https://huggingface.co/models'\nIf this is a private repository, make sure to pass a token"
    )
    wrapped.__cause__ = cause
    return wrapped


def failing(monkeypatch: pytest.MonkeyPatch, auto: str, error: Exception) -> None:
    import transformers

    def raise_it(*args: Any, **kwargs: Any) -> Any:
        raise error

    monkeypatch.setattr(getattr(transformers, auto), "from_pretrained", raise_it)


def gated_line(what: str, repo_id: str, endpoint: str = "https://huggingface.co") -> str:
    return (
        f"cannot load {what}: the repository is gated; accept the license at {endpoint}/{repo_id} "
        "and set HF_TOKEN"
    )


@pytest.mark.parametrize("loader", ["load_model", "load_tokenizer", "load_for_engine"])
def test_a_gated_repository_is_one_line_with_the_fix(hub_cache, monkeypatch, loader):
    repo = "meta-llama/Llama-2-7b-chat-hf"
    failing(monkeypatch, "AutoTokenizer", gated_error(repo))
    with pytest.raises(MissingDataError) as failed:
        getattr(models, loader)("llama2-7b-chat")
    assert str(failed.value) == gated_line(
        f"the tokenizer of {repo!r}" if loader != "load_model" else f"model {repo!r}", repo
    )
    assert isinstance(failed.value.__cause__, OSError)


def test_a_gated_repository_through_transformers_own_wrapping(hub_cache, monkeypatch):
    """transformers itself turns the hub client's GatedRepoError into its OSError (utils/hub.py); the
    download is the only thing replaced (and the revision lookup, which fails open: no network here)."""
    import httpx2
    import huggingface_hub.constants
    import transformers.utils.hub
    from huggingface_hub.errors import GatedRepoError

    def gated(repo_id: str, filename: str = "", **kwargs: Any) -> str:
        url = f"https://huggingface.co/{repo_id}/resolve/main/{filename}"
        request = httpx2.Request("GET", url)
        raise GatedRepoError(
            f"401 Client Error.\n\nCannot access gated repo for url {url}.",
            response=httpx2.Response(401, request=request),
        )

    class NoHub:
        def resolve_revision(self, *args: Any, **kwargs: Any) -> str:
            raise ConnectionError("no hub in tests")

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(transformers.utils.hub, "hf_hub_download", gated)
    monkeypatch.setattr(transformers.utils.hub, "hf_api", NoHub)
    repo = "meta-llama/Llama-3.1-8B-Instruct"
    with pytest.raises(MissingDataError) as failed:
        models.load_model("llama3.1-8b-instruct", device="cpu")
    assert str(failed.value) == gated_line(f"model {repo!r}", repo)
    assert "You are trying to access a gated repo." in str(failed.value.__cause__)  # transformers' own
    with pytest.raises(MissingDataError) as failed:
        models.load_tokenizer("llama3.1-8b-instruct")
    assert str(failed.value) == gated_line(f"the tokenizer of {repo!r}", repo)


def test_a_gated_config_for_the_engine(hub_cache, monkeypatch):
    import transformers

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *args, **kwargs: object())
    failing(monkeypatch, "AutoConfig", gated_error("google/gemma-2-9b-it", 403))
    with pytest.raises(MissingDataError) as failed:
        models.load_for_engine("gemma2-9b-it", pretraining_window=8192)
    assert str(failed.value) == gated_line("the config of 'google/gemma-2-9b-it'", "google/gemma-2-9b-it")


def test_the_weights_of_a_gated_repository(hub_cache, monkeypatch):
    import transformers

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *args, **kwargs: object())
    failing(monkeypatch, "AutoModelForCausalLM", gated_error("org/gated"))
    with pytest.raises(MissingDataError) as failed:
        models.load_model("org/gated", device="cpu")
    assert str(failed.value) == gated_line("model 'org/gated'", "org/gated")


@pytest.mark.parametrize("form", ["hub error", "transformers text", "has_file text"])
def test_every_form_of_the_gated_error_and_the_configured_endpoint(hub_cache, monkeypatch, form):
    """huggingface_hub's own error (unwrapped), transformers' text without its cause, its other wording;
    the page on the hub this process talks to (HF_ENDPOINT), not transformers' hard-coded host."""
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", "https://hub.example.org/")
    wrapped = gated_error("org/gated")
    error = {
        "hub error": wrapped.__cause__,
        "transformers text": OSError(str(wrapped)),
        "has_file text": OSError("org/gated is a gated repository. Make sure to request access at ..."),
    }[form]
    assert isinstance(error, Exception)
    failing(monkeypatch, "AutoTokenizer", error)
    with pytest.raises(MissingDataError) as failed:
        models.load_model("org/gated", device="cpu")
    line = str(failed.value)
    assert (
        line == gated_line("model 'org/gated'", "org/gated", "https://hub.example.org") and "\n" not in line
    )


def test_the_cli_says_it_on_one_line(hub_cache, monkeypatch, capsys):
    from tests.helpers.cli import cli, one_line

    failing(monkeypatch, "AutoTokenizer", gated_error("meta-llama/Meta-Llama-3-8B-Instruct"))
    args = ["show-prompt", "--bench", "longbench", "--task", "qasper", "--len", "4k", "--opt", "fixture=true"]
    code, out, err = cli(capsys, *args, "--model", "llama3-8b-instruct")
    assert code == 2 and not out
    line = one_line(err)
    assert line.endswith(
        "accept the license at https://huggingface.co/meta-llama/Meta-Llama-3-8B-Instruct and set HF_TOKEN"
    ), line


@pytest.mark.parametrize("loader", ["load_model", "load_tokenizer"])
def test_a_missing_repository_names_the_id(hub_cache, monkeypatch, loader):
    failing(monkeypatch, "AutoTokenizer", not_found_error("org/no-such-model"))
    with pytest.raises(MissingDataError) as failed:
        getattr(models, loader)("org/no-such-model")
    what = "model 'org/no-such-model'" if loader == "load_model" else "the tokenizer of 'org/no-such-model'"
    assert str(failed.value) == (
        f"cannot load {what}: no repository 'org/no-such-model' on https://huggingface.co (check the name; "
        "a private repository needs HF_TOKEN)"
    )


def test_other_failures_keep_their_first_line_or_pass_through(hub_cache, monkeypatch):
    failing(monkeypatch, "AutoTokenizer", OSError("disk on fire\nsecond line"))
    with pytest.raises(MissingDataError, match=r"^cannot load model 'org/x': disk on fire$"):
        models.load_model("org/x", device="cpu")
    failing(monkeypatch, "AutoTokenizer", RuntimeError("a bug"))
    with pytest.raises(RuntimeError, match="^a bug$"):
        models.load_model("org/x", device="cpu")
    failing(monkeypatch, "AutoTokenizer", ValueError("not about code"))
    with pytest.raises(ValueError, match="^not about code$") as raised:
        models.load_tokenizer("org/x")
    assert raised.value.__cause__ is None and not isinstance(raised.value, LampeEvalError)


# ------------------------------------------------------------------------------------------ the docs
def test_the_docs_say_what_each_preset_needs():
    """docs/running.md's table names every preset once: packaged (the PyPI ones), open or gated (the hub
    organisations that gate their models: Meta, Google, Mistral AI)."""
    import re

    text = (Path(__file__).resolve().parents[1] / "docs" / "running.md").read_text(encoding="utf-8")
    section = text.split("### Model presets and hub access", 1)[1].split("\n## ", 1)[0]
    rows = {
        cells[0].strip(): re.findall(r"`([^`]+)`", cells[1])
        for line in section.splitlines()
        if line.startswith("| ") and (cells := line.strip("|").split("|"))[1].strip().startswith("`")
    }
    named = [name for names in rows.values() for name in names]
    assert sorted(named) == sorted(models.PRESETS)
    packaged = {n for n, p in models.PRESETS.items() if p.source.startswith("embedded:")}
    assert set(rows["packaged (PyPI)"]) == packaged
    gated = {n for row, names in rows.items() if row.startswith("gated") for n in names}
    gating = ("meta-llama/", "google/", "mistralai/")
    assert gated == {n for n, p in models.PRESETS.items() if p.source.startswith(gating)}
