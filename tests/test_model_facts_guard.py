"""One place for model facts: outside ``lampe_eval/models/``, ``lampe_eval/model_facts.py`` and the test
factories (``lampe_eval/testing.py``), no module reads a config's heads, window, layers or RoPE attributes
itself; it reads :class:`~lampe_eval.model_facts.ModelFacts` (a method: the fields of ``RopeBase``). The few
legitimate reads are allowlisted below, each with its reason."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXEMPT = ("lampe_eval/models/", "lampe_eval/model_facts.py", "lampe_eval/testing.py")

# Attributes only a transformers config carries: a read of one is a raw config read, whatever the receiver.
CONFIG_ONLY = frozenset(
    {
        "num_attention_heads",
        "num_key_value_heads",
        "num_hidden_layers",
        "max_position_embeddings",
        "partial_rotary_factor",
        "rotary_pct",
        "rotary_emb_base",
        "layer_types",
        "max_window_layers",
        "use_sliding_window",
        "attn_logit_softcapping",
    }
)
# Names lampe-eval's own objects use too (ModelFacts.sliding_window and rope_theta, RopeBase.rope_parameters
# and head_dim, AttentionPlan.rope_scaling): a raw read only on a receiver that names a config.
SHARED = frozenset({"sliding_window", "rope_parameters", "rope_scaling", "rope_theta", "head_dim"})

# (file, the read as written): why it stays a raw read.
ALLOWED: dict[tuple[str, str], str] = {
    ("lampe_eval/families/phi3.py", "layer.config.num_attention_heads"): (
        "the split of the layer's fused qkv, as Phi3Attention.forward computes it from its own config"
    ),
    ("lampe_eval/families/phi3.py", "layer.num_key_value_heads"): (
        "a layer's own attribute (the fused qkv split), not its model's config"
    ),
    ("lampe_eval/backends/vllm/backend.py", "getattr(self.config, 'max_position_embeddings', 0)"): (
        "handed to vLLM as is (hf_overrides' max_position_embeddings), which checks the config's own value"
    ),
    ("lampe_eval/backends/vllm/checks.py", "getattr(facts.text, 'use_sliding_window', True)"): (
        "vLLM's own switch (its MoE classes read it), not a fact of the model's attention"
    ),
    ("lampe_eval/backends/vllm/checks.py", "getattr(facts.text, 'max_window_layers', None)"): (
        "vLLM's own switch (its Qwen classes read it), not a fact of the model's attention"
    ),
}


def _names_a_config(node: ast.expr) -> bool:
    text = ast.unparse(node).lower()
    return "config" in text or "cfg" in text or text == "text" or text.endswith(".text")


def _read(node: ast.AST) -> tuple[object, ast.expr, bool] | None:
    """(the name, its receiver, whether by key) of a read: ``x.NAME`` (loaded: building a config for
    transformers assigns, and reads nothing), ``getattr(x, "NAME", ...)`` or ``hasattr``; by key:
    ``x["NAME"]``, ``x.get("NAME")``. None for anything else."""
    if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
        return node.attr, node.value, False
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        return node.slice.value, node.value, True
    if not isinstance(node, ast.Call) or not node.args:
        return None
    func, args = node.func, node.args
    if isinstance(func, ast.Name) and func.id in ("getattr", "hasattr") and len(args) >= 2:
        return (args[1].value, args[0], False) if isinstance(args[1], ast.Constant) else None
    if isinstance(func, ast.Attribute) and func.attr == "get" and isinstance(args[0], ast.Constant):
        return args[0].value, func.value, True
    return None


def _raw_read(node: ast.AST) -> bool:
    found = _read(node)
    if found is None or not isinstance(found[0], str):
        return False
    name, receiver, by_key = found
    if by_key and not _names_a_config(receiver):
        return False  # a dict's key (rope parameters, a record), not a config's
    return name in CONFIG_ONLY or (name in SHARED and _names_a_config(receiver))


def raw_reads(source: str) -> list[tuple[int, str]]:
    """(line, the read as written) of each raw config read in ``source``."""
    return sorted((node.lineno, ast.unparse(node)) for node in ast.walk(ast.parse(source)) if _raw_read(node))


def package_reads(root: Path = ROOT) -> dict[tuple[str, str], list[int]]:
    """{(file, read): its lines} over the package under ``root``, the exempt modules left out."""
    found: dict[tuple[str, str], list[int]] = {}
    for path in sorted((root / "lampe_eval").rglob("*.py")):
        where = path.relative_to(root).as_posix()
        if where.startswith(EXEMPT):
            continue
        for line, read in raw_reads(path.read_text(encoding="utf-8")):
            found.setdefault((where, read), []).append(line)
    return found


def test_no_module_reads_a_raw_config_attribute_outside_the_model_facts():
    offenders = [
        f"{where}:{lines[0]}: {read}"
        for (where, read), lines in package_reads().items()
        if (where, read) not in ALLOWED
    ]
    assert not offenders, "read ModelFacts (or RopeBase's fields) instead:\n" + "\n".join(offenders)


def test_every_allowlisted_read_is_still_there():
    """A read that went away leaves the list (which stays as short as the reads it excuses)."""
    stale = sorted(set(ALLOWED) - set(package_reads()))
    assert not stale, stale


def test_the_guard_catches_a_new_raw_read_and_leaves_the_facts_alone():
    for read in (
        "config.num_attention_heads",
        "model.config.sliding_window",
        'getattr(config, "head_dim", None)',
        'getattr(text, "rope_theta", 1e4)',
        'config.rope_parameters["rope_theta"]',
        'cfg.get("rope_scaling")',
        "layer.self_attn.rotary_pct",
    ):
        assert raw_reads(f"def report(config, model, text, cfg, layer):\n    return {read}\n"), read
    for read in (
        "facts.sliding_window",
        "base.rope_parameters",
        "base.head_dim",
        "facts.rope_theta",
        "plan.rope_scaling",
        "shape.head_dim",
        'base.rope_parameters.get("rope_theta")',
    ):
        assert not raw_reads(f"def plan(facts, base, plan, shape):\n    return {read}\n"), read
    # building a config for transformers' rope init functions writes, and reads nothing
    assert not raw_reads("def init(config, rope):\n    config.rope_parameters = dict(rope)\n")


def test_a_report_module_reading_the_heads_fails_the_guard(tmp_path):
    for where in ("report/table.py", "models/loading.py", "model_facts.py"):
        path = tmp_path / "lampe_eval" / where
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("def heads(config):\n    return config.num_attention_heads\n", encoding="utf-8")
    assert package_reads(tmp_path) == {("lampe_eval/report/table.py", "config.num_attention_heads"): [2]}
