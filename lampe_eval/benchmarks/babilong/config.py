"""The BABILong task table, ``tasks/babilong/babilong.yaml`` (package data; the user directory may override
it): the official prompt parts and answer labels per task, the template, the pre-built lengths."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from ...errors import LampeEvalError
from ..tables import load_table, mapping

PROMPT_PARTS = ("instruction", "examples", "post_prompt")


@dataclass(frozen=True)
class TaskSpec:
    """One BABILong task: its bAbI file, answer labels and prompt parts."""

    name: str
    babi_file: str  # e.g. qa1_single-supporting-fact (the bAbI file is <babi_file>_<split>.txt)
    labels: tuple[str, ...]
    instruction: str
    examples: str
    post_prompt: str

    def prompt_fingerprint(self, parts: dict[str, bool], template: str) -> str:
        """A short hash of the prompt parts in use and the template (part of the generation cache key)."""
        used = [getattr(self, p) if parts[p] else "" for p in PROMPT_PARTS]
        return hashlib.sha256(json.dumps([template, *used]).encode()).hexdigest()[:10]


@dataclass(frozen=True)
class BabilongConfig:
    dataset: str
    template: str
    max_new_tokens: int
    lengths: dict[str, int]  # pre-built length name -> nominal size (GPT-2 tokens)
    num_samples: int
    babi_folder: str
    babi_split: str
    babi_hub_repo: str
    babi_hub_file: str
    default_tasks: tuple[str, ...]
    headline_tasks: tuple[str, ...]
    tasks: dict[str, TaskSpec]

    def length_name(self, length: int) -> str | None:
        """The pre-built set for a job length: ``4k`` for 4096 (this harness's k) or 4000 (BABILong's k),
        ``1M`` for 1048576 or 1000000; None when there is none."""
        for name, size in self.lengths.items():
            if size <= 0:
                continue
            binary = size // 1000 * 1024 if size < 1_000_000 else size // 1_000_000 * 1024 * 1024
            if length in (size, binary):
                return name
        return None


def parse_config(raw: dict[str, Any], where: str) -> BabilongConfig:
    tasks: dict[str, TaskSpec] = {}
    for name, entry in mapping(raw.get("tasks"), f"{where}: 'tasks'").items():
        entry = mapping(entry, f"{where}: task {name}")
        labels = entry.pop("labels")
        if not isinstance(labels, list) or not labels:
            raise LampeEvalError(f"{where}: task {name}: 'labels' must be a non-empty list")
        tasks[str(name)] = TaskSpec(name=str(name), labels=tuple(str(x) for x in labels), **entry)
    hub = mapping(raw.get("babi_hub"), f"{where}: 'babi_hub'")
    lengths = {str(k): int(v) for k, v in mapping(raw.get("lengths"), f"{where}: 'lengths'").items()}
    config = BabilongConfig(
        dataset=str(raw["dataset"]),
        template=str(raw["template"]),
        max_new_tokens=int(raw["max_new_tokens"]),
        lengths=lengths,
        num_samples=int(raw["num_samples"]),
        babi_folder=str(raw["babi_folder"]),
        babi_split=str(raw["babi_split"]),
        babi_hub_repo=str(hub["repo"]),
        babi_hub_file=str(hub["file"]),
        default_tasks=tuple(raw["default_tasks"]),
        headline_tasks=tuple(raw["headline_tasks"]),
        tasks=tasks,
    )
    unknown = [t for t in (*config.default_tasks, *config.headline_tasks) if t not in tasks]
    if unknown:
        raise LampeEvalError(f"{where}: unknown task(s) {', '.join(unknown)} in default_tasks/headline_tasks")
    return config


def load_config() -> BabilongConfig:
    return load_table("babilong", parse_config)
