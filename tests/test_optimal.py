"""The optimal tree under the rate model: equal to brute force, a spine with branches at a 6x gap, its curves; the
model's fit to a run, and its calibration against the run's steps."""

from __future__ import annotations

import functools
import itertools
import math
import random

import numpy as np
import pytest

import goose
from goose import metrics
from goose.charts import expected_length_chart
from goose.optimal import (
    BUDGET_AXIS,
    CALIBRATION_TOLERANCE,
    GAP_AXIS,
    Calibration,
    RateModel,
    RateTree,
    balanced_tree,
    budget_curves,
    calibration,
    chain_tree,
    children_mass,
    fit_geometric,
    gap_curves,
    geometric_rates,
    margin,
    measured_rates,
    optimal_tree,
    rates_at_gap,
    root_mass,
)
from goose.trace import NodeRecord, RunRecord, StepRecord
from goose.tree import BRANCH, ROOT, SPINE

MAX_NODES = 7
MAX_RANKS = 3
# a quality gap of 6x (0.72 / 0.12), the paper's median
SIX_X_SPINE = [0.72] * 64
SIX_X_BRANCH = [0.12 * 0.5**j for j in range(10)]


def slot_children(path: tuple) -> list[tuple]:
    """The slots under a slot named by its path from the root ("s": a spine step, j: the rank-j successor)."""
    spine_child = [path + ("s",)] if all(step == "s" for step in path) else []
    return spine_child + [path + (j,) for j in range(1, MAX_RANKS + 1)]


def every_tree() -> list[frozenset]:
    """Every tree of at most MAX_NODES nodes: every set of slots that holds the root and each member's parent."""
    level = {frozenset({()})}
    trees = list(level)
    for _ in range(MAX_NODES - 1):
        level = {tree | {child} for tree in level for slot in tree for child in slot_children(slot)
                 if child not in tree}
        trees += level
    return trees


@pytest.fixture(scope="module")
def brute_force():
    """Every tree as slot indices (padded with a slot of reach 0), its size, and the slots."""
    trees = every_tree()
    slots = sorted({slot for tree in trees for slot in tree if slot}, key=lambda path: (len(path), str(path)))
    index = {slot: i + 1 for i, slot in enumerate(slots)}  # 0: the padding
    members = np.zeros((len(trees), MAX_NODES - 1), dtype=np.int64)
    for row, tree in enumerate(trees):
        nonroot = [index[slot] for slot in tree if slot]
        members[row, :len(nonroot)] = nonroot
    sizes = np.array([len(tree) for tree in trees])
    return members, sizes, slots


@functools.cache
def first_heads(rates: tuple[float, ...]) -> dict[int | None, float]:
    """The model's outcome at a reached node, by brute force: a coin per child in the model's order (the spine child
    where there is one, then the ranks), heads at its rate; the target takes the first child whose coin came up
    heads (None: no child). Every throw of every coin enumerated: index of the child taken -> its chance."""
    taken: dict[int | None, float] = {}
    for throws in itertools.product((True, False), repeat=len(rates)):
        chance = float(np.prod([rate if heads else 1.0 - rate for rate, heads in zip(rates, throws)]))
        first = next((i for i, heads in enumerate(throws) if heads), None)
        taken[first] = taken.get(first, 0.0) + chance
    return taken


def coin_rates(path: tuple, spine: list[float], branch: list[float]) -> tuple[float, ...]:
    """The coins at the node a slot path names: its spine child's (where the match goes on), then each rank's."""
    has_spine = all(step == "s" for step in path) and len(path) < len(spine)
    return tuple([spine[len(path)]] if has_spine else []) + tuple(branch)


def reach_of(path: tuple, spine: list[float], branch: list[float]) -> float:
    """The chance that the walk accepts the slot: at each node along the path, the target takes the next one."""
    reach = 1.0
    for depth, step in enumerate(path):
        rates = coin_rates(path[:depth], spine, branch)
        has_spine = len(rates) > len(branch)
        if step == "s" and not has_spine or step != "s" and step > len(branch):
            return 0.0
        reach *= first_heads(rates).get(0 if step == "s" else step - 1 + has_spine, 0.0)
    return reach


def assert_valid(tree: RateTree, budget: int, spine: list[float], branch: list[float]) -> None:
    """A tree of at most `budget` slots the model offers, each once, parents first, reach as the model says."""
    assert 1 <= len(tree) <= budget
    assert tree.parents[0] == -1 and tree.sources[0] == ROOT and tree.reach[0] == 1.0
    seen = set()
    for node in range(1, len(tree)):
        parent, source, rank = tree.parents[node], tree.sources[node], tree.ranks[node]
        assert 0 <= parent < node
        assert (parent, source, rank) not in seen
        seen.add((parent, source, rank))
        if source == SPINE:
            assert tree.sources[parent] in (ROOT, SPINE) and rank == 0
        else:
            assert source == BRANCH and 1 <= rank <= len(branch)
        assert tree.reach[node] == pytest.approx(reach_of(slot_path(tree, node), spine, branch), abs=1e-15)
        assert tree.reach[node] > 0.0


def slot_path(tree: RateTree, node: int) -> tuple:
    """The slot a node of a model tree fills, as a path from the root ("s" or a rank per step)."""
    return tuple("s" if tree.sources[n] == SPINE else tree.ranks[n] for n in reversed(ancestors(tree, node)[:-1]))


def random_rates(rng: random.Random) -> tuple[list[float], list[float]]:
    """Rates of random length; every other setting on a coarse grid, so that ties and zeros occur."""
    coarse = rng.random() < 0.5
    draw = (lambda: rng.randint(0, 4) / 4) if coarse else rng.random
    spine = [draw() for _ in range(rng.randint(0, MAX_NODES - 1))]
    branch = [draw() for _ in range(rng.randint(0, MAX_RANKS))]
    return spine, branch


def test_brute_force_enumerates_every_tree(brute_force):
    _, sizes, _ = brute_force
    # size 2: one of the root's 4 children; size 3: two of them (6), or one and a child of its own (the spine
    # child has 4, each branch child 3: 13)
    assert np.bincount(sizes)[1:4].tolist() == [1, 4, 19]


def test_optimal_tree_equals_brute_force_on_200_rate_settings(brute_force):
    members, sizes, slots = brute_force
    rng = random.Random(27)
    for _ in range(200):
        spine, branch = random_rates(rng)
        reach = np.array([0.0] + [reach_of(slot, spine, branch) for slot in slots])
        values = reach[members].sum(axis=1)
        for budget in range(1, MAX_NODES + 1):
            best = values[sizes <= budget].max()
            tree = optimal_tree(budget, spine, branch)
            assert tree.expected_accepted == pytest.approx(best, abs=1e-12), (spine, branch, budget)
            assert_valid(tree, budget, spine, branch)
            assert_valid(tree.balanced, budget, spine, branch)
            assert_valid(tree.chain, budget, spine, branch)


def test_six_x_gap_gives_a_spine_with_branches_never_worse_than_either_alone():
    for budget in range(1, 65):
        tree = optimal_tree(budget, SIX_X_SPINE, SIX_X_BRANCH)
        assert tree.expected_accepted >= tree.balanced.expected_accepted - 1e-12
        assert tree.expected_accepted >= tree.chain.expected_accepted - 1e-12
        if budget >= 24:
            depths = tree.depths
            spine_depth = max(d for d, s in zip(depths, tree.sources) if s == SPINE)
            branch_depth = max(d - max(depths[a] for a in ancestors(tree, n) if tree.sources[a] != BRANCH)
                               for n, (d, s) in enumerate(zip(depths, tree.sources)) if s == BRANCH)
            on_spine = sum(tree.sources[tree.parents[n]] == SPINE for n in range(1, len(tree))
                           if tree.sources[n] == BRANCH)
            assert spine_depth >= 10 and branch_depth <= 2 and on_spine >= 3  # deep and narrow; short and wide
    assert tree.expected_accepted > 1.08 * tree.chain.expected_accepted  # the branches catch what the spine misses
    assert tree.expected_accepted > 10 * tree.balanced.expected_accepted


def ancestors(tree: RateTree, node: int) -> list[int]:
    path = []
    while node >= 0:
        path.append(node)
        node = tree.parents[node]
    return path


def test_ties_go_to_the_spine_child_then_lower_ranks():
    tree = optimal_tree(3, [0.5], [1.0])  # the spine child and the top successor: 0.5 each; then the root's first
    assert tree.sources == [ROOT, SPINE, BRANCH] and tree.ranks == [0, 0, 1] and tree.parents == [-1, 0, 0]
    assert optimal_tree(3, [0.5], [1.0]) == tree
    assert optimal_tree(2, [], [0.5, 1.0]).ranks == [0, 1]  # rank 2 is as likely: the rank before it fails


def test_nodes_of_reach_zero_are_not_drafted():
    assert len(optimal_tree(10, [0.9, 0.0], [])) == 2
    assert len(chain_tree(10, [0.9, 0.0, 0.9])) == 2
    assert balanced_tree(4, [], [0.0, 0.5], 2).ranks == [0, 2, 2, 2]  # each node's rank-2 child alone: a chain


def test_the_best_balanced_tree_picks_its_width():
    tree = optimal_tree(13, [], [1 / 3, 1 / 2, 1.0])  # each rank taken a third of the time
    assert tree.balanced_k == 3 and max(tree.balanced.depths) == 2  # 1 + 3 + 9: a full ternary tree of depth 2
    assert tree.balanced.expected_accepted == pytest.approx(3 * 1 / 3 + 9 * 1 / 9)
    assert optimal_tree(5, [], []).balanced_k == 0


def test_the_balanced_tree_misses_the_spine_token_the_target_takes():
    alone, beside = balanced_tree(2, [], [0.5], 1), balanced_tree(2, [0.6], [0.5], 1)
    assert alone.reach == [1.0, 0.5] and beside.reach == pytest.approx([1.0, 0.4 * 0.5])


def test_curves_hold_each_budgets_trees():
    curves = budget_curves([1, 4, 32], SIX_X_SPINE, SIX_X_BRANCH)
    assert curves.axis == BUDGET_AXIS and curves.x == [1, 4, 32]
    tree = optimal_tree(32, SIX_X_SPINE, SIX_X_BRANCH)
    assert curves.optimal[-1] == tree.expected_accepted and curves.balanced[-1] == tree.balanced.expected_accepted
    assert curves.chain == pytest.approx([0.0, 0.72 + 0.72**2 + 0.72**3, tree.chain.expected_accepted])


def test_gap_curves_split_the_same_acceptance_at_each_gap():
    spine, branch = rates_at_gap(4.0, [0.6, 0.3], [0.2, 0.1])  # from 3x to 4x, each source keeping its shape
    assert spine[0] == pytest.approx(4.0 * branch[0]) and spine[1] / spine[0] == pytest.approx(0.5)
    assert branch[1] / branch[0] == pytest.approx(0.5)
    assert root_mass(spine, branch) == pytest.approx(root_mass([0.6], [0.2, 0.1]))  # 1 - 0.4 * 0.8 * 0.9 kept
    assert rates_at_gap(2.0, [0.6], [0.3]) == (pytest.approx([0.6]), pytest.approx([0.3]))  # its own gap: as it was
    curves = gap_curves([1.0, 2.0], 2, [0.6], [0.3])  # 1 - 0.4 * 0.7 = 0.72 at every gap
    assert curves.axis == GAP_AXIS
    even = 1 - 0.28**0.5  # gap 1: 1 - (1 - x)^2 = 0.72
    assert curves.chain == pytest.approx([even, 0.6])  # budget 2: the spine's first token alone
    assert curves.balanced == pytest.approx([(1 - even) * even, 0.4 * 0.3])  # ... or the top successor alone
    wide = gap_curves([2.0, 18.0], 32, SIX_X_SPINE, SIX_X_BRANCH)
    assert wide.chain[0] < wide.chain[1] and wide.balanced[0] > wide.balanced[1]
    assert wide.optimal[0] >= max(wide.chain[0], wide.balanced[0])
    with pytest.raises(ValueError):
        rates_at_gap(2.0, [0.6], [0.0])


@pytest.mark.parametrize("budget, spine, branch", [(0, [0.5], [0.5]), (4, [1.5], []), (4, [], [-0.1])])
def test_rejects_what_the_model_cannot_hold(budget, spine, branch):
    with pytest.raises(ValueError):
        optimal_tree(budget, spine, branch)


def test_exported_and_charted():
    assert goose.optimal_tree is optimal_tree
    for curves in (budget_curves(range(1, 9), SIX_X_SPINE, SIX_X_BRANCH),
                   gap_curves([2.0, 6.0, 18.0], 16, SIX_X_SPINE, SIX_X_BRANCH)):
        figure = expected_length_chart(curves)
        assert [list(trace.y) for trace in figure.data[:3]] == [curves.optimal, curves.balanced, curves.chain]
        assert list(figure.data[0].x) == list(curves.x)
        assert ("gap" in figure.layout.xaxis.title.text) == (curves.axis == GAP_AXIS)
        # along the gap, the optimal tree's margin over the better source alone, on the right axis
        assert [list(trace.y) for trace in figure.data[3:]] == ([margin(curves)] if curves.axis == GAP_AXIS else [])


def test_margin_is_the_optimal_trees_lead_over_the_better_source_alone():
    curves = gap_curves([2.0, 6.0, 18.0], 32, SIX_X_SPINE, SIX_X_BRANCH)
    for lead, optimal, balanced, chain in zip(margin(curves), curves.optimal, curves.balanced, curves.chain,
                                              strict=True):
        assert lead == pytest.approx(optimal / max(balanced, chain) - 1.0) and lead >= 0.0
    assert margin(budget_curves([1], SIX_X_SPINE, SIX_X_BRANCH)) == [None]  # the root alone: nothing to beat


def test_geometric_rates_decay_or_grow_and_stay_probabilities():
    assert geometric_rates(0.8, 0.5, 3) == pytest.approx([0.8, 0.4, 0.2])
    assert geometric_rates(0.8, 1.2, 3) == pytest.approx([0.8, 0.96, 1.0])


@pytest.mark.parametrize("first, ratio", [(0.72, 1.0), (0.3, 0.6), (0.6, 1.15)])
def test_the_fit_recovers_the_rates_that_made_the_counts(first, ratio):
    rates = geometric_rates(first, ratio, 8)
    counts = {k + 1: (round(10_000 * rate), 10_000) for k, rate in enumerate(rates)}
    assert fit_geometric(counts) == pytest.approx((first, ratio), abs=0.011)


def test_the_fit_keeps_the_factor_at_1_when_only_depth_1_was_tried_and_needs_a_tried_node():
    assert fit_geometric({1: (12, 100)}) == (0.12, 1.0)
    assert fit_geometric({}) is None and fit_geometric({1: (0, 0)}) is None


def test_measured_rates_fit_a_runs_steps():
    from test_metrics import tree_step

    measured = measured_rates([tree_step(8), tree_step(16)])
    assert measured.counts == {SPINE: {1: (2, 2), 2: (0, 2)}, BRANCH: {1: (2, 2)}}
    assert measured.spine == fit_geometric(measured.counts[SPINE]) and measured.spine[0] == 1.0
    assert measured.branch == fit_geometric(measured.counts[BRANCH])
    assert measured.gap == pytest.approx(measured.spine[0] / measured.branch[0])
    assert measured.mean_accepted == 2.0 and measured.mean_budget == 12.0 and measured.spine_depth == 2
    empty = measured_rates([])
    assert empty.spine is None and empty.spine_depth is None and empty.gap is None and empty.mean_accepted is None


def test_the_chart_marks_a_measured_run_on_the_same_footing_and_the_sliders_x():
    curves = budget_curves(range(1, 17), SIX_X_SPINE, SIX_X_BRANCH)
    figure = expected_length_chart(curves, measured=(12.0, 2.25), at=16)
    run = figure.data[-1]
    assert (list(run.x), list(run.y)) == ([12.0], [2.25])
    assert "2.25 accepted per step" in run.name and "τ per step 3.25" in run.name  # the bonus: one more
    assert [shape.x0 for shape in figure.layout.shapes] == [16]


def test_children_mass_is_the_chance_that_the_walk_goes_on_past_a_node():
    assert children_mass(SIX_X_SPINE, SIX_X_BRANCH) == pytest.approx(1 - 0.28 * np.prod([1 - r for r in SIX_X_BRANCH]))
    assert children_mass([], [0.5, 0.6]) == pytest.approx(1 - 0.5 * 0.4)
    assert children_mass([0.2, 0.9], []) == pytest.approx(0.9)  # the most likely spine child


def test_children_mass_never_passes_1():
    rng = random.Random(5)
    for _ in range(500):
        spine, branch = random_rates(rng)
        assert children_mass(spine, branch) <= 1.0 + 1e-12
        assert sum(first_heads(coin_rates((), spine, branch)).values()) == pytest.approx(1.0)


def test_rates_moved_to_a_gap_stay_probabilities():
    spine, branch = rates_at_gap(18.0, [0.5, 1.0], [0.05, 0.02])  # a spine that grows more reliable with depth
    assert spine[0] == pytest.approx(18.0 * branch[0]) and max(spine + branch) == 1.0
    spine, branch = rates_at_gap(24.0, [0.9], [0.5] * 10)
    assert max(spine + branch) <= 1.0 and spine[0] == pytest.approx(24.0 * branch[0])


# --- the model fitted to a run, and its calibration ------------------------------------------------------------

def synthetic_step(rng: random.Random, spine: list[float], branch: list[float], index: int = 0) -> StepRecord:
    """A random tree (a spine chain, then branches under random nodes, at most len(branch) under one parent) verified
    by a target that follows the model: at each reached node a coin per drafted child in the model's order (spine
    child, then ranks), the first heads taken."""
    nodes = [NodeRecord(0, "", ROOT, -1, 0, 1.0, status="root")]
    for depth in range(1, rng.randint(0, len(spine)) + 1):
        nodes.append(NodeRecord(depth, "", SPINE, depth - 1, depth, 1.0))
    for _ in range(rng.randint(0, 8)):
        parent = rng.randrange(len(nodes))
        if sum(n.parent == parent and n.source == BRANCH for n in nodes) < len(branch):
            nodes.append(NodeRecord(len(nodes), "", BRANCH, parent, nodes[parent].depth + 1, 0.5))
    ranks = metrics.branch_ranks(StepRecord(index, nodes, [], 0, "", [], 0.0, 0.0, len(nodes)))
    accepted, node = [], 0
    while True:
        children = sorted((c for c in range(len(nodes)) if nodes[c].parent == node), key=ranks.__getitem__)
        taken = None
        for child in children:
            nodes[child].status = "rejected"
            if taken is None and rng.random() < (spine[nodes[child].depth - 1] if nodes[child].source == SPINE
                                                 else branch[ranks[child] - 1]):
                taken = child
        if taken is None:
            return StepRecord(index, nodes, accepted, 0, "", [0] * (len(accepted) + 1), 0.0, 0.0, len(nodes))
        nodes[taken].status = "accepted"
        accepted.append(node := taken)


def synthetic_run(steps: list[StepRecord], temperature: float = 0.0) -> RunRecord:
    return RunRecord("", "goose", "synthetic", {}, {"temperature": temperature}, 0, steps=steps)


def brute_force_expectation(step: StepRecord, model: RateModel) -> float:
    """The expected accepted length of the step's tree under the model, by every throw of the coins at every node
    the walk can reach (a coin per drafted child, in the model's order; the first heads taken)."""
    ranks = metrics.branch_ranks(step)

    def expected_from(node: int) -> float:
        children = sorted((c for c, n in enumerate(step.nodes) if n.parent == node), key=ranks.__getitem__)
        rates = tuple(at(model.spine, step.nodes[c].depth) if step.nodes[c].source == SPINE else
                      at(model.branch, ranks[c]) for c in children)
        return math.fsum(chance * (1 + expected_from(children[i])) for i, chance in first_heads(rates).items()
                         if i is not None)

    return expected_from(0)


def at(rates: list[float], key: int) -> float:
    return rates[key - 1] if key <= len(rates) else 0.0


def test_a_steps_prediction_is_the_exact_expectation_of_its_tree():
    rng = random.Random(3)
    for index in range(100):
        model = RateModel([rng.random() for _ in range(rng.randint(0, 3))], [rng.random() for _ in range(3)])
        step = synthetic_step(rng, [0.5] * 4, [0.5] * 3, index)
        assert math.fsum(model.reach(step)[1:]) == pytest.approx(brute_force_expectation(step, model), abs=1e-12)


def test_the_fit_recovers_the_model_that_drew_the_run():
    spine, branch = [0.8, 0.6, 0.7], [0.5, 0.3, 0.2]
    rng = random.Random(11)
    fit = calibration(synthetic_run([synthetic_step(rng, spine, branch, i) for i in range(4000)]))
    assert fit.model.spine == pytest.approx(spine, abs=0.04) and fit.model.branch == pytest.approx(branch, abs=0.04)
    assert fit.error == pytest.approx(0.0, abs=0.03) and fit.fits  # the model that drew the run explains it
    assert fit.children_mass == children_mass(fit.model.spine, fit.model.branch) <= 1.0


def test_the_fit_is_accepted_over_tried_and_its_chances_never_add_past_1():
    from test_metrics import tree_step

    fit = calibration(synthetic_run([tree_step(), tree_step()]))
    assert fit.model == RateModel(spine=[1.0, 0.0], branch=[1.0])  # spine: 2 of 2, then 0 of 2; rank 1: 2 of 2
    assert fit.measured == [2, 2] and fit.predicted == [2.0, 2.0] and fit.error == 0.0 and fit.fits
    assert not Calibration(fit.model, [2.4], [2], {}, {}).fits  # 20% more than the step took
    assert Calibration(fit.model, [0.0], [0], {}, {}).error is None
    assert fit.children_mass == 1.0
    rng = random.Random(8)
    for _ in range(50):
        run = synthetic_run([synthetic_step(rng, [rng.random()] * 4, [rng.random()] * 3) for _ in range(5)])
        if any(step.nodes[1:] for step in run.steps):
            assert calibration(run).children_mass <= 1.0


def test_calibration_splits_its_prediction_by_depth_and_source_and_names_the_worst():
    rng = random.Random(2)
    fit = calibration(synthetic_run([synthetic_step(rng, [0.9, 0.8, 0.7], [0.4, 0.2], i) for i in range(50)]))
    assert math.fsum(p for p, _ in fit.by_depth.values()) == pytest.approx(math.fsum(fit.predicted))
    assert sum(m for _, m in fit.by_source.values()) == sum(fit.measured) == sum(m for _, m in fit.by_depth.values())
    misses = [abs(p - m) for p, m in zip(fit.predicted, fit.measured)]
    assert [misses[i] for i in fit.worst_steps(3)] == sorted(misses, reverse=True)[:3]
    depth = fit.worst_depth()
    assert abs(fit.by_depth[depth][0] - fit.by_depth[depth][1]) == max(abs(p - m) for p, m in fit.by_depth.values())


def test_calibration_refuses_a_sampled_run_and_a_run_that_tried_nothing():
    from test_metrics import tree_step

    with pytest.raises(ValueError, match="greedy run"):
        calibration(synthetic_run([tree_step()], temperature=0.7))
    root_alone = StepRecord(0, [NodeRecord(0, "", ROOT, -1, 0, 1.0, status="root")], [], 0, "", [0], 0.0, 0.0, 1)
    for steps in ([], [root_alone]):
        with pytest.raises(ValueError, match="tried a draft node"):
            calibration(synthetic_run(steps))


@pytest.mark.slow
def test_the_fitted_model_predicts_what_the_embedded_model_accepted(gemma):
    """Pooled over a code prompt and a chat prompt the model was not designed on (auto budget, 128 tokens), the
    fitted model's predictions come within 15% of what the runs accepted (docs/METHOD.md, "A run's own rates")."""
    from goose.bench.suites import format_prompt, load_suite

    prompts = [next(p for p in load_suite(suite) if p.id == pid) for suite, pid in (("humaneval", "HumanEval/5"),
                                                                                   ("mtbench", "86"))]
    fits = [calibration(goose.generate(gemma, format_prompt(gemma.tokenizer, p), "goose", 128)) for p in prompts]
    assert all(fit.children_mass <= 1.0 for fit in fits)
    predicted, measured = (sum(pooled) for pooled in zip(*(fit.pooled for fit in fits)))
    assert abs(predicted / measured - 1.0) <= CALIBRATION_TOLERANCE, (predicted, measured)
