"""Answer scorers shared by the generation benchmarks (LongBench, L-Eval, InfiniteBench).

Every function scores one prediction against one gold answer and returns a float in [0, 1], exactly
as the official scripts do (benchmarks multiply by 100); :func:`max_over_references` takes the best
gold answer. The behaviour follows the official implementations, quirks included (see each
docstring and ``docs/benchmarks.md`` section 1.4):

- English answer normalisation: lowercase, drop ASCII punctuation, drop the articles a/an/the,
  collapse whitespace (:func:`normalize_answer`); Chinese: lowercase, drop ASCII and CJK
  punctuation, drop all whitespace (:func:`normalize_zh_answer`).
- Token F1 on normalised words (:func:`qa_f1_score`), on jieba words (:func:`qa_f1_zh_score`,
  LongBench) or on characters (:func:`qa_f1_zh_char_score`, InfiniteBench Zh.QA).
- ROUGE-L as LongBench computes it: the F-measure of the PyPI package ``rouge`` (1.0.1), a
  summary-level union-LCS over sentences split on ``"."`` with *distinct*-word counts
  (:func:`rouge_l_score`, :func:`rouge_l_zh_score`); and Google's ``rouge-score`` types for
  InfiniteBench / HF ``evaluate`` (:func:`google_rouge_score`).
- LongBench classification, retrieval, count and code edit similarity.
"""

from __future__ import annotations

import difflib
import logging
import re
import string
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rouge_score.rouge_scorer import RougeScorer

__all__ = [
    "CHINESE_PUNCTUATION",
    "classification_score",
    "code_sim_score",
    "count_score",
    "first_line",
    "google_rouge_score",
    "jieba_cut",
    "max_over_references",
    "normalize_answer",
    "normalize_zh_answer",
    "qa_f1_score",
    "qa_f1_zh_char_score",
    "qa_f1_zh_score",
    "retrieval_score",
    "retrieval_zh_score",
    "rouge_l_score",
    "rouge_l_zh_score",
    "token_f1",
]

# The CJK punctuation LongBench and InfiniteBench strip in Chinese answers (the last "." is ASCII).
CHINESE_PUNCTUATION = (
    "！？｡。＂＃＄％＆＇（）＊＋，－／：；＜＝＞＠［＼］＾＿｀｛｜｝～"
    "｟｠｢｣､、〃》「」『』【】〔〕〖〗〘〙〚〛〜〝〞〟〰〾〿–—‘’‛“”„‟…‧﹏."
)
_ASCII_PUNCTUATION = frozenset(string.punctuation)
_ALL_PUNCTUATION = frozenset(string.punctuation + CHINESE_PUNCTUATION)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


# --------------------------------------------------------------------------- normalisation


def normalize_answer(text: str) -> str:
    """English answer normalisation (SQuAD style): lowercase, remove ASCII punctuation, replace the
    whole words a/an/the by a space, collapse whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _ASCII_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def normalize_zh_answer(text: str) -> str:
    """Chinese answer normalisation: lowercase, remove ASCII and CJK punctuation, remove all whitespace."""
    return "".join("".join(ch for ch in text.lower() if ch not in _ALL_PUNCTUATION).split())


@lru_cache(maxsize=1)
def _jieba() -> ModuleType:
    import jieba

    jieba.setLogLevel(logging.WARNING)  # no "Building prefix dict" chatter on every process start
    return jieba


def jieba_cut(text: str) -> list[str]:
    """jieba's accurate mode (``cut_all=False``), the tokenisation LongBench uses for Chinese."""
    return list(_jieba().cut(text, cut_all=False))


def first_line(prediction: str) -> str:
    """LongBench's few-shot post-processing: drop leading newlines, keep the first line."""
    return prediction.lstrip("\n").split("\n")[0]


# --------------------------------------------------------------------------- F1


def token_f1(prediction_tokens: Sequence[str], gold_tokens: Sequence[str]) -> float:
    """F1 of the multiset overlap of two token lists (0 when nothing overlaps)."""
    common = Counter(prediction_tokens) & Counter(gold_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision = same / len(prediction_tokens)
    recall = same / len(gold_tokens)
    return (2 * precision * recall) / (precision + recall)


def qa_f1_score(prediction: str, ground_truth: str, **_: object) -> float:
    """Token F1 over the words of :func:`normalize_answer` (LongBench, InfiniteBench En.QA)."""
    return token_f1(normalize_answer(prediction).split(), normalize_answer(ground_truth).split())


def qa_f1_zh_score(prediction: str, ground_truth: str, **_: object) -> float:
    """LongBench's Chinese F1: jieba words of the raw strings, each normalised, empty ones dropped."""

    def tokens(text: str) -> list[str]:
        return [t for t in (normalize_zh_answer(w) for w in jieba_cut(text)) if t]

    return token_f1(tokens(prediction), tokens(ground_truth))


def qa_f1_zh_char_score(prediction: str, ground_truth: str, **_: object) -> float:
    """InfiniteBench's Chinese F1: characters of :func:`normalize_zh_answer`."""
    return token_f1(list(normalize_zh_answer(prediction)), list(normalize_zh_answer(ground_truth)))


# --------------------------------------------------------------------------- ROUGE-L (LongBench)


def _rouge_sentences(text: str) -> list[str]:
    """``rouge`` 1.0.1's sentence split: pieces between "." that are non-empty, whitespace collapsed
    (a piece of only whitespace stays, as an empty sentence)."""
    return [" ".join(piece.split()) for piece in text.split(".") if piece]


def _lcs_words(reference: list[str], hypothesis: list[str]) -> set[str]:
    """The words of one longest common subsequence, traced back from the end of both sequences; on a
    tie the walk moves along the hypothesis (the choice ``rouge`` 1.0.1 makes, which decides *which*
    words are counted)."""
    n, m = len(reference), len(hypothesis)
    table = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(1, n + 1):
        row, previous, word = table[i], table[i - 1], reference[i - 1]
        for j in range(1, m + 1):
            if word == hypothesis[j - 1]:
                row[j] = previous[j - 1] + 1
            else:
                row[j] = previous[j] if previous[j] > row[j - 1] else row[j - 1]
    words: set[str] = set()
    i, j = n, m
    while i > 0 and j > 0:
        if reference[i - 1] == hypothesis[j - 1]:
            words.add(reference[i - 1])
            i, j = i - 1, j - 1
        elif table[i - 1][j] > table[i][j - 1]:
            i -= 1
        else:
            j -= 1
    return words


def rouge_l_score(prediction: str, ground_truth: str, **_: object) -> float:
    """LongBench's ``rouge_score``: ROUGE-L F of the PyPI package ``rouge`` (1.0.1, default settings).

    Case-sensitive, no punctuation removal; sentences are the pieces between "." and words are the
    space-separated tokens of each sentence. With R and H the sets of distinct reference and
    hypothesis words, and U the union over every (reference sentence, hypothesis sentence) pair of
    the set of words on their LCS: P = |U|/|H|, R = |U|/|R|, F = 2PR/(P+R+1e-8). A text with no
    sentence (empty, or only dots) scores 0 (the official code catches the library's error).

    Deviation: the library traces the LCS recursively, so a single sentence pair of more than
    ~1000 words combined hits Python's recursion limit, which the official code also turns into 0;
    we return the actual score.
    """
    hypothesis = _rouge_sentences(prediction)
    reference = _rouge_sentences(ground_truth)
    if not hypothesis or not reference:
        return 0.0
    hypothesis_words = [s.split(" ") for s in hypothesis]
    reference_words = [s.split(" ") for s in reference]
    ref_count = len({w for words in reference_words for w in words})
    hyp_count = len({w for words in hypothesis_words for w in words})
    union: set[str] = set()
    for ref in reference_words:
        for hyp in hypothesis_words:
            union |= _lcs_words(ref, hyp)
    overlap = len(union)
    recall = overlap / ref_count
    precision = overlap / hyp_count
    return 2.0 * ((precision * recall) / (precision + recall + 1e-8))


def rouge_l_zh_score(prediction: str, ground_truth: str, **_: object) -> float:
    """LongBench's Chinese ROUGE-L: jieba words joined by spaces, then :func:`rouge_l_score`."""
    return rouge_l_score(" ".join(jieba_cut(prediction)), " ".join(jieba_cut(ground_truth)))


# --------------------------------------------------------------------------- ROUGE (Google)


@lru_cache(maxsize=8)
def _google_scorer(rouge_type: str, use_stemmer: bool) -> RougeScorer:
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer([rouge_type], use_stemmer=use_stemmer)


def google_rouge_score(
    prediction: str,
    ground_truth: str | Sequence[str],
    rouge_type: str = "rougeLsum",
    use_stemmer: bool = False,
    **_: object,
) -> float:
    """F-measure of Google's ``rouge-score`` (what HF ``evaluate.load("rouge")`` runs; InfiniteBench
    En.Sum uses ``rougeLsum``: summary-level LCS over newline-separated sentences, lowercased
    alphanumeric tokens). A list of references takes the best one (``score_multi``)."""
    scorer = _google_scorer(rouge_type, use_stemmer)
    if isinstance(ground_truth, str):
        return float(scorer.score(ground_truth, prediction)[rouge_type].fmeasure)
    return float(scorer.score_multi(list(ground_truth), prediction)[rouge_type].fmeasure)


# --------------------------------------------------------------------------- LongBench task metrics


def classification_score(
    prediction: str, ground_truth: str, all_classes: Sequence[str] = (), **_: object
) -> float:
    """LongBench trec/lsht: 1/k when the gold class is among the k classes found in the prediction.

    Classes are found as substrings of the prediction, in ``all_classes`` order. Then every found class
    that is a proper substring of the gold class is dropped -- scanning the list while deleting from
    it, as the official loop does, so the class right after a dropped one is not examined (and stays).
    """
    matches = [name for name in all_classes if name in prediction]
    position = 0
    while position < len(matches):
        name = matches[position]
        if name in ground_truth and name != ground_truth:
            del matches[position]  # the official for-loop still moves on: the next class is skipped
        position += 1
    if ground_truth in matches:
        return 1.0 / len(matches)
    return 0.0


def _fraction_equal(prediction: str, target: str) -> float:
    numbers = re.findall(r"\d+", prediction)
    if not numbers:
        return 0.0
    return sum(1 for number in numbers if number == target) / len(numbers)


def retrieval_score(prediction: str, ground_truth: str, **_: object) -> float:
    """LongBench passage_retrieval_en: the share of the prediction's numbers that equal the gold
    paragraph number (the first ``Paragraph N`` in the gold answer)."""
    return _fraction_equal(prediction, re.findall(r"Paragraph (\d+)", ground_truth)[0])


def retrieval_zh_score(prediction: str, ground_truth: str, **_: object) -> float:
    """LongBench passage_retrieval_zh: as :func:`retrieval_score` with ``段落N``."""
    return _fraction_equal(prediction, re.findall(r"段落(\d+)", ground_truth)[0])


def count_score(prediction: str, ground_truth: str, **_: object) -> float:
    """LongBench passage_count: the share of the prediction's numbers equal to the gold count."""
    return _fraction_equal(prediction, str(ground_truth))


def _fuzz_ratio(a: str, b: str, backend: str) -> int:
    """``fuzzywuzzy.fuzz.ratio``: equal strings 100, an empty one 0, else round(100 * ratio)."""
    if a == b:
        return 100
    if not a or not b:
        return 0
    if backend == "difflib":
        ratio = difflib.SequenceMatcher(None, a, b).ratio()
    elif backend == "levenshtein":
        import Levenshtein

        ratio = Levenshtein.ratio(a, b)
    else:
        raise ValueError(f"unknown edit-similarity backend {backend!r}; choose difflib or levenshtein")
    return int(round(100 * ratio))


def code_sim_score(prediction: str, ground_truth: str, backend: str = "difflib", **_: object) -> float:
    """LongBench lcc/repobench-p: ``fuzz.ratio(line, gold) / 100`` for the first line of the prediction
    (leading newlines dropped) that contains none of ``` ` ```, ``#``, ``//`` (empty if none; the line
    is not stripped).

    ``backend``: ``difflib`` is ``fuzzywuzzy`` as LongBench's requirements install it (pure-Python
    ``difflib.SequenceMatcher``); ``levenshtein`` is ``fuzzywuzzy`` with ``python-Levenshtein``
    present (its speed-up, which computes a slightly different ratio).
    """
    line = ""
    for candidate in prediction.lstrip("\n").split("\n"):
        if "`" not in candidate and "#" not in candidate and "//" not in candidate:
            line = candidate
            break
    return _fuzz_ratio(line, ground_truth, backend) / 100


# --------------------------------------------------------------------------- helpers


def max_over_references(
    metric: Callable[..., float], prediction: str, references: Iterable[str], **kwargs: object
) -> float:
    """The best score over the gold answers, never below 0 (0 with no gold answer), as LongBench does."""
    best = 0.0
    for reference in references:
        best = max(best, float(metric(prediction, reference, **kwargs)))
    return best
