"""Choosing the next token and accepting tree nodes: greedy or lossless sampling.

Greedy (temperature 0): a child is accepted when it equals the target's argmax
at its parent; the argmax at the last accepted node is the bonus token.

Sampling over a tree of deterministic drafts (docs/METHOD.md, "Sampling"; not in the paper):
at a node with target distribution p, try its children in order; accept child
x with probability p(x); on rejection set p(x) = 0 and renormalise, then try
the next child. When no child is accepted, sample the bonus token from what
is left. Each token then has exactly the probability ordinary sampling gives
it: P(x) = p(x) when tried first, and the residual keeps the rest in proportion.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from goose import validate


@dataclass(frozen=True)
class Sampling:
    """Warping of the target distribution. temperature 0 means greedy."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None

    def __post_init__(self) -> None:
        validate.number("temperature", self.temperature, 0.0, validate.MAX_TEMPERATURE, where=" (0 = greedy)")
        validate.whole_number("top_k", self.top_k, 0, where=" (0 = off)")
        validate.number("top_p", self.top_p, 0.0, 1.0, above_low=True)
        validate.seed(self.seed)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def to_dict(self) -> dict:
        return asdict(self)

    def warp(self, logits: torch.Tensor) -> torch.Tensor:
        """Probabilities after temperature, top-k and top-p (the same rule as `transformers`)."""
        logits = logits.float() / self.temperature
        if self.top_k > 0:
            kth = torch.topk(logits, min(self.top_k, logits.shape[-1])).values[..., -1, None]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        if self.top_p < 1.0:
            sorted_logits, order = torch.sort(logits, descending=True)
            cumulative = sorted_logits.softmax(-1).cumsum(-1)
            # drop a token when the mass before it already reaches top_p; the first always stays
            drop_sorted = (cumulative - sorted_logits.softmax(-1)) >= self.top_p
            drop = drop_sorted.scatter(-1, order, drop_sorted)
            logits = logits.masked_fill(drop, float("-inf"))
        return logits.softmax(-1)

    def generator(self) -> torch.Generator:
        generator = torch.Generator()
        generator.manual_seed(self.seed if self.seed is not None else torch.seed())
        return generator


@dataclass
class Verdict:
    """What happened at one tree node during the walk."""

    status: str  # "accepted" or "rejected"
    accept_prob: float | None
    reason: str


def choose_child(probs: torch.Tensor, children: list[tuple[int, int]], generator: torch.Generator
                 ) -> tuple[int | None, int | None, dict[int, Verdict]]:
    """Try `children` ((node, token) pairs, in order) against distribution `probs`.

    Returns (accepted node or None, bonus token or None, verdict per tried node).
    When a child is accepted the walk goes on below it and no token is sampled here.
    """
    residual = probs.clone()
    verdicts: dict[int, Verdict] = {}
    for node, token in children:
        mass = residual.sum()
        p = float(residual[token] / mass) if mass > 0 else 0.0
        if torch.rand((), generator=generator).item() < p:
            verdicts[node] = Verdict("accepted", p, f"accepted with probability {p:.3f}")
            return node, None, verdicts
        verdicts[node] = Verdict("rejected", p, f"rejected: accepted only with probability {p:.3f}"
                                 if p > 0 else "rejected: probability 0 under the target")
        residual[token] = 0.0
    token = int(torch.multinomial(residual / residual.sum(), 1, generator=generator).item())
    return None, token, verdicts


def choose_drawn(token: int, children: list[tuple[int, int]]) -> tuple[int | None, int | None, dict[int, Verdict]]:
    """The same choice from a draw `token` of the target's distribution p: the child holding it is accepted,
    else it is the bonus token. Equal in distribution to choose_child for drafts that are fixed tokens:
    child x is accepted with probability p(x), and the bonus is x with probability p(x) for every other x.
    (Used when the draw is cheaper than p itself: Gumbel-max through a screened head.)"""
    verdicts: dict[int, Verdict] = {}
    for node, child_token in children:
        if child_token == token:
            verdicts[node] = Verdict("accepted", None, "accepted: the target model drew this token")
            return node, None, verdicts
        verdicts[node] = Verdict("rejected", None, "rejected: the target model drew another token")
    return None, token, verdicts
