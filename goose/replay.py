"""A whole run replayed at other settings, with the replay's own step boundaries (docs/METHOD.md, "What if").

Under greedy decoding the continuation is fixed by the prompt: whatever tree a step
drafts, the tokens committed are the recorded run's. So a run at other settings can
be simulated without the model: at each position build the tree those settings would
draft there, walk it along the fixed continuation, and advance by accepted + 1. A
setting that accepts less takes more passes, one that accepts more reaches further per
pass; keeping the recorded step boundaries instead biases both (measured: -39% tau).

What each step's tree is built from, and how exact it is:
- the context match is a function of the token prefix: exact;
- the spine tree's acceptance EMA follows the replay's own trees: exact;
- the adjacency table is the replay's own, kept as a real run keeps it: seeded with the prefill's
  rows, then after every replayed step refreshed with a row for each node of the replay's own tree.
  A node's row is a function of its context (the sequence up to the anchor, then its path), so
  where a recorded pass verified a node in the same context its row is exact (`RecordedRows`); the
  accepted path always is. Approximated: a node no recorded pass saw in its context (a rejected
  node of a tree other than the recorded ones) takes its token's latest row the recorded passes
  before the anchor stored (`ReplayTable`), or keeps its old row when they stored none.
Replaying the recorded setting rebuilds the recorded run exactly, step for step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from goose.budget import accepted_length
from goose.config import GooseConfig
from goose.drafters import METHODS, DraftState
from goose.sources import AdjacencyTable, ContextMatch, ContextMatcher
from goose.sources.adjacency import Row
from goose.sources.prior import find_prior
from goose.trace import RunRecord, StepRecord
from goose.tree import DraftTree


class NoReplayDataError(ValueError):
    """The run was recorded without what a replay needs (the adjacency rows of its passes, its trees' shapes)."""


@dataclass
class ReplayStep:
    """One step of the replay. position: new tokens committed before it (its anchor is tokens[position - 1]);
    budget: its node budget; nodes: its tree's size; accepted: draft tokens the walk accepts."""

    position: int
    budget: int
    nodes: int
    accepted: int
    tree: DraftTree = field(repr=False)


def anchor_positions(run: RunRecord) -> list[int]:
    """Each recorded step's position: new tokens committed before it (the prefill commits the first)."""
    positions, position = [], 1
    for step in run.steps:
        positions.append(position)
        position += len(step.committed)
    return positions


Context = tuple[int, tuple[int, ...]]  # (length of the true sequence it starts with, the path off it)


def context_key(sequence: Sequence[int], start: int, path: Sequence[int]) -> Context:
    """The context a node's row is computed in: sequence[:start] (its tree's anchor last), then its path from
    the root; canonical, so that equal contexts reached from different anchors get equal keys (the part of
    the path that follows the sequence moves into the length)."""
    m = 0
    while m < len(path) and start + m < len(sequence) and sequence[start + m] == path[m]:
        m += 1
    return start + m, tuple(path[m:])


def node_paths(parents: Sequence[int], tokens: Sequence[int]) -> list[tuple[int, ...]]:
    """Each node's tokens from the root's child down to it (the root's: empty); parents come first."""
    paths: list[tuple[int, ...]] = []
    for parent, token in zip(parents, tokens):
        paths.append(() if parent < 0 else (*paths[parent], token))
    return paths


def step_paths(step: StepRecord) -> list[tuple[int, ...]]:
    """The paths (node_paths) of a recorded step's nodes, then of its shadow nodes (numbered after them)."""
    paths = node_paths([n.parent for n in step.nodes], [n.token for n in step.nodes])
    for parent, token, _ in step.shadow or []:
        paths.append((*paths[parent], token))
    return paths


class RecordedRows:
    """Every adjacency row the recorded passes computed (their shadow trees' too), by the context it was
    computed in."""

    def __init__(self, run: RunRecord) -> None:
        sequence, length = [*run.prompt_tokens, *run.tokens], len(run.prompt_tokens)
        self.rows: dict[Context, Row] = {}
        shadows = []
        for position, step in zip(anchor_positions(run), run.steps):
            paths = step_paths(step)
            for path, row in zip(paths, step.rows):
                self.rows.setdefault(context_key(sequence, length + position, path), row)
            shadows.append((position, paths[len(step.nodes):], step.shadow or []))
        for position, paths, shadow in shadows:  # after every real row: the recorded run replays to itself
            for path, (_, _, row) in zip(paths, shadow):
                self.rows.setdefault(context_key(sequence, length + position, path), row)

    def get(self, context: Context) -> Row | None:
        return self.rows.get(context)


class ReplayTable:
    """The adjacency table as a replay at one position would hold it, from the recorded run's rows.

    Rows of recorded steps wholly behind the position are stored in `table`; the step the position
    falls inside (its pass began before the position, its accepted path reaches past it) lies over
    them in `recent`, without the rows of its path at or after the position. Both store as the
    recorded table stored; `row` looks up as AdjacencyTable.successors does, with the replay's bigram
    setting. The replay reads it only for nodes no recorded pass saw in their context.
    """

    def __init__(self, run: RunRecord, config: GooseConfig) -> None:
        self.use_bigram = config.use_bigram
        recorded = GooseConfig.from_dict(run.config)
        self.table = AdjacencyTable.from_config(recorded, recorded_prior(run, config))
        self.recent = AdjacencyTable.from_config(recorded)
        self._store(self.table, run.prefill_rows)
        self._steps = list(zip(anchor_positions(run), run.steps))
        self._applied = 0  # recorded steps wholly in the table

    @staticmethod
    def _store(table: AdjacencyTable, keyed_rows: Sequence[tuple[int | None, int, Row]]) -> None:
        table.store(*_columns(keyed_rows))

    @staticmethod
    def _keyed_rows(step: StepRecord, before_anchor: int | None, keep: Any) -> list[tuple[int | None, int, Row]]:
        """(previous, token, row) of each node of a recorded step that `keep(node index)` admits, in node order."""
        nodes = step.nodes
        return [(nodes[node.parent].token if node.parent >= 0 else before_anchor, node.token, row)
                for i, (node, row) in enumerate(zip(nodes, step.rows)) if keep(i)]

    @staticmethod
    def _shadow_keyed_rows(step: StepRecord, sequence: Sequence[int], start: int) -> list[tuple[int | None, int, Row]]:
        """(previous, token, row) of the step's shadow nodes off the continuation (`start`: the length of the
        sequence its anchor ends). A shadow node on the continuation may hold the row of a token at or after a
        later anchor, and is left out."""
        shadow = step.shadow or []
        tokens = [node.token for node in step.nodes] + [token for _, token, _ in shadow]
        paths = step_paths(step)[len(step.nodes):]
        return [(tokens[parent], token, row) for (parent, token, row), path in zip(shadow, paths)
                if context_key(sequence, start, path)[1]]

    def at(self, position: int, sequence: list[int], prompt_length: int) -> ReplayTable:
        """Move to `position` (never backwards): the table a replay whose anchor is tokens[position - 1] reads."""
        def before_anchor(start: int) -> int | None:
            index = prompt_length + start - 2
            return sequence[index] if index >= 0 else None

        while self._applied < len(self._steps):
            start, step = self._steps[self._applied]
            if start + len(step.committed) > position:
                break
            self._store(self.table, self._keyed_rows(step, before_anchor(start), lambda i: True))
            self._store(self.table, self._shadow_keyed_rows(step, sequence, prompt_length + start))
            self._applied += 1
        self.recent.unigram.clear()
        self.recent.bigram.clear()
        if self._applied < len(self._steps):
            start, step = self._steps[self._applied]
            if start < position:  # its pass came before; its path at depth >= position - start is still ahead
                on_path = {0, *step.accepted}
                ahead = {i for i in on_path if step.nodes[i].depth >= position - start}
                self._store(self.recent, self._keyed_rows(step, before_anchor(start), lambda i: i not in ahead))
        return self

    def row(self, token: int, previous: int | None = None) -> Row | None:
        """The row a lookup of `token` (after `previous`) reads, unfiltered; None when none was stored."""
        pairs = None
        if self.use_bigram and previous is not None:
            key = (previous, token)
            pairs = self.recent.bigram.get(key, self.table.bigram.get(key))
        if pairs is None:
            pairs = self.recent.unigram.get(token)
        return pairs if pairs is not None else self.table.unigram_row(token)


def _accepted_nodes(tree: DraftTree, continuation: list[int], accepted: int) -> list[int]:
    node, path = 0, []
    for token in continuation[:accepted]:
        node = tree.children[node][token]
        path.append(node)
    return path


def recorded_prior(run: RunRecord, config: GooseConfig) -> Mapping[int, Row] | None:
    """The rows of the prior the run's table started over, if the replay's `config` starts warm too (else None);
    NoReplayDataError when that prior is not on this machine."""
    if run.prior is None or not config.warm_start:
        return None
    prior = find_prior(run.model)
    if prior is None or prior.name != run.prior:
        raise NoReplayDataError(f"this run's adjacency table started over the prior {run.prior!r}, which is not on "
                                f"this machine (python -m goose build-prior --model {run.model} builds the model's "
                                "prior; a rebuilt one must be the same to replay the run)")
    return prior.rows


def check_replayable(run: RunRecord, method: str) -> None:
    """NoReplayDataError unless `run` holds what replaying it under `method` needs."""
    if run.sampling.get("temperature", 0.0) != 0.0:
        raise ValueError("a replay needs a greedy run (temperature 0): a sampled run's tokens are one draw, "
                         "not the continuation every tree is walked along")
    if not run.has_replay_data:
        raise NoReplayDataError("this run was recorded without the adjacency rows and tree shapes a replay needs "
                                "(an older trace, or recorded without sources): record it again with "
                                "goose.generate(..., record_sources=True)")
    if METHODS[method].uses_adjacency and not METHODS[run.method].uses_adjacency:
        raise NoReplayDataError(f"the recorded method {run.method!r} kept no adjacency table, so a {method!r} tree "
                                "cannot be rebuilt from it: record the run with a method that drafts from the table")


def replay(run: RunRecord, method: str, config: GooseConfig, base: int | None,
           shapes: Mapping[int, tuple[dict[str, Any], int]] | None = None) -> list[ReplayStep]:
    """The steps of `run` replayed under `method` and `config` (auto budget off).

    base: the base budget (grown with the match's confidence as a real run grows it); None: the run's own
    (under an auto budget: the node budget of the recorded step whose span holds each position).
    shapes: position -> (shape overrides, budget) to use there instead (the recorded run's own trees).
    """
    check_replayable(run, method)
    prompt, tokens = list(run.prompt_tokens), list(run.tokens)
    sequence, end = prompt + tokens, len(tokens)
    settings = GooseConfig.from_dict(run.config)
    matcher = ContextMatcher.from_config(settings)
    matcher.extend(prompt + tokens[:1])
    drafter = METHODS[method](config)
    table = None
    if drafter.uses_adjacency:  # the replay's own table, refreshed as a real run refreshes it
        table, recorded_rows = AdjacencyTable.from_config(config, recorded_prior(run, config)), RecordedRows(run)
        latest = ReplayTable(run, config)
        table.store(*_columns(run.prefill_rows))
    recorded = list(zip(anchor_positions(run), run.steps))
    steps, position, covering = [], 1, 0
    while position < end:
        while covering + 1 < len(recorded) and recorded[covering + 1][0] <= position:
            covering += 1
        match = matcher.match() if drafter.uses_context else ContextMatch()
        match.tokens = match.tokens[:max(0, run.max_new_tokens - position - 1)]
        start = len(prompt) + position  # the anchor's context: sequence[:start]
        state = DraftState(sequence[start - 1], sequence[start - 2], match, table, drafter.spine_acceptance)
        if shapes is not None:
            shape, budget = shapes[position]
            drafter.config = config.with_overrides(**shape)
        elif base is None and settings.auto_budget:  # the tuner's budget of the recorded step holding this position
            budget = recorded[covering][1].budget
        else:
            budget = drafter.budget(state, base if base is not None else settings.budget)
        tree = drafter.build(state, budget)
        continuation = tokens[position:]
        accepted = accepted_length(tree, continuation)
        path = _accepted_nodes(tree, continuation, accepted)
        drafter.observe(state, tree, path, continuation[:accepted + 1])
        if table is not None:
            latest.at(position, sequence, len(prompt))
            previous = [tree.tokens[p] if p >= 0 else sequence[start - 2] for p in tree.parents]
            keyed = [(before, token, recorded_rows.get(context_key(sequence, start, node_path))
                      or latest.row(token, before))
                     for before, token, node_path in zip(previous, tree.tokens, node_paths(tree.parents, tree.tokens))]
            table.store(*_columns([row for row in keyed if row[2] is not None]))
        steps.append(ReplayStep(position, budget, len(tree), accepted, tree))
        committed = min(accepted + 1, end - position)
        matcher.extend(tokens[position:position + committed])
        position += committed
    return steps


def _columns(keyed_rows: Sequence[tuple[int | None, int, Row]]) -> tuple[list[int], list[int | None], list[Row]]:
    """(previous, token, row) triples as AdjacencyTable.store's columns: tokens, previous tokens, rows."""
    return [token for _, token, _ in keyed_rows], [previous for previous, _, _ in keyed_rows], \
        [row for _, _, row in keyed_rows]


def own_shapes(run: RunRecord) -> dict[int, tuple[dict[str, Any], int]]:
    """position -> (shape overrides, budget) of each recorded step: replaying these rebuilds the run itself."""
    return {position: (dict(step.shape or {}), step.budget) for position, step in zip(anchor_positions(run),
                                                                                       run.steps)}
