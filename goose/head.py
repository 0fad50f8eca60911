"""The LM head, and a cheaper exact argmax for it (issue: cheaper verification).

With a 262k vocabulary the LM head dominates a CPU forward. Greedy
verification needs only each node's argmax, and the adjacency table only a
top-K that need not be exact. So the screened head multiplies in bfloat16
first (several times faster here), bounds how far any bf16 logit can be from
its float32 value, and recomputes in float32 only the rows that could still be
the maximum. The argmax it returns is the float32 argmax. Sampling needs exact
distributions, but only at the rows its walk visits: those get float32 logits
on demand, every other row only the screen.

Error bound for row r, with h~ = bf16(h), w~ = bf16(w_r), a = bf16(h~ . w~):
  |h.w - a| <= |h - h~| |w| + |h~| |w - w~|        (input rounding, Cauchy-Schwarz)
             + d * eps32 * |h~| |w~|              (float32 accumulation over d terms)
             + eps_bf16 * |a|                     (the product rounded to bf16)
Candidates are the rows whose upper bound reaches the best lower bound.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

BF16_EPS = 2.0 ** -8   # relative rounding of a bf16 value
FP32_EPS = 2.0 ** -24
SCREEN_WIDTH = 16  # bf16 top-k searched for candidates before a full scan
HEADS = ("screened", "full")  # the exact screened head, or the textbook float32 head
HEAD_CHOICES = ("auto", *HEADS)  # auto (the default): whichever exact head is faster on this device

RowLogits = Callable[[int], torch.Tensor]  # row index -> that row's exact float32 logits


def softcap(logits: torch.Tensor, cap: float | None) -> torch.Tensor:
    """Gemma 2's final logit soft-capping (monotonic: argmax is unchanged)."""
    return logits if cap is None else torch.tanh(logits / cap) * cap


class FullHead:
    """The model's own LM head: exact float32 logits for every row."""

    def __init__(self, lm_head: torch.nn.Module, cap: float | None) -> None:
        self.lm_head, self.cap = lm_head, cap

    @torch.inference_mode()
    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return softcap(self.lm_head(hidden), self.cap).float()

    @torch.inference_mode()
    def greedy(self, hidden: torch.Tensor, top_k: int = 0) -> tuple[torch.Tensor, torch.return_types.topk | None]:
        """(argmax per row, top-k per row or None)."""
        logits = self.logits(hidden)
        return logits.argmax(-1), (torch.topk(logits, top_k, dim=-1) if top_k else None)

    @torch.inference_mode()
    def rows(self, hidden: torch.Tensor, top_k: int = 0) -> tuple[RowLogits, torch.return_types.topk | None]:
        """(exact float32 logits of a row on demand, top-k per row or None): what sampling needs."""
        logits = self.logits(hidden)
        return logits.__getitem__, (torch.topk(logits, top_k, dim=-1) if top_k else None)


class ScreenedHead(FullHead):
    """Exact float32 argmax through a bfloat16 screen; exact float32 rows only where asked for."""

    def __init__(self, lm_head: torch.nn.Linear, cap: float | None) -> None:
        super().__init__(lm_head, cap)
        weight = lm_head.weight.detach()
        self.weight = weight
        self.weight_bf16 = weight.to(torch.bfloat16)
        self.max_norm = float(weight.norm(dim=1).max())
        self.max_error_norm = float((weight - self.weight_bf16.float()).norm(dim=1).max())
        self.max_bf16_norm = float(self.weight_bf16.float().norm(dim=1).max())
        # rows recomputed in float32, kept on the device so that counting never waits for it
        self._recomputed = torch.zeros((), dtype=torch.long, device=weight.device)

    @property
    def screened_rows(self) -> int:
        """How many vocabulary rows needed a float32 recompute so far (for the curious)."""
        return int(self._recomputed)

    def _screen(self, hidden: torch.Tensor) -> torch.Tensor:
        """bf16 logits [n, vocab] (before soft-capping), each within the slack of its float32 value."""
        return (hidden.to(torch.bfloat16) @ self.weight_bf16.T).float()

    @torch.inference_mode()
    def greedy(self, hidden: torch.Tensor, top_k: int = 0) -> tuple[torch.Tensor, torch.return_types.topk | None]:
        hidden = hidden.float()
        approx = self._screen(hidden)
        low = hidden.to(torch.bfloat16).float()
        low_norm = low.norm(dim=1)
        slack = ((hidden - low).norm(dim=1) * self.max_norm + low_norm * self.max_error_norm
                 + hidden.shape[1] * FP32_EPS * low_norm * self.max_bf16_norm
                 + BF16_EPS * approx.abs().amax(dim=1))
        # The few largest bf16 logits hold every candidate unless the screen is unusually flat.
        top = torch.topk(approx, min(max(top_k, SCREEN_WIDTH), approx.shape[1]), dim=-1)
        threshold = top.values[:, 0] - 2 * slack  # best lower bound, less one more slack for the upper bound
        candidates = top.values >= threshold[:, None]  # [n, width]: every row at once, no per-row loop
        exact = torch.einsum("nwd,nd->nw", self.weight[top.indices], hidden).masked_fill(~candidates, -torch.inf)
        argmax = top.indices.gather(1, exact.argmax(1, keepdim=True)).squeeze(1)
        self._recomputed += candidates.sum()
        flat = top.values[:, -1] >= threshold  # candidates beyond the top list: scan those rows whole
        if flat.any():  # one host synchronisation per call; a flat screen is rare
            rows = flat.nonzero().squeeze(1)
            inside = approx[rows] >= threshold[rows, None]
            full = torch.nn.functional.linear(hidden[rows], self.weight).masked_fill(~inside, -torch.inf)
            argmax[rows] = full.argmax(1)
            self._recomputed += inside.sum() - candidates[rows].sum()
        if not top_k:
            return argmax, None
        return argmax, torch.return_types.topk((softcap(top.values[:, :top_k], self.cap), top.indices[:, :top_k]))

    @torch.inference_mode()
    def rows(self, hidden: torch.Tensor, top_k: int = 0) -> tuple[RowLogits, torch.return_types.topk | None]:
        """Float32 logits only for the rows asked for (the ones the sampling walk visits); the top-k for
        the adjacency table from the bf16 screen, which need not be exact."""
        def row(i: int) -> torch.Tensor:
            return self.logits(hidden[i:i + 1])[0]

        if not top_k:
            return row, None
        top = torch.topk(self._screen(hidden), top_k, dim=-1)
        return row, torch.return_types.topk((softcap(top.values, self.cap), top.indices))


def make_head(model, kind: str = "screened") -> FullHead:
    """The screened head where it is exact and pays (float32 Linear head without bias), else the full one."""
    if kind not in HEADS:
        raise ValueError(f"unknown head {kind!r}; choose one of {', '.join(HEADS)}")
    config = model.config.get_text_config(decoder=True)
    cap = getattr(config, "final_logit_softcapping", None)
    lm_head = model.get_output_embeddings()
    plain = isinstance(lm_head, torch.nn.Linear) and lm_head.bias is None and lm_head.weight.dtype == torch.float32
    return ScreenedHead(lm_head, cap) if kind == "screened" and plain else FullHead(lm_head, cap)


def head_for(goose_model, kind: str = "screened") -> FullHead:
    """One head of each kind per model, built on first use and kept on the model: the screened head's
    bfloat16 weight copy and norms cost about a second on the embedded model, once rather than per call."""
    heads = goose_model.__dict__.setdefault("_heads", {})
    if kind not in heads:
        heads[kind] = make_head(goose_model.model, kind)
    return heads[kind]


def choose_head(goose_model, kind: str = "auto") -> str:
    """The head a run applies: `kind` itself, or for "auto" the faster of the two exact heads on this
    device, timed once per model on 16 rows. The screen pays only where bfloat16 matrix products are
    fast (AVX-512 BF16, AMX, GPUs); without them (a plain AVX2 CPU) it costs more than the float32 head."""
    if kind not in HEAD_CHOICES:
        raise ValueError(f"unknown head {kind!r}; choose one of {', '.join(HEAD_CHOICES)}")
    if kind != "auto":
        return kind
    if "_head_choice" not in goose_model.__dict__:
        goose_model.__dict__["_head_choice"] = _faster_head(goose_model)
    return goose_model.__dict__["_head_choice"]


@torch.inference_mode()
def _faster_head(goose_model, rows: int = 16, repeats: int = 3) -> str:
    weight = goose_model.model.get_output_embeddings().weight
    hidden = torch.randn(rows, weight.shape[1], generator=torch.Generator().manual_seed(0)).to(weight.device)
    seconds = {}
    for kind in HEADS:
        head = head_for(goose_model, kind)
        head.greedy(hidden, 10)  # warm-up
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            head.greedy(hidden, 10)
            if weight.device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        seconds[kind] = sorted(times)[len(times) // 2]
    return min(HEADS, key=seconds.__getitem__)
