"""What an LM head offers its callers (LMHead) and what a sampling walk reads of its rows (SampledRows).

Every head kind (goose.heads.screens, goose.heads.routing) answers the same calls with the same exact
results: the float32 argmax, and float32 rows where sampling asks. They differ only in how much float32
work that takes, and in the adjacency table's top-k, which need not be exact.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch


def softcap(logits: torch.Tensor, cap: float | None) -> torch.Tensor:
    """Gemma 2's final logit soft-capping (monotonic: argmax is unchanged)."""
    return logits if cap is None else torch.tanh(logits / cap) * cap


@runtime_checkable
class SampledRows(Protocol):
    """One verified pass's rows as a walk reads them, exact in float32, each only when asked."""

    @property
    def vocab_size(self) -> int: ...

    def logits(self, i: int) -> torch.Tensor:
        """Row i's float32 logits, soft-capped as the model's."""
        ...

    def argmax(self, i: int) -> int:
        """Row i's float32 argmax (the first among ties)."""
        ...

    def top(self, i: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits, token ids) of row i's k largest logits and every token tied with the k-th."""
        ...

    def draw(self, i: int, temperature: float, generator: torch.Generator) -> int:
        """A token drawn from softmax(row i / temperature)."""
        ...

    def adjacency_top(self, k: int) -> torch.return_types.topk:
        """Every row's top-k for the adjacency table (approximate where the head screens)."""
        ...


@runtime_checkable
class LMHead(Protocol):
    """An LM head applied to the verified rows' hidden states [n, hidden]."""

    @property
    def vocab_size(self) -> int: ...

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Exact float32 logits [n, vocab], soft-capped as the model's."""
        ...

    def greedy(self, hidden: torch.Tensor, top_k: int = 0) -> tuple[torch.Tensor, torch.return_types.topk | None]:
        """(the float32 argmax per row, the top-k per row for the adjacency table or None when top_k is 0)."""
        ...

    def top(self, hidden: torch.Tensor, top_k: int) -> torch.return_types.topk:
        """The top-k per row for the adjacency table, as greedy() would give it (need not be exact)."""
        ...

    def top_among(self, hidden: torch.Tensor, vocabulary: torch.Tensor | None, top_k: int
                  ) -> torch.return_types.topk:
        """The top-k per row among the tokens `vocabulary` holds (None: all), for the adjacency table."""
        ...

    def target_rows(self, hidden: torch.Tensor) -> SampledRows:
        """One pass's rows as sampling needs them."""
        ...
