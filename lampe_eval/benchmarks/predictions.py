"""The prediction files other harnesses write, as the benchmark they belong to declares them.

``lampe-eval import`` reads such a file into a results store: each benchmark lists in
``prediction_files`` the files its official code writes (:class:`PredictionFile`: which keys recognise
it, where the prediction, the references, the sample id and the scorer's meta are), and scores each
prediction with its own scorer (:meth:`~lampe_eval.benchmarks.base.Benchmark.score_prediction`). A file
of any other shape is read through the same type, built from ``--field NAME=KEY`` options.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MISSING: Any = object()  # what :func:`lookup` gives for a key the line does not have


def lookup(line: Mapping[str, Any], key: str) -> Any:
    """``line[key]``; a dotted key (``others.id``) reaches into nested objects when the line has no key of
    that exact name; :data:`MISSING` when there is none."""
    if key in line:
        return line[key]
    value: Any = line
    for part in key.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return MISSING
        value = value[part]
    return value


@dataclass(frozen=True)
class PredictionFile:
    """One prediction file's format: the keys of each of its JSON lines."""

    name: str  # what messages call it, with the official script that writes it
    prediction: str  # the model's answer (text)
    references: str  # the gold answer(s): a list, or one value
    keys: tuple[str, ...] = ()  # more keys every line has: with the two above, they recognise the format
    sample_id: tuple[str, ...] = ()  # tried in order (``a.b``: nested); none found: the line number
    meta: tuple[tuple[str, str], ...] = ()  # (sample meta key, file key): what the scorer reads, lengths
    prompt: str | None = None  # the input text: its head and tail are kept, as a run keeps them
    prompt_tokens: str | None = None  # the tokens given to the model
    score: str | None = None  # the file's own score of the sample: kept beside lampe-eval's

    @property
    def required(self) -> tuple[str, ...]:
        return (self.prediction, self.references, *self.keys)

    def recognises(self, line: Mapping[str, Any]) -> bool:
        """Every key the format requires is in ``line``."""
        return all(lookup(line, key) is not MISSING for key in self.required)

    def describe(self) -> str:
        """``name (keys a, b, c)`` for messages."""
        return f"{self.name} (keys {', '.join(self.required)})"


def as_references(value: Any) -> list[str]:
    """Gold answers as the scorers take them: a list of strings (numbers as text, nested lists flattened,
    one value as a list of one)."""
    if isinstance(value, (list, tuple)):
        out: list[str] = []
        for item in value:
            out.extend(as_references(item) if isinstance(item, (list, tuple)) else [_text(item)])
        return out
    return [_text(value)]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)


def as_prediction(value: Any) -> str:
    """A prediction as text (``null``: the empty answer)."""
    return _text(value)
