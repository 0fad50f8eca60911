"""The LM head, and a cheaper exact argmax for it (issue: cheaper verification).

With a 262k vocabulary the LM head dominates a CPU forward. Greedy
verification needs only each node's argmax, and the adjacency table only a
top-K that need not be exact. So the screened head multiplies in bfloat16
first (several times faster here), bounds how far any bf16 logit can be from
its float32 value, and recomputes in float32 only the rows that could still be
the maximum. The argmax it returns is the float32 argmax.

Error bound for row r, with h~ = bf16(h), w~ = bf16(w_r), a = bf16(h~ . w~):
  |h.w - a| <= |h - h~| |w| + |h~| |w - w~|        (input rounding, Cauchy-Schwarz)
             + d * eps32 * |h~| |w~|              (float32 accumulation over d terms)
             + eps_bf16 * |a|                     (the product rounded to bf16)
Candidates are the rows whose upper bound reaches the best lower bound.
"""

from __future__ import annotations

import torch

BF16_EPS = 2.0 ** -8   # relative rounding of a bf16 value
FP32_EPS = 2.0 ** -24
SCREEN_WIDTH = 16  # bf16 top-k searched for candidates before a full scan


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


class ScreenedHead(FullHead):
    """Exact float32 argmax through a bfloat16 screen."""

    def __init__(self, lm_head: torch.nn.Linear, cap: float | None) -> None:
        super().__init__(lm_head, cap)
        weight = lm_head.weight.detach()
        self.weight = weight
        self.weight_bf16 = weight.to(torch.bfloat16)
        self.max_norm = float(weight.norm(dim=1).max())
        self.max_error_norm = float((weight - self.weight_bf16.float()).norm(dim=1).max())
        self.max_bf16_norm = float(self.weight_bf16.float().norm(dim=1).max())
        self.screened_rows = 0  # how many rows needed a float32 recompute (for the curious)

    @torch.inference_mode()
    def greedy(self, hidden: torch.Tensor, top_k: int = 0) -> tuple[torch.Tensor, torch.return_types.topk | None]:
        hidden = hidden.float()
        low = hidden.to(torch.bfloat16)
        approx = (low @ self.weight_bf16.T).float()  # [n, vocab], each within `slack` of the truth
        low32 = low.float()
        low_norm = low32.norm(dim=1)
        slack = ((hidden - low32).norm(dim=1) * self.max_norm + low_norm * self.max_error_norm
                 + hidden.shape[1] * FP32_EPS * low_norm * self.max_bf16_norm
                 + BF16_EPS * approx.abs().amax(dim=1))
        # The few largest bf16 logits hold every candidate unless the screen is unusually flat.
        top = torch.topk(approx, min(max(top_k, SCREEN_WIDTH), approx.shape[1]), dim=-1)
        threshold = top.values[:, 0] - 2 * slack  # best lower bound, less one more slack for the upper bound
        argmax = torch.empty(hidden.shape[0], dtype=torch.long)
        for i in range(hidden.shape[0]):
            if top.values[i, -1] >= threshold[i]:  # flat screen: candidates beyond the top list
                candidates = (approx[i] >= threshold[i]).nonzero().squeeze(1)
            else:
                candidates = top.indices[i][top.values[i] >= threshold[i]]
            exact = self.weight.index_select(0, candidates) @ hidden[i]
            argmax[i] = candidates[int(exact.argmax())]
            self.screened_rows += candidates.numel()
        if not top_k:
            return argmax, None
        values, indices = top.values[:, :top_k], top.indices[:, :top_k]
        return argmax, torch.return_types.topk((softcap(values, self.cap), indices))


def make_head(model, screened: bool) -> FullHead:
    """The screened head where it is exact and pays (float32 Linear head without bias), else the full one."""
    config = model.config.get_text_config(decoder=True)
    cap = getattr(config, "final_logit_softcapping", None)
    lm_head = model.get_output_embeddings()
    plain = isinstance(lm_head, torch.nn.Linear) and lm_head.bias is None and lm_head.weight.dtype == torch.float32
    return ScreenedHead(lm_head, cap) if screened and plain else FullHead(lm_head, cap)
