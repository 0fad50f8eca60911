"""The recorded passes' adjacency rows, by the context a node was verified in (goose.whatif): exact where a
recorded pass saw the node in its context (`PassRows`), else its token's latest row before its place (`LatestRows`)."""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from goose.sources.adjacency import Row
from goose.trace import RunRecord, StepRecord

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


def anchor_positions(run: RunRecord) -> list[int]:
    """Each recorded step's position: new tokens committed before it (the prefill commits the first)."""
    positions, position = [], 1
    for step in run.steps:
        positions.append(position)
        position += len(step.committed)
    return positions


class PassRows:
    """Every adjacency row the recorded passes computed (their shadow trees' too), by the context it was
    computed in: exact for any node a replay verifies in the same context."""

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


class LatestRows:
    """Every row the recorded passes computed (the prefill's, every tree's, the shadow trees'), by token and by
    its place in the text: what a replayed node no recorded pass saw in its context reads.

    A real run would compute that node's row afresh, in the node's own context. A row is mostly a function of
    its token and the text just before it, so the stand-in is the latest row the recording holds for the same
    token at or before the node's own place in the text. (Read at the anchor instead, the stand-in is stale
    wherever the replay's tree reaches further than the recorded one did, and a stale row drafts stale
    branches: that rule read a tenth to a fifth low from budget 16 on; docs/WHAT_IF.md has both.) A row
    found between the anchor and the node may belong to the continuation the step is verifying; it stands in
    for the row of another node, never for its own (that one is exact, `PassRows`).
    Places count as anchor_positions does: a node at depth d of a tree anchored at p sits at p + d; the
    prompt's tokens at 0 and below.
    """

    def __init__(self, run: RunRecord) -> None:
        found: dict[int, list[tuple[int, Row]]] = {}  # token -> (place, row), in the order they were computed
        prompt = run.prompt_tokens
        last = {(prompt[i - 1] if i else None, token): i for i, token in enumerate(prompt)}
        for previous, token, row in run.prefill_rows or []:
            found.setdefault(token, []).append((last.get((previous, token), len(prompt) - 1) + 1 - len(prompt), row))
        for position, step in zip(anchor_positions(run), run.steps):
            shadow = step.shadow or []
            tokens = [*(node.token for node in step.nodes), *(token for _, token, _ in shadow)]
            rows = [*step.rows, *(row for _, _, row in shadow)]
            for token, path, row in zip(tokens, step_paths(step), rows):
                found.setdefault(token, []).append((position + len(path), row))  # its place: anchor + depth
        self._places: dict[int, list[int]] = {}
        self._rows: dict[int, list[Row]] = {}
        for token, entries in found.items():
            entries.sort(key=lambda entry: entry[0])  # stable: at one place, the later computed last
            self._places[token] = [place for place, _ in entries]
            self._rows[token] = [row for _, row in entries]

    def row(self, token: int, place: int) -> Row | None:
        """The latest recorded row of `token` at or before `place` (None if it has none there)."""
        latest = bisect.bisect_right(self._places.get(token, ()), place) - 1
        return self._rows[token][latest] if latest >= 0 else None
