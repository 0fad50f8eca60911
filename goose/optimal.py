"""The optimal draft tree under a rate model of acceptance, why it is a spine, and how well the model explains a
run (docs/METHOD.md, "Why a spine").

The model. At a node the walk reached, the target picks one token, so at most one child is accepted: a node's
children are exclusive outcomes. The spine child (a context-match token, drafted under the root or a spine node
while the match goes on) at depth d is accepted with probability spine[d-1] = s_d; failing it (or where the
node has none), the recycled successor of rank 1 with probability branch[0] = b_1, failing that rank 2 with
b_2, and so on, under every parent. So a reached node's child is accepted with its *chance*

    spine child:  s_d            successor of rank j:  (1 - s_d) (1 - b_1) ... (1 - b_(j-1)) b_j

(no 1 - s_d where the node has no spine outcome), and a node's children's chances add up to
1 - (1 - s_d) (1 - b_1) ... <= 1 by construction. A chance is the target's, whatever else was drafted: a
slot's chance does not depend on which of its siblings a tree holds. A node is accepted when its whole path
is, so its *reach* is the product of the chances along its path, and by linearity of expectation

    expected accepted length of a tree = sum over its non-root nodes of their reach.

Best first is exact. Every chance is at most 1, so a child's reach is at most its parent's, and a slot's reach
is fixed whatever else the tree holds. Let S be the tree built so far and n the likeliest slot on its frontier
(a slot outside S whose parent is in S). For any slot m outside S, m or an ancestor of it is on the frontier
(the highest one outside S; call it a), and reach(m) <= reach(a) <= reach(n). So each pick is the likeliest
slot left anywhere, and after B - 1 picks the tree holds B - 1 slots of the largest reach there are: no B-node
tree, closed under parents or not, sums to more. Ties change the tree, never its value; they go to the slot
offered first (older parent first, and under one parent the spine child, then ranks in order). A slot of
reach 0 adds nothing and is not drafted, so a tree may hold fewer than B nodes.

The fit. What a step shows at each node the walk reached is which of its drafted children the target took, if
any: in the model's order (spine child, then ranks), every child before the taken one failed and the taken one
succeeded; the children after it, and the children never drafted, show nothing. So the likelihood of a run is
a product of one Bernoulli draw per *tried* node (goose.metrics.acceptance_by_depth_and_rank) at its depth's or
rank's rate, and the maximum-likelihood rate of each depth and rank is its accepted / tried (fit_rates); a
geometric decay over depth or rank (fit_geometric, the Why tab's sliders) is fitted to the same likelihood.
calibration() sets the expected accepted length of each step's own tree under the fitted rates beside what
the step accepted.
"""

from __future__ import annotations

import heapq
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from goose.metrics import acceptance_by_depth_and_rank, branch_ranks, mean_accepted_length
from goose.trace import RunRecord, StepRecord
from goose.tree import BRANCH, ROOT, SPINE

BUDGET_AXIS, GAP_AXIS = "budget", "quality gap"  # what a Curves' x holds


@dataclass
class RateTree:
    """A tree of draft slots, root first, parents before children, scored under the rate model."""

    parents: list[int] = field(default_factory=lambda: [-1])
    sources: list[str] = field(default_factory=lambda: [ROOT])  # ROOT, SPINE or BRANCH (goose.tree)
    # a recycled successor's rank (1: the table's top one); 0 for the root and spine nodes
    ranks: list[int] = field(default_factory=lambda: [0])
    # the chance that the walk accepts the node: the product of the rates along its path
    reach: list[float] = field(default_factory=lambda: [1.0])

    def __len__(self) -> int:
        return len(self.parents)

    def add(self, parent: int, source: str, rank: int, reach: float) -> int:
        self.parents.append(parent)
        self.sources.append(source)
        self.ranks.append(rank)
        self.reach.append(reach)
        return len(self.parents) - 1

    @property
    def expected_accepted(self) -> float:
        """Expected accepted tokens per step, the bonus token not counted (τ of such steps is one more)."""
        return math.fsum(self.reach[1:])

    @property
    def depths(self) -> list[int]:
        depths = [0]
        for parent in self.parents[1:]:
            depths.append(depths[parent] + 1)
        return depths


@dataclass
class OptimalTree(RateTree):
    """The optimal tree, beside the best tree of each source alone at the same budget."""

    balanced: RateTree = field(default_factory=RateTree)  # the best balanced k-ary tree of recycled successors
    balanced_k: int = 0                                    # its k (0 when there are no branch rates)
    chain: RateTree = field(default_factory=RateTree)     # the spine chain alone


def _check(budget: int, spine: Sequence[float], branch: Sequence[float]) -> None:
    if budget < 1:
        raise ValueError(f"a budget counts the root: at least 1, got {budget}")
    for name, rates in (("spine", spine), ("branch", branch)):
        if any(not 0.0 <= rate <= 1.0 for rate in rates):
            raise ValueError(f"{name} rates are probabilities, in [0, 1]: {list(rates)}")


def child_chances(spine_rate: float | None, branch: Sequence[float]) -> tuple[float, list[float]]:
    """The chance that a reached node's spine child (spine_rate, its s_d; None where the node has no spine
    outcome) and its recycled successor of each rank (branch: b_1, b_2, ...) are accepted: each the chance that
    every outcome before it failed, times its own rate. They add up to at most 1 (the module's model)."""
    spine_chance = spine_rate or 0.0
    left, chances = 1.0 - spine_chance, []
    for rate in branch:
        chances.append(left * rate)
        left *= 1.0 - rate
    return spine_chance, chances


def _best_tree(budget: int, spine: Sequence[float], branch: Sequence[float]) -> RateTree:
    """Best first on reach (the module's docstring proves it optimal)."""
    tree, depths = RateTree(), [0]
    slots: list[tuple[float, int, int, str, int]] = []  # a heap of (-reach, offer order, parent, source, rank)
    offered = 0

    def offer(node: int) -> None:
        nonlocal offered
        match_goes_on = tree.sources[node] != BRANCH and depths[node] < len(spine)
        spine_chance, chances = child_chances(spine[depths[node]] if match_goes_on else None, branch)
        children = [(SPINE, 0, spine_chance)] if match_goes_on else []
        children += [(BRANCH, j + 1, chance) for j, chance in enumerate(chances)]
        for source, rank, chance in children:
            reach = tree.reach[node] * chance
            if reach > 0.0:
                heapq.heappush(slots, (-reach, offered, node, source, rank))
                offered += 1

    offer(0)
    while slots and len(depths) < budget:
        negative_reach, _, parent, source, rank = heapq.heappop(slots)
        depths.append(depths[parent] + 1)
        offer(tree.add(parent, source, rank, -negative_reach))
    return tree


def chain_tree(budget: int, spine: Sequence[float]) -> RateTree:
    """The spine chain alone (prompt lookup): as deep as the budget and the match allow."""
    tree = RateTree()
    for rate in spine[:budget - 1]:
        reach = tree.reach[-1] * rate
        if reach == 0.0:
            break
        tree.add(len(tree.parents) - 1, SPINE, 0, reach)
    return tree


def balanced_tree(budget: int, spine: Sequence[float], branch: Sequence[float], k: int) -> RateTree:
    """The k-ary tree of recycled successors (ranks 1..k under every node) filled breadth first until the
    budget is spent, as goose.tree.build_balanced_tree fills it. Its depth follows from k and the budget. It
    drafts no spine token, but where the match offers one (under the root) the target takes it all the same:
    the root's successors keep the chances they have beside the spine child (child_chances)."""
    tree, node = RateTree(), 0
    while node < len(tree.parents) and len(tree.parents) < budget:
        _, chances = child_chances(spine[0] if node == 0 and spine else None, branch[:k])
        for j, chance in enumerate(chances):
            reach = tree.reach[node] * chance
            if reach > 0.0 and len(tree.parents) < budget:
                tree.add(node, BRANCH, j + 1, reach)
        node += 1
    return tree


def best_balanced_tree(budget: int, spine: Sequence[float], branch: Sequence[float]) -> tuple[RateTree, int]:
    """The balanced tree of the best k (the smallest on ties) at this budget, and that k."""
    best, best_k = RateTree(), 0
    for k in range(1, len(branch) + 1):
        tree = balanced_tree(budget, spine, branch, k)
        if tree.expected_accepted > best.expected_accepted:
            best, best_k = tree, k
    return best, best_k


def optimal_tree(budget: int, spine: Sequence[float], branch: Sequence[float]) -> OptimalTree:
    """The tree of at most `budget` nodes (root included) with the largest expected accepted length, for a
    spine child at depth i + 1 accepted with probability spine[i] once its parent is, and a recycled successor
    of rank j + 1 with probability branch[j] once its parent is and the spine child and the ranks before it are
    not (the module's model); beside it the best balanced tree and the chain at the same budget."""
    _check(budget, spine, branch)
    best = _best_tree(budget, spine, branch)
    balanced, k = best_balanced_tree(budget, spine, branch)
    return OptimalTree(best.parents, best.sources, best.ranks, best.reach, balanced=balanced, balanced_k=k,
                       chain=chain_tree(budget, spine))


@dataclass(frozen=True)
class Curves:
    """Expected accepted length of the three trees along one axis, as plain lists (for plots and JSON)."""

    axis: str  # what x holds: BUDGET_AXIS or GAP_AXIS
    x: list[float]
    optimal: list[float]
    balanced: list[float]
    chain: list[float]


def _curves(axis: str, points: Iterable[tuple[float, OptimalTree]]) -> Curves:
    points = list(points)
    return Curves(axis, [x for x, _ in points], [t.expected_accepted for _, t in points],
                  [t.balanced.expected_accepted for _, t in points], [t.chain.expected_accepted for _, t in points])


def budget_curves(budgets: Iterable[int], spine: Sequence[float], branch: Sequence[float]) -> Curves:
    """Expected accepted length against the node budget."""
    return _curves(BUDGET_AXIS, ((b, optimal_tree(b, spine, branch)) for b in budgets))


def children_mass(spine: Sequence[float], branch: Sequence[float]) -> float:
    """The most a node's children's chances add up to (a spine node's where the spine's rate is highest: its
    spine child and every rank): the chance that the walk goes on past it, 1 - (1 - s_d) (1 - b_1) (1 - b_2) ...,
    so at most 1."""
    return 1.0 - (1.0 - max(spine, default=0.0)) * math.prod(1.0 - rate for rate in branch)


def root_mass(spine: Sequence[float], branch: Sequence[float]) -> float:
    """The chance that the walk accepts some child of the root: 1 - (1 - s_1) (1 - b_1) (1 - b_2) ..."""
    return children_mass(spine[:1], branch)


def rates_at_gap(gap: float, spine: Sequence[float], branch: Sequence[float]) -> tuple[list[float], list[float]]:
    """The rates scaled to a quality gap spine[0] / branch[0]: each source's shape over depth and rank kept, and
    the chance that some child of the root is accepted (root_mass). So a gap moves acceptance from one source to
    the other and makes no tree likelier overall. A rate scaled past 1 stays at 1 (a spine that grows more
    reliable with depth). The branches' scale is found by bisection: the root's mass grows with it."""
    if not spine or not branch or spine[0] == 0.0 or branch[0] == 0.0:
        raise ValueError("a quality gap needs a first spine rate and a first branch rate above 0")

    def scaled(branch_scale: float) -> tuple[list[float], list[float]]:
        spine_scale = gap * branch[0] * branch_scale / spine[0]  # spine[0] after = gap * branch[0] after
        return [min(1.0, r * spine_scale) for r in spine], [min(1.0, r * branch_scale) for r in branch]

    mass = root_mass(spine, branch)
    low, high = 0.0, 1.0 / (max(gap, 1.0) * branch[0])  # at high a first rate is 1, and so is the mass
    for _ in range(100):
        middle = (low + high) / 2
        low, high = (middle, high) if root_mass(*scaled(middle)) < mass else (low, middle)
    return scaled(high)


def gap_curves(gaps: Iterable[float], budget: int, spine: Sequence[float], branch: Sequence[float]) -> Curves:
    """Expected accepted length against the quality gap, at one budget (rates_at_gap)."""
    return _curves(GAP_AXIS, ((gap, optimal_tree(budget, *rates_at_gap(gap, spine, branch))) for gap in gaps))


def margin(curves: Curves) -> list[float | None]:
    """How far the optimal tree stands above the better of the two sources alone, as a fraction (0.25: 25% more
    expected accepted tokens); None where neither source alone accepts anything."""
    return [optimal / best - 1.0 if (best := max(balanced, chain)) > 0.0 else None
            for optimal, balanced, chain in zip(curves.optimal, curves.balanced, curves.chain, strict=True)]


# --- the rates a run measured -----------------------------------------------------------------------------------

RATIO_RANGE = (0.5, 1.2)  # a geometric fit's factor per depth or rank: the Why view's sliders span this
GRID_STEP = 0.01  # the fit's resolution, the sliders' step


def geometric_rates(first: float, ratio: float, n: int) -> list[float]:
    """n rates first, first * ratio, first * ratio^2, ..., none above 1 (a factor above 1 is a source that
    grows more reliable the further it goes, as a context match does)."""
    return [min(1.0, first * ratio ** i) for i in range(n)]


def fit_geometric(counts: Mapping[int, tuple[int, int]]) -> tuple[float, float] | None:
    """The (first, ratio) of geometric_rates that makes the counts likeliest (depth or rank -> (accepted, tried),
    each a binomial draw at its rate), on a grid of GRID_STEP over [0, 1] x RATIO_RANGE; None without a tried
    node. Ties go to the factor nearest 1 (with depth 1 alone, every factor fits as well)."""
    keys = [k for k, (_, tried) in counts.items() if tried]
    if not keys:
        return None
    accepted = np.array([counts[k][0] for k in keys], dtype=float)
    rejected = np.array([counts[k][1] - counts[k][0] for k in keys], dtype=float)
    exponent = np.array(keys, dtype=float) - 1.0
    firsts = np.round(np.arange(0.0, 1.0 + GRID_STEP / 2, GRID_STEP), 2)
    low, high = RATIO_RANGE
    ratios = np.round(np.arange(low, high + GRID_STEP / 2, GRID_STEP), 2)
    ratios = ratios[np.argsort(np.abs(ratios - 1.0), kind="stable")]  # nearest 1 first: argmax keeps the first
    rates = np.clip(firsts[:, None, None] * ratios[None, :, None] ** exponent, 1e-12, 1.0 - 1e-12)
    likelihood = (accepted * np.log(rates) + rejected * np.log1p(-rates)).sum(axis=2)
    i, j = np.unravel_index(np.argmax(likelihood), likelihood.shape)
    return float(firsts[i]), float(ratios[j])


@dataclass(frozen=True)
class MeasuredRates:
    """A run's conditional acceptance, fitted to the rate model, and what its steps accepted on average."""

    spine: tuple[float, float] | None  # (rate at depth 1, factor per depth), None: no spine node was tried
    spine_depth: int | None  # the deepest spine node tried: the fit says nothing deeper (None: none tried)
    branch: tuple[float, float] | None  # (rate at rank 1, factor per rank), None: no branch node was tried
    counts: dict[str, dict[int, tuple[int, int]]]  # metrics.acceptance_by_depth_and_rank of the steps
    mean_accepted: float | None  # draft tokens accepted per step, the bonus not counted (τ per step: one more)
    mean_budget: float | None  # the steps' node budgets, averaged

    @property
    def gap(self) -> float | None:
        """The quality gap: the spine's rate at depth 1 over the branches' at rank 1."""
        if self.spine is None or self.branch is None or not self.branch[0]:
            return None
        return self.spine[0] / self.branch[0]


def measured_rates(steps: Sequence[StepRecord]) -> MeasuredRates:
    """The rate model fitted to what the steps' trees accepted (each source by fit_geometric)."""
    counts = acceptance_by_depth_and_rank(steps)
    return MeasuredRates(spine=fit_geometric(counts[SPINE]), spine_depth=max(counts[SPINE], default=None),
                         branch=fit_geometric(counts[BRANCH]), counts=counts,
                         mean_accepted=mean_accepted_length(step.accepted_length for step in steps),
                         mean_budget=statistics.fmean(step.budget for step in steps) if steps else None)


@dataclass(frozen=True)
class RateModel:
    """The model's rates: spine[d - 1] = s_d by depth, branch[j - 1] = b_j by rank (the module's docstring)."""

    spine: list[float]
    branch: list[float]

    @property
    def children_mass(self) -> float:
        return children_mass(self.spine, self.branch)

    def reach(self, step: StepRecord) -> list[float]:
        """Each node of the step's tree: the chance that the walk accepts it under the model (the root: 1). A node
        of the tree has a spine outcome where the step drafted a spine child under it; depths and ranks beyond
        the rates are never accepted."""
        ranks = branch_ranks(step)
        children: dict[int, list[int]] = {}
        for index, node in enumerate(step.nodes[1:], start=1):
            children.setdefault(node.parent, []).append(index)
        reach = [1.0] + [0.0] * (len(step.nodes) - 1)
        for parent, nodes in children.items():  # parents before children: each parent's reach is known
            spine_child = next((n for n in nodes if step.nodes[n].source == SPINE), None)
            depth = step.nodes[parent].depth + 1
            spine_rate = (self.spine[depth - 1] if depth <= len(self.spine) else 0.0) if spine_child else None
            branches = [n for n in nodes if step.nodes[n].source == BRANCH]  # ranks 1, 2, ... in order
            rates = [self.branch[ranks[n] - 1] if ranks[n] <= len(self.branch) else 0.0 for n in branches]
            spine_chance, chances = child_chances(spine_rate, rates)
            for node, chance in ((spine_child, spine_chance), *zip(branches, chances)):
                if node is not None:
                    reach[node] = reach[parent] * chance
        return reach


def fit_rates(counts: Mapping[str, Mapping[int, tuple[int, int]]]) -> RateModel:
    """The maximum-likelihood rates for acceptance_by_depth_and_rank's counts: each tried node is one Bernoulli
    draw at its depth's or rank's rate (the module's docstring), so each rate's estimate is accepted / tried. A
    node is tried only below a tried parent (spine) or sibling (branch), so the depths and ranks tried run 1, 2,
    ... without a gap."""
    def rates(by_key: Mapping[int, tuple[int, int]]) -> list[float]:
        return [accepted / tried for accepted, tried in by_key.values() if tried]

    return RateModel(rates(counts.get(SPINE, {})), rates(counts.get(BRANCH, {})))


CALIBRATION_TOLERANCE = 0.15  # a fit explains a run when its pooled prediction is this close to what the run took


@dataclass(frozen=True)
class Calibration:
    """The rate model fitted to a greedy run (fit_rates), and how well it explains the run's steps.

    predicted:     per step, the expected accepted length of its own tree under the model (RateModel.reach)
    measured:      per step, what it accepted (the bonus not counted)
    by_depth:      depth -> (predicted, measured) tokens accepted at that depth, over the steps
    by_source:     SPINE / BRANCH -> (predicted, measured) tokens that source drafted and the walk accepted
    children_mass: the most a node's children's chances add up to under the model (at most 1)
    """

    model: RateModel
    predicted: list[float]
    measured: list[int]
    by_depth: dict[int, tuple[float, int]]
    by_source: dict[str, tuple[float, int]]

    @property
    def children_mass(self) -> float:
        return self.model.children_mass

    @property
    def pooled(self) -> tuple[float, int]:
        """Predicted and measured accepted tokens, summed over the steps."""
        return math.fsum(self.predicted), sum(self.measured)

    @property
    def error(self) -> float | None:
        """Pooled predicted / measured - 1 (None when the steps accepted nothing)."""
        predicted, measured = self.pooled
        return predicted / measured - 1.0 if measured else None

    @property
    def fits(self) -> bool:
        """The model explains the run: its pooled prediction within CALIBRATION_TOLERANCE of what the run took."""
        return self.error is not None and abs(self.error) <= CALIBRATION_TOLERANCE

    def worst_steps(self, n: int = 3) -> list[int]:
        """The n steps whose prediction misses what they accepted by the most, worst first."""
        misses = [abs(p - m) for p, m in zip(self.predicted, self.measured, strict=True)]
        return sorted(range(len(misses)), key=lambda i: -misses[i])[:n]

    def worst_depth(self) -> int | None:
        """The depth whose predicted tokens miss the measured ones by the most (None without a drafted node)."""
        return max(self.by_depth, key=lambda d: abs(self.by_depth[d][0] - self.by_depth[d][1]), default=None)


def calibration(run: RunRecord) -> Calibration:
    """The rate model fitted to a greedy run's steps, and per step its prediction beside what the step accepted.
    Refuses (ValueError, one line) a sampled run, whose verdicts follow the sampling rule rather than the greedy
    walk the model describes, and a run without a tried draft node, which gives the fit nothing."""
    if run.sampling.get("temperature", 0.0) != 0.0:
        raise ValueError("calibration needs a greedy run (temperature 0): the rate model describes the greedy walk, "
                         "a sampled step's verdicts follow the sampling rule")
    counts = acceptance_by_depth_and_rank(run.steps)
    if not any(tried for by_key in counts.values() for _, tried in by_key.values()):
        raise ValueError("calibration needs a run whose steps tried a draft node: this one verified no drafted token")
    model = fit_rates(counts)
    predicted, by_depth, by_source = [], {}, {SPINE: [0.0, 0], BRANCH: [0.0, 0]}
    for step in run.steps:
        reach = model.reach(step)
        predicted.append(math.fsum(reach[1:]))
        accepted = set(step.accepted)
        for index, node in enumerate(step.nodes[1:], start=1):
            for cell in (by_depth.setdefault(node.depth, [0.0, 0]), by_source.get(node.source)):
                if cell is not None:
                    cell[0] += reach[index]
                    cell[1] += index in accepted
    return Calibration(model, predicted, run.accepted_lengths, {d: tuple(by_depth[d]) for d in sorted(by_depth)},
                       {source: tuple(cell) for source, cell in by_source.items()})
