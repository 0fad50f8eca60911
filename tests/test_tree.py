"""Tree builders: budget, order, sibling uniqueness, source tags, balance, fallbacks."""

from __future__ import annotations

import math
import random
from dataclasses import asdict

import pytest
import torch

from goose.config import GooseConfig
from goose.sources import AdjacencyTable, ContextMatch
from goose.tree import (
    BRANCH,
    ROOT,
    SPINE,
    DraftTree,
    build_balanced_tree,
    build_chain_tree,
    build_goose_tree,
    build_recycling_tree,
    harmonic_split,
)
from goose.validate import InputError

VOCAB = 50


def random_table(seed: int, vocab: int = VOCAB, top_k: int = 10, fill: float = 1.0, spread: float = 3.0
                 ) -> AdjacencyTable:
    """An adjacency table whose rows hold random successors with random logits (some rows empty)."""
    generator = torch.Generator().manual_seed(seed)
    table = AdjacencyTable(top_k)
    tokens = [t for t in range(vocab) if random.Random(seed * 7919 + t).random() < fill]
    logits = torch.randn(len(tokens), vocab, generator=generator) * spread
    top = torch.topk(logits, top_k, dim=-1)
    table.refresh(tokens, [None] * len(tokens), top.indices, top.values)
    return table


def random_match(seed: int, length: int, confidence: float) -> ContextMatch:
    rng = random.Random(seed)
    return ContextMatch([rng.randrange(VOCAB) for _ in range(length)], confidence)


def check_structure(tree: DraftTree, budget: int) -> None:
    assert 1 <= len(tree) <= budget
    assert tree.parents[0] == -1 and tree.sources[0] == ROOT and tree.depths[0] == 0
    for node in range(1, len(tree)):
        parent = tree.parents[node]
        assert 0 <= parent < node, "parents come before their children"
        assert tree.depths[node] == tree.depths[parent] + 1
        assert tree.sources[node] in (SPINE, BRANCH)
    for node in range(len(tree)):
        siblings = [tree.tokens[c] for c in tree.child_list(node)]
        assert len(siblings) == len(set(siblings)), "no two siblings carry the same token"


def spine_nodes(tree: DraftTree) -> list[int]:
    return [n for n in range(len(tree)) if tree.sources[n] == SPINE]


CASES = [(seed, budget, length, confidence, fill)
         for seed in range(6)
         for budget in (1, 2, 5, 16, 60, 100)
         for length, confidence in ((0, 0.0), (3, 0.225), (12, 0.73), (40, 1.0))
         for fill in (1.0, 0.5)]


@pytest.mark.parametrize("order", ["best", "breadth"])
@pytest.mark.parametrize("seed,budget,length,confidence,fill", CASES)
def test_goose_tree_structure_and_sources(seed, budget, length, confidence, fill, order):
    table, match = random_table(seed, fill=fill), random_match(seed, length, confidence)
    config = GooseConfig(branch_order=order)
    tree = build_goose_tree(seed % VOCAB, None, match, table, config, budget, spine_acceptance=0.5)
    check_structure(tree, budget)
    spine = spine_nodes(tree)
    # the spine is a chain hanging from the root carrying the match, in order
    assert [tree.tokens[n] for n in spine] == match.tokens[:len(spine)]
    assert [tree.parents[n] for n in spine] == [0, *spine[:-1]][:len(spine)]
    for node in range(1, len(tree)):
        if tree.sources[node] == BRANCH:
            assert tree.depths[node] <= GooseConfig().max_branch_depth or tree.sources[tree.parents[node]] != BRANCH


@pytest.mark.parametrize("seed,budget,length,confidence,fill", CASES[::3])
def test_other_builders_structure_and_sources(seed, budget, length, confidence, fill):
    table, match, config = random_table(seed, fill=fill), random_match(seed, length, confidence), GooseConfig()
    chain = build_chain_tree(1, match, budget)
    check_structure(chain, budget)
    assert set(chain.sources[1:]) <= {SPINE} and chain.tokens[1:] == match.tokens[:budget - 1]
    for tree in (build_recycling_tree(1, None, table, config, budget), build_balanced_tree(1, None, table, config,
                                                                                          budget)):
        check_structure(tree, budget)
        assert set(tree.sources[1:]) <= {BRANCH}


def test_spine_gets_the_share_its_ratio_allows():
    table, config = random_table(0), GooseConfig()
    match = random_match(1, 40, 0.3)
    tree = build_goose_tree(1, None, match, table, config, 60, spine_acceptance=0.5)  # r = 0.5 -> 0.65
    assert len(spine_nodes(tree)) == int(60 * (0.5 + 0.3 * 0.5))
    low = build_goose_tree(1, None, match, table, config, 60, spine_acceptance=0.1)  # r = 0.15
    assert len(spine_nodes(low)) == int(60 * (0.15 + 0.3 * 0.85))
    assert len(tree) == len(low) == 60, "a full adjacency table fills the budget"


@pytest.mark.parametrize("share", [0.0, 0.25, 0.8])
def test_a_fixed_spine_share_replaces_the_ema_tiers(share):
    table, match = random_table(0), random_match(1, 59, 0.3)
    fixed = GooseConfig(spine_share=share)
    for ema in (0.05, 0.9):  # the EMA no longer matters
        tree = build_goose_tree(1, None, match, table, fixed, 60, spine_acceptance=ema)
        assert len(spine_nodes(tree)) == int(60 * (share + 0.3 * (1 - share)))
    with pytest.raises(ValueError, match="spine_share"):
        GooseConfig(spine_share=1.5)


def test_full_confidence_is_one_long_chain():
    tree = build_goose_tree(1, None, random_match(2, 80, 1.0), random_table(0), GooseConfig(), 30, 0.5)
    assert len(spine_nodes(tree)) == 29 and len(tree) == 30 and set(tree.sources[1:]) == {SPINE}


def test_fallbacks():
    config, match = GooseConfig(), random_match(3, 10, 0.5)
    empty = AdjacencyTable(10)
    only_chain = build_goose_tree(1, None, match, empty, config, 60, 0.5)
    assert set(only_chain.sources[1:]) == {SPINE}, "no adjacency row: verify the chain alone"
    assert len(build_goose_tree(1, None, ContextMatch(), empty, config, 60, 0.5)) == 1, "neither: one AR step"
    table = random_table(4)
    no_match = build_goose_tree(1, 2, ContextMatch(), table, config, 40, 0.5)
    recycling = build_recycling_tree(1, 2, table, config, 40)
    assert (no_match.tokens, no_match.parents) == (recycling.tokens, recycling.parents)


def test_branches_skip_the_next_spine_token_and_root_prefers_strong_successors():
    table = random_table(5)
    match = ContextMatch([table.successors(1)[0][0], 7, 8], 0.3)  # spine starts with the root's best successor
    tree = build_goose_tree(1, None, match, table, GooseConfig(), 40, 0.5)
    root_children = [tree.tokens[c] for c in tree.child_list(0)]
    assert root_children[0] == match.tokens[0] and root_children.count(match.tokens[0]) == 1
    expected = [t for t, _ in table.successors(1) if t != match.tokens[0]]
    assert root_children[1:] == expected[:len(root_children) - 1]


def reach(tree: DraftTree, node: int) -> float:
    """The product of the branch scores on the way to `node` (spine nodes score 1)."""
    return math.prod(tree.scores[n] for n in tree.ancestors(node) if tree.sources[n] == BRANCH)


def likeliest_paths(table: AdjacencyTable, anchor: int, config: GooseConfig, count: int) -> list[float]:
    """Brute force: the reaches of the `count` likeliest nodes of the whole tree the table allows from
    `anchor` (the root's row whole, a node at depth d its top_k // d best, no node deeper than
    max_branch_depth), most likely first."""
    reaches, paths = [], [([anchor], 1.0)]
    while paths:
        path, p = paths.pop()
        depth = len(path) - 1
        if depth >= config.max_branch_depth:
            continue
        row = table.successors(path[-1], path[-2] if depth else None)
        for token, score in row[:None if depth == 0 else max(1, config.top_k // depth)]:
            reaches.append(p * score)
            paths.append(([*path, token], p * score))
    return sorted(reaches, reverse=True)[:count]


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("budget", [2, 5, 9, 24, 60])
def test_best_first_branches_are_the_likeliest_paths(seed, budget):
    """Without a match, the tree holds exactly the budget's likeliest nodes under the table's scores."""
    config = GooseConfig(max_branch_depth=4)
    table = random_table(seed, spread=1.5)
    tree = build_goose_tree(seed, None, ContextMatch(), table, config, budget, spine_acceptance=0.5)
    grown = sorted((reach(tree, n) for n in range(1, len(tree))), reverse=True)
    assert grown == pytest.approx(likeliest_paths(table, seed, config, budget - 1), rel=1e-9)
    assert len(tree) == budget


def test_best_first_splits_the_branch_budget_by_rho_and_weighs_spine_nodes_by_their_reach():
    """rho of the branch nodes hang off the spine; a spine node's branches weigh q^(depth) (q: the spine
    acceptance), so a likelier spine node's branches come first, and a confident row off the root grows deep."""
    table, match = random_table(6, spread=1.5), random_match(7, 6, 0.0)
    for rho in (0.0, 0.4, 1.0):
        config = GooseConfig(spine_share=0.25, spine_branch_share=rho)
        tree = build_goose_tree(1, None, match, table, config, 40, spine_acceptance=0.5)
        spine = spine_nodes(tree)
        off_spine = [n for n in range(len(tree)) if tree.sources[n] == BRANCH
                     and tree.sources[tree.ancestors(n)[-2]] == SPINE]
        assert len(off_spine) == round((40 - 1 - len(spine)) * rho)
    config = GooseConfig(spine_share=0.25, spine_branch_share=1.0)
    hung = {}  # q -> branch nodes hung (at any depth) off each spine node
    for q in (0.2, 0.9):
        tree = build_goose_tree(1, None, match, table, config, 40, spine_acceptance=q)
        spine = spine_nodes(tree)
        seeds = [next(a for a in tree.ancestors(n) if tree.sources[a] == SPINE)
                 for n in range(1, len(tree)) if tree.sources[n] == BRANCH]
        hung[q] = [seeds.count(node) for node in spine]
    assert hung[0.2][0] > hung[0.9][0] and sum(hung[0.2][3:]) < sum(hung[0.9][3:])


def test_the_papers_breadth_first_order_still_builds_its_tree():
    """branch_order="breadth": the root takes its whole share first, a node of score s about remaining * s
    children (the reference's step 4)."""
    table = random_table(3)
    tree = build_goose_tree(1, None, ContextMatch(), table, GooseConfig(branch_order="breadth"), 12, 0.5)
    root_row = [t for t, _ in table.successors(1)]
    assert [tree.tokens[c] for c in tree.child_list(0)] == root_row[:11]
    best = build_goose_tree(1, None, ContextMatch(), table, GooseConfig(), 12, 0.5)
    assert (best.tokens, best.parents) != (tree.tokens, tree.parents)
    with pytest.raises(ValueError, match="branch_order"):
        GooseConfig(branch_order="depth")
    stored = asdict(GooseConfig())
    assert GooseConfig.from_dict(stored).branch_order == "best"
    del stored["branch_order"]  # a trace from before the knob: its trees grew breadth-first
    assert GooseConfig.from_dict(stored).branch_order == "breadth"


@pytest.mark.parametrize("k", [2, 3, 5])
@pytest.mark.parametrize("budget", [10, 40, 100])
def test_balanced_tree_is_balanced(k, budget):
    """Breadth-first k-ary: each level full before the next, every internal node (but the last) has k children."""
    config = GooseConfig(branching=k)
    tree = build_balanced_tree(0, None, random_table(k, spread=0.1), config, budget)  # every row >= k strong
    check_structure(tree, budget)
    assert len(tree) == min(budget, sum(k ** d for d in range(config.max_branch_depth + 1)))
    internal = [n for n in range(len(tree)) if tree.child_list(n)]
    assert all(len(tree.child_list(n)) == k for n in internal[:-1])
    depth_counts = [tree.depths.count(d) for d in range(max(tree.depths) + 1)]
    assert depth_counts[:-1] == [k ** d for d in range(len(depth_counts) - 1)]


def test_harmonic_split_sums_and_narrows():
    for total in range(0, 40):
        for slots in range(1, 12):
            shares = harmonic_split(total, slots)
            assert sum(shares) == total and len(shares) == slots
            assert shares == sorted(shares, reverse=True)


def test_grown_budget_follows_confidence():
    config = GooseConfig()
    assert config.grown_budget(0.0) == 60 and config.grown_budget(1.0) == 100
    assert GooseConfig(budget=8).grown_budget(0.0) == 8 and GooseConfig(budget=8).grown_budget(1.0) == 13


def test_a_budget_is_a_node_count_or_auto_in_one_field():
    """budget holds a whole number of nodes or "auto" (the tuner's pick, grown as a fixed one is); a config stored
    before, as `budget` beside `auto_budget`, reads as the same setting."""
    tuned = GooseConfig(budget="auto")
    assert tuned.tuned and not GooseConfig(budget=8).tuned and tuned.grown_budget(1.0, 8) == 13
    with pytest.raises(ValueError, match="no fixed size"):
        tuned.grown_budget(0.0)
    with pytest.raises(InputError, match=r"^budget must be a whole number between 1 and 1024 tree nodes, or 'auto', "
                                         r"got 'Auto'$"):
        GooseConfig(budget="Auto")
    stored = tuned.to_dict()
    assert stored["budget"] == "auto" and "auto_budget" not in stored and GooseConfig.from_dict(stored) == tuned
    old = {**GooseConfig().to_dict(), "auto_budget": True}
    assert GooseConfig.from_dict(old) == tuned
    assert GooseConfig.from_dict({**old, "auto_budget": False, "budget": 16}) == GooseConfig(budget=16)


def test_a_merged_tree_keeps_its_own_nodes_and_appends_what_it_lacks():
    tree = DraftTree.rooted_at(5)
    a = tree.add(6, 0, SPINE)
    tree.add(7, a, SPINE)
    tree.add(8, 0, BRANCH)
    other = DraftTree.rooted_at(5)
    b = other.add(8, 0, BRANCH)     # shared with tree
    other.add(9, b, BRANCH)         # new, under a shared node
    c = other.add(10, 0, BRANCH)    # new
    other.add(11, c, BRANCH)        # new, under a new node
    merged = tree.merged_with(other)
    assert merged.tokens[:len(tree)] == tree.tokens and merged.parents[:len(tree)] == tree.parents
    assert merged.tokens[len(tree):] == [9, 10, 11]
    assert merged.parents[len(tree):] == [3, 0, len(tree) + 1]
    assert merged.depths == [0, 1, 2, 1, 2, 1, 2]
    assert len(tree) == 4 and tree.children[3] == {}, "the tree itself is left as it was"
