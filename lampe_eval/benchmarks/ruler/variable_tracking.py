"""RULER's variable_tracking generator (vt): chains of ``VAR X = VAR Y`` statements in a noise haystack,
after one in-context example; the meta says where the queried chain's statements ended up."""

from __future__ import annotations

import random
import re
import string
from dataclasses import dataclass

from ...errors import LampeEvalError
from .config import TaskConfig
from .fitting import fit_to_budget
from .generator_base import Built, GenEnv, Generator, needle_depths
from .haystack import NOISE_SENTENCE


def _random_name(rng: random.Random, length: int) -> str:
    while True:
        name = "".join(rng.choices(string.ascii_uppercase, k=length))
        if name != "VAR":  # the statements' keyword: renaming a "VAR" name would rewrite every statement
            return name


@dataclass
class _VTState:
    index: int
    example: str
    chains: list[list[str]]
    names: list[str]
    value: str


class VariableTrackingGenerator(Generator[_VTState]):
    unit = "sentences"

    def __init__(self, task: TaskConfig, env: GenEnv) -> None:
        super().__init__(task, env)
        if self.args.get("type_haystack", "noise") != "noise":
            raise LampeEvalError(f"{task.name}: only the noise haystack is implemented for variable tracking")
        self.num_chains = int(self.args.get("num_chains", 1))
        self.num_hops = int(self.args.get("num_hops", 4))
        self._example: tuple[str, list[str]] | None = None

    def haystack(self) -> str:
        return "noise"

    def probe_size(self) -> int:
        return 10

    def min_size(self, state: _VTState) -> int:
        return self.num_hops + 1

    def _chains(self, rng: random.Random, name_length: int, hops: int, value: str | None) -> list[list[str]]:
        total = self.num_chains * (hops + 1)
        names = [_random_name(rng, name_length) for _ in range(total)]
        while len(set(names)) < total:  # RULER appends names until there are enough distinct ones
            names.append(_random_name(rng, name_length))
        chains = []
        for c in range(self.num_chains):
            chain_names = names[c * (hops + 1) : (c + 1) * (hops + 1)]
            first = value if value is not None else str(rng.randrange(10000, 99999))
            statements = [f"VAR {chain_names[0]} = {first}"]
            statements += [f"VAR {chain_names[j + 1]} = VAR {chain_names[j]} " for j in range(hops)]
            chains.append(statements)
        return chains

    @staticmethod
    def _names(chain: list[str]) -> list[str]:
        return [s.split()[1] for s in chain]

    def _noise(self, chains: list[list[str]], size: int, rng: random.Random) -> str:
        lines = [NOISE_SENTENCE] * size
        for chain in chains:
            positions = sorted(rng.sample(range(len(lines)), len(chain)))
            for j, (position, statement) in enumerate(zip(positions, chain, strict=True)):
                lines.insert(position + j, statement)
        return "\n".join(lines).replace(". \n", ".\n")

    def example(self) -> tuple[str, list[str]]:
        """The one in-context example: 3-letter names, value 12345, raw template + answer prefix (no chat
        wrapper), fitted to ``icl_max_tokens`` (500) tokens; built once per (seed, task)."""
        if self._example is None:
            rng = self.rng("icl")
            hops = min(10, self.num_hops)
            chains = self._chains(rng, 3, hops, "12345")
            raw = self.task.template + self.task.answer_prefix

            def build(size: int) -> str:
                context = self._noise(chains, size, self.rng("icl", "positions", size))
                return raw.format(context=context, query="12345", num_v=hops + 1)

            fit = fit_to_budget(
                build,
                self.env.count_plain,
                int(self.args.get("icl_max_tokens", 500)),
                min_size=hops + 1,
                probe_size=10,
                tolerance=0,
            )
            answers = self._names(chains[0])
            self._example = (fit.built + " " + " ".join(answers) + "\n", answers)
        return self._example

    def prepare(self, index: int) -> _VTState:
        rng = self.rng(index)
        example, old_names = self.example()
        for old in old_names:  # fresh names and value for this sample's copy of the example
            example = re.sub(rf"\b{re.escape(old)}\b", _random_name(rng, len(old)), example)
        example = example.replace("12345", str(rng.randrange(10000, 99999)))
        chains = self._chains(rng, 5, self.num_hops, None)
        value = chains[0][0].split("=")[-1].strip()
        return _VTState(index, example, chains, self._names(chains[0]), value)

    def build(self, state: _VTState, size: int) -> Built:
        context = self._noise(state.chains, size, self.rng(state.index, "positions", size))
        num_v = self.num_hops + 1
        body = (
            state.example
            + "\n"
            + self.task.template.format(context=self.shown(context), query=state.value, num_v=num_v)
        )
        prefix = self.task.answer_prefix.format(num_v=num_v, query=state.value)
        queried = state.chains[0]
        placed = needle_depths(context, queried, range(len(queried)))
        meta = {"answer_prefix": prefix, "chain_depths": [depth for depth, _ in placed]}
        return Built(self.env.wrap(body) + prefix, list(state.names), meta)
