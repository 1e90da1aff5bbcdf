"""The RULER task table, read from ``tasks/ruler/ruler.yaml`` (repo-relative, like ``method_configs/``).

``LAMPE_EVAL_RULER_CONFIG`` points to another YAML file of the same shape.
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

from ...errors import LampeEvalError

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


def config_path() -> Path:
    env = os.environ.get("LAMPE_EVAL_RULER_CONFIG")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3] / "tasks" / "ruler" / "ruler.yaml"


@lru_cache(maxsize=4)
def _load(path: str) -> RulerConfig:
    file = Path(path)
    if not file.is_file():
        raise LampeEvalError(f"RULER task table not found at {file} (set LAMPE_EVAL_RULER_CONFIG)")
    data = yaml.safe_load(file.read_text(encoding="utf-8")) or {}
    templates = data.get("templates") or {}
    tasks: dict[str, TaskConfig] = {}
    for name, spec in (data.get("tasks") or {}).items():
        generator = spec.get("generator")
        if generator not in GENERATORS or generator not in templates:
            raise LampeEvalError(f"{file}: task {name!r} has unknown generator {generator!r}")
        metric = spec.get("metric")
        if metric not in METRICS:
            raise LampeEvalError(f"{file}: task {name!r} has unknown metric {metric!r}")
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
        raise LampeEvalError(f"{file}: no tasks")
    return RulerConfig(num_samples=int(data.get("num_samples", 500)), tasks=tasks)


def load_config() -> RulerConfig:
    return _load(str(config_path()))
