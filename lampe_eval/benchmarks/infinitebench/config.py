"""The InfiniteBench task table, ``tasks/infinitebench/infinitebench.yaml`` (package data; the user
directory may override it)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from ...errors import LampeEvalError, unknown
from ..tables import load_table, mapping

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


def parse_config(data: dict[str, Any], where: str) -> InfiniteBenchConfig:
    """The typed InfiniteBench table (``tasks/infinitebench/infinitebench.yaml``)."""
    tasks: dict[str, TaskSpec] = {}
    for name, spec in mapping(data.get("tasks"), f"{where}: 'tasks'").items():
        spec = mapping(spec, f"{where}: task {name!r}")
        metric = spec.get("metric")
        if metric not in METRICS:
            raise LampeEvalError(f"{where}: task {name!r} has unknown metric {metric!r}")
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
        for k, d in mapping(data.get("templates"), f"{where}: 'templates'").items()
    }
    default_template = str(data.get("default_template", "yarn_mistral"))
    if default_template not in templates:
        raise LampeEvalError(f"{where}: default_template {default_template!r} is not a template family")
    return InfiniteBenchConfig(
        dataset=str(data.get("dataset", "xinrongzhang2022/InfiniteBench")),
        default_template=default_template,
        tasks=tasks,
        templates=templates,
        synthetic=dict(data.get("synthetic") or {}),
    )


def load_config() -> InfiniteBenchConfig:
    return load_table("infinitebench", parse_config)
