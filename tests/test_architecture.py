"""Where knowledge lives: the report and the runner know no benchmark, no metric, no method and no
backend by name (each benchmark declares its metrics, options, summaries and plots; each method how
reports present it; each backend its placement, checks and loading), and every benchmark is complete."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

from lampe_eval.benchmarks import BENCHMARKS
from lampe_eval.benchmarks.base import Benchmark

PACKAGE = Path(__file__).resolve().parents[1] / "lampe_eval"
# Metric names that are plain words of any code (a variable called `length` is not benchmark knowledge).
PLAIN_WORDS = {"length", "tokens", "count", "passages", "fact", "accuracy", "classification", "retrieval"}


def benchmark_words() -> set[str]:
    words = {"perplexity", "l-eval"}
    for name in BENCHMARKS.names():
        cls = BENCHMARKS.get(name)
        if not cls.__module__.startswith("lampe_eval."):
            continue  # a test's own benchmark
        words.add(name)
        words.update(m.name for m in cls.metrics)
        words.update(m.cap_text for m in cls.metrics if m.cap_text)
    return words - PLAIN_WORDS


@pytest.mark.parametrize("folder", ["report", "runner"])
def test_report_and_runner_name_no_benchmark_and_no_metric(folder):
    words = benchmark_words()
    assert {"pg19", "ruler", "longbench", "leval", "infinitebench", "ppl", "qa_f1"} <= words
    pattern = re.compile(r"(?<![\w-])(" + "|".join(re.escape(w) for w in sorted(words)) + r")(?![\w-])", re.I)
    found = []
    for path in sorted((PACKAGE / folder).rglob("*")):
        if path.is_file() and path.suffix in (".py", ".yaml", ".md"):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                match = pattern.search(line)
                if match:
                    found.append(f"{path.relative_to(PACKAGE)}:{number}: {match.group(0)}")
    assert not found, found


# Method names that are plain words of any code (a "linear" scale, a "string" of text).
PLAIN_METHOD_WORDS = {"linear", "string"}


def method_words() -> set[str]:
    """The registered methods' names (each method declares how reports present it: display_order,
    is_baseline, highlight). Matched as written (``RoPE`` the encoding is not ``rope`` the method)."""
    from lampe_eval.methods import METHODS

    names = {n for n in METHODS.names() if METHODS.get(n).__module__.startswith("lampe_eval.")}
    return names - PLAIN_METHOD_WORDS


@pytest.mark.parametrize("folder", ["report", "runner"])
def test_report_and_runner_name_no_method(folder):
    words = method_words()
    assert {"rope", "lampe", "selfextend", "dca", "yarn", "streamingllm"} <= words
    pattern = re.compile(r"(?<![\w-])(" + "|".join(re.escape(w) for w in sorted(words)) + r")(?![\w-])")
    found = []
    for path in sorted((PACKAGE / folder).rglob("*")):
        if path.is_file() and path.suffix in (".py", ".yaml", ".md", ".j2", ".js", ".css"):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                match = pattern.search(line)
                if match:
                    found.append(f"{path.relative_to(PACKAGE)}:{number}: {match.group(0)}")
    assert not found, found


def backend_words() -> set[str]:
    """The registered backends' names, matched in any case (``vLLM`` in prose names the backend too)."""
    from lampe_eval.backends import BACKENDS

    return {n for n in BACKENDS.names() if BACKENDS.get(n).__module__.startswith("lampe_eval.")}


@pytest.mark.parametrize("folder", ["report", "runner"])
def test_report_and_runner_name_no_backend(folder):
    words = backend_words()
    assert {"hf", "vllm"} <= words
    pattern = re.compile(r"(?<![\w-])(" + "|".join(re.escape(w) for w in sorted(words)) + r")(?![\w-])", re.I)
    found = []
    for path in sorted((PACKAGE / folder).rglob("*")):
        relative = path.relative_to(PACKAGE).as_posix()
        if path.is_file() and path.suffix in (".py", ".yaml", ".md", ".j2", ".js", ".css"):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                match = pattern.search(line)
                if match:
                    found.append(f"{relative}:{number}: {match.group(0)}")
    assert not found, found


def test_a_backend_declares_its_placement():
    from lampe_eval.backends import BACKEND_NAMES, BACKENDS, BaseBackend, Placement
    from lampe_eval.backends.base import _check_backend
    from lampe_eval.registry import Registry

    assert tuple(BACKENDS.names()) == BACKEND_NAMES and BACKEND_NAMES[:2] == ("hf", "vllm")
    assert BACKENDS.get("hf").placement is Placement.PER_DEVICE
    assert BACKENDS.get("vllm").placement is Placement.SELF_PLACED
    for name in BACKENDS.names():
        assert isinstance(BACKENDS.get(name).placement, Placement), name
    registry: Registry[BaseBackend] = Registry("backend", check=_check_backend)

    class Nowhere(BaseBackend):
        placement = "gpu"  # type: ignore[assignment]

    with pytest.raises(TypeError, match="placement must be a Placement"):
        registry.register("nowhere")(Nowhere)


def test_every_benchmark_is_concrete_and_declares_metrics_and_options():
    for name in BENCHMARKS.names():
        cls = BENCHMARKS.get(name)
        assert not inspect.isabstract(cls), name
        assert cls.metrics and all(m.name for m in cls.metrics), name
        for option in cls.options:
            assert option.help and option.type in (bool, int, float, str, Path), (name, option.name)
    with pytest.raises(TypeError):
        Benchmark()  # type: ignore[abstract]


def test_a_benchmark_without_metrics_does_not_register():
    from lampe_eval.benchmarks.base import _check_declarations
    from lampe_eval.registry import Registry

    registry: Registry[Benchmark] = Registry("benchmark", check=_check_declarations)

    class NoMetrics(Benchmark):
        def tasks(self):
            return ["t"]

        def samples(self, task, ctx):
            return iter(())

        def score(self, sample, output):
            return {}

    with pytest.raises(TypeError, match="must declare its metrics"):
        registry.register("nometrics")(NoMetrics)


def benchmark_owner(module: str) -> str | None:
    """The benchmark a module of ``lampe_eval.benchmarks`` belongs to (None: code the benchmarks share):
    a sub-package's modules belong to it, a top-level module that registers a benchmark to itself."""
    parts = module.split(".")
    if len(parts) < 3:
        return None
    name = parts[2]
    if (PACKAGE / "benchmarks" / name).is_dir():
        return name
    path = PACKAGE / "benchmarks" / f"{name}.py"
    registers = path.is_file() and re.search(r"^@BENCHMARKS\.register", path.read_text(), re.M)
    return name if registers else None


def imported_modules(path: Path, module: str) -> set[str]:
    """Every module ``path`` imports, at the top or inside a function, as an absolute dotted name."""
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            base = base[: len(base) - node.level + 1] if node.level else []
            target = ".".join([*base, *([node.module] if node.module else [])])
            out.add(target)
            out.update(f"{target}.{alias.name}" for alias in node.names)
    return out


def test_no_benchmark_imports_another_benchmark():
    """Code two benchmarks need lives in the shared modules (datafiles, books, metrics, ...), and shared
    code imports no benchmark."""
    root = PACKAGE.parent
    found = []
    for path in sorted((PACKAGE / "benchmarks").rglob("*.py")):
        module = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        owner = benchmark_owner(module)
        for target in imported_modules(path, module):
            if not target.startswith("lampe_eval.benchmarks.") or len(target.split(".")) < 3:
                continue
            other = benchmark_owner(target)
            if other is not None and other != owner:
                found.append(f"{module} imports {target}")
    assert not found, found


MAX_MODULE_LINES = 500  # the architecture's rule: a module past it is split by concern


def test_no_module_is_over_500_lines():
    """No ``.py`` module of the package or of ``perf/`` holds more than :data:`MAX_MODULE_LINES` lines."""
    root = PACKAGE.parent
    modules = [path for folder in (PACKAGE, root / "perf") for path in sorted(folder.rglob("*.py"))]
    assert len(modules) > 100  # the walk found the package
    too_long = [
        f"{path.relative_to(root).as_posix()}: {lines} lines"
        for path in modules
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    ]
    assert not too_long, f"modules over {MAX_MODULE_LINES} lines (split each by concern): {too_long}"
