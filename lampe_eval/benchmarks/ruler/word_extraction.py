"""RULER's word-extraction generators: common_words_extraction (cwe: a numbered list of words, the
``num_cw`` common ones repeated most often) and freq_words_extraction (fwe: Zipf-distributed coded words,
the three most frequent asked)."""

from __future__ import annotations

import random
import string
from dataclasses import dataclass

from ...errors import LampeEvalError
from .config import TaskConfig
from .generator_base import Built, GenEnv, Generator
from .words import common_words_vocabulary, large_english_vocabulary

# --------------------------------------------------------------------------- common words


@dataclass
class _CWEState:
    index: int
    fewshot: str
    order: list[str]  # this sample's random order of the vocabulary: the first n words are used
    large_order: list[str] | None = None


class CommonWordsGenerator(Generator[_CWEState]):
    unit = "distinct words"

    def __init__(self, task: TaskConfig, env: GenEnv) -> None:
        super().__init__(task, env)
        self.num_cw = int(self.args.get("num_cw", 10))
        self.num_fewshot = int(self.args.get("num_fewshot", 1))
        if env.length < 4096:  # RULER's short-context setting
            self.example_shape = (20, 3, 1)
            self.freqs = (6, 1)
        else:
            self.example_shape = (40, 10, 3)
            self.freqs = (int(self.args.get("freq_cw", 30)), int(self.args.get("freq_ucw", 3)))

    def haystack(self) -> str:
        return "wonderwords"

    def probe_size(self) -> int:
        return 64

    def min_size(self, state: _CWEState) -> int:
        return self.num_cw

    def _listing(
        self, rng: random.Random, words: list[str], common_repeats: int, uncommon_repeats: int
    ) -> tuple[str, list[str]]:
        common, uncommon = words[: self.num_cw], words[self.num_cw :]
        listed = common * common_repeats + uncommon * uncommon_repeats
        rng.shuffle(listed)
        return " ".join(f"{i + 1}. {w}" for i, w in enumerate(listed)), common

    def _prompt(self, context: str) -> str:
        return self.env.wrap(self.task.template.format(context=context, query="")) + self.task.answer_prefix

    def prepare(self, index: int) -> _CWEState:
        rng = self.rng(index)
        vocabulary = common_words_vocabulary()
        shots = []
        for _ in range(self.num_fewshot):
            num_words, common_repeats, uncommon_repeats = self.example_shape
            words = rng.sample(vocabulary, num_words)
            context, answer = self._listing(rng, words, common_repeats, uncommon_repeats)
            listed = " ".join(f"{i + 1}. {w}" for i, w in enumerate(answer))
            shots.append(self._prompt(context) + " " + listed)
        return _CWEState(index, "\n".join(shots), rng.sample(vocabulary, len(vocabulary)))

    def _words(self, state: _CWEState, size: int) -> list[str]:
        if size <= len(state.order):
            return state.order[:size]
        if state.large_order is None:  # more distinct words than wonderwords has
            large = large_english_vocabulary()
            state.large_order = self.rng(state.index, "large").sample(large, len(large))
        if size > len(state.large_order):
            raise LampeEvalError(
                f"cwe needs {size} distinct words; the word lists have {len(state.large_order)}"
            )
        return state.large_order[:size]

    def build(self, state: _CWEState, size: int) -> Built:
        rng = self.rng(state.index, "order", size)
        context, answer = self._listing(rng, self._words(state, size), *self.freqs)
        prompt = (state.fewshot + "\n" if state.fewshot else "") + self._prompt(self.shown(context))
        return Built(prompt, answer, {"answer_prefix": self.task.answer_prefix})


# --------------------------------------------------------------------------- frequent words


@dataclass
class _FWEState:
    index: int
    vocab: list[str]


class FrequentWordsGenerator(Generator[_FWEState]):
    unit = "words"

    def __init__(self, task: TaskConfig, env: GenEnv) -> None:
        super().__init__(task, env)
        from scipy.special import zeta

        self.alpha = float(self.args.get("alpha", 2.0))
        self.zeta = float(zeta(self.alpha))
        self.word_length = int(self.args.get("coded_wordlen", 6))
        size = int(self.args.get("vocab_size", -1))
        self.vocab_size = (env.length - task.tokens_to_generate) // 50 if size == -1 else size
        if self.vocab_size < 4:
            raise LampeEvalError(
                f"{task.name}: length {env.length} is too short (vocabulary of {self.vocab_size})"
            )

    def haystack(self) -> str:
        return "coded words"

    def probe_size(self) -> int:
        return max(64, self.sample_budget() // 6)

    def min_size(self, state: _FWEState) -> int:
        return 10

    def prepare(self, index: int) -> _FWEState:
        rng = self.rng(index)
        letters = string.ascii_lowercase
        vocab = ["".join(rng.choices(letters, k=self.word_length)) for _ in range(self.vocab_size)]
        while len(set(vocab)) < self.vocab_size:
            vocab.append("".join(rng.choices(letters, k=self.word_length)))
        vocab = sorted(set(vocab))
        rng.shuffle(vocab)
        vocab[0] = "..."  # the most frequent "word" is noise
        return _FWEState(index, vocab)

    def build(self, state: _FWEState, size: int) -> Built:
        words: list[str] = []
        for rank, word in enumerate(state.vocab, start=1):
            words.extend([word] * int(size * (rank**-self.alpha) / self.zeta))
        self.rng(state.index, "order", size).shuffle(words)
        prompt = (
            self.env.wrap(self.task.template.format(context=self.shown(" ".join(words)), query=""))
            + self.task.answer_prefix
        )
        return Built(prompt, state.vocab[1:4], {"answer_prefix": self.task.answer_prefix})
