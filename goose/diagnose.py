"""Where a greedy run's tokens went: taken, lost to the shape of its trees, or lost to its sources
(docs/METHOD.md, "Lost to the shape or to the sources").

Under greedy decoding the target's continuation is fixed by the prompt, and the run reveals it. Each
step's sources (the context match, the adjacency table) are rebuilt exactly by replaying the run at its own
setting (goose.whatif): the one decoding loop over the recording, which drafts the run's trees, tree for
tree. An observer of that replay reads each step's DraftState before its verification; no model runs.

Per step, c_1, c_2, ... being the revealed continuation after the step's anchor c_0 (c_-1 the token before):

  offered    the longest prefix c_1 .. c_m that the step's sources could have drafted, each token given the
             path c_0 .. c_(i-1) before it. c_i is offered by
             - the spine, when c_1 .. c_i are the first i tokens of the step's context match (methods that
               draft a spine: goose, pld; the match as the loop cut it to what can still be generated);
             - the adjacency table, when c_i is in the row its lookup gives c_(i-1) after c_(i-2): the drafters'
               own lookup (AdjacencyTable.lookup: the bigram tier, else the token's own row, else the prior's),
               its whole usable row: the table's top_k successors (the run's top_k; a prior's row as built)
               that score at least min_score. A builder's narrower width (balanced's k, goose's top_k // depth)
               and its depth caps are shape knobs the tuner varies: a token they leave out is the shape's loss.
  reachable  min(offered, budget - 1): what a tree of the step's node budget could have taken.
  accepted   what the step's tree took (the run's own verification).
  positions  min(budget - 1, the known continuation's length): the most the step could have taken (the
             continuation is known to the last pass's bonus token; past it nothing is counted).
  lost_to_shape = reachable - accepted; lost_to_sources = positions - reachable: the positions of the
  budget that no source offered a token for (the step's sources stopped at offered + 1).

So accepted <= reachable <= offered, and taken + lost_to_shape + lost_to_sources = positions at every step.

By source, each of a step's positions goes to one source: a taken or reachable token to the source that
offered it (the spine first, where the row holds the same token: the walk tries the spine child first);
every position lost to the sources to the source the path relied on where the offer stopped: the spine
when the path still followed the match and the match had a token there (another one), else the tier of the
row looked up there (NO_ROW: no row at all, or a method without a table).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from goose.config import GooseConfig
from goose.decode import Generation, Observer
from goose.drafters import METHODS, DraftState
from goose.sources.adjacency import BIGRAM, NO_ROW, PRIOR, UNIGRAM
from goose.trace import RunRecord
from goose.tree import SPINE, DraftTree
from goose.whatif import anchor_positions, known_continuation, replay_generation

SPLIT = ("taken", "lost_to_shape", "lost_to_sources")  # the three parts of a step's positions
SOURCES = (SPINE, BIGRAM, UNIGRAM, PRIOR, NO_ROW)  # what offers (or lacks) a token, in the order shown


@dataclass
class StepDiagnosis:
    """One step's split (see the module's docstring for each number).

    offered_by: the source that offered each offered token, in order (SPINE or a table tier).
    stopped_on: the source the path relied on at the first token no source offered; "" when the offer ran
                to the end of the known continuation.
    """

    step: int
    budget: int
    accepted: int
    offered: int
    reachable: int
    lost_to_shape: int
    lost_to_sources: int
    offered_by: list[str] = field(default_factory=list)
    stopped_on: str = ""

    @property
    def positions(self) -> int:
        """The most this step could have taken: taken + lost to the shape + lost to the sources."""
        return self.accepted + self.lost_to_shape + self.lost_to_sources

    def by_source(self) -> dict[str, dict[str, int]]:
        """Source -> the step's split, each position counted for the one source that offered (or lacked) it."""
        split: dict[str, dict[str, int]] = {}
        for position, source in enumerate(self.offered_by[:self.reachable]):
            part = "taken" if position < self.accepted else "lost_to_shape"
            split.setdefault(source, dict.fromkeys(SPLIT, 0))[part] += 1
        if self.lost_to_sources:
            split.setdefault(self.stopped_on, dict.fromkeys(SPLIT, 0))["lost_to_sources"] += self.lost_to_sources
        return split


@dataclass
class Diagnosis:
    """A greedy run's steps diagnosed, and their split pooled (sums over the steps)."""

    method: str
    steps: list[StepDiagnosis]

    @property
    def taken(self) -> int:
        return sum(step.accepted for step in self.steps)

    @property
    def lost_to_shape(self) -> int:
        return sum(step.lost_to_shape for step in self.steps)

    @property
    def lost_to_sources(self) -> int:
        return sum(step.lost_to_sources for step in self.steps)

    def split(self) -> dict[str, int]:
        return {"taken": self.taken, "lost_to_shape": self.lost_to_shape, "lost_to_sources": self.lost_to_sources}

    def shares(self) -> dict[str, float]:
        """The split as fractions of every step's positions together (all 0.0 when no step had any)."""
        split = self.split()
        total = sum(split.values())
        return {part: count / total if total else 0.0 for part, count in split.items()}

    @property
    def by_source(self) -> dict[str, dict[str, int]]:
        """Source (SPINE, the table's tiers, NO_ROW) -> the pooled split of the positions it offered or lacked;
        summed over the sources, the pooled split."""
        pooled: dict[str, dict[str, int]] = {}
        for step in self.steps:
            for source, split in step.by_source().items():
                counts = pooled.setdefault(source, dict.fromkeys(SPLIT, 0))
                for part, count in split.items():
                    counts[part] += count
        return {source: pooled[source] for source in SOURCES if source in pooled}

    @classmethod
    def pooled(cls, diagnoses: Sequence[Diagnosis]) -> Diagnosis:
        """Several runs' diagnoses as one (their steps together): the split pooled over runs."""
        methods = {d.method for d in diagnoses}
        return cls(methods.pop() if len(methods) == 1 else "+".join(sorted(methods)),
                   [step for d in diagnoses for step in d.steps])

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, **self.split(), "shares": self.shares(), "by_source": self.by_source,
                "steps": [asdict(step) for step in self.steps]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Diagnosis:
        return cls(data["method"], [StepDiagnosis(**step) for step in data["steps"]])


def offers(state: DraftState, continuation: Sequence[int], spine: bool) -> tuple[list[str], str]:
    """The source offering each token of the longest prefix of `continuation` that a step drafting from `state`
    could draft (spine: its method drafts the match as a spine), and the source the path relied on where the
    offer stopped ("" when it ran to the end of `continuation`). The definitions are the module's."""
    chain = state.match.tokens if spine else []
    previous, last = state.before_anchor, state.anchor
    on_chain = True  # the path so far is the match's first tokens
    offered_by: list[str] = []
    for i, token in enumerate(continuation):
        tier, row = state.adjacency.lookup(last, previous) if state.adjacency is not None else (NO_ROW, [])
        chain_offers = on_chain and i < len(chain)
        if chain_offers and chain[i] == token:
            offered_by.append(SPINE)
        elif any(successor == token for successor, _ in row):
            offered_by.append(tier)
            on_chain = False
        else:
            return offered_by, SPINE if chain_offers else tier
        previous, last = last, token
    return offered_by, ""


def check_diagnosable(method: str) -> None:
    """ValueError, in one line, for a method whose offers this split does not define: its sources are the context
    match and the adjacency table, not SuffixDecoding's suffix trees."""
    if METHODS[method].uses_suffix:
        raise ValueError(f"diagnose splits what the context match and the adjacency table offer; method {method!r} "
                         "drafts from SuffixDecoding's suffix trees, whose offers it does not define")


def step_diagnosis(index: int, budget: int, accepted: int, offered_by: list[str], stopped_on: str,
                   known: int) -> StepDiagnosis:
    """A step's split from what it took, what its sources offered and how much of the continuation is `known`."""
    reachable = min(len(offered_by), budget - 1)
    positions = min(budget - 1, known)
    return StepDiagnosis(index, budget, accepted, len(offered_by), reachable, reachable - accepted,
                         positions - reachable, offered_by, stopped_on)


class _Offers(Observer):
    """Watches a replay of `run` at its own setting: each step's offer, read from the state it drafts from."""

    def __init__(self, run: RunRecord) -> None:
        self.run = run
        self.continuation = known_continuation(run)
        self.positions = anchor_positions(run)
        self.spine = METHODS[run.method].drafts_spine
        self.steps: list[StepDiagnosis] = []

    def drafted(self, generation: Generation, state: DraftState, tree: DraftTree) -> None:
        index = len(generation.run.steps)
        recorded = self.run.steps[index]
        if tree.tokens != [n.token for n in recorded.nodes] or tree.parents != [n.parent for n in recorded.nodes]:
            raise ValueError(f"replaying this run did not rebuild the tree of its step {index}, so the sources "
                             "replayed are not the run's: diagnose needs a run this code replays to itself")
        continuation = self.continuation[self.positions[index]:]
        offered_by, stopped_on = offers(state, continuation, self.spine)
        self.steps.append(step_diagnosis(index, recorded.budget, recorded.accepted_length, offered_by, stopped_on,
                                         len(continuation)))


def diagnose(run: RunRecord) -> Diagnosis:
    """Per step of a greedy run recorded with its sources (goose.generate(..., record_sources=True)): what its tree
    took, what its sources offered, what a tree of its budget could have taken; pooled, the tokens taken, lost to
    the shape and lost to the sources, also by source. Exact, from a replay of the run; no model runs.

    A replay refuses what it cannot rebuild, saying why: a sampled run (ValueError: its tokens are one draw, not the
    continuation greedy decoding reveals) or one recorded without its sources (NoReplayDataError). A run of a
    method that drafts from SuffixDecoding is refused too (check_diagnosable)."""
    check_diagnosable(run.method)
    watcher = _Offers(run)
    generation = replay_generation(run, run.method, GooseConfig.from_dict(run.config))
    generation.observers.append(watcher)
    for _ in generation:
        pass
    return Diagnosis(run.method, watcher.steps)
