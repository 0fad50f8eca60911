"""Source snapshots: what the tree builders read at one step, kept so that any other tree can be rebuilt later.

A step's tree is a pure function of its DraftState (goose.drafters): the anchor and
the token before it, the context match, the spine-acceptance EMA and the adjacency
rows the builder looks up. A snapshot keeps all of it, but only the adjacency rows
a builder could touch: recording happens by building a grid of the widest trees
the Lab and `goose.what_if` offer (every tree method, spine shares, rho, branching k,
bigram on and off, up to SNAPSHOT_BUDGET nodes) through a proxy that remembers
every row asked for, unigram and bigram tier both. A later rebuild reads only those
rows; a row outside them is counted as missing, never silently guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from goose.config import GooseConfig
from goose.drafters import METHODS, Balanced, DraftState, Recycling, SpineTree
from goose.sources import AdjacencyTable, ContextMatch
from goose.sources.adjacency import Row

SNAPSHOT_FORMAT = 1
SNAPSHOT_BUDGET = 128  # the largest tree (nodes, root included) a snapshot is recorded for
GRID_BUDGETS = (SNAPSHOT_BUDGET, SNAPSHOT_BUDGET // 4)
GRID_SPINE_SHARES = (0.0, 0.5, 1.0)
GRID_RHOS = (0.0, 1.0)
GRID_BRANCHING = (1, 2, 3, 4)


class RowPool:
    """Adjacency rows shared by the snapshots of one run, each kept once in JSON: most rows outlive many steps."""

    def __init__(self) -> None:
        self.rows: list[Row] = []
        self._index: dict[tuple, int] = {}

    def add(self, row: Row) -> int:
        """The row's index in the pool (added if new)."""
        key = tuple(row)
        if key not in self._index:
            self._index[key] = len(self.rows)
            self.rows.append(row)
        return self._index[key]

    def to_json(self) -> list[list[list]]:
        """Each row as [ids, scores], scores to float32 precision (9 significant digits)."""
        return [[[t for t, _ in row], [float(f"{s:.9g}") for _, s in row]] for row in self.rows]

    @staticmethod
    def from_json(data: list[list[list]]) -> list[Row]:
        """The rows back, scores exactly as the table held them (float32), whatever rounding JSON did."""
        return [list(zip(ids, torch.tensor(scores, dtype=torch.float32).tolist())) for ids, scores in data]


@dataclass
class Snapshot:
    """The sources at one step, as the builders saw them.

    unigram: token -> its successor row (every kept successor, unfiltered by min_score).
    bigram:  (previous, token) -> its row, or None where the table had no bigram row
             (the builder then fell back to the unigram row).
    max_budget: the largest tree the recorded rows were gathered for.
    """

    anchor: int
    before_anchor: int | None
    match: list[int]
    confidence: float
    ngram: int
    spine_acceptance: float
    max_budget: int = SNAPSHOT_BUDGET
    unigram: dict[int, Row] = field(default_factory=dict)
    bigram: dict[tuple[int, int], Row | None] = field(default_factory=dict)
    format: int = SNAPSHOT_FORMAT

    def state(self, adjacency: Any) -> DraftState:
        """The DraftState this snapshot holds, reading adjacency rows from `adjacency`."""
        return DraftState(self.anchor, self.before_anchor, ContextMatch(list(self.match), self.confidence,
                                                                        self.ngram),
                          adjacency, self.spine_acceptance)

    def tokens(self) -> set[int]:
        """Every token id the snapshot mentions (to keep their texts beside the trace)."""
        found = {self.anchor, *self.match}
        for row in [*self.unigram.values(), *self.bigram.values()]:
            found.update(token for token, _ in row or ())
        return found

    def to_dict(self, pool: RowPool | None = None) -> dict[str, Any]:
        """JSON-ready and compact: rows as indices into `pool` (the run's); without one, the snapshot
        carries its own pool under "rows"."""
        own = pool is None
        pool = pool or RowPool()
        data = {"format": self.format, "anchor": self.anchor, "before_anchor": self.before_anchor,
                "match": self.match, "confidence": self.confidence, "ngram": self.ngram,
                "spine_acceptance": self.spine_acceptance, "max_budget": self.max_budget,
                "unigram": [[token, pool.add(row)] for token, row in self.unigram.items()],
                "bigram": [[previous, token, pool.add(row) if row is not None else None]
                           for (previous, token), row in self.bigram.items()]}
        if own:
            data["rows"] = pool.to_json()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any], rows: list[Row] | None = None) -> Snapshot:
        """A snapshot from `to_dict`'s form; `rows`: the run's pool (RowPool.from_json), if it has one."""
        if data.get("format") != SNAPSHOT_FORMAT:
            raise ValueError(f"unknown snapshot format {data.get('format')!r} (this Goose reads {SNAPSHOT_FORMAT})")
        if "rows" in data:
            rows = RowPool.from_json(data["rows"])
        if rows is None:
            raise ValueError("a snapshot's rows are missing (neither its own nor the run's)")
        return cls(anchor=data["anchor"], before_anchor=data["before_anchor"], match=list(data["match"]),
                   confidence=data["confidence"], ngram=data["ngram"], spine_acceptance=data["spine_acceptance"],
                   max_budget=data["max_budget"],
                   unigram={token: rows[i] for token, i in data["unigram"]},
                   bigram={(previous, token): rows[i] if i is not None else None
                           for previous, token, i in data["bigram"]})


class RecordedRows:
    """A `Successors` over a snapshot's rows, with a run's min_score and bigram setting.

    With `live` (a real AdjacencyTable) it records: a row it lacks is copied from the live
    table. Without, a row it lacks is missing: it answers no successors and counts it in `missing`.
    """

    def __init__(self, snapshot: Snapshot, config: GooseConfig, live: AdjacencyTable | None = None) -> None:
        self.snapshot = snapshot
        self.min_score = config.min_score
        self.use_bigram = config.use_bigram
        self.live = live
        self.missing: set[tuple[int | None, int]] = set()

    def _unigram(self, token: int) -> Row | None:
        rows = self.snapshot.unigram
        if token not in rows and self.live is not None:
            rows[token] = list(self.live.unigram_row(token) or [])
        return rows.get(token)

    def _bigram(self, previous: int, token: int) -> tuple[bool, Row | None]:
        """(known, row): whether the snapshot knows the key, and its row (None: no bigram row)."""
        rows, key = self.snapshot.bigram, (previous, token)
        if key not in rows and self.live is not None:
            found = self.live.bigram.get(key)
            rows[key] = list(found) if found is not None else None
        return key in rows, rows.get(key)

    def successors(self, token: int, previous: int | None = None) -> list[tuple[int, float]]:
        pairs = None
        if self.use_bigram and previous is not None:
            known, pairs = self._bigram(previous, token)
            if not known:
                self.missing.add((previous, token))
                return []
        if pairs is None:
            pairs = self._unigram(token)
            if pairs is None:
                self.missing.add((None, token))
                return []
        return [(t, s) for t, s in pairs if s >= self.min_score]


def _grid(config: GooseConfig) -> list[tuple[str, GooseConfig]]:
    """The (method, config) of every tree the recording builds at each grid budget."""
    bigram = (True, False) if config.use_bigram else (False,)
    trees = []
    for use_bigram in bigram:
        base = config.with_overrides(use_bigram=use_bigram)
        trees.append((Recycling.name, base))
        trees.extend((Balanced.name, base.with_overrides(branching=k)) for k in GRID_BRANCHING)
        trees.extend((SpineTree.name, base.with_overrides(spine_share=share, spine_branch_share=rho))
                     for share in GRID_SPINE_SHARES for rho in GRID_RHOS)
    return trees


def take_snapshot(state: DraftState, config: GooseConfig, budget: int = SNAPSHOT_BUDGET
                  ) -> tuple[Snapshot, DraftState]:
    """Snapshot the sources of `state` (whose adjacency, if any, is a live table): the match, the EMA,
    and every row the grid of widest trees (up to `budget` nodes) looks up. Also returns the state to
    draft from: the same, read through a recorder, so the step's own trees add their rows too."""
    match = state.match
    snapshot = Snapshot(state.anchor, state.before_anchor, list(match.tokens), match.confidence, match.ngram,
                        state.spine_acceptance, budget)
    if not isinstance(state.adjacency, AdjacencyTable):
        return snapshot, state
    budgets = [b for b in GRID_BUDGETS if b <= budget] or [budget]
    for method, grid_config in _grid(config):
        recorder = RecordedRows(snapshot, grid_config, state.adjacency)
        drafter = METHODS[method](grid_config)
        for size in budgets:
            drafter.build(snapshot.state(recorder), size)
    return snapshot, snapshot.state(RecordedRows(snapshot, config, state.adjacency))
