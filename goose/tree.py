"""Draft trees and the ways Goose builds them (docs/METHOD.md, "Building the spine tree").

A tree is flattened root first; every node knows its token, parent, depth,
which source drafted it and with what score. The root is the anchor: the last
committed token, not yet in the KV cache.

Builders:
  goose      the spine tree: context chain as a deep spine, adjacency branches
             hung off the root and every spine node (anisotropic);
  balanced   a k-ary adjacency tree under the same budget (isotropic control);
  pld        the context chain alone (prompt lookup);
  recycling  the adjacency tree alone (Token Recycling);
  suffix     SuffixDecoding's own draft (goose.sources.suffix), a tree or one path, as arctic-inference gives it.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from goose.config import GooseConfig
from goose.sources import AdjacencyTable, ContextMatch

ROOT = "root"
SPINE = "spine"    # drafted by the context matcher
BRANCH = "branch"  # drafted by the adjacency table
SUFFIX = "suffix"  # drafted by SuffixDecoding's suffix trees (Snowflake's arctic-inference)


@dataclass
class DraftTree:
    """A draft tree flattened so that every parent comes before its children."""

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    depths: list[int] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    children: list[dict[int, int]] = field(default_factory=list)  # per node: token -> child index

    @classmethod
    def rooted_at(cls, anchor: int) -> DraftTree:
        tree = cls()
        tree.tokens, tree.parents, tree.depths = [int(anchor)], [-1], [0]
        tree.sources, tree.scores, tree.children = [ROOT], [1.0], [{}]
        return tree

    def __len__(self) -> int:
        return len(self.tokens)

    def add(self, token: int, parent: int, source: str, score: float = 1.0) -> int | None:
        """Append a child of `parent`; None if the parent already has a child with that token."""
        token = int(token)
        if token in self.children[parent]:
            return None
        node = len(self.tokens)
        self.tokens.append(token)
        self.parents.append(parent)
        self.depths.append(self.depths[parent] + 1)
        self.sources.append(source)
        self.scores.append(float(score))
        self.children.append({})
        self.children[parent][token] = node
        return node

    def merged_with(self, other: DraftTree) -> DraftTree:
        """A copy of this tree with the nodes of `other` (same root) it lacks appended after its own, which keep
        their indices."""
        merged = DraftTree(list(self.tokens), list(self.parents), list(self.depths), list(self.sources),
                           list(self.scores), [dict(c) for c in self.children])
        index = [0]  # other's node -> merged node
        for i in range(1, len(other)):
            parent, token = index[other.parents[i]], other.tokens[i]
            node = merged.children[parent].get(token)
            index.append(node if node is not None else merged.add(token, parent, other.sources[i], other.scores[i]))
        return merged

    def child_list(self, node: int) -> list[int]:
        """Children of `node` in the order they were drafted (spine child first)."""
        return list(self.children[node].values())

    def walk(self, continuation: Sequence[int]) -> list[int]:
        """The nodes a greedy walk accepts when the target's continuation starts with `continuation` (root
        excluded): the longest path from the root that spells a prefix of it. The one walk along a
        continuation, for the tuner's scores, the replay's verdicts and every what-if."""
        node, path = 0, []
        for token in continuation:
            child = self.children[node].get(token)
            if child is None:
                break
            path.append(node := child)
        return path

    def ancestors(self, node: int) -> list[int]:
        """`node` and its ancestors, root last."""
        path = []
        while node >= 0:
            path.append(node)
            node = self.parents[node]
        return path


# --- the spine tree (Goose) ---------------------------------------------------

def harmonic_split(total: int, slots: int) -> list[int]:
    """Split `total` over `slots` with weights 1/(i+1): wide near the root, narrow deep."""
    if slots <= 0:
        return []
    weights = [1.0 / (i + 1) for i in range(slots)]
    norm = sum(weights)
    shares = [int(total * w / norm) for w in weights]
    for i in range(total - sum(shares)):  # hand out what rounding left, front first
        shares[i % slots] += 1
    return shares


def _attach(tree: DraftTree, node: int, candidates: Sequence[tuple[int, float]], allowance: int,
            skip: int | None) -> list[tuple[int, float]]:
    """Hang up to `allowance` candidates off `node`, skipping `skip` (already on the spine)."""
    added = []
    for token, score in candidates:
        if len(added) >= allowance:
            break
        if token == skip:
            continue
        child = tree.add(token, node, BRANCH, score)
        if child is not None:
            added.append((child, score))
    return added


def _previous_token(tree: DraftTree, node: int, before_root: int | None) -> int | None:
    parent = tree.parents[node]
    return tree.tokens[parent] if parent >= 0 else before_root


def _grow_branches(tree: DraftTree, frontier: deque, adjacency: AdjacencyTable, config: GooseConfig,
                   budget: int, before_root: int | None) -> None:
    """The paper's step 4 (docs/METHOD.md, `branch_order="breadth"`): extend branches breadth-first.

    A branch drafted with score s gets about remaining * s children, so
    confident branches grow and doubtful ones stop; width narrows with depth.
    """
    while frontier and len(tree) < budget:
        node, score = frontier.popleft()
        depth = tree.depths[node]
        if depth >= config.max_branch_depth:
            continue
        successors = adjacency.successors(tree.tokens[node], _previous_token(tree, node, before_root))
        remaining = budget - len(tree)
        width = max(1, min(len(successors), math.ceil(remaining * score)))
        width = min(width, max(1, config.top_k // depth), remaining)
        frontier.extend(_attach(tree, node, successors, width, skip=None))


class _BestFirst:
    """Step 3 (docs/METHOD.md), best first: branch candidates, grown in order of how likely the walk is to reach them.

    A candidate's reach is its parent's times its own score (the adjacency table's softmax over the top K),
    so the nodes added are the likeliest paths under the table's scores: a confident guess grows deep, a
    doubtful one stops, and a wide root competes with deep branches for the same nodes (measured, MT-Bench
    steps without a context match: 4-6% more tokens per second than breadth-first growth or a balanced tree
    of the best static shape). Children of a branch node at depth d: at most top_k // d; no node at depth
    max_branch_depth or deeper offers children, a seed on the spine included (the paper's order still hangs a
    deep spine node's own children). A seed's spine child is never added twice (`DraftTree.add` refuses it).
    """

    def __init__(self, tree: DraftTree, adjacency: AdjacencyTable, config: GooseConfig,
                 before_root: int | None) -> None:
        self.tree, self.adjacency, self.config, self.before_root = tree, adjacency, config, before_root
        self.candidates: list[tuple[float, int, int, int, float]] = []  # (-reach, order, parent, token, score)

    def offer(self, node: int, reach: float, width: int | None = None) -> None:
        """Make `node`'s successors candidates (its `width` best; all of its row when None)."""
        tree = self.tree
        if tree.depths[node] >= self.config.max_branch_depth:
            return
        row = self.adjacency.successors(tree.tokens[node], _previous_token(tree, node, self.before_root))
        for token, score in row[:width]:
            heapq.heappush(self.candidates, (-reach * score, len(self.candidates), node, token, score))

    def grow(self, size: int) -> None:
        """Add the likeliest candidates until the tree holds `size` nodes (or none is left)."""
        tree = self.tree
        while self.candidates and len(tree) < size:
            reach, _, parent, token, score = heapq.heappop(self.candidates)
            child = tree.add(token, parent, BRANCH, score)
            if child is not None:
                self.offer(child, -reach, max(1, self.config.top_k // tree.depths[child]))


def build_goose_tree(anchor: int, before_anchor: int | None, match: ContextMatch, adjacency: AdjacencyTable,
                     config: GooseConfig, budget: int, spine_acceptance: float) -> DraftTree:
    """The anisotropic spine tree (docs/METHOD.md) under a node budget (root included)."""
    tree = DraftTree.rooted_at(anchor)
    base = config.spine_ratio(spine_acceptance)
    ratio = base + match.confidence * (1.0 - base) if config.branches else 1.0
    spine_length = min(len(match.tokens), int(budget * ratio), budget - 1)

    spine = []
    for token in match.tokens[:spine_length]:
        spine.append(tree.add(token, spine[-1] if spine else 0, SPINE, match.confidence))
    if not config.branches:  # the spine alone: the context chain
        return tree

    branch_budget = budget - len(tree)
    spine_share = int(round(branch_budget * config.spine_branch_share)) if spine else 0
    root_share = branch_budget - spine_share
    if config.branch_order == "best":
        # rho splits the branch budget between the root's branches and the spine's; within each, best first.
        # The spine node at depth d is reached when the walk accepts d spine tokens: q^d, q the recent
        # spine acceptance.
        q = min(0.95, max(0.05, spine_acceptance))
        off_root, off_spine = (_BestFirst(tree, adjacency, config, before_anchor) for _ in range(2))
        off_root.offer(0, 1.0)
        off_root.grow(len(tree) + root_share)
        for node in spine:
            off_spine.offer(node, q ** tree.depths[node])
        off_spine.grow(budget)
        off_root.grow(budget)  # what the spine's rows could not fill
        return tree

    frontier: deque = deque()
    next_on_spine = match.tokens[0] if spine else None
    frontier.extend(_attach(tree, 0, adjacency.successors(anchor, before_anchor), root_share, next_on_spine))
    for i, allowance in enumerate(harmonic_split(spine_share, len(spine))):
        node = spine[i]
        skip = match.tokens[i + 1] if i + 1 < len(spine) else None
        successors = adjacency.successors(tree.tokens[node], _previous_token(tree, node, before_anchor))
        frontier.extend(_attach(tree, node, successors, allowance, skip))
    _grow_branches(tree, frontier, adjacency, config, budget, before_anchor)
    return tree


def build_recycling_tree(anchor: int, before_anchor: int | None, adjacency: AdjacencyTable,
                         config: GooseConfig, budget: int) -> DraftTree:
    """The adjacency tree alone: the spine tree with no context match."""
    return build_goose_tree(anchor, before_anchor, ContextMatch(), adjacency, config, budget, config.ema_start)


def build_chain_tree(anchor: int, match: ContextMatch, budget: int) -> DraftTree:
    """The context chain alone (prompt lookup decoding)."""
    tree = DraftTree.rooted_at(anchor)
    for token in match.tokens[:budget - 1]:
        tree.add(token, len(tree) - 1, SPINE, match.confidence)
    return tree


def build_suffix_tree(anchor: int, tokens: Sequence[int], parents: Sequence[int],
                      probs: Sequence[float]) -> DraftTree:
    """SuffixDecoding's draft under the anchor, node for node: its parents index its own tokens (-1: the root)
    and come before their children, and no two siblings share a token (they are paths of a suffix tree), so
    node i of the draft is node i + 1 of the tree. Each node's score is its estimated probability."""
    tree = DraftTree.rooted_at(anchor)
    for token, parent, prob in zip(tokens, parents, probs, strict=True):
        tree.add(token, parent + 1, SUFFIX, prob)
    return tree


def build_balanced_tree(anchor: int, before_anchor: int | None, adjacency: AdjacencyTable,
                        config: GooseConfig, budget: int) -> DraftTree:
    """Isotropic control: every node gets the same k children, breadth first, depth <= max_branch_depth."""
    tree = DraftTree.rooted_at(anchor)
    frontier = deque([0])
    while frontier and len(tree) < budget:
        node = frontier.popleft()
        successors = adjacency.successors(tree.tokens[node], _previous_token(tree, node, before_anchor))
        allowance = min(config.branching, budget - len(tree))
        for child, _ in _attach(tree, node, successors, allowance, skip=None):
            if tree.depths[child] < config.max_branch_depth:
                frontier.append(child)
    return tree
