"""Source 2, the adjacency table of Token Recycling, DESIGN.md §1.

For each token, the top-K successors the target model predicted the last time
it saw that token, with scores (softmax over the top-K logits). Every forward
pass refreshes it, so predictions the model makes anyway, at rejected tree
nodes too, are recycled as drafts. A bigram tier keyed on (previous token,
token) is consulted first: two tokens of context narrow the guess.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


class AdjacencyTable:
    """Two-tier top-K successor table."""

    def __init__(self, vocab_size: int, top_k: int = 10, min_score: float = 0.01, use_bigram: bool = True) -> None:
        self.top_k = top_k
        self.min_score = min_score
        self.use_bigram = use_bigram
        self.successor_ids = torch.full((vocab_size, top_k), -1, dtype=torch.long)
        self.successor_scores = torch.zeros((vocab_size, top_k), dtype=torch.float32)
        self.bigram: dict[tuple[int, int], list[tuple[int, float]]] = {}

    def refresh(self, tokens: Sequence[int], previous: Sequence[int | None],
                top_ids: torch.Tensor, top_logits: torch.Tensor) -> None:
        """Overwrite the rows of `tokens` with the top-K of one forward pass.

        `top_ids` / `top_logits` are [n, K'] (K' >= K), row i predicted after
        tokens[i], whose own predecessor is previous[i] (None at the start).
        When a token occurs twice in one pass, its last occurrence wins.
        """
        if len(tokens) == 0:
            return
        ids = top_ids[:, :self.top_k].cpu()
        scores = torch.softmax(top_logits[:, :self.top_k].float(), dim=-1).cpu()
        last = {int(t): i for i, t in enumerate(tokens)}
        rows = torch.tensor(list(last.values()), dtype=torch.long)
        keys = torch.tensor(list(last.keys()), dtype=torch.long)
        self.successor_ids[keys] = ids[rows]
        self.successor_scores[keys] = scores[rows]
        if self.use_bigram:
            id_rows, score_rows = ids.tolist(), scores.tolist()
            for i, prev in enumerate(previous):
                if prev is not None:
                    self.bigram[(int(prev), int(tokens[i]))] = list(zip(id_rows[i], score_rows[i]))

    def successors(self, token: int, previous: int | None = None) -> list[tuple[int, float]]:
        """(successor, score) pairs, most likely first, scores >= min_score."""
        pairs = self.bigram.get((previous, token)) if self.use_bigram and previous is not None else None
        if pairs is None:
            pairs = zip(self.successor_ids[token].tolist(), self.successor_scores[token].tolist())
        return [(t, s) for t, s in pairs if t >= 0 and s >= self.min_score]
