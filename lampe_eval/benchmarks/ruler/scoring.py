"""RULER's scoring (``scripts/eval/evaluate.py`` + ``scripts/eval/synthetic/constants.py``), 0-100 scale.

- prediction post-processing: strip, every control character ``[\\x00-\\x1f]`` -> newline, strip;
- ``string_match_all``: fraction of the gold strings that occur (case-insensitive) in the prediction;
- ``string_match_part``: 1 if any gold string occurs (case-insensitive) in the prediction;
- task score = ``round(100 * mean over samples, 2)``; a length's score = the plain mean of the task scores;
  over lengths: ``Avg.`` and the weighted means ``wAvg. (inc)`` / ``wAvg. (dec)`` (weights 1..n / n..1).

Not RULER's: ``answer_nll`` (``--opt score=answer_nll``), the NLL per token of the gold answer
(:func:`answer_text`) after the prompt, one forward pass and no generation: a continuous score that
separates settings where a small model finds no needle (DPE's search, ``lampe-eval dpe-select``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

_CONTROL = re.compile(r"[\x00-\x1f]")


def postprocess(prediction: str) -> str:
    return _CONTROL.sub("\n", prediction.strip()).strip()


def string_match_all(prediction: str, references: Sequence[str]) -> float:
    """Per-sample fraction in [0, 1] of the references found in the prediction (case-insensitive)."""
    if not references:
        return 0.0
    pred = prediction.lower()
    return sum(1.0 for r in references if r.lower() in pred) / len(references)


def string_match_part(prediction: str, references: Sequence[str]) -> float:
    """Per-sample 1.0 when any reference occurs in the prediction (case-insensitive), else 0.0."""
    pred = prediction.lower()
    return max((1.0 if r.lower() in pred else 0.0 for r in references), default=0.0)


def answer_text(references: Sequence[str]) -> str:
    """The gold answer scored by ``answer_nll``, read after the prompt's answer prefix ("... are")."""
    return " " + ", ".join(references) + "."


METRIC_FNS = {"string_match_all": string_match_all, "string_match_part": string_match_part}


def corpus_score(metric: str, predictions: Sequence[str], references: Sequence[Sequence[str]]) -> float:
    """RULER's task score for a list of raw predictions: ``round(100 * mean, 2)``."""
    if not predictions:
        return 0.0
    fn = METRIC_FNS[metric]
    total = sum(fn(postprocess(p), r) for p, r in zip(predictions, references, strict=True))
    return round(total / len(predictions) * 100, 2)


def average_over_tasks(task_scores: Mapping[str, float]) -> float:
    """A length's RULER score: the unweighted mean of its task scores."""
    return sum(task_scores.values()) / len(task_scores) if task_scores else 0.0


def length_averages(scores_by_length: Mapping[int, float]) -> dict[str, float]:
    """``avg``, ``wavg_inc`` (weights 1..n, growing with the length) and ``wavg_dec`` (n..1)."""
    lengths = sorted(scores_by_length)
    if not lengths:
        return {}
    values = [scores_by_length[n] for n in lengths]
    weights = list(range(1, len(values) + 1))
    norm = sum(weights)
    return {
        "avg": sum(values) / len(values),
        "wavg_inc": sum(w * v for w, v in zip(weights, values, strict=True)) / norm,
        "wavg_dec": sum(w * v for w, v in zip(reversed(weights), values, strict=True)) / norm,
    }
