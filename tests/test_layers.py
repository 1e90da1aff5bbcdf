"""The package's floors: every import (at module level or inside a function) goes to the same floor or a
lower one, and no modules import each other in a circle. A new module or folder must be given its floor
here, so its place in the structure is decided, not grown into."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "lampe_eval"

# Bottom up: a module may import its own floor and the floors below. Names are lampe_eval's top-level
# modules and folders.
FLOORS: list[tuple[str, ...]] = [
    (
        "errors",
        "prompts",
        "registry",
        "fileio",
        "lengths",
        "options",
        "resources",
        "data",
        "settings",
        "processes",
        "model_facts",
    ),
    ("records", "attention", "models", "method_configs", "families", "testing"),
    ("methods", "memory"),
    ("backends",),
    ("benchmarks",),
    ("integrations",),
    ("runner",),
    ("tools", "report", "api"),
    ("cli", "__main__"),
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules that ``name`` imports (the longest known prefix of each imported name)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            target = ".".join([*base, *([node.module] if node.module else [])])
            candidates = [f"{target}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        else:
            continue
        for candidate in candidates:
            parts = candidate.split(".")
            while parts and ".".join(parts) not in known:
                parts.pop()
            if parts and parts[0] == "lampe_eval":
                found.add(".".join(parts))
    found.discard(name)
    return found


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imported(name, path, known) for name, path in known.items()}


def floor(name: str) -> int:
    parts = name.split(".")
    if len(parts) == 1:
        return len(FLOORS)  # lampe_eval/__init__.py: the top
    for number, names in enumerate(FLOORS):
        if parts[1] in names:
            return number
    raise AssertionError(f"{name}: give lampe_eval.{parts[1]} a floor in tests/test_layers.py")


def test_every_import_goes_down_or_stays_on_its_floor():
    upward = [
        f"{name} -> {target}"
        for name, targets in sorted(import_graph().items())
        for target in sorted(targets)
        if floor(target) > floor(name)
    ]
    assert not upward, upward


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_modules_import_each_other_in_a_circle():
    assert circles(import_graph()) == []


def test_the_checks_can_fail():
    assert circles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]
    assert floor("lampe_eval.cli.run") > floor("lampe_eval.runner.local") > floor("lampe_eval.methods.base")
    graph = import_graph()
    assert "lampe_eval.records" in graph["lampe_eval.runner.store"]
