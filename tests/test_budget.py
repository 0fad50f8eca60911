"""The tuner of budget and shape (goose.budget): what it picks and what it learns (the costs it reads: test_costs)."""

from __future__ import annotations

import pytest
from tiny import tiny_llama

import goose
import goose.decode
from goose.budget import BudgetTuner, expected_acceptance, height_below, interpolate_cost
from goose.drafters import DraftState, SpineTree
from goose.sources import ContextMatch
from goose.tree import DraftTree

TARGET = list(range(1, 41))  # the target's greedy continuation in the simulated runs below


def chain(*tokens: int) -> DraftTree:
    tree = DraftTree.rooted_at(0)
    for token in tokens:
        tree.add(token, len(tree) - 1, "spine")
    return tree


def verified(tree: DraftTree) -> list[int]:
    """What verifying `tree` reveals when the target continues with TARGET: the accepted tokens and the bonus."""
    accepted = len(tree.walk(TARGET))
    return TARGET[:accepted + 1]


def test_best_is_the_argmax_of_tokens_per_pass_over_cost():
    tuner = BudgetTuner({2: 1.0, 4: 1.5, 8: 2.0})
    trees = {((), 2): chain(1), ((), 4): chain(1, 2, 3), ((), 8): chain(1, 2, 3, 4, 5, 6, 7)}
    tuner.observe(trees, TARGET[:9])
    rates = {n: (1 + e.accepted) / e.cost for (_, n), e in tuner.estimates.items()}
    assert rates == pytest.approx({2: 2 / 1.0, 4: 4 / 1.5, 8: 8 / 2.0})
    assert tuner.best() == ((), 8)
    for _ in range(30):  # the big tree stops being right: the pick follows the rates down
        tuner.observe({((), 2): chain(1), ((), 4): chain(1, 2, 3), ((), 8): chain(9, 9, 9, 9, 9, 9, 9)}, TARGET[:9])
    assert tuner.best() == ((), 4)


def test_where_no_tree_pays_the_tuner_falls_back_to_the_root_alone():
    """Budget 1 is a plain autoregressive step: with a steep cost curve and drafts that are never right the
    tuner takes it (rate 1 / cost(1)) instead of paying for rows that accept nothing; when drafts turn
    right again the counterfactual scores bring the trees back."""
    tuner = BudgetTuner({1: 1.0, 2: 1.7, 4: 1.9, 8: 2.4})
    wrong = {((), 1): chain(), ((), 2): chain(9), ((), 4): chain(9, 9, 9), ((), 8): chain(9, 9, 9, 9, 9, 9, 9)}
    for _ in range(5):
        tuner.observe(wrong, TARGET[:1])  # an autoregressive step reveals one token
    assert tuner.best() == ((), 1)
    right = {((), 1): chain(), ((), 2): chain(1), ((), 4): chain(1, 2, 3), ((), 8): chain(1, 2, 3, 4, 5, 6, 7)}
    for _ in range(10):
        tuner.observe(right, TARGET[:1])  # the root-only step reveals one token: enough to see a draft right
    assert tuner.best()[1] > 1


def test_below_the_floor_a_budget_must_beat_the_floor_by_the_margin():
    """A budget below the floor wins only by more than the margin; budgets below it are still scored, and a
    floor set on a situation holds for its tuner, made before or after, and nowhere else."""
    def no_match_where_small_wins_by(share):
        tuner = BudgetTuner({4: 1.0, 8: 1.0 + share})
        tuner.set_floor("no match", 8, 0.10)
        no_match = tuner.situation("no match")
        for _ in range(8):  # both trees accept one token: the rates are 2 / cost
            no_match.observe({((), 4): chain(1, 90, 91), ((), 8): chain(1, 90, 91, 92, 93, 94, 95)}, TARGET[:3])
        return tuner, no_match

    tuner, no_match = no_match_where_small_wins_by(0.05)
    assert no_match.estimates[(), 4].rate == pytest.approx(1.05 * no_match.estimates[(), 8].rate)
    assert no_match.best() == ((), 8)
    assert no_match.candidates() == [((), 4), ((), 8)]  # still scored
    assert (tuner.floor, tuner.margin) == (0, 0.0)
    _, no_match = no_match_where_small_wins_by(0.5)
    assert no_match.best() == ((), 4)
    early = BudgetTuner({4: 1.0, 8: 1.0})
    made_before = early.situation("no match")
    early.set_floor("no match", 8, 0.10)
    assert (made_before.floor, made_before.margin) == (8, 0.10)


def test_the_spine_tree_sets_its_floor_on_the_no_match_tuner_only():
    tuner = BudgetTuner({n: 1.0 + 0.05 * n for n in (1, 2, 3, 4, 6, 8, 12, 16)})
    SpineTree(goose.GooseConfig(), tuner)
    no_match = tuner.situation("no match")
    assert (no_match.floor, no_match.margin) == (SpineTree.no_match_floor, SpineTree.no_match_margin)
    assert (tuner.floor, tuner.margin) == (0, 0.0)  # with a match the budget is tuned freely


def test_before_any_step_the_prior_prefers_what_is_cheap_for_its_few_tokens():
    tuner = BudgetTuner({2: 1.0, 16: 1.1})
    assert tuner.best() == ((), 16)  # (1 + 0.4 * 3) / 1.1 > (1 + 0.17) / 1.0
    assert BudgetTuner({2: 1.0, 16: 4.0}).best() == ((), 2)


def test_exact_observations_give_a_running_mean_then_an_ema():
    tuner = BudgetTuner({4: 1.0}, decay=0.5)
    for tree in (chain(1, 9, 9), chain(1, 2, 3)):  # accepts 1, then 3 (both exact: the walk stops inside g)
        tuner.observe({((), 4): tree}, TARGET[:5])
    assert tuner.estimates[(), 4].accepted == pytest.approx(2.0)
    for _ in range(3):
        tuner.observe({((), 4): chain(9)}, TARGET[:5])  # 0 accepted
    assert tuner.estimates[(), 4].accepted == pytest.approx(2.0 * 0.5 ** 3)  # past the warm-up: rate = decay


def test_cost_follows_the_trees_really_built_not_their_budget():
    tuner = BudgetTuner({2: 1.0, 64: 5.0})
    tuner.observe({((), 2): chain(1), ((), 64): chain(1, 2)}, TARGET[:2])  # a 3-node tree under budget 64
    assert tuner.estimates[(), 64].cost == pytest.approx(interpolate_cost(tuner.costs, 3))
    assert tuner.estimates[(), 64].cost < 5.0 / 4


def test_a_walk_ending_inside_the_revealed_continuation_or_at_a_leaf_is_exact():
    assert expected_acceptance(chain(1, 2, 7), [1, 2, 3], 5.0) == 2.0
    assert expected_acceptance(chain(1, 2, 3), [1, 2, 3], 5.0) == 3.0  # holds all of g, but ends there


def test_a_tree_that_holds_all_the_revealed_continuation_and_goes_on_is_a_lower_bound():
    tree = chain(1, 2, 3, 4, 5)
    tree.add(8, 2, "branch")  # a second child of token 2 does not change the height below token 3
    assert height_below(tree, 3) == 2 and height_below(tree, 5) == 0
    assert expected_acceptance(tree, [1, 2, 3], 1.0) == pytest.approx(3 + 0.5 + 0.25)  # c = 3, h = 2, p = 1/2
    assert 3 < expected_acceptance(tree, [1, 2, 3], 100.0) <= 3 + 2  # never beyond the tree's depth
    assert expected_acceptance(tree, [1, 2, 3], 0.0) == 3.0  # a key that never accepts adds nothing


def simulate(tuner: BudgetTuner, build, steps: int) -> None:
    """Decode against TARGET: draft the tuner's pick, verify it, let the tuner score every candidate."""
    for _ in range(steps):
        revealed = verified(build(*tuner.best()))
        tuner.observe({key: build(*key) for key in tuner.candidates()}, revealed)


def test_bigger_budgets_scored_only_as_lower_bounds_are_not_under_scored():
    """The verified small tree reveals just [1, 2]; the big one holds it and more. Scored at its bound
    (2 tokens for twice the cost) it would never be tried; scored as censored it is, and it wins."""
    def build(shape, n):
        return chain(*TARGET[:1]) if n == 2 else chain(*TARGET[:10])

    tuner = BudgetTuner({2: 1.0, 16: 2.0})
    assert tuner.best() == ((), 2)
    naive_rate = (1 + 2) / interpolate_cost(tuner.costs, 11)
    assert naive_rate < 2.0 / 1.0  # the bias this test is about: at its bound the big tree looks worse
    simulate(tuner, build, 3)
    assert tuner.best() == ((), 16)
    simulate(tuner, build, 20)
    assert tuner.estimates[(), 16].accepted == pytest.approx(10.0, abs=0.5)  # exact once chosen


def test_the_shape_tuner_walks_the_grid_towards_what_accepts_more():
    """Deeper chains of TARGET accept more, in the bigger tree only: the tuner moves depth 1 -> 2 -> 3 and
    budget 2 -> 8, coordinate-wise."""
    def build(shape, n):
        depth, width = shape
        tree = chain(*TARGET[:min(depth, n - 1)])
        while len(tree) < n:  # the rest of the budget on wrong guesses at the root
            tree.add(100 + len(tree), 0, "branch")
        return tree

    tuner = BudgetTuner({2: 1.0, 8: 1.2}, knobs={"depth": (1, 2, 3), "width": (1, 2)}, start={"depth": 1})
    assert tuner.best() == ((1, 1), 8)
    assert sorted(tuner.candidates()) == [((1, 1), 2), ((1, 1), 8), ((1, 2), 8), ((2, 1), 8)]
    simulate(tuner, build, 20)
    (depth, _), budget = tuner.best()  # width changes nothing here: either is a best
    assert (depth, budget) == (3, 8)
    assert tuner.best(pinned={"depth": 2})[0][0] == 2  # a pinned knob is never moved
    assert all(shape[0] == 2 for shape, _ in tuner.candidates(pinned={"depth": 2}))


def test_a_new_shape_competes_only_after_enough_observations():
    tuner = BudgetTuner({8: 1.0}, knobs={"depth": (1, 2)}, start={"depth": 1}, min_count=4)
    for step in range(4):
        tuner.observe({((1,), 8): chain(9), ((2,), 8): chain(1, 2)}, TARGET[:3])
        assert tuner.best() == (((2,) if step == 3 else (1,)), 8)


def test_a_new_shape_is_compared_with_its_neighbour_on_the_same_steps():
    """A shape first scored after its neighbour has a long record starts from that record (estimate and
    count): a stretch where both do as well does not make it the best, as comparing its first steps alone
    with the neighbour's whole record would; doing better on the same steps does."""
    tuner = BudgetTuner({8: 1.0}, knobs={"depth": (1, 2)}, start={"depth": 1}, min_count=4)
    for _ in range(20):
        tuner.observe({((1,), 8): chain(9)}, TARGET[:3])  # a poor stretch: the best shape accepts nothing
    good = {((1,), 8): chain(1, 2, 9), ((2,), 8): chain(1, 2, 9)}  # then both accept 2 a step
    tuner.observe(good, TARGET[:3])
    new = tuner.estimates[(2,), 8]
    assert new.seen == 1 and new.count == 21
    for _ in range(10):
        tuner.observe(good, TARGET[:3])
    assert tuner.estimates[(2,), 8].accepted == pytest.approx(tuner.estimates[(1,), 8].accepted)
    assert tuner.best() == ((1,), 8)  # as good, not better: the pick stays
    for _ in range(4):
        tuner.observe({((1,), 8): chain(1, 2, 9), ((2,), 8): chain(1, 2, 3, 9)}, TARGET[:4])
    assert tuner.best() == ((2,), 8)


class ShapedSpineTree(SpineTree):
    """The spine tree with the shape search its tuner once ran (goose tunes its budget alone; balanced and
    recycling still search their shapes): the search itself, on the spine tree's knobs."""

    shape_grid = {"spine_share": (0.15, 0.3, None, 0.5, 0.7, 1.0), "spine_branch_share": (0.0, 0.25, 0.5, 0.75, 1.0),
                  "max_branch_depth": (1, 2, 3, 4, 6, 8), "top_k": (2, 4, 6, 10), "branches": (False, True)}


def test_the_spine_tree_tunes_its_budget_alone_per_situation():
    tuner = BudgetTuner({n: 1.0 + 0.05 * n for n in (1, 2, 3, 4, 6, 8, 12, 16)})
    drafter = SpineTree(goose.GooseConfig(), tuner)
    assert tuner.knobs == {} and drafter.pinned == {}
    assert tuner.candidates() == [((), n) for n in (6, 8, 12, 16)]  # within 2 places of the prior's pick, 16
    state = DraftState(0, None, ContextMatch(), Successors(), drafter.spine_acceptance)
    tree, _ = drafter.draft(state)
    drafter.observe(state, tree, [], [7])
    assert {shape for shape, _ in tuner.situation("no match").estimates} == {()}


class Successors:
    """An adjacency table that always proposes the same unhelpful successors."""

    def successors(self, token, previous=None):
        return [(100 + i, 0.3) for i in range(5)]


def test_the_spine_tree_tuner_changes_shape_when_the_spine_is_always_right():
    """A long, always-correct context match and useless branches: the tuner gives the spine more of the tree."""
    tuner = BudgetTuner({n: 1.0 + 0.05 * n for n in (4, 8, 16, 32)})
    drafter = ShapedSpineTree(goose.GooseConfig(), tuner)
    assert tuner.knobs and tuner.start == (None, 0.5, 6, 10, True)
    first = None
    for _ in range(40):
        state = DraftState(0, None, ContextMatch(TARGET[:20], 0.0), Successors(), drafter.spine_acceptance)
        tree, _ = drafter.draft(state)
        first = tree if first is None else first
        accepted = len(tree.walk(TARGET))
        drafter.observe(state, tree, list(range(1, accepted + 1)), TARGET[:accepted + 1])
    copying = tuner.situation("copying")  # every step after the first took its whole spine
    assert copying.steps == 39
    shape, _ = copying.best()
    assert shape != copying.start
    spine = sum(source == "spine" for source in tree.sources)
    assert spine / len(tree) > sum(source == "spine" for source in first.sources) / len(first)


def test_the_spine_tree_tuner_drops_branches_that_never_pay():
    """Useless branches and a spine that is right: the pure chain (branches=False, pld's tree) is among the
    shapes scored every step, so where the branches' rows only cost, the tuner ends on the chain."""
    tuner = BudgetTuner({n: 1.0 + 0.2 * n for n in (2, 4, 8, 16)})
    drafter = ShapedSpineTree(goose.GooseConfig(), tuner)
    for _ in range(40):
        state = DraftState(0, None, ContextMatch(TARGET[:3], 0.0), Successors(), drafter.spine_acceptance)
        tree, _ = drafter.draft(state)
        accepted = len(tree.walk(TARGET))
        drafter.observe(state, tree, list(range(1, accepted + 1)), TARGET[:accepted + 1])
    copying = tuner.situation("copying")  # every step after the first took its whole spine
    assert copying.steps == 39
    assert tuner.shape_overrides(copying.best()[0])["branches"] is False
    assert set(tree.sources[1:]) == {"spine"} and tree.tokens[1:] == TARGET[:3]


def test_generate_tunes_by_default_from_a_fresh_tuner_over_the_recorded_table(monkeypatch):
    """Every run starts its tuner afresh over the device's cost table, which the run records: nothing learnt in
    one run changes the next, so a run's trees follow from its inputs and its record."""
    table = {n: 1.0 + 0.02 * n for n in (1, 2, 4, 8, 16)}
    monkeypatch.setattr(goose.decode, "cost_table", lambda model, head="screened": table)
    model = tiny_llama(0)
    prompt = "the cat sat on the mat. the cat sat on the"
    first = goose.generate(model, prompt, "goose", 30)
    assert first.config["budget"] == "auto" and first.costs == table
    goose.generate(model, "abc abc abc", "goose", 10)
    again = goose.generate(model, prompt, "goose", 30)
    assert [s.budget for s in again.steps] == [s.budget for s in first.steps]
    assert [[n.token for n in s.nodes] for s in again.steps] == [[n.token for n in s.nodes] for s in first.steps]
    assert goose.generate(model, "abc", "goose", 5, budget=8).config["budget"] == 8


def test_a_shape_knob_set_by_the_caller_is_kept():
    tuner = BudgetTuner({n: 1.0 + 0.05 * n for n in (4, 8, 16)})
    drafter = ShapedSpineTree(goose.GooseConfig(max_branch_depth=4), tuner)
    assert drafter.pinned == {"max_branch_depth": 4}
    for _ in range(12):
        state = DraftState(0, None, ContextMatch(TARGET[:20], 0.0), Successors(), drafter.spine_acceptance)
        tree, _ = drafter.draft(state)
        accepted = len(tree.walk(TARGET))
        drafter.observe(state, tree, list(range(1, accepted + 1)), TARGET[:accepted + 1])
        assert all(shape[2] == 4 for shape, _ in tuner.candidates(drafter.pinned))
    assert tuner.best(drafter.pinned)[0][2] == 4


class CountingSpineTree(ShapedSpineTree):
    builds = 0

    def build(self, state, budget):
        CountingSpineTree.builds += 1
        return super().build(state, budget)


def test_equal_trees_are_built_once_per_step():
    """Without a context match the spine knobs change nothing, and the drafted tree is reused."""
    tuner = BudgetTuner({n: 1.0 + 0.05 * n for n in (2, 3, 4, 8)})
    drafter = CountingSpineTree(goose.GooseConfig(), tuner)
    state = DraftState(0, None, ContextMatch(), Successors(), drafter.spine_acceptance)
    tree, _ = drafter.draft(state)
    assert tuner.best() == (tuner.start, 8)
    # the budgets within 2 places of 8 (3, 4, 8); spine share, rho, depth, width and branches neighbours
    assert len(tuner.candidates()) == 3 + 2 + 2 + 2 + 1 + 1
    CountingSpineTree.builds = 0
    drafter.observe(state, tree, [], [7])
    # budgets 3, 4 (8 is the drafted tree); depths 4, 8; width 6; no branches (the root alone)
    assert CountingSpineTree.builds == 2 + 2 + 1 + 1
    # the spine share and rho neighbours build the best shape's own tree: not scored as shapes of their own
    scored = {shape for shape, _ in tuner.situation("no match").estimates}
    assert scored == {tuner.start, (None, 0.5, 4, 10, True), (None, 0.5, 8, 10, True), (None, 0.5, 6, 6, True),
                      (None, 0.5, 6, 10, False)}


def test_steps_without_a_context_match_are_tuned_apart():
    """With a match the (always right) spine pays for a big tree; without one only useless branches are
    left and the root alone pays. One shared pick would be a compromise; each situation gets its own."""
    tuner = BudgetTuner({n: 1.0 + 0.05 * n for n in (1, 4, 8, 16, 32)})
    drafter = SpineTree(goose.GooseConfig(), tuner)
    for step in range(60):
        match = ContextMatch(TARGET[:20], 0.0) if step % 2 else ContextMatch()
        state = DraftState(0, None, match, Successors(), drafter.spine_acceptance)
        tree, _ = drafter.draft(state)
        accepted = len(tree.walk(TARGET))
        drafter.observe(state, tree, list(range(1, accepted + 1)), TARGET[:accepted + 1])
    no_match = tuner.situation("no match")
    assert tuner.steps == no_match.steps == 30 and tuner.all_steps == 60
    assert tuner.best()[1] >= 8
    assert no_match.best()[1] == 1
    assert no_match.knobs == tuner.knobs


def test_match_steps_after_a_whole_spine_taken_are_tuned_apart_as_copying():
    """A step that took its whole spine sends the next match step to the "copying" tuner; a step that took part of
    it, or had no match, sends it back."""
    tuner = BudgetTuner({n: 1.0 + 0.05 * n for n in (1, 4, 8, 16, 32)})
    drafter = SpineTree(goose.GooseConfig(), tuner)
    situations = []
    for right in (20, 20, 20, 1, 20, None, 20, 20):  # the match agrees with the target for `right` tokens (None: none)
        spine = [] if right is None else TARGET[:right] + [99] * (20 - right)
        state = DraftState(0, None, ContextMatch(spine, 0.0), Successors(), drafter.spine_acceptance)
        situations.append(drafter.situation(state))
        tree, _ = drafter.draft(state)
        walk = tree.walk(TARGET)
        drafter.observe(state, tree, walk, TARGET[:len(walk) + 1])
    assert situations == ["", "copying", "copying", "copying", "", "no match", "", "copying"]
    assert tuner.situation("copying").steps == 4 and tuner.steps == 3 and tuner.all_steps == 8
