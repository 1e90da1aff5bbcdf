"""BABILong's answer check (``babilong/metrics.py``: ``preprocess_output`` + ``compare_answers``).

The label of the task (``TASK_LABELS``, in the task table) must be the only label found in the output's
first sentence, not counting labels that occur in the question; facts: ``docs/benchmarks.md`` section 7.4.
"""

from __future__ import annotations

from collections.abc import Sequence


def preprocess_output(output: str) -> str:
    """Lowercase, keep the text before the first ".", then before ``<context>`` and ``<example>``. (The
    official function also cuts at ``Question``, after lowercasing: that never matches, so it is left out.)"""
    output = output.lower().split(".")[0]
    return output.split("<context>")[0].split("<example>")[0]


def compare_answers(target: str, output: str, question: str, labels: Sequence[str]) -> bool:
    """``compare_answers``: labels are matched as substrings (lowercased) of the preprocessed output,
    minus those that occur in the question. A multi-answer target (qa8's ``apple,milk``: a comma and more
    than 3 characters) needs all its parts and nothing else; any other target must be the only label.
    Substring matching is the official behaviour: ``none`` also contains ``one`` (qa7), so "none" is
    never correct there, and a target that is not one of the labels is never correct."""
    output = preprocess_output(output)
    target = target.lower()
    labels_lower = {label.lower() for label in labels}
    in_question = {label for label in labels_lower if label in question.lower()}
    in_output = {label for label in labels_lower if label in output} - in_question
    if "," in target and len(target) > 3:
        parts = target.split(",")
        return all(part in in_output for part in parts) and len(in_output) == len(parts)
    return target in in_output and len(in_output) == 1
