"""The rows a sampled walk reads (goose.walk.SamplingWalker): one verified pass's float32 rows, each only
where the walk asks.

Sampling needs exact distributions, but only at the rows its walk visits: those get float32 logits on
demand, every other row only the screen (goose.heads.screens).
"""

from __future__ import annotations

from typing import Protocol

import torch

from goose.chunks import ChunkedRows
from goose.heads.protocol import LMHead, softcap


def gumbel_noise(size: int, generator: torch.Generator) -> torch.Tensor:
    """Standard Gumbel noise: argmax(logits / T + noise) is a draw from softmax(logits / T) (Gumbel-max)."""
    return -torch.log(-torch.log(torch.rand(size, generator=generator)))


class Screening(LMHead, Protocol):
    """What ScreenedRows reads of its head (goose.heads.screens.Screen): the screen and its bound, the pairs
    recomputed in float32, the soft-cap, and how many candidates a row may have before it is computed whole."""

    cap: float | None
    FLAT: int

    def screen(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...

    def recompute(self, hidden: torch.Tensor, vocab: torch.Tensor) -> torch.Tensor: ...


class TargetRows:
    """One verified pass's rows as sampling needs them, exact in float32, each only when the walk asks:
    a whole row, its exact top-k (ties at the k-th included), or one Gumbel-max draw from it.
    This base computes every row of the full head at once."""

    def __init__(self, head: LMHead, hidden: torch.Tensor) -> None:
        self.head, self.hidden = head, hidden.float()
        self._logits: torch.Tensor | None = None

    @property
    def vocab_size(self) -> int:
        return self.head.vocab_size

    def logits(self, i: int) -> torch.Tensor:
        """Row i's float32 logits, soft-capped as the model's."""
        return self._every_row()[i]

    def _every_row(self) -> torch.Tensor:
        if self._logits is None:
            self._logits = self.head.logits(self.hidden)
        return self._logits

    def argmax(self, i: int) -> int:
        """Row i's float32 argmax (the first among ties, as torch.argmax picks it)."""
        return int(self.logits(i).argmax())

    def top(self, i: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits, token ids) of row i's k largest logits and every token tied with the k-th."""
        logits = self.logits(i)
        ids = (logits >= torch.topk(logits, min(k, len(logits))).values[-1]).nonzero().squeeze(1)
        return logits[ids], ids

    def draw(self, i: int, temperature: float, generator: torch.Generator) -> int:
        """A token drawn from softmax(row i / temperature)."""
        noise = gumbel_noise(self.vocab_size, generator).to(self.hidden.device)
        return int((self.logits(i) / temperature + noise).argmax())

    def adjacency_top(self, k: int) -> torch.return_types.topk:
        """Every row's top-k for the adjacency table (approximate where the head screens)."""
        return torch.topk(self._every_row(), min(k, self.vocab_size), dim=-1)


class ScreenedRows(TargetRows):
    """The same through a screen: one screen of every row, float32 only for the vocabulary rows that the
    screen's bound cannot rule out (as the screens' greedy argmax does). The soft-cap is 1-Lipschitz and
    monotonic, so a bound on the raw logits bounds the capped ones too."""

    head: Screening

    def __init__(self, head: Screening, hidden: torch.Tensor) -> None:
        super().__init__(head, hidden)
        approx, self.bound = head.screen(self.hidden)
        self.approx = softcap(approx, head.cap)
        self._rows: ChunkedRows | None = None  # the screen read through its chunks, built on first use

    def logits(self, i: int) -> torch.Tensor:
        return self.head.logits(self.hidden[i:i + 1])[0]

    def _exact(self, i: int, vocab: torch.Tensor) -> torch.Tensor:
        return softcap(self.head.recompute(self.hidden[i], vocab), self.head.cap)

    def argmax(self, i: int) -> int:
        # The true maximum m >= (screened maximum) - bound, and a token reaching m has a screened logit
        # >= m - bound: every candidate is within twice the bound of the screened maximum. They are read
        # through the row's chunk maxima (goose.chunks), in vocabulary order, and float32 decides among them
        # on the raw products, as the screens' greedy() does (soft-capping is monotonic).
        rows = self._chunked()
        candidates = rows.row_at_least(i, rows.maxima[i].max() - 2 * self.bound[i])
        if len(candidates) > self.head.FLAT:
            return super().argmax(i)
        return int(candidates[self.head.recompute(self.hidden[i], candidates).argmax()])

    def _chunked(self) -> ChunkedRows:
        if self._rows is None:
            self._rows = ChunkedRows(self.approx)
        return self._rows

    def top(self, i: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        # The true k-th largest logit t >= (k-th largest screened) - bound, and a token at or above t has a
        # screened logit >= t - bound: so every candidate for the top-k (ties included) is in here.
        approx, bound = self.approx[i], self.bound[i]
        candidates = (approx >= torch.topk(approx, min(k, len(approx))).values[-1] - 2 * bound).nonzero().squeeze(1)
        if len(candidates) > self.head.FLAT:
            return super().top(i, k)
        exact = self._exact(i, candidates)
        keep = exact >= torch.topk(exact, min(k, len(exact))).values[-1]
        return exact[keep], candidates[keep]

    def draw(self, i: int, temperature: float, generator: torch.Generator) -> int:
        # Gumbel-max through the screen: noisy screened logits lie within bound / T of the noisy exact ones,
        # so only tokens within twice that of the noisy screened maximum can win; float32 decides among them.
        noise = gumbel_noise(self.vocab_size, generator).to(self.hidden.device)
        noisy = self.approx[i] / temperature + noise
        margin = 2 * self.bound[i] / temperature
        candidates = (noisy >= noisy.max() - margin).nonzero().squeeze(1)
        if len(candidates) > self.head.FLAT:
            return int((self.logits(i) / temperature + noise).argmax())
        exact = self._exact(i, candidates) / temperature + noise[candidates]
        return int(candidates[exact.argmax()])

    def adjacency_top(self, k: int) -> torch.return_types.topk:
        # read through the chunks' maxima, as greedy's top-k is (the rows are soft-capped already)
        return self._chunked().top(k)
