"""Walking a verified tree: which drafts the target model accepts, and the bonus token.

One result type for both rules. Greedy: a child is accepted when it is the
target's argmax at its parent; the argmax where the walk stops is the bonus.
Sampling: goose.sampling's lossless rule for deterministic drafts. Each walker
also applies the LM head to the verified rows, since what it needs of them
differs (greedy: exact argmax only; sampling: exact distributions, and only at
the nodes the walk visits), and hands back the approximate top-k per row that
refreshes the adjacency table.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from goose.head import FullHead
from goose.sampling import Sampling, Verdict, choose_child
from goose.tree import DraftTree


@dataclass
class Verification:
    """The target model's verdict on one verified tree.

    accepted: accepted nodes along the path, root excluded.
    bonus:    the token the target adds after the last accepted node.
    targets:  per node, the token the target chose after it (its argmax when greedy;
              the sampled or accepted token at visited nodes when sampling, else None).
    verdicts: per tried node, accepted or rejected and why.
    top:      per row, the target's (approximate) top-k successors for the adjacency table; None when
              no table is kept.
    """

    accepted: list[int]
    bonus: int
    targets: list[int | None]
    verdicts: dict[int, Verdict]
    top: torch.return_types.topk | None

    def new_tokens(self, tree: DraftTree) -> list[int]:
        """The tokens this step commits: the accepted drafts, then the bonus."""
        return [tree.tokens[n] for n in self.accepted] + [self.bonus]


class GreedyWalker:
    """Greedy verification: exact argmax per row (the head may screen), follow the matching child."""

    greedy = True

    def __init__(self, head: FullHead) -> None:
        self.head = head

    def first_token(self, last: torch.Tensor) -> int:
        """After the prefill: the target's next token, from the last prompt row's hidden state [1, hidden]."""
        return int(self.head.greedy(last, 0)[0][0])

    def walk(self, tree: DraftTree, hidden: torch.Tensor, top_k: int) -> Verification:
        argmax, top = self.head.greedy(hidden, top_k)
        targets = argmax.tolist()
        verdicts: dict[int, Verdict] = {}
        accepted: list[int] = []
        node = 0
        while True:
            target = targets[node]
            for child in tree.child_list(node):
                verdicts[child] = (Verdict("accepted", None, "") if tree.tokens[child] == target else
                                   Verdict("rejected", None, "the target model predicted another token here"))
            child = tree.children[node].get(target)
            if child is None:
                return Verification(accepted, target, targets, verdicts, top)
            accepted.append(child)
            node = child


class SamplingWalker:
    """Lossless sampling over the tree with exact float32 distributions (goose.sampling), computed only for
    the nodes the walk visits (usually the accepted path and one more)."""

    greedy = False

    def __init__(self, head: FullHead, sampling: Sampling) -> None:
        self.head = head
        self.sampling = sampling
        self.generator = sampling.generator()

    def _probs(self, logits: torch.Tensor) -> torch.Tensor:
        """The warped distribution, on the host: the walk draws with a host generator, token by token."""
        return self.sampling.warp(logits).cpu()

    def first_token(self, last: torch.Tensor) -> int:
        row, _ = self.head.rows(last)
        return choose_child(self._probs(row(0)), [], self.generator)[1]

    def walk(self, tree: DraftTree, hidden: torch.Tensor, top_k: int) -> Verification:
        row, top = self.head.rows(hidden, top_k)
        targets: list[int | None] = [None] * len(tree)
        verdicts: dict[int, Verdict] = {}
        accepted: list[int] = []
        node = 0
        while True:
            children = [(c, tree.tokens[c]) for c in tree.child_list(node)]
            child, bonus, tried = choose_child(self._probs(row(node)), children, self.generator)
            verdicts.update(tried)
            if child is None:
                targets[node] = bonus
                return Verification(accepted, bonus, targets, verdicts, top)
            targets[node] = tree.tokens[child]
            accepted.append(child)
            node = child


def make_walker(head: FullHead, sampling: Sampling) -> GreedyWalker | SamplingWalker:
    return GreedyWalker(head) if sampling.greedy else SamplingWalker(head, sampling)
