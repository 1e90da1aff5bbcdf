"""The five RULER generators (niah, variable_tracking, common_words_extraction, freq_words_extraction, qa).

Each generator splits a sample into what does not depend on the haystack size (``prepare``: keys,
values, queries, few-shot examples, drawn from the sample's own RNG) and a pure function of the size
(``build``: positions, distractors, word lists). :func:`lampe_eval.benchmarks.ruler.fitting.fit_to_budget`
then picks the largest size whose final prompt (chat template + answer prefix) fits the token budget.

Every random draw comes from ``random.Random`` seeded with a string naming (seed, task, sample index,
purpose[, size]), so a sample does not depend on how many samples are generated or in which order.

Where a generator places something to find, the sample's meta says where it ended up (the heat maps of
score by depth and length read it): NIAH ``needle_depths`` (the needles that answer the question, in
context order) and ``needle_chars`` (their offsets in the prompt, characters); variable tracking
``chain_depths`` (the queried chain's statements); QA ``gold_doc_depths`` (the gold documents). A depth is
the fraction of the haystack before the needle, in [0, 1]: 0 at the start of the context, 1 at its end.

The shared base is :mod:`.generator_base`; each generator has its module: :mod:`.niah`,
:mod:`.variable_tracking`, :mod:`.word_extraction` (cwe and fwe) and :mod:`.qa`. This module names them.
"""

from __future__ import annotations

from .generator_base import Generator
from .niah import NiahGenerator
from .qa import QAGenerator
from .variable_tracking import VariableTrackingGenerator
from .word_extraction import CommonWordsGenerator, FrequentWordsGenerator

GENERATOR_CLASSES: dict[str, type[Generator]] = {
    "niah": NiahGenerator,
    "variable_tracking": VariableTrackingGenerator,
    "common_words_extraction": CommonWordsGenerator,
    "freq_words_extraction": FrequentWordsGenerator,
    "qa": QAGenerator,
}
