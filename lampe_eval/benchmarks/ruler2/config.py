"""The RULERv2 task table, ``tasks/ruler2/ruler2.yaml`` (package data; the user directory may override it)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from ...errors import LampeEvalError
from ..tables import load_table, mapping

GENERATORS = ("niah", "mmlu", "qa")
METRICS = ("all", "part", "2steps", "multichoice")  # eval_ruler2's match types and nemo-skills' multichoice
LADDERS = ("mk_niah", "mv_niah", "qa")
DIFFICULTIES = ("basic", "easy", "medium", "hard")

# the arguments each generator reads (prepare_data.py's command lines), with their allowed values
ARGS: dict[str, dict[str, tuple[Any, ...] | type]] = {
    "niah": {
        "num_needle_k": int,
        "num_needle_v": int,
        "num_needle_q": int,
        "type_needle_k": ("numbers", "words", "uuids"),
        "type_needle_v": ("numbers", "words", "uuids"),
        "num_digits_k": int,
        "num_digits_v": int,
    },
    "mmlu": {
        "fewshot": int,
        "num_order": int,
        "task_type": ("retrieve", "niah", "solve"),
        "algo_type": ("single", "2steps"),
    },
    "qa": {
        "task_type": ("retrieve", "solve"),
        "query_type": ("doc", "question"),
        "algo_type": ("single", "2steps"),
    },
}
PROMPTS = {"niah": (), "mmlu": ("context", "problem"), "qa": ("context", "problem")}


@dataclass(frozen=True)
class TaskConfig:
    """One RULERv2 task: its ladder and level, generator, arguments, prompts and metric."""

    name: str
    ladder: str
    difficulty: str
    generator: str
    metric: str
    tokens_to_generate: int
    args: dict[str, Any] = field(default_factory=dict)
    prompts: dict[str, str] = field(default_factory=dict)  # context / problem / example (mmlu, qa)
    shared: dict[str, str] = field(default_factory=dict)  # the generator's own strings (needle, templates)

    def fingerprint(self) -> str:
        """A short hash of everything that changes the generated text (part of the cache key)."""
        payload = json.dumps([self.generator, self.args, self.prompts, self.shared], sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:10]


@dataclass(frozen=True)
class Ruler2Config:
    num_samples: int
    tasks: dict[str, TaskConfig]


def _check_args(name: str, generator: str, args: dict[str, Any], where: str) -> None:
    allowed = ARGS[generator]
    for key, value in args.items():
        kind = allowed.get(key)
        if kind is None:
            raise LampeEvalError(f"{where}: task {name!r} has unknown argument {key!r} for {generator}")
        if isinstance(kind, tuple) and value not in kind:
            raise LampeEvalError(f"{where}: task {name!r}: {key}={value!r}, choose one of {', '.join(kind)}")
        if kind is int and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise LampeEvalError(f"{where}: task {name!r}: {key} must be a non-negative integer")


def parse_config(data: dict[str, Any], where: str) -> Ruler2Config:
    """The typed RULERv2 table (``tasks/ruler2/ruler2.yaml``)."""
    shared = mapping(data.get("generators"), f"{where}: 'generators'")
    tasks: dict[str, TaskConfig] = {}
    for name, spec in mapping(data.get("tasks"), f"{where}: 'tasks'").items():
        spec = mapping(spec, f"{where}: task {name!r}")
        generator = spec.get("generator")
        if generator not in GENERATORS or generator not in shared:
            raise LampeEvalError(f"{where}: task {name!r} has unknown generator {generator!r}")
        for key, choices in (("metric", METRICS), ("ladder", LADDERS), ("difficulty", DIFFICULTIES)):
            if spec.get(key) not in choices:
                raise LampeEvalError(
                    f"{where}: task {name!r} has {key} {spec.get(key)!r}; choose one of {', '.join(choices)}"
                )
        args = dict(spec.get("args") or {})
        _check_args(name, generator, args, where)
        prompts: dict[str, str] = {k: str(spec[k]) for k in ("context", "problem", "example") if k in spec}
        missing = [k for k in PROMPTS[generator] if k not in prompts]
        if generator == "mmlu" and args.get("fewshot") and "example" not in prompts:
            missing.append("example")
        if missing:
            raise LampeEvalError(f"{where}: task {name!r} lacks {', '.join(missing)}")
        tasks[name] = TaskConfig(
            name=name,
            ladder=str(spec["ladder"]),
            difficulty=str(spec["difficulty"]),
            generator=generator,
            metric=str(spec["metric"]),
            tokens_to_generate=int(spec["tokens_to_generate"]),
            args=args,
            prompts=prompts,
            shared={k: str(v) for k, v in mapping(shared[generator], f"{where}: {generator}").items()},
        )
    if not tasks:
        raise LampeEvalError(f"{where}: no tasks")
    return Ruler2Config(num_samples=int(data.get("num_samples", 100)), tasks=tasks)


def load_config() -> Ruler2Config:
    return load_table("ruler2", parse_config)
