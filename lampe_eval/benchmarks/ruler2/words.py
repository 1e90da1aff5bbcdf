"""RULERv2's ``words`` keys: the sorted, de-duplicated "adjective-noun" strings, as a lazy sequence.

The official generator (``nemo_skills/dataset/ruler2/prepare_niah.py``) builds every ``f"{adj}-{noun}"`` from
wonderwords' adjective and noun lists, sorts the unique strings (~6.17M) and draws keys with
``random.choice(words)``. :class:`AdjectiveNounKeys` is the same sequence without materialising it: item
``k`` is the k-th string of that sorted list, so ``rng.choice(AdjectiveNounKeys())`` draws exactly the
official key from the same random stream (``random.choice`` only reads ``len(seq)`` and ``seq[i]``).

Order. Write ``p(a) = a + "-"``. When neither of two adjectives' prefixes starts with the other, every
string of one sorts on the same side of every string of the other, so the sorted list is a run of blocks,
one per adjective, in the order of the prefixes. A prefix can start with another (``"high-"`` and
``"high-pitched-"``): then their strings interleave ("high-pitched-x" sorts among "high-" + noun) and may
even coincide. Such adjectives form one group (every prefix starting with the group's shortest one): a
group is sorted and de-duplicated explicitly (a few thousand strings), a lone adjective is its noun list.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from functools import lru_cache
from typing import overload

from ...errors import MissingDataError


def wonderwords_list(name: str) -> list[str]:
    """A wonderwords word list as the official code reads it (``_get_words_from_text_file``: every line,
    right-stripped)."""
    try:
        from wonderwords import random_word
    except ImportError as err:  # pragma: no cover - a core dependency
        raise MissingDataError("ruler2 needs the wonderwords package: pip install wonderwords") from err
    return list(random_word._get_words_from_text_file(name))


class AdjectiveNounKeys(Sequence[str]):
    """``sorted(set(f"{a}-{n}" for a in adjectives for n in nouns))``, computed item by item."""

    def __init__(self, adjectives: Sequence[str], nouns: Sequence[str]) -> None:
        self.nouns = sorted(set(nouns))
        prefixes = sorted({f"{a}-" for a in adjectives})
        # blocks in sorted order: (first index, the lone prefix or None, the group's strings or None)
        self._starts: list[int] = []
        self._blocks: list[tuple[str, list[str] | None]] = []
        total = 0
        i = 0
        while i < len(prefixes):
            root = prefixes[i]
            j = i + 1
            while j < len(prefixes) and prefixes[j].startswith(root):
                j += 1
            if j == i + 1:
                block: tuple[str, list[str] | None] = (root, None)
                size = len(self.nouns)
            else:
                strings = sorted({p + n for p in prefixes[i:j] for n in self.nouns})
                block = (root, strings)
                size = len(strings)
            self._starts.append(total)
            self._blocks.append(block)
            total += size
            i = j
        self._len = total

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...

    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._len))]
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError("key index out of range")
        b = bisect.bisect_right(self._starts, index) - 1
        prefix, strings = self._blocks[b]
        offset = index - self._starts[b]
        return strings[offset] if strings is not None else prefix + self.nouns[offset]


@lru_cache(maxsize=1)
def official_keys() -> AdjectiveNounKeys:
    """The official key list over wonderwords' ``adjectivelist.txt`` and ``nounlist.txt``."""
    return AdjectiveNounKeys(wonderwords_list("adjectivelist.txt"), wonderwords_list("nounlist.txt"))
