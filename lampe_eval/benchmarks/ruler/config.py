"""The RULER task table, ``tasks/ruler/ruler.yaml`` (package data; the user directory may override it)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from ...errors import LampeEvalError
from ..tables import load_table, mapping

GENERATORS = ("niah", "variable_tracking", "common_words_extraction", "freq_words_extraction", "qa")
METRICS = ("string_match_all", "string_match_part")


@dataclass(frozen=True)
class TaskConfig:
    """One RULER task: which generator, with which arguments, template and metric."""

    name: str
    generator: str
    metric: str
    tokens_to_generate: int
    template: str
    answer_prefix: str
    args: dict[str, Any] = field(default_factory=dict)

    def fingerprint(self) -> str:
        """A short hash of everything that changes the generated text (part of the cache key)."""
        payload = json.dumps(
            [self.generator, self.tokens_to_generate, self.template, self.answer_prefix, self.args],
            sort_keys=True,
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:10]


@dataclass(frozen=True)
class RulerConfig:
    num_samples: int
    tasks: dict[str, TaskConfig]


def parse_config(data: dict[str, Any], where: str) -> RulerConfig:
    """The typed RULER table (``tasks/ruler/ruler.yaml``)."""
    templates = mapping(data.get("templates"), f"{where}: 'templates'")
    tasks: dict[str, TaskConfig] = {}
    for name, spec in mapping(data.get("tasks"), f"{where}: 'tasks'").items():
        spec = mapping(spec, f"{where}: task {name!r}")
        generator = spec.get("generator")
        if generator not in GENERATORS or generator not in templates:
            raise LampeEvalError(f"{where}: task {name!r} has unknown generator {generator!r}")
        metric = spec.get("metric")
        if metric not in METRICS:
            raise LampeEvalError(f"{where}: task {name!r} has unknown metric {metric!r}")
        template = templates[generator]
        tasks[name] = TaskConfig(
            name=name,
            generator=generator,
            metric=metric,
            tokens_to_generate=int(spec.get("tokens_to_generate", template["tokens_to_generate"])),
            template=str(template["template"]),
            answer_prefix=str(template["answer_prefix"]),
            args=dict(spec.get("args") or {}),
        )
    if not tasks:
        raise LampeEvalError(f"{where}: no tasks")
    return RulerConfig(num_samples=int(data.get("num_samples", 500)), tasks=tasks)


def load_config() -> RulerConfig:
    return load_table("ruler", parse_config)
