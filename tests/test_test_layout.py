"""The tests' own layout: no module of ``tests/`` imports a test module (``tests/test_*.py``) or
``conftest.py``. What several test modules share lives in helper modules (``tests/helpers/``,
``tests/fakebench.py``, ``tests/kernel_contracts.py``, ...); conftest's fixtures are used as fixtures.
A test module importing another runs that module's imports (and side effects) for the importer, and ties
the two so that moving or renaming a test breaks an unrelated one."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
DATA = TESTS / "fixtures"  # data (files written into model or benchmark folders), not the tests' modules


def module_name(path: Path) -> str:
    parts = path.relative_to(TESTS.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def forbidden(module: str) -> bool:
    """A test module or conftest of ``tests/``: ``tests.test_x``, ``tests.conftest`` (or, imported as a
    top-level module the way pytest's rootdir insertion would allow, ``test_x`` and ``conftest``)."""
    parts = module.split(".")
    if parts[0] == "tests":
        parts = parts[1:]
    elif len(parts) > 1:
        return False  # another package's module (e.g. a library's own tests)
    return len(parts) == 1 and (parts[0] == "conftest" or parts[0].startswith("test_"))


def imported_modules(source: str, module: str, is_package: bool = False) -> list[tuple[int, str]]:
    """(line, module) for each module the source imports, relative imports resolved against ``module``;
    ``from M import N`` counts M and M.N (N may be a submodule), ``importlib.import_module("M")`` counts M."""
    package = module if is_package else module.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append((node.lineno, target))
            found += [(node.lineno, f"{target}.{alias.name}") for alias in node.names if alias.name != "*"]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, (ast.Attribute, ast.Name))
            and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append((node.lineno, node.args[0].value))
    return found


def test_modules_in_tests_never_import_a_test_module_or_conftest():
    modules = [p for p in sorted(TESTS.rglob("*.py")) if DATA not in p.parents]
    assert len([p for p in modules if p.name.startswith("test_")]) > 50  # the walk found the tests
    offending = [
        f"{path.relative_to(TESTS.parent)}:{line}: imports {target}"
        for path in modules
        for line, target in imported_modules(path.read_text(), module_name(path), path.name == "__init__.py")
        if forbidden(target)
    ]
    assert not offending, (
        "move what is shared into a helper module (tests/helpers/) and use conftest's fixtures as "
        "fixtures:\n" + "\n".join(offending)
    )


@pytest.mark.parametrize(
    ("source", "module"),
    [
        ("from .test_vllm import hf_prompt_logprobs", "tests.test_serve"),
        ("from tests.test_vllm import LOGPROB_TOLERANCE", "tests.test_serve"),
        ("from tests.conftest import save_random_model", "tests.test_serve"),
        ("from . import test_vllm", "tests.test_serve"),
        ("from tests import conftest", "tests.test_serve"),
        ("from ..test_families import tiny", "tests.helpers.families"),
        ("import tests.test_bad_input", "tests.test_bad_input_2"),
        ("import conftest", "tests.test_serve"),
        ("def f():\n    from .test_lm_eval import TASK_DIR", "tests.test_serve"),
        ("importlib.import_module('tests.test_kernels')", "tests.test_gpu_check"),
    ],
)
def test_each_way_of_importing_a_test_module_is_caught(source, module):
    assert any(forbidden(target) for _, target in imported_modules(source, module))


@pytest.mark.parametrize(
    ("source", "module"),
    [
        ("from .helpers.methods import base", "tests.test_kernels"),
        ("from tests.kernel_contracts import fake_flash_attn", "tests.test_gpu_check"),
        ("from tests.helpers.cli import one_line", "tests.helpers.remote_code"),
        ("import pytest\nfrom lampe_eval.testing import tiny_llama", "tests.test_families"),
        ("from torch.testing import assert_close", "tests.test_kernels"),
    ],
)
def test_helper_and_library_imports_are_allowed(source, module):
    assert not [target for _, target in imported_modules(source, module) if forbidden(target)]
