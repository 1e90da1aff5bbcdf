"""CONTRIBUTING.md's steps work as written: its code blocks (a method module, a benchmark module, its
task table and fixture) are taken from the file, installed where the steps say (the package for the
modules, the user directory for the package data), checked and run end to end."""

from __future__ import annotations

import importlib.util
import json
import random
import re
import sys
from pathlib import Path

import pytest
import torch

import lampe_eval.models
from lampe_eval import resources
from lampe_eval.benchmarks import BENCHMARKS
from lampe_eval.cli import main
from lampe_eval.methods import METHODS, create_method
from lampe_eval.registry import import_submodules

ROOT = Path(__file__).resolve().parents[1]


def blocks() -> dict[str, str]:
    """file path -> the code block that follows its ``<!-- file: ... -->`` marker in CONTRIBUTING.md."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    found = re.findall(r"<!-- file: (\S+) -->\n```\w*\n(.*?)```", text, flags=re.S)
    return dict(found)


def load_module(name: str, source: str, tmp: Path) -> None:
    """Import ``source`` as the package module ``name`` (as if the file were in the package)."""
    path = tmp / f"{name.rsplit('.', 1)[1]}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)


@pytest.fixture
def contributed(tmp_path, monkeypatch):
    """The method and the benchmark of CONTRIBUTING.md, registered for one test."""
    code = blocks()
    assert set(code) == {
        "lampe_eval/methods/clip.py",
        "lampe_eval/benchmarks/capitals.py",
        "tasks/capitals/capitals.yaml",
        "lampe_eval/resources/fixtures/capitals/europe.jsonl",
    }
    home = tmp_path / "home"
    for path, content in code.items():
        # package data (the top-level tasks/ and method_configs/, the rest in lampe_eval/resources/): the
        # user directory has the same layout
        relative = path.removeprefix("lampe_eval/resources/")
        if relative.split("/")[0] in resources.TOP_LEVEL or relative != path:
            target = home / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
    monkeypatch.setenv("LAMPE_EVAL_HOME", str(home))
    try:
        load_module("lampe_eval.methods.clip", code["lampe_eval/methods/clip.py"], tmp_path)
        load_module("lampe_eval.benchmarks.capitals", code["lampe_eval/benchmarks/capitals.py"], tmp_path)
        yield
    finally:
        METHODS.remove("clip")
        BENCHMARKS.remove("capitals")
        sys.modules.pop("lampe_eval.methods.clip", None)
        sys.modules.pop("lampe_eval.benchmarks.capitals", None)


def test_the_method_of_contributing_is_exact_against_the_oracle(contributed):
    from lampe_eval.attention import segmented_attention
    from lampe_eval.attention.reference import oracle_attention, relative_positions
    from tests.helpers.methods import WINDOW, D, base

    rng = random.Random(0)
    for length in (5, 33, 70):  # short, and past w (<= 40)
        method = create_method("clip", WINDOW, 4 * WINDOW, window=rng.randint(1, 40))
        plan = method.plan(base(), length, length)
        _, owner = relative_positions(plan, 0, length, length)
        assert ((owner >= 0) == torch.ones(length, length, dtype=torch.bool).tril()).all()
        q, k, v = torch.randn(1, 4, length, D), torch.randn(1, 2, length, D), torch.randn(1, 2, length, D)
        fast = segmented_attention(q, k, v, plan, 0, D**-0.5, block=64)
        assert (fast - oracle_attention(q, k, v, plan, 0, D**-0.5)).abs().max() <= 1e-4
    assert create_method("clip", 8192, 16384).params() == {"window": 2048}


def test_the_benchmark_of_contributing_runs_and_reports(contributed, smollm2, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(lampe_eval.models, "load_model", lambda name, **kw: smollm2)
    out = tmp_path / "R"
    args = ["run", "--bench", "capitals", "--method", "clip", "--len", "1k", "--opt", "fixture=true"]
    with pytest.raises(SystemExit) as info:
        main([*args, "--limit", "2", "--out", str(out), "--no-progress"])
    stdout, stderr = capsys.readouterr()
    assert info.value.code == 0 and not stderr, stderr
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert len(records) == 2 and {r["method"] for r in records} == {"clip"}
    assert all(set(r["scores"]) == {"match"} for r in records)
    assert records[0]["meta"]["data_source"] == "fixture:fixtures/capitals/europe.jsonl"
    with pytest.raises(SystemExit) as info:
        main(["report", str(out), "--no-plots", "-q"])
    assert info.value.code == 0 and "capitals" in (out / "report" / "leaderboard.csv").read_text()


def test_modules_register_without_a_list(tmp_path, monkeypatch):
    package = tmp_path / "toypkg"
    package.mkdir()
    init = [
        "from lampe_eval.registry import import_submodules",
        "SEEN = []",
        "import_submodules(__name__, __path__)",
    ]
    (package / "__init__.py").write_text("\n".join(init) + "\n")
    (package / "alpha.py").write_text("from toypkg import SEEN\nSEEN.append('alpha')\n")
    (package / "beta.py").write_text("from toypkg import SEEN\nSEEN.append('beta')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        import toypkg  # type: ignore[import-not-found]

        assert toypkg.SEEN == ["alpha", "beta"]
        assert callable(import_submodules)
    finally:
        for name in ("toypkg", "toypkg.alpha", "toypkg.beta"):
            sys.modules.pop(name, None)
