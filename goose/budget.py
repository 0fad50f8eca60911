"""Hardware-aware tree budgets and shapes (issue: speed): the tree that wins is measured, not assumed.

Two measurements decide each step's tree:
  cost(n)             seconds of one verification pass of n tree nodes on this device
                      (measured once per model, device and thread count; cached on disk: goose.costs);
  accepted(shape, n)  draft tokens the tree of that shape and base budget gets accepted,
                      learnt while decoding.

The second needs no exploration. Greedy acceptance depends only on the target's
greedy continuation g: a tree accepts the longest prefix of g that is one of
its paths. Each verified step reveals g up to its bonus token, so the trees
other shapes and budgets *would* have built from the same state can be scored
against it: exactly, or, when a tree holds all of the known g and goes on
below it, as a lower bound (see `BudgetTuner.observe`). The next step uses the
shape and budget with the most expected tokens per second: (1 + accepted) / cost.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from typing import Any

from goose.tree import DraftTree

Shape = tuple  # one value per tuned knob, in the tuner's knob order
Key = tuple[Shape, int]  # (shape, base budget)


def interpolate_cost(costs: Mapping[int, float], size: int) -> float:
    """Cost of a `size`-node pass from the measured grid: linear between grid points, the
    smallest cost below the grid, the last segment's slope (never falling) above it."""
    sizes = sorted(costs)
    if size <= sizes[0]:
        return costs[sizes[0]]
    if size >= sizes[-1]:
        if len(sizes) == 1:
            return costs[sizes[0]] * size / sizes[0]
        low, high = sizes[-2], sizes[-1]
        return costs[high] + max(0.0, (costs[high] - costs[low]) / (high - low)) * (size - high)
    i = bisect.bisect_right(sizes, size)  # sizes[i - 1] <= size < sizes[i]
    low, high = sizes[i - 1], sizes[i]
    return costs[low] + (costs[high] - costs[low]) * (size - low) / (high - low)


def height_below(tree: DraftTree, node: int) -> int:
    """Depth of the deepest node under `node`, counted from it (0 for a leaf)."""
    inside = {node}
    deepest = tree.depths[node]
    for i in range(node + 1, len(tree)):  # parents come before their children
        if tree.parents[i] in inside:
            inside.add(i)
            deepest = max(deepest, tree.depths[i])
    return deepest - tree.depths[node]


def expected_acceptance(tree: DraftTree, greedy: Sequence[int], mean: float) -> float:
    """What `tree` is expected to accept, given that the target's continuation starts with `greedy`.

    Exact when the walk stops inside `greedy` or at a leaf. Otherwise the walk
    consumed all c known tokens and would go on: a censored observation, the
    acceptance X only known to lie in [c, c + h] (h: the height below the node
    reached). It is scored as E[X | X >= c] under a memoryless (geometric) model
    of acceptance with this key's current mean m (each further level accepted
    with probability p = m / (1 + m)), capped by the tree: c + sum_{k=1..h} p^k.
    m itself holds earlier such scores: an online EM step, deterministic.
    Scoring it as c (the bound) would under-score exactly the bigger trees that
    were not verified, and a tree that is never chosen would never correct it.
    """
    path = tree.walk(greedy)
    node, length = (path[-1] if path else 0), len(path)
    if length < len(greedy) or not tree.children[node]:
        return float(length)
    p = mean / (1.0 + mean)
    return length + p * (1.0 - p ** height_below(tree, node)) / (1.0 - p)


class _Estimate:
    """Running means of one (shape, budget): accepted tokens and verification cost of its trees.

    count: the observations the means hold, `weight` of them lent by where the means started (a prior);
    seen: the observations of this key's own trees since (a key competes once it has seen enough)."""

    __slots__ = ("accepted", "cost", "count", "seen")

    def __init__(self, accepted: float, cost: float, weight: int = 0, seen: int = 0) -> None:
        self.accepted, self.cost, self.count, self.seen = accepted, cost, weight, seen

    def update(self, accepted: float, cost: float, decay: float) -> None:
        self.count += 1
        self.seen += 1
        rate = max(decay, 1.0 / self.count)  # a running mean at first, then an EMA
        self.accepted += rate * (accepted - self.accepted)
        self.cost += rate * (cost - self.cost)

    @property
    def rate(self) -> float:
        """Expected tokens per second: the accepted drafts plus the bonus token, per pass."""
        return (1.0 + self.accepted) / self.cost


class BudgetTuner:
    """Picks each step's tree shape and budget from measured costs and counterfactual acceptance.

    knobs: the shape grid, GooseConfig field -> candidate values in order (empty: budget only),
    set by the method's drafter (`set_knobs`); start: every knob's starting value.
    Every step scores, against the revealed continuation, the trees the current best shape
    would have built at the budgets near its best (`reach` places either side on the grid) and those of
    its grid neighbours (one knob moved one place) near the current best budget: a coordinate-wise
    search that costs no verification. A key first scored starts from its neighbour's estimate and
    count, and competes once it has seen `min_count` steps of its own (the starting shape's budgets
    compete from a weak prior, or from what an earlier tuner learnt). Its cost is that of the trees it
    really builds (a tree may fall short of its budget, or grow with confidence), read off the measured
    table: fixed before the run starts, so that the same inputs draft the same trees however busy the
    machine is. `pinned` knobs (set by the caller) are never moved.
    """

    def __init__(self, costs: Mapping[int, float], knobs: Mapping[str, Sequence[Any]] | None = None,
                 start: Mapping[str, Any] | None = None, decay: float = 0.05, min_count: int = 4,
                 reach: int = 2) -> None:
        self.costs = dict(sorted(costs.items()))
        self.decay, self.min_count, self.reach = decay, min_count, reach
        self.steps = 0
        self.situations: dict[str, BudgetTuner] = {}
        self.floors: dict[str, tuple[int, float]] = {}  # situation -> (floor, margin): set_floor
        self.floor, self.margin = 0, 0.0
        self.set_knobs(knobs or {}, start or {})

    def situation(self, name: str) -> BudgetTuner:
        """The tuner of the steps in situation `name` ("": this one), created on first use with this one's
        costs and knobs and kept. The best tree differs by situation: with no context match a tree holds
        only adjacency guesses and a small one pays; with a match a deep spine does (measured, HumanEval:
        1.7 vs 5.9 tokens per step), and one shared pick is a compromise for both."""
        if not name:
            return self
        if name not in self.situations:
            sibling = BudgetTuner(self.costs, decay=self.decay, min_count=self.min_count, reach=self.reach)
            sibling.set_knobs(self.knobs, dict(zip(self.knobs, self.start)))
            sibling.floor, sibling.margin = self.floors.get(name, (0, 0.0))
            self.situations[name] = sibling
        return self.situations[name]

    def set_floor(self, situation: str, floor: int, margin: float) -> None:
        """In `situation`, a budget below `floor` is picked only when its rate beats the best at or above the floor by
        more than `margin` (a share): for what bigger trees gain that no step's score sees. Budgets below it are
        still scored."""
        self.floors[situation] = (floor, margin)
        tuner = self if not situation else self.situations.get(situation)
        if tuner is not None:
            tuner.floor, tuner.margin = floor, margin
            tuner._best.clear()

    @property
    def all_steps(self) -> int:
        """Steps observed in every situation."""
        return self.steps + sum(sibling.steps for sibling in self.situations.values())

    def set_knobs(self, knobs: Mapping[str, Sequence[Any]], start: Mapping[str, Any]) -> None:
        """Tune these shape knobs from `start` on (forgets what was learnt: call it before any step)."""
        self.knobs = {name: tuple(values) for name, values in knobs.items()}
        self.start: Shape = tuple(start.get(name, values[0]) for name, values in self.knobs.items())
        self.estimates: dict[Key, _Estimate] = {}
        self._around: Shape | None = None  # the shape the last candidates were scored around
        self._best: dict[tuple, Key] = {}  # per pinned knobs, until the next observation
        self._prior(self.start)

    def _prior(self, shape: Shape) -> None:
        """A weak prior for every budget of `shape` (a few accepted tokens for big trees) until steps are seen."""
        for n, cost in self.costs.items():
            self.estimates.setdefault((shape, n), _Estimate(0.4 * (n ** 0.5 - 1), cost))

    def _start(self, pinned: Mapping[str, Any]) -> Shape:
        shape = tuple(pinned.get(name, value) for name, value in zip(self.knobs, self.start))
        self._prior(shape)
        return shape

    def best(self, pinned: Mapping[str, Any] | None = None) -> Key:
        """The (shape, budget) with the most expected tokens per second (less a margin below the floor: set_floor),
        among the keys seen enough (and the starting shape's) that keep the pinned knobs."""
        pinned = pinned or {}
        memo = tuple(sorted(pinned.items()))
        if memo in self._best:
            return self._best[memo]
        start = self._start(pinned)
        fixed = [(i, pinned[name]) for i, name in enumerate(self.knobs) if name in pinned]
        eligible = ((key, e) for key, e in self.estimates.items()
                    if (e.seen >= self.min_count or key[0] == start) and all(key[0][i] == v for i, v in fixed))
        self._best[memo] = max(eligible, key=self._score)[0]
        return self._best[memo]

    def _score(self, item: tuple[Key, _Estimate]) -> float:
        """What `best` ranks a key by: its rate, less the margin below the floor (set_floor)."""
        (_, budget), estimate = item
        return estimate.rate if budget >= self.floor else estimate.rate / (1.0 + self.margin)

    def shape_overrides(self, shape: Shape) -> dict[str, Any]:
        """A shape as GooseConfig overrides."""
        return dict(zip(self.knobs, shape))

    def candidates(self, pinned: Mapping[str, Any] | None = None) -> list[Key]:
        """The keys to score this step: the best shape at the budgets within `reach` places of the best one on
        the grid, then its grid neighbours at the best budget on even steps and at the next bigger one on odd
        steps (a shape may only pay off in a bigger tree than the current shape's best). The pick moves one
        budget at a time, as it moves one knob at a time; scoring every budget took 1.65 ms a step, 1.8% of a
        HumanEval run, most of it building the biggest trees (1.07 ms within two places)."""
        pinned = pinned or {}
        shape, budget = self.best(pinned)
        self._around = shape
        budgets = list(self.costs)
        at = budgets.index(budget)
        keys = [(shape, n) for n in budgets[max(0, at - self.reach):at + self.reach + 1]]
        budget = budgets[min(at + self.steps % 2, len(budgets) - 1)]
        for i, (name, values) in enumerate(self.knobs.items()):
            if name in pinned or shape[i] not in values:
                continue
            j = values.index(shape[i])
            keys.extend(((*shape[:i], values[k], *shape[i + 1:]), budget) for k in (j - 1, j + 1)
                        if 0 <= k < len(values))
        return keys

    def learnt(self) -> dict[str, Any]:
        """What this tuner has learnt, JSON-ready: per situation, every key seen at least `min_count` times as
        [shape, budget, accepted, cost, count] (goose.tuning keeps it, so that a run can start from it)."""
        def seen(tuner: BudgetTuner) -> list[list]:
            return [[list(shape), budget, e.accepted, e.cost, e.count]
                    for (shape, budget), e in tuner.estimates.items() if e.seen >= tuner.min_count]
        return {"knobs": list(self.knobs),
                "situations": {"": seen(self), **{name: seen(tuner) for name, tuner in self.situations.items()}}}

    def start_from(self, learnt: Mapping[str, Any], weight: int = 8) -> None:
        """Start from what a tuner learnt before (`learnt()`, of the same knobs) instead of the weak prior: its
        keys, each counted as at most `weight` steps so that the run's own steps soon outweigh them, and in
        each situation its best shape as the starting shape around which the neighbours are scored."""
        if list(learnt["knobs"]) != list(self.knobs):
            raise ValueError(f"a tuner of knobs {learnt['knobs']} cannot start one of knobs {list(self.knobs)}")
        for name, keys in learnt["situations"].items():
            tuner = self.situation(name)
            keys = [key for key in keys if int(key[1]) in self.costs]  # budgets this tuner's table prices
            for shape, budget, accepted, cost, count in keys:
                lent = min(count, weight)
                tuner.estimates[tuple(shape), int(budget)] = _Estimate(accepted, cost, lent, lent)
            if keys:
                tuner.start = max(tuner.estimates.items(), key=lambda item: (item[1].seen >= tuner.min_count,
                                                                             item[1].rate))[0][0]
            tuner._best.clear()

    def observe(self, trees: Mapping[Key, DraftTree], greedy: Sequence[int]) -> None:
        """Score the tree each key would have built against the continuation this step revealed.

        A tree that holds all of the revealed continuation and goes on below it is a
        censored observation: `expected_acceptance` scores it by its expected acceptance
        given the lower bound, not by the bound. Over-scoring corrects itself (the chosen
        key's own tree never holds its bonus token, so it is always scored exactly);
        under-scoring a key that is then never chosen would not.

        A key seen for the first time starts from the estimate and count of the shape whose neighbour it
        is (at its budget), so that the two move alike from then on and part only by how their trees score
        on the same steps: a paired comparison. Started from its first steps alone, a new key was compared
        with its neighbour's longer record over other steps, and one lucky stretch made it the best
        (measured, HumanEval: at the end of a 128-token run the best keys had seen 5-12 steps, among 80-340
        keys, and the tuner chased their noise).
        """
        self.steps += 1
        around = self.start if self._around is None else self._around
        self._best.clear()
        new = [key for key in trees if key not in self.estimates]  # in order: ties go to the first key
        for key in new:  # from the neighbour's record before this step
            reference = self.estimates.get((around, key[1])) or _Estimate(0.0, 0.0)
            self.estimates[key] = _Estimate(reference.accepted, reference.cost, reference.count)
        for key, tree in trees.items():
            estimate = self.estimates[key]
            estimate.update(expected_acceptance(tree, greedy, estimate.accepted),
                            interpolate_cost(self.costs, len(tree)), self.decay)
