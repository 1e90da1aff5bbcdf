"""The InfiniteBench task table, read from ``tasks/infinitebench/infinitebench.yaml`` (repo-relative).

``LAMPE_EVAL_INFINITEBENCH_CONFIG`` points to another YAML file of the same shape.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from ...errors import LampeEvalError, unknown

SYNTHETIC_TASKS = ("passkey", "number_string", "kv_retrieval")
# The score each task's metric name stands for (checked against the YAML so a typo fails loudly).
METRICS = ("accuracy", "qa_f1", "qa_f1_zh", "rougeLsum", "prefix_accuracy")


@dataclass(frozen=True)
class TaskSpec:
    """One InfiniteBench task: its official name, table label, budget and headline metric."""

    name: str
    label: str
    max_new_tokens: int
    metric: str
    aliases: tuple[str, ...] = ()
    default: bool = False
    synthetic: bool = False


@dataclass(frozen=True)
class InfiniteBenchConfig:
    dataset: str
    default_template: str
    tasks: dict[str, TaskSpec]
    templates: dict[str, dict[str, str]]  # family -> task -> template
    synthetic: dict[str, Any] = field(default_factory=dict)

    def resolve(self, name: str) -> str:
        """The official task name for a task name or alias (case-insensitive)."""
        key = name.strip().lower()
        for spec in self.tasks.values():
            if key == spec.name or key == spec.label.lower() or key in spec.aliases:
                return spec.name
        choices = [*self.tasks, *(a for s in self.tasks.values() for a in s.aliases)]
        raise unknown("infinitebench task", name, choices)

    def template(self, family: str, task: str) -> str:
        if family not in self.templates:
            raise unknown("infinitebench template family", family, list(self.templates))
        if task not in self.templates[family]:
            raise LampeEvalError(f"infinitebench: template family {family!r} has no template for {task!r}")
        return self.templates[family][task]

    def synthetic_fingerprint(self, task: str) -> str:
        """A short hash of the recipe of one synthetic task (part of the generation cache key)."""
        payload = json.dumps([self.synthetic.get("noise"), self.synthetic.get(task)], sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:10]


def config_path() -> Path:
    env = os.environ.get("LAMPE_EVAL_INFINITEBENCH_CONFIG")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3] / "tasks" / "infinitebench" / "infinitebench.yaml"


@lru_cache(maxsize=4)
def _load(path: str) -> InfiniteBenchConfig:
    file = Path(path)
    if not file.is_file():
        raise LampeEvalError(
            f"InfiniteBench task table not found at {file} (set LAMPE_EVAL_INFINITEBENCH_CONFIG)"
        )
    try:
        data = yaml.safe_load(file.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as err:
        raise LampeEvalError(f"{file}: not valid YAML: {err}".splitlines()[0]) from err
    tasks: dict[str, TaskSpec] = {}
    for name, spec in (data.get("tasks") or {}).items():
        metric = spec.get("metric")
        if metric not in METRICS:
            raise LampeEvalError(f"{file}: task {name!r} has unknown metric {metric!r}")
        tasks[name] = TaskSpec(
            name=name,
            label=str(spec.get("label", name)),
            max_new_tokens=int(spec["max_new_tokens"]),
            metric=metric,
            aliases=tuple(str(a).lower() for a in spec.get("aliases") or ()),
            default=bool(spec.get("default", False)),
            synthetic=bool(spec.get("synthetic", False)),
        )
    templates = {
        str(k): {str(t): str(v) for t, v in (d or {}).items()}
        for k, d in (data.get("templates") or {}).items()
    }
    default_template = str(data.get("default_template", "yarn_mistral"))
    if default_template not in templates:
        raise LampeEvalError(f"{file}: default_template {default_template!r} is not a template family")
    return InfiniteBenchConfig(
        dataset=str(data.get("dataset", "xinrongzhang2022/InfiniteBench")),
        default_template=default_template,
        tasks=tasks,
        templates=templates,
        synthetic=dict(data.get("synthetic") or {}),
    )


def load_config() -> InfiniteBenchConfig:
    return _load(str(config_path()))
