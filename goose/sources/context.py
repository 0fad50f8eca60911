"""Source 1, the context matcher (prompt lookup), docs/METHOD.md.

The pool is the prompt plus every committed token. The last n tokens (n = 5,
4, 3, longest first) are looked up in an n-gram index of the pool, and what
followed their earliest occurrence is copied as the draft chain.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from goose.config import GooseConfig


@dataclass
class ContextMatch:
    """A chain of copied tokens, how much we trust it, in [0, 1], and the n-gram length that matched (0: none)."""

    tokens: list[int] = field(default_factory=list)
    confidence: float = 0.0
    ngram: int = 0


def match_confidence(length: int, consensus: bool, long_match: int) -> float:
    """docs/METHOD.md: 1.0 for a template (>= 2 earlier occurrences, one continuation);
    0.7-0.9 for a long match; else 0.6 * L / long_match."""
    if length == 0:
        return 0.0
    if consensus:
        return 1.0
    if length >= long_match:
        return min(0.9, 0.7 + 0.2 * (length - long_match) / 12.0)
    return 0.6 * length / long_match


class ContextMatcher:
    """An incremental n-gram index over prompt + output."""

    def __init__(self, ngram_lengths: Sequence[int] = (5, 4, 3), max_chain: int = 20,
                 long_match: int = 8, extend_above: float = 0.6, max_extended_chain: int = 100) -> None:
        self.ngram_lengths = tuple(sorted(set(ngram_lengths), reverse=True))
        self.max_chain = max_chain
        self.long_match = long_match
        self.extend_above = extend_above
        self.max_extended_chain = max_extended_chain
        self.tokens: list[int] = []
        # n -> n-gram -> start positions, earliest first. Only n-grams with a
        # token after them are indexed: the query itself has nothing to copy.
        self._index: dict[int, dict[tuple[int, ...], list[int]]] = {n: defaultdict(list) for n in self.ngram_lengths}

    @classmethod
    def from_config(cls, config: GooseConfig) -> ContextMatcher:
        """The matcher a run with this GooseConfig queries."""
        return cls(config.ngram_lengths, config.max_chain, config.long_match, config.extend_above,
                   config.max_extended_chain)

    def extend(self, tokens: Sequence[int]) -> None:
        """Add committed tokens to the pool."""
        start = len(self.tokens)
        self.tokens.extend(int(t) for t in tokens)
        for n in self.ngram_lengths:
            index = self._index[n]
            for i in range(max(0, start - n), len(self.tokens) - n):
                index[tuple(self.tokens[i:i + n])].append(i)

    def _lookup(self, suffix: Sequence[int]) -> tuple[int, list[int]]:
        """(n, positions) of the longest n-gram ending `suffix` seen before."""
        for n in self.ngram_lengths:
            if len(suffix) >= n:
                positions = self._index[n].get(tuple(suffix[-n:]))
                if positions:
                    return n, positions
        return 0, []

    def _copy(self, suffix: Sequence[int], limit: int) -> list[int]:
        n, positions = self._lookup(suffix)
        if not positions:
            return []
        start = positions[0] + n
        return self.tokens[start:start + limit]

    def _consensus(self, suffix: Sequence[int]) -> bool:
        """Every one of >= 2 earlier occurrences continues with the same token."""
        n, positions = self._lookup(suffix)
        if len(positions) < 2:
            return False
        return len({self.tokens[p + n] for p in positions}) == 1

    def match(self) -> ContextMatch:
        """The chain that continues the pool, extended while confident."""
        chain = self._copy(self.tokens, self.max_chain)
        confidence = match_confidence(len(chain), self._consensus(self.tokens), self.long_match)
        if confidence > self.extend_above:
            cap = int(self.max_extended_chain * confidence)
            while len(chain) < cap:
                more = self._copy(self.tokens[-self.ngram_lengths[0]:] + chain, min(self.max_chain, cap - len(chain)))
                if not more:
                    break
                chain.extend(more)
        return ContextMatch(chain, confidence, self._lookup(self.tokens)[0] if chain else 0)
