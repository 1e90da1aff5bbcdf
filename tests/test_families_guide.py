"""docs/model-families.md ("Adding a family") works as written: its family module, written where a reader
would put it (a directory on the Python path, outside the package) and imported the way ``--import`` and
``imports=`` import it, registers OLMo's attention; a random OLMo patched through it gives the dense
oracle's logits, run inside transformers' own ``OlmoAttention``; and its command line passes the run's
checks with the import and is refused without it."""

from __future__ import annotations

import dataclasses
import re
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch
from huggingface_hub import hf_hub_download

from lampe_eval.backends.hf.patch import apply_method
from lampe_eval.families import FAMILIES, family_of_config
from lampe_eval.families.base import separate_projections
from lampe_eval.methods import METHODS, create_method
from lampe_eval.runner.experiment import import_plugins
from lampe_eval.testing import shaped_config, tiny_family
from tests.helpers.cli import cli, one_line
from tests.helpers.families import LENGTH, WINDOW, family_replaced, logits, oracle_logits
from tests.localhub import LocalHub

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "model-families.md"
MODULE = "olmo_family"
# OLMo-7B-0424's layout, small: biases, and a clamp low enough to bind on random weights (a quarter of
# the projections), so that a module leaving it out is caught
OLMO = {"attention_bias": True, "clip_qkv": 0.2, "eos_token_id": 2}


def guide() -> tuple[dict[str, str], list[str]]:
    """The page's module files (by name) and its command lines."""
    text = GUIDE.read_text()
    files = dict(re.findall(r"<!-- file: (\S+) -->\n```python\n(.*?)```", text, flags=re.S))
    commands = re.findall(r"^PYTHONPATH=\. (lampe-eval .*)$", text, flags=re.M)
    return files, commands


@pytest.fixture
def reader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The reader's directory: the page's module written there, on the Python path, the current directory;
    afterwards the registry without its family and the module forgotten (no other test sees them)."""
    files, _ = guide()
    assert set(files) == {f"{MODULE}.py"}
    for name, source in files.items():
        (tmp_path / name).write_text(source)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    shipped = FAMILIES.names()
    try:
        yield tmp_path
    finally:
        for name in FAMILIES.names():
            if name not in shipped:
                FAMILIES.remove(name)
        sys.modules.pop(MODULE, None)


def imported() -> ModuleType:
    """The page's module, imported as ``--import olmo_family`` imports it."""
    import_plugins([MODULE])
    return sys.modules[MODULE]


def olmo() -> torch.nn.Module:
    """A random two-layer OLMo (4 query / 2 KV heads, head dim 16) with its biases drawn away from 0."""
    net = tiny_family("olmo", window=WINDOW, head_dim=16, **OLMO)
    generator = torch.Generator().manual_seed(5)
    for name, parameter in net.named_parameters():
        if name.endswith(".bias"):
            parameter.data = torch.randn(parameter.shape, generator=generator) * 0.1
    return net


@pytest.fixture(scope="module")
def ids() -> torch.Tensor:
    return torch.randint(0, 128, (1, LENGTH), generator=torch.Generator().manual_seed(1))


@pytest.mark.usefixtures("reader")
@pytest.mark.parametrize("name", [n for n in METHODS.names() if n != "rope"])
def test_the_guide_family_gives_the_oracle_in_olmos_own_code(
    name: str, ids: torch.Tensor, monkeypatch: pytest.MonkeyPatch
) -> None:
    net = olmo()
    assert family_of_config(net.config) is None  # no shipped family covers OLMo
    family = imported().FAMILY
    assert family_of_config(net.config) is family and FAMILIES.get("olmo") is family
    extra = {"identity_within_window": False} if name == "lampe" else {}
    method = create_method(name, WINDOW, LENGTH, **extra)
    with apply_method(net, method):
        patched = logits(net, ids)
    reference = oracle_logits(net, method, ids, monkeypatch)
    assert (patched - reference).abs().max() <= 1e-4 * reference.abs().max(), name


@pytest.mark.usefixtures("reader")
def test_the_oracle_catches_the_guide_family_without_its_clamp(
    ids: torch.Tensor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The test above can fail: the page's module with Llama's projections (no clamp) is far off."""
    net = olmo()
    family = imported().FAMILY
    method = create_method("dca", WINDOW, LENGTH)
    reference = oracle_logits(net, method, ids, monkeypatch)
    with (
        family_replaced(dataclasses.replace(family, project=separate_projections)),
        apply_method(net, method),
    ):
        patched = logits(net, ids)
    assert (patched - reference).abs().max() > 1e-2 * reference.abs().max()


@pytest.mark.usefixtures("no_model")
def test_the_guide_command_line_passes_the_checks_only_with_the_import(
    reader: Path, hub_env: LocalHub, capsys: pytest.CaptureFixture[str]
) -> None:
    """The page's command line as written, against the local hub serving a tiny OLMo config under the hub
    model's id, fetched into the hub cache: its dry run (every check before a model loads: the family,
    memory, the data) passes; without ``--import`` OLMo is refused in one line."""
    _, commands = guide()
    assert len(commands) == 1
    args = shlex.split(commands[0])[1:]
    shape = {"layers": 2, "heads": 4, "kv_heads": 2, "head_dim": 16, "window": 2048, "vocab": 128}
    config = shaped_config(**shape, rope_theta=10000.0, model_type="olmo", **OLMO)  # OLMo-1B's window
    config.architectures = ["OlmoForCausalLM"]
    repo, files = args[args.index("--model") + 1], {"config.json": config.to_json_string().encode()}
    if hub_env.has_repo(repo, "model"):
        hub_env.update_repo(repo, files, repo_type="model")
    else:
        hub_env.add_repo(repo, files, repo_type="model")
    hf_hub_download(repo, "config.json")  # in the hub cache, where a dry run reads a hub model's config
    at = args.index("--import")
    code, _, err = cli(capsys, *args[:at], *args[at + 2 :], "--out", str(reader / "refused"))
    assert code == 2 and "methods cannot be installed in 'olmo' models" in one_line(err), err
    code, out, err = cli(capsys, *args, "--out", str(reader / "checked"), "--no-progress")
    assert code == 0 and "job(s) ->" in out, err
