"""Walking a verified tree: which drafts the target model accepts, and the bonus token.

One result type for both rules. Greedy: a child is accepted when it is the
target's argmax at its parent; the argmax where the walk stops is the bonus.
Sampling: goose.sampling's lossless rule for deterministic drafts. Each walker
also applies the LM head to the verified rows, since what it needs of them
differs (greedy: the exact argmax; sampling: exact distributions; both only at
the nodes the walk visits), and hands back the approximate top-k per row that
refreshes the adjacency table (beside the verdict: `Walked`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from goose.heads.protocol import LMHead, SampledRows
from goose.sampling import Sampling, Verdict, choose_child, choose_drawn
from goose.sources.adjacency import Row
from goose.tree import DraftTree

Walked = tuple["Verification", "torch.return_types.topk | None"]  # the verdict, and each row's top-k for the table


@dataclass
class Verification:
    """The target model's verdict on one verified tree.

    accepted: accepted nodes along the path, root excluded.
    bonus:    the token the target adds after the last accepted node.
    targets:  per node, the token the target chose after it (its argmax when greedy;
              the sampled or accepted token at visited nodes when sampling, else None).
    verdicts: per tried node, accepted or rejected and why.
    rows:     per node, the adjacency row the target's pass gives its token (its top-k successors, scored);
              None without a table, and None for a node whose row is unknown (a replay's).
    """

    accepted: list[int]
    bonus: int
    targets: list[int | None]
    verdicts: dict[int, Verdict]
    rows: list[Row | None] | None = None

    def new_tokens(self, tree: DraftTree) -> list[int]:
        """The tokens this step commits: the accepted drafts, then the bonus."""
        return [tree.tokens[n] for n in self.accepted] + [self.bonus]


def greedy_verdicts(tree: DraftTree, node: int, target: int | None) -> dict[int, Verdict]:
    """The verdict on each child of `node` when the target's greedy choice there is `target`."""
    return {child: Verdict("accepted", None, "") if tree.tokens[child] == target else
            Verdict("rejected", None, "the target model predicted another token here")
            for child in tree.child_list(node)}


class GreedyWalker:
    """Greedy verification: follow the child that is the target's exact argmax, computed (the head may screen)
    only at the nodes the walk visits: the accepted path and the node it stops at. A rejected branch's row
    feeds the adjacency table alone, whose top-k need not be exact, so it gets the screen and no float32 work
    (measured, embedded model, 2-core AVX2 EPYC, int8 head, medians of 15 alternated calls: a 32-row call
    84 ms with every row's argmax, 66 ms walked; 16 rows 46 and 36 ms)."""

    greedy = True

    def __init__(self, head: LMHead) -> None:
        self.head = head

    def first_token(self, last: torch.Tensor) -> int:
        """After the prefill: the target's next token, from the last prompt row's hidden state [1, hidden]."""
        return int(self.head.greedy(last, 0)[0][0])

    def walk(self, tree: DraftTree, hidden: torch.Tensor, top_k: int) -> Walked:
        rows = self.head.target_rows(hidden)
        top = rows.adjacency_top(top_k) if top_k else None
        targets: list[int | None] = [None] * len(tree)  # None: a node the walk did not reach
        verdicts: dict[int, Verdict] = {}
        accepted: list[int] = []
        node = 0
        while True:
            target = targets[node] = rows.argmax(node)
            verdicts.update(greedy_verdicts(tree, node, target))
            child = tree.children[node].get(target)
            if child is None:
                return Verification(accepted, target, targets, verdicts), top
            accepted.append(child)
            node = child


class SamplingWalker:
    """Lossless sampling over the tree, exact in float32 at the nodes the walk visits (usually the accepted
    path and one more) and only there.

    What a visited node needs of its row depends on the warp: with top-k, the exact top-k (a screen finds
    it, with float32 only near the k-th) and goose.sampling's rule over it; with temperature alone, one
    Gumbel-max draw through the screen and the child holding it (goose.sampling.choose_drawn); top-p
    without top-k needs the whole row's mass, so the whole float32 row."""

    greedy = False

    def __init__(self, head: LMHead, sampling: Sampling) -> None:
        self.head = head
        self.sampling = sampling
        self.generator = sampling.generator()

    def _choose(self, rows: SampledRows, i: int, children: list[tuple[int, int]]
                ) -> tuple[int | None, int | None, dict[int, Verdict]]:
        sampling = self.sampling
        if sampling.top_k > 0:
            logits, ids = rows.top(i, sampling.top_k)
            probs = torch.zeros(rows.vocab_size).index_put_((ids.cpu(),), sampling.warp(logits).cpu())
            return choose_child(probs, children, self.generator)
        if sampling.top_p < 1.0:
            return choose_child(sampling.warp(rows.logits(i)).cpu(), children, self.generator)
        return choose_drawn(rows.draw(i, sampling.temperature, self.generator), children)

    def first_token(self, last: torch.Tensor) -> int:
        return self._choose(self.head.target_rows(last), 0, [])[1]

    def walk(self, tree: DraftTree, hidden: torch.Tensor, top_k: int) -> Walked:
        rows = self.head.target_rows(hidden)
        top = rows.adjacency_top(top_k) if top_k else None
        targets: list[int | None] = [None] * len(tree)
        verdicts: dict[int, Verdict] = {}
        accepted: list[int] = []
        node = 0
        while True:
            children = [(c, tree.tokens[c]) for c in tree.child_list(node)]
            child, bonus, tried = self._choose(rows, node, children)
            verdicts.update(tried)
            if child is None:
                targets[node] = bonus
                return Verification(accepted, bonus, targets, verdicts), top
            targets[node] = tree.tokens[child]
            accepted.append(child)
            node = child


def make_walker(head: LMHead, sampling: Sampling) -> GreedyWalker | SamplingWalker:
    return GreedyWalker(head) if sampling.greedy else SamplingWalker(head, sampling)
