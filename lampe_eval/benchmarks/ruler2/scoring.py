"""RULERv2's scoring, per sample in [0, 1] (the benchmark reports 0-100).

Ported from nemo-skills (read, not copied): ``nemo_skills/evaluation/evaluator/ruler.py`` (``eval_ruler2``,
commit 2c6b9e3) for the string matches, ``evaluator/mcq.py`` (511d678) with ``math_grader.py``'s
``extract_answer`` (a42e286) for ``multichoice``. The matches read the raw generation (the evaluator's
``parse_func`` output is stored, not scored).

- one reference ``r`` against a prediction ``p`` (both lower-cased):
  ``max(1 if r in p else 0, 1 - WER(p, r))``, with the word error rate
  ``WER = word edit distance(p.split(), r.split()) / len(r.split())``;
- ``all``: the mean of that over the references;
- ``2steps``: ``all`` on the prediction's last ``"\\n\\n"``-separated block (the answer after the copies);
- ``part``: the best reference, after dropping the ``"Document N:"`` blocks the model copied;
- ``multichoice``: the letter in the last ``\\boxed{}`` (else after "The final answer is"), else after
  "Answer:"; 1 when it equals the gold letter.

The group score (``ruler2_score.py``) is the plain mean of the 12 task scores.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

_COPIED_DOCUMENTS = re.compile(r"Document \d+:(?:.*\n)+?\n")
_FINAL_ANSWER = r"The final answer is (.+)$"
_LAST_LETTER = re.compile(r"\b[A-Z]\b(?!.*\b[A-Z]\b)", re.DOTALL)
_ANSWER_LINE = re.compile(r"(?i)[\*\_]{0,2}Answer[\*\_]{0,2}\s*:[\s\*\_]{0,2}\s*([A-Z])(?![a-zA-Z0-9])")
# letters other scripts use for A-D in multiple-choice answers (mcq.py's normalisation)
_LETTER_FORMS: tuple[tuple[str, str], ...] = (
    *(("أ", " A"), ("ب", " B"), ("ج", " C"), ("د", " D")),  # Arabic
    *(("অ", " A"), ("ব", " B"), ("ড", " C"), ("ঢ", " D")),  # Bengali
    *(("Ａ", " A"), ("Ｂ", " B"), ("Ｃ", " C"), ("Ｄ", " D")),  # full-width (Japanese)
)


def word_edit_distance(hypothesis: Sequence[str], reference: Sequence[str]) -> int:
    """Levenshtein distance between two word sequences (insertions, deletions, substitutions)."""
    if len(hypothesis) < len(reference):
        hypothesis, reference = reference, hypothesis
    previous = list(range(len(reference) + 1))
    for i, word in enumerate(hypothesis, 1):
        current = [i]
        for j, other in enumerate(reference, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (word != other)))
        previous = current
    return previous[-1]


def word_error_rate(hypothesis: str, reference: str) -> float:
    """Word edit distance over the reference's word count (inf for a reference without words)."""
    ref = reference.split()
    if not ref:
        return math.inf
    return word_edit_distance(hypothesis.split(), ref) / len(ref)


def match_one(prediction: str, reference: str) -> float:
    """``max(substring match, 1 - WER)``, case-insensitive; the WER term can only matter without a match."""
    pred, ref = prediction.lower(), reference.lower()
    if ref in pred:
        return 1.0
    return max(0.0, 1.0 - word_error_rate(pred, ref))


def match_all(prediction: str, references: Sequence[str]) -> float:
    if not references:
        return 0.0
    return sum(match_one(prediction, r) for r in references) / len(references)


def match_2steps(prediction: str, references: Sequence[str]) -> float:
    return match_all(prediction.split("\n\n")[-1], references)


def match_part(prediction: str, references: Sequence[str]) -> float:
    cleaned = _COPIED_DOCUMENTS.sub("", prediction)
    return max((match_one(cleaned, r) for r in references), default=0.0)


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (braces balanced), None without one."""
    if "\\boxed" not in text:
        return None
    start = text.rfind("\\boxed")
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                found = text[start : i + 1]
                return found[len("\\boxed{") : -1] if found.startswith("\\boxed{") else None
    return None


def final_answer_phrase(text: str) -> str | None:
    found = re.findall(_FINAL_ANSWER, text)
    return found[-1] if found else None


def extract_letter(text: str) -> str | None:
    """The multiple-choice letter of a generation, as nemo-skills' ``multichoice`` evaluator reads it
    (its defaults: ``\\boxed{}`` first, then the "final answer" phrase, then "Answer: X")."""
    extracted = last_boxed(text) or final_answer_phrase(text)
    letter = None
    if extracted is not None:
        for form, plain in _LETTER_FORMS:
            extracted = extracted.replace(form, plain)
        extracted = extracted.strip()
        if len(extracted) == 1:
            letter = extracted.upper()
        elif extracted:
            found = _LAST_LETTER.findall(extracted)
            letter = found[-1].strip().upper() if found else None
    if letter is None:
        found = _ANSWER_LINE.findall(text)
        letter = found[-1].strip().upper() if found else None
    return letter


def multichoice(prediction: str, references: Sequence[str]) -> float:
    return 1.0 if references and extract_letter(prediction) == references[0] else 0.0


METRIC_FNS = {"all": match_all, "part": match_part, "2steps": match_2steps, "multichoice": multichoice}


def group_score(task_scores: dict[str, float], tasks: Sequence[str]) -> float | None:
    """``ruler2_score.py``: the mean of the task scores, only when every task is there."""
    if not tasks or any(t not in task_scores for t in tasks):
        return None
    return sum(task_scores[t] for t in tasks) / len(tasks)
