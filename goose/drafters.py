"""How each method drafts: one small class per method behind one interface.

The decoding loop (goose.decode) knows a method only through its drafter:
`draft(state)` turns the sources' state at one step into a tree and its node
budget; `observe(...)` sees the verified step and updates whatever the drafter
learns from it (the spine-acceptance EMA of the spine tree's step 1, the tuner of its budget
and shape). `shape_grid` names the GooseConfig knobs that shape a method's
tree and the values the tuner may try for them.
`METHODS` is the registry: the loop, the CLI, the bench and the app list the
methods from it, so adding a method is one registered class. A method whose
library is missing here stays listed, with the reason (`unavailable_methods`).
"""

from __future__ import annotations

import copy
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from goose.budget import BudgetTuner, Shape
from goose.config import GooseConfig
from goose.sources import ContextMatch, SuffixSource
from goose.sources.suffix import unavailable
from goose.tree import (
    SPINE,
    DraftTree,
    build_balanced_tree,
    build_chain_tree,
    build_goose_tree,
    build_recycling_tree,
    build_suffix_tree,
)
from goose.validate import AUTO, MAX_BUDGET

NO_MATCH = "no match"  # the tuner situation of the steps whose source offers nothing to copy
COPYING = "copying"  # the spine tree's match steps right after a step that took its whole spine


class Successors(Protocol):
    """What a builder reads of the adjacency table (a live AdjacencyTable, or a recorded copy of its rows)."""

    def successors(self, token: int, previous: int | None = None) -> list[tuple[int, float]]: ...


@dataclass
class DraftState:
    """What a drafter may look at when it drafts one step.

    anchor:           the last committed token, the tree's root.
    before_anchor:    the token before it (the bigram tier's key); None at the very start.
    match:            this step's context match, already cut to what can still be generated.
    adjacency:        the adjacency table, or None for methods that keep none.
    spine_acceptance: the drafter's EMA of recent spine acceptance (only the spine tree reads it).
    suffix:           SuffixDecoding's cache of the run, or None for methods that keep none.
    room:             draft tokens the step may still take: what can still be generated, less the bonus token
                      (the match is already cut to it).
    """

    anchor: int
    before_anchor: int | None
    match: ContextMatch
    adjacency: Successors | None
    spine_acceptance: float
    suffix: SuffixSource | None = None
    room: int = MAX_BUDGET


class Drafter:
    """One method's drafting strategy. Subclasses set `name` and implement `build`.

    uses_context:   the loop queries the context matcher for this method (for its spine, or its budget's growth).
    drafts_spine:   its trees copy the context match as a spine (the match is one of its draft sources).
    uses_adjacency: the loop keeps and refreshes an adjacency table for it.
    uses_suffix:    the loop keeps a SuffixDecoding cache for it, fed as the context matcher is (and a run may
                    pass it a store of past outputs).
    speculative:    False for the baseline that drafts nothing (no budget tuner either).
    default_budget: the node budget of a request that names none: "auto" (the tuner's pick every step) or a
                    fixed number of nodes, root included.
    shape_grid:     GooseConfig knob -> values the tuner may try (empty: the budget alone is tuned).
                    A knob the run's config sets away from its default is pinned, not tuned.
    """

    name: ClassVar[str]
    uses_context: ClassVar[bool] = True
    drafts_spine: ClassVar[bool] = False
    uses_adjacency: ClassVar[bool] = False
    uses_suffix: ClassVar[bool] = False
    speculative: ClassVar[bool] = True
    default_budget: ClassVar[int | str] = AUTO
    shape_grid: ClassVar[dict[str, tuple]] = {}

    def __init__(self, config: GooseConfig, tuner: BudgetTuner | None = None) -> None:
        self.config = config
        self.tuner = tuner
        self.spine_acceptance = config.ema_start
        defaults = GooseConfig()
        self.pinned: dict[str, Any] = {knob: getattr(config, knob) for knob in self.shape_grid
                                       if getattr(config, knob) != getattr(defaults, knob)}
        self._shaped: dict[Shape, Drafter] = {}
        if tuner is not None and self.shape_grid and not tuner.knobs:  # a fresh tuner learns this method's shape
            tuner.set_knobs(self.shape_grid, {knob: getattr(defaults, knob) for knob in self.shape_grid})

    @classmethod
    def unavailable(cls) -> str:
        """Why this method cannot run here, in one line ('' when it can)."""
        return ""

    def build(self, state: DraftState, budget: int) -> DraftTree:
        """The tree of at most `budget` nodes (root included) this method drafts from `state`."""
        raise NotImplementedError

    def tree_signature(self, state: DraftState, budget: int) -> Hashable:
        """What `build(state, budget)` depends on beyond the state: equal signatures, equal trees (built once)."""
        return budget, self.config

    def shaped(self, shape: Shape) -> Drafter:
        """This drafter with the tuner's `shape` in its config (kept: the tuner asks for the same shapes often)."""
        drafter = self._shaped.get(shape)
        if drafter is None:
            drafter = copy.copy(self)
            drafter.config = self.config.with_overrides(**self.tuner.shape_overrides(shape))
            self._shaped[shape] = drafter
        return drafter

    def situation(self, state: DraftState) -> str:
        """Which of the tuner's situations a step is in: a method that reads the context tunes its steps
        without a match apart ("no match") from those with one ("")."""
        return NO_MATCH if self.uses_context and not state.match.tokens else ""

    def _tuner(self, state: DraftState) -> BudgetTuner:
        return self.tuner.situation(self.situation(state))

    def budget(self, state: DraftState, base: int | None = None) -> int:
        """This step's node budget: the base budget (the tuner's pick, or the configured one),
        grown with the match's confidence — the same for every tree method."""
        if base is None:
            base = self._tuner(state).best(self.pinned)[1] if self.tuner is not None else self.config.budget
        return self.config.grown_budget(state.match.confidence, base)

    def draft(self, state: DraftState) -> tuple[DraftTree, int]:
        """The step's tree and its node budget: the tuner's shape and budget, or the configured ones."""
        if self.tuner is None:
            budget = self.budget(state)
            return self.build(state, budget), budget
        shape, base = self._tuner(state).best(self.pinned)
        budget = self.budget(state, base)
        return self.shaped(shape).build(state, budget), budget

    def shape_for(self, state: DraftState) -> dict[str, Any]:
        """The shape knobs `draft(state)` sets over the configured ones (the tuner's pick; none without a tuner)."""
        if self.tuner is None:
            return {}
        return self.tuner.shape_overrides(self._tuner(state).best(self.pinned)[0])

    def observe(self, state: DraftState, tree: DraftTree, accepted: Sequence[int],
                revealed: Sequence[int] | None) -> None:
        """Learn from the verified step. `accepted`: accepted nodes (root excluded); `revealed`: the
        continuation the step revealed (accepted tokens + bonus): the target's argmax path when greedy,
        its draws when sampling, or None (nothing to learn).

        The tuner scores the trees its candidate shapes and budgets would have built from the same
        state against the revealed continuation. Sampled steps are scored the same way: the rule of
        goose.sampling accepts, in distribution, exactly the longest prefix of a draw from the target
        that a tree holds, and a lossless step's revealed tokens are such a draw (so the score is an
        unbiased estimate of the tree's expected acceptance at this temperature; sampling keeps its
        own tuner). Each distinct tree is built once; the drafted tree is the tuner's current best."""
        if self.tuner is None or revealed is None:
            return
        tuner = self._tuner(state)
        best, base = tuner.best(self.pinned)
        built = {self.shaped(best).tree_signature(state, self.budget(state, base)): tree}
        best_signatures: dict[int, Hashable] = {}  # base budget -> the best shape's tree there
        trees = {}
        for shape, base in tuner.candidates(self.pinned):
            drafter, budget = self.shaped(shape), self.budget(state, base)
            signature = drafter.tree_signature(state, budget)
            if shape == best:
                best_signatures[base] = signature
            elif signature == best_signatures.get(base) and (shape, base) not in tuner.estimates:
                continue  # the best shape's own tree (a knob that changes nothing here): not a new candidate
            if signature not in built:
                built[signature] = drafter.build(state, budget)
            trees[shape, base] = built[signature]
        tuner.observe(trees, revealed)


METHODS: dict[str, type[Drafter]] = {}


def register(drafter: type[Drafter]) -> type[Drafter]:
    """Add a drafter to `METHODS` under its name (a class decorator)."""
    METHODS[drafter.name] = drafter
    return drafter


def available_methods() -> list[str]:
    """The registered methods that can run here, in the registry's order."""
    return [name for name, drafter in METHODS.items() if not drafter.unavailable()]


def unavailable_methods() -> dict[str, str]:
    """The registered methods that cannot run here, each with its one-line reason."""
    return {name: reason for name, drafter in METHODS.items() if (reason := drafter.unavailable())}


@register
class Autoregressive(Drafter):
    """The baseline: no draft, the root alone; one token per forward pass."""

    name = "autoregressive"
    uses_context = False
    speculative = False

    def budget(self, state: DraftState, base: int | None = None) -> int:
        return 1

    def build(self, state: DraftState, budget: int) -> DraftTree:
        return DraftTree.rooted_at(state.anchor)


@register
class PromptLookup(Drafter):
    """The context chain alone (prompt lookup decoding)."""

    name = "pld"
    drafts_spine = True

    def build(self, state: DraftState, budget: int) -> DraftTree:
        return build_chain_tree(state.anchor, state.match, budget)


@register
class Recycling(Drafter):
    """The adjacency tree alone (Token Recycling)."""

    name = "recycling"
    uses_adjacency = True
    shape_grid = {"max_branch_depth": (1, 2, 3, 4, 6, 8), "top_k": (2, 4, 6, 10)}

    def build(self, state: DraftState, budget: int) -> DraftTree:
        return build_recycling_tree(state.anchor, state.before_anchor, state.adjacency, self.config, budget)


@register
class Balanced(Drafter):
    """The isotropic control: a k-ary adjacency tree under the same budget."""

    name = "balanced"
    uses_adjacency = True
    shape_grid = {"branching": (1, 2, 3, 4, 6), "max_branch_depth": (1, 2, 3, 4, 6, 8)}

    def build(self, state: DraftState, budget: int) -> DraftTree:
        return build_balanced_tree(state.anchor, state.before_anchor, state.adjacency, self.config, budget)


@register
class SpineTree(Drafter):
    """Goose: the context chain as a deep spine, adjacency branches off the root and every spine node."""

    name = "goose"
    drafts_spine = True
    uses_adjacency = True
    # The tuner picks the budget alone, per situation; the tree's shape is the spine tree's own rule (the spine's
    # share from its acceptance and the match's confidence, branches best first). Searching the shape too
    # (spine share, rho, branch depth, width, branches or not) ran slower than a fixed budget of 8 on both
    # suites, where the budget alone did not (2-core AVX2 EPYC, 20 prompts each, interleaved: shape and budget
    # 0.96x / 0.95x that fixed budget on HumanEval / MT-Bench, the budget alone 0.97x / 1.01x): its 60-340 keys
    # per situation each saw a few steps of a 128-token run, and the shapes it favoured cost more than the measured
    # table says (against the table, its real passes cost 2-7% more than the fixed budget's).
    shape_grid = {}
    # Without a context match the tree is all recycled guesses, and its verified nodes are also what refreshes the
    # adjacency table (each writes back its token's successors) for the steps after: a gain no step's score sees. The
    # tuner alone drafted 4-node trees there that took fewer tokens a step than 6-8 nodes did (HumanEval, 2-core AVX2
    # EPYC: 1.84 tokens against 2.0-2.2); the 6-node trees accepted 12% more when they were drafted (refreshing) than
    # when they were only scored (1.21 against 1.08). So a smaller tree must beat 6 nodes by 10% (priced off the cost
    # table, auto against a fixed budget of 8 went from 0.99x / 0.94x / 1.00x to 1.00x / 0.97x / 1.04x on HumanEval
    # 1-20, 21-40 and MT-Bench 1-20).
    no_match_floor, no_match_margin = 6, 0.10

    def __init__(self, config: GooseConfig, tuner: BudgetTuner | None = None) -> None:
        super().__init__(config, tuner)
        self.copying = False  # the last step took its whole spine (see `situation`)
        if tuner is not None:
            tuner.set_floor(NO_MATCH, self.no_match_floor, self.no_match_margin)

    def situation(self, state: DraftState) -> str:
        """Match steps right after one that took its whole spine are tuned apart ("copying"): the text is being
        copied, and a bigger tree pays there that does not on a weak match. One tuner for every match step mixed
        the two, and its running mean lagged a copying stretch by some 20 steps (HumanEval, 2-core AVX2 EPYC:
        auto drafted 7-node trees accepted whole eight steps running where a fixed budget of 8 took 12 tokens a
        step). Priced off the cost table, auto against a fixed budget of 8 went from 1.00x / 0.97x / 1.04x to
        1.04x / 1.00x / 1.06x on HumanEval 1-20, 21-40 and MT-Bench 1-20."""
        if not state.match.tokens:
            return NO_MATCH
        return COPYING if self.copying else ""

    def build(self, state: DraftState, budget: int) -> DraftTree:
        return build_goose_tree(state.anchor, state.before_anchor, state.match, state.adjacency, self.config,
                                budget, state.spine_acceptance)

    def tree_signature(self, state: DraftState, budget: int) -> Hashable:
        """Without a context match there is no spine: its share and rho change nothing."""
        if not state.match.tokens:
            return budget, self.config.max_branch_depth, self.config.top_k, self.config.branches
        return super().tree_signature(state, budget)

    def observe(self, state: DraftState, tree: DraftTree, accepted: Sequence[int],
                revealed: Sequence[int] | None) -> None:
        """The tuner (in the situation the step was drafted in), then the spine tree's step-1 EMA of the share of
        spine nodes accepted (with a spine only) and whether the whole spine was taken."""
        super().observe(state, tree, accepted, revealed)
        spine = sum(source == SPINE for source in tree.sources)
        taken = sum(tree.sources[n] == SPINE for n in accepted)
        if spine:
            alpha = self.config.ema_alpha
            self.spine_acceptance = (1 - alpha) * self.spine_acceptance + alpha * taken / spine
        self.copying = bool(spine) and taken == spine


SUFFIX_BUDGET = 25  # vLLM's 24 speculative tokens for SuffixDecoding (its tree depth), plus the root


@register
class Suffix(Drafter):
    """SuffixDecoding as Snowflake's arctic-inference drafts it, its tree form: what most often followed the
    context's suffix in the run's prompt and output (and a store's past outputs, when the run is given one).

    Its budget defaults to vLLM's: 24 speculative tokens, a budget of 25 nodes (budget="auto" tunes it per step,
    as for every method; a fixed budget B drafts at most B - 1 tokens). The tuner tells the steps where the suffix
    trees offer nothing ("no match") from the others, as it does for the context match."""

    name = "suffix"
    uses_context = False
    uses_suffix = True
    default_budget = SUFFIX_BUDGET
    tree_form: ClassVar[bool] = True  # arctic's use_tree_spec

    @classmethod
    def unavailable(cls) -> str:
        reason = unavailable()
        return f"method {cls.name!r} is unavailable here: {reason}" if reason else ""

    def build(self, state: DraftState, budget: int) -> DraftTree:
        draft = state.suffix.draft(min(budget - 1, state.room), self.tree_form)
        return build_suffix_tree(state.anchor, draft.token_ids, draft.parents, draft.probs)

    def situation(self, state: DraftState) -> str:
        return "" if state.suffix.draft(min(1, state.room), self.tree_form).token_ids else NO_MATCH


@register
class SuffixPath(Suffix):
    """SuffixDecoding's one-path form: the single likeliest continuation, what vLLM's method="suffix" drafts."""

    name = "suffix-path"
    tree_form = False
