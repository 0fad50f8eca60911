"""Source 2, the adjacency table of Token Recycling, docs/METHOD.md.

For each token, the top-K successors the target model predicted the last time
it saw that token, with scores (softmax over the top-K logits). Every forward
pass refreshes it, so predictions the model makes anyway, at rejected tree
nodes too, are recycled as drafts. A bigram tier keyed on (previous token,
token) is consulted first: two tokens of context narrow the guess. A prior
(goose.sources.prior), where given, answers last, for tokens the run has not seen.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from goose.config import GooseConfig

Row = list[tuple[int, float]]  # (successor, score) pairs, most likely first
# The tiers a lookup reads, first to last: the (previous, token) row, the token's own, the prior's; or none.
BIGRAM, UNIGRAM, PRIOR, NO_ROW = "bigram", "unigram", "prior", "none"


def usable(pairs: Row, min_score: float) -> Row:
    """The pairs a builder may draft from: real token ids scoring at least `min_score`."""
    return [(t, s) for t, s in pairs if t >= 0 and s >= min_score]


class AdjacencyTable:
    """Two-tier top-K successor table, kept sparse: only tokens seen in a run have rows, so a run's
    table costs nothing up front whatever the vocabulary. `prior`: rows for tokens without one of the
    run's own (read, never written)."""

    def __init__(self, top_k: int = 10, min_score: float = 0.01, use_bigram: bool = True,
                 prior: Mapping[int, Row] | None = None) -> None:
        self.top_k = top_k
        self.min_score = min_score
        self.use_bigram = use_bigram
        self.unigram: dict[int, Row] = {}
        self.bigram: dict[tuple[int, int], Row] = {}
        self.prior: Mapping[int, Row] = prior or {}

    @classmethod
    def from_config(cls, config: GooseConfig, prior: Mapping[int, Row] | None = None) -> AdjacencyTable:
        """The table a run with this GooseConfig keeps (over `prior`'s rows, if any)."""
        return cls(config.top_k, config.min_score, config.use_bigram, prior)

    def refresh(self, tokens: Sequence[int], previous: Sequence[int | None],
                top_ids: torch.Tensor, top_logits: torch.Tensor) -> list[Row]:
        """Overwrite the rows of `tokens` with the top-K of one forward pass; returns the rows stored.

        `top_ids` / `top_logits` are [n, K'] (K' >= K), row i predicted after
        tokens[i], whose own predecessor is previous[i] (None at the start).
        When a token occurs twice in one pass, its last occurrence wins.
        """
        rows = self.rows(top_ids, top_logits) if len(tokens) else []
        self.store(tokens, previous, rows)
        return rows

    def rows(self, top_ids: torch.Tensor, top_logits: torch.Tensor) -> list[Row]:
        """The table's rows for one pass's top-K: (successor, softmax score over the top K) pairs."""
        ids = top_ids[:, :self.top_k].cpu().tolist()
        scores = torch.softmax(top_logits[:, :self.top_k].float(), dim=-1).cpu().tolist()
        return [list(zip(i, s)) for i, s in zip(ids, scores)]

    def store(self, tokens: Sequence[int], previous: Sequence[int | None], rows: Sequence[Row | None]) -> None:
        """Overwrite the rows of `tokens` (in order: a later occurrence wins) with `rows`; a None row (unknown,
        in a replay) leaves the token's row as it was."""
        for token, before, pairs in zip(tokens, previous, rows):
            if pairs is None:
                continue
            self.unigram[int(token)] = pairs
            if self.use_bigram and before is not None:
                self.bigram[(int(before), int(token))] = pairs

    def last_occurrences(self, tokens: Sequence[int], previous: Sequence[int | None]) -> list[int]:
        """Positions whose rows survive a refresh of all of `tokens`, in order: the last occurrence of each
        key (the bigram (previous, token) when that tier is on, which also holds the token's last occurrence)."""
        last: dict = {}
        for i, token in enumerate(tokens):
            last[(previous[i], token) if self.use_bigram else token] = i
        return sorted(last.values())

    def prompt_rows(self, prompt: Sequence[int]) -> list[int]:
        """Positions of a prompt whose rows a prefill keeps (and pays the head's top-k for): the last occurrence of
        each key over the whole prompt."""
        return self.last_occurrences(prompt, [None, *prompt[:-1]])

    def successors(self, token: int, previous: int | None = None) -> list[tuple[int, float]]:
        """(successor, score) pairs, most likely first, scores >= min_score."""
        return self.lookup(token, previous)[1]

    def lookup(self, token: int, previous: int | None = None) -> tuple[str, Row]:
        """The tier a lookup of `token` (after `previous`) reads, BIGRAM, UNIGRAM or PRIOR (NO_ROW: none has a
        row), and its usable pairs: what `successors` returns."""
        pairs = self.bigram.get((previous, token)) if self.use_bigram and previous is not None else None
        if pairs is not None:
            return BIGRAM, usable(pairs, self.min_score)
        pairs = self.unigram.get(token)
        if pairs is not None:
            return UNIGRAM, usable(pairs, self.min_score)
        pairs = self.prior.get(token)
        return (PRIOR, usable(pairs, self.min_score)) if pairs is not None else (NO_ROW, [])

    def unigram_row(self, token: int) -> Row | None:
        """The token's row: the run's own, else the prior's; None when neither has one."""
        row = self.unigram.get(token)
        return row if row is not None else self.prior.get(token)
