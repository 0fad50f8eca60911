"""Step and run records: what the app, the benchmarks, the CLI and exports all read.

A step is one draft-and-verify cycle: the tree (per node its token, text,
source, parent, depth, score and what the target model chose there), the
accepted path, the bonus token and the timings, and, in a recorded run, what a
replay of it needs (goose.whatif). A run is a prompt, a method, its steps, its
totals and what it started from. Both round-trip through JSON. This module is the
bottom of the stack: a trace loads without the model, the head, the costs or the loop.

Format 2 added source snapshots and the verification cost table; format 3 the adjacency rows every
pass stored (the prefill's and each step's, one per node) and the shape the tuner gave each tree,
and split a step's time after drafting into verify_s (the forward pass and the walk) and observe_s
(the rest); a run recorded with a shadow budget also holds each step's shadow rows. Format 4 drops
the snapshots (a replay of the run rebuilds every step's sources exactly) and keeps the cost table the
tuner read, so that a run's trees follow from its record; a suffix run that read a store of past outputs keeps
it (its name and outputs) under "store". Older formats still load (a format-2 or -3
snapshot is ignored; before format 3, verify_s holds all of the step after drafting, observe_s 0).
"""

from __future__ import annotations

import json
from array import array
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from goose.sources.adjacency import Row
from goose.trace_check import TraceError, check_run

TRACE_FORMAT = "goose-trace/4"
READABLE_FORMATS = ("goose-trace/1", "goose-trace/2", "goose-trace/3", TRACE_FORMAT)


class RowPool:
    """The adjacency rows of one run, each kept once in JSON: most rows are stored by many passes."""

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
        return [list(zip(ids, array("f", scores).tolist())) for ids, scores in data]


@dataclass
class NodeRecord:
    """One draft-tree node as verified.

    target:  the token the target model chose after this node (its argmax
             when greedy, its sample when sampling); None where not computed.
    status:  "root", "accepted", "rejected" (tried and refused) or "unvisited"
             (its parent was never reached).
    accept_prob: sampling only: the probability with which it was accepted
             (or failed to be); greedy steps leave it None.
    """

    token: int
    text: str
    source: str
    parent: int
    depth: int
    score: float
    target: int | None = None
    status: str = "unvisited"
    accept_prob: float | None = None
    reason: str = ""


@dataclass
class StepRecord:
    """One speculation step: tree, accepted path (node indices, root excluded), bonus, timings;
    When the run was recorded with its sources:
    `rows`, the adjacency row the pass stored for each node (node order); `shape`, the shape knobs
    the tuner set over the run's config for this tree (empty without a tuner); `shadow`, recorded with a
    shadow budget: (parent, token, row) of each node a bigger tree had beyond this one, verified outside
    the run (parents numbered after this tree's nodes; goose.decode.Recorder).

    Timings: draft_s builds the tree; verify_s is its forward pass and the walk along it; observe_s
    the rest of the step: committing the tokens, the drafter's (and tuner's) learning and the
    adjacency refresh (0 in traces before format 3, whose verify_s holds it)."""

    index: int
    nodes: list[NodeRecord]
    accepted: list[int]
    bonus_token: int
    bonus_text: str
    committed: list[int]
    draft_s: float
    verify_s: float
    budget: int
    observe_s: float = 0.0
    rows: list[Row] | None = None
    shape: dict[str, Any] | None = None
    shadow: list[tuple[int, int, Row]] | None = None

    @property
    def accepted_length(self) -> int:
        """Draft tokens accepted this step (the bonus token not counted)."""
        return len(self.accepted)

    @property
    def seconds(self) -> float:
        """The step's own time: drafting, verification and observation."""
        return self.draft_s + self.verify_s + self.observe_s

    @property
    def path(self) -> list[int]:
        return [0, *self.accepted]

    @property
    def revealed(self) -> list[int]:
        """The target's greedy continuation this step revealed (greedy runs): accepted tokens, then the bonus."""
        return [self.nodes[n].token for n in self.accepted] + [self.bonus_token]

    def to_dict(self, pool: RowPool | None = None) -> dict[str, Any]:
        """JSON-ready; the adjacency rows go to `pool` (the run's) when given."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("nodes", "rows", "shadow")}
        data["nodes"] = [asdict(node) for node in self.nodes]
        pool = pool if pool is not None else RowPool()
        if self.rows is not None:
            data["rows"] = [pool.add(row) for row in self.rows]
        if self.shadow is not None:
            data["shadow"] = [[parent, token, pool.add(row)] for parent, token, row in self.shadow]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any], rows: list | None = None) -> StepRecord:
        data = dict(data)
        data.pop("snapshot", None)  # formats 2 and 3: a replay rebuilds it
        data["nodes"] = [NodeRecord(**node) for node in data["nodes"]]
        if data.get("rows") is not None:
            data["rows"] = [rows[i] for i in data["rows"]]
        if data.get("shadow") is not None:
            data["shadow"] = [(parent, token, rows[i]) for parent, token, i in data["shadow"]]
        return cls(**data)


@dataclass
class RunTotals:
    """Totals of a run. tau = new tokens / target forward passes (prefill counted).

    wall_s runs from the call to the last token, set-up included, the caller's time between steps, observers
    and node texts left out (goose.decode.Generation); setup_s is the part before the prefill (encoding, head,
    verifier, tables), prefill_s the prompt's forward pass."""

    new_tokens: int = 0
    forward_passes: int | None = 0  # None where the passes were not counted
    tau: float | None = 0.0  # None without counted passes (goose.metrics.tau)
    tokens_per_s: float = 0.0
    wall_s: float = 0.0
    prefill_s: float | None = 0.0  # None where the prefill is not timed apart (transformers' generate)
    setup_s: float = 0.0
    drafted: dict[str, int] = field(default_factory=dict)
    accepted: dict[str, int] = field(default_factory=dict)


@dataclass
class RunRecord:
    """A whole generation: inputs, output, steps and totals.

    token_texts: texts of token ids beyond the steps' own (to draw rebuilt trees without a tokenizer).
                 In JSON the adjacency rows are pooled under "rows", each row once.
    costs:       seconds of one verification step per tree size on the recording device: the table the budget
                 tuner read (fixed before the run), or kept for a replay's estimates; {} where neither.
    autoregressive_s: seconds of one plain autoregressive pass (the root alone, no adjacency top-k), measured
                 with `costs`: what a method that keeps no adjacency table pays per pass; None where not known.
    prefill_row_s: seconds per prompt row of the head's top-k, which a prefill pays for the rows the adjacency
                 table keeps (`prefill_rows`), measured with `costs`; None where not known.
    prefill_rows: the adjacency rows the prefill stored, as (previous, token, row) in order; None when the
                 run was not recorded with its sources (an empty list: recorded, no adjacency table kept).
    prior:       the name of the prior the adjacency table started over (goose.sources.prior), None if none.
    tuner_start: what the budget tuner started from (goose.tuning: learnt on the recording machine), None if
                 it started from nothing.
    parallel:    a run on a model split over several ranks (goose.parallel.Parallel): world_size, backend, the
                 plan entries replicated instead of split and why pieces run differently; None in one process.
    store:       the store of past outputs a suffix run read (goose.sources.suffix.SuffixStore): its name and the
                 outputs it held when the run started, {"name": ..., "outputs": [[token ids], ...]}; None when the
                 run read only its own prompt and output.
    """

    prompt: str
    method: str
    model: str
    config: dict[str, Any]
    sampling: dict[str, Any]
    max_new_tokens: int
    prompt_tokens: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    text: str = ""
    stop_reason: str = ""
    steps: list[StepRecord] = field(default_factory=list)
    totals: RunTotals = field(default_factory=RunTotals)
    token_texts: dict[int, str] = field(default_factory=dict)
    costs: dict[int, float] = field(default_factory=dict)
    autoregressive_s: float | None = None
    prefill_row_s: float | None = None
    head: str = "screened"  # the LM head every method applied: "screened" (exact argmax) or "full"
    prefill_rows: list[tuple[int | None, int, Row]] | None = None
    prior: str | None = None
    tuner_start: dict[str, Any] | None = None
    parallel: dict[str, Any] | None = None
    store: dict[str, Any] | None = None
    format: str = TRACE_FORMAT

    @property
    def accepted_lengths(self) -> list[int]:
        """Draft tokens accepted at each step (the bonus token not counted)."""
        return [step.accepted_length for step in self.steps]

    @property
    def has_replay_data(self) -> bool:
        """Recorded with what a whole-run replay needs: every pass's adjacency rows (if it kept a table)
        and each tree's shape (goose.whatif). A run that ended at the prefill's token has no step to replay,
        and replays to itself all the same."""
        return self.prefill_rows is not None and all(step.shape is not None for step in self.steps)

    def to_dict(self) -> dict[str, Any]:
        pool = RowPool()
        skip = ("steps", "totals", "prefill_rows")
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip}
        data["steps"] = [step.to_dict(pool) for step in self.steps]
        data["prefill_rows"] = (None if self.prefill_rows is None
                                else [[previous, token, pool.add(row)] for previous, token, row in self.prefill_rows])
        data["totals"] = asdict(self.totals)
        data["rows"] = pool.to_json()
        return data

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json(indent=1), encoding="utf-8")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunRecord:
        """The run a trace's JSON holds; TraceError (a ValueError: "not a Goose trace: ...") for anything else."""
        if not isinstance(data, dict) or data.get("format") not in READABLE_FORMATS:
            raise TraceError(f"expected a JSON object with format {TRACE_FORMAT!r}")
        check_run(data)
        known = {f.name for f in fields(cls)}
        try:
            rows = RowPool.from_json(data.get("rows", []))
            data = {k: v for k, v in data.items() if k in known}
            data["steps"] = [StepRecord.from_dict(step, rows) for step in data["steps"]]
            data["totals"] = RunTotals(**data["totals"])
            data["token_texts"] = {int(k): v for k, v in data.get("token_texts", {}).items()}
            data["costs"] = {int(k): v for k, v in data.get("costs", {}).items()}
            if data.get("prefill_rows") is not None:
                data["prefill_rows"] = [(previous, token, rows[i]) for previous, token, i in data["prefill_rows"]]
            data["format"] = TRACE_FORMAT
            return cls(**data)
        except (TypeError, KeyError) as error:  # a field no format has
            raise TraceError(str(error)) from error

    @classmethod
    def from_json(cls, text: str) -> RunRecord:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise TraceError(f"invalid JSON ({error})") from error
        return cls.from_dict(data)

    @classmethod
    def load(cls, path: str | Path) -> RunRecord:
        return cls.from_json(read_text(path))


def read_text(path: str | Path) -> str:
    """A trace file's text; TraceError for a file that is not UTF-8 text (a picture, a zip)."""
    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise TraceError(f"it is not UTF-8 text (byte {error.start} is {data[error.start]:#04x}; "
                         "expected a .json trace)") from None
