"""Routing between two exact heads by the number of rows in a call, and the names of such pairs.

Why: the best screen depends on how many rows a call holds (measured, embedded model, AVX-512/AMX Xeon,
2 threads: 1 row int8 16 ms, bf16 38 ms; 32 rows int8 95 ms, bf16 61 ms): the autoregressive step and small
trees want one, big trees the other.
"""

from __future__ import annotations

import torch

from goose.heads.protocol import LMHead, SampledRows
from goose.heads.screens import HEADS


class RoutedHead:
    """Two exact heads, each on the calls it is faster for: `small` below `rows` rows a call, `large` from there.

    Both return the float32 argmax and float32 rows where sampling asks, so which one answers a call changes no
    token; only the adjacency table's approximate top-k comes from the screen that answered."""

    def __init__(self, small: LMHead, large: LMHead, rows: int) -> None:
        self.small, self.large, self.rows = small, large, rows

    def pick(self, hidden: torch.Tensor) -> LMHead:
        return self.small if hidden.shape[0] < self.rows else self.large

    @property
    def vocab_size(self) -> int:
        return self.large.vocab_size

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.large.logits(hidden)

    def greedy(self, hidden: torch.Tensor, top_k: int = 0) -> tuple[torch.Tensor, torch.return_types.topk | None]:
        return self.pick(hidden).greedy(hidden, top_k)

    def top(self, hidden: torch.Tensor, top_k: int) -> torch.return_types.topk:
        return self.pick(hidden).top(hidden, top_k)

    def top_among(self, hidden: torch.Tensor, vocabulary: torch.Tensor | None, top_k: int
                  ) -> torch.return_types.topk:
        return self.pick(hidden).top_among(hidden, vocabulary, top_k)

    def target_rows(self, hidden: torch.Tensor) -> SampledRows:
        return self.pick(hidden).target_rows(hidden)


def routed_kind(small: str, large: str, rows: int) -> str:
    """The name of a routed head: "int8+screened@8" is int8 below 8 rows a call, screened from 8."""
    return f"{small}+{large}@{rows}"


def parse_routed(kind: str) -> tuple[str, str, int] | None:
    """(small, large, rows) of a routed head's name, None for any other name."""
    pair, _, rows = kind.partition("@")
    small, _, large = pair.partition("+")
    if small in HEADS and large in HEADS and small != large and rows.isdigit() and int(rows) >= 2:
        return small, large, int(rows)
    return None
