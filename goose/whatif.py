"""What if a step, or a whole run, had drafted other trees? Recorded runs replayed, no model needed.

Under greedy decoding the continuation is fixed by the prompt: whatever tree a step
drafts, the tokens committed are the recorded run's, and a tree accepts the longest
prefix of the continuation that is one of its paths (DraftTree.walk). So a run at other
settings is the same decoding loop (goose.decode) with a target that reads the recording
instead of running the model (`RecordedTarget`): every step builds the tree those settings
would draft there, walks it along the recorded continuation and advances by accepted + 1.

What a replayed step is built from, and how exact it is:
- the context match is a function of the token prefix: exact;
- the spine-acceptance EMA and the budget tuner follow the replay's own trees, the tuner over
  the cost table the run recorded: exact;
- SuffixDecoding's cache is a function of the token prefix and the store the run recorded: exact;
- the adjacency table is the replay's own, refreshed after every replayed step with a row per
  node of its own tree. A node's row is a function of its context (the sequence up to the
  anchor, then its path), so where a recorded pass verified a node in the same context its row
  is exact (`PassRows`); the accepted path's always is. Approximated: a node no recorded pass saw
  in its context (a rejected node of a tree other than the recorded ones) takes its token's
  latest recorded row at or before its own place in the text (`LatestRows`), or, where there
  is none, keeps its old row.
Replaying the recorded settings therefore rebuilds the recorded run itself, tree for tree: the
loop is the same, and so is everything it starts from (recorded in the trace).

Estimates: a replay's passes priced by the run's cost table (`estimated_totals`). Running the
model to check an estimate is measuring, and lives with it (goose.check).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from goose import metrics, validate
from goose.budget import interpolate_cost
from goose.config import GooseConfig
from goose.decode import Generation, Observer, Request
from goose.drafters import METHODS, Drafter, DraftState, SpineTree
from goose.sampling import Sampling
from goose.sources import AdjacencyTable, SuffixStore
from goose.sources.adjacency import Row
from goose.sources.prior import find_prior
from goose.trace import RunRecord, RunTotals, StepRecord
from goose.tree import DraftTree
from goose.walk import Verification, greedy_verdicts

# Knobs that change the sources themselves (the matcher, the table, the EMA), not the shape built from them:
# a recording cannot answer for them.
SOURCE_SETTINGS = ("ngram_lengths", "max_chain", "long_match", "extend_above", "max_extended_chain", "top_k",
                   "ema_alpha", "ema_start")
ALIASES = {"rho": "spine_branch_share", "branch_depth": "max_branch_depth", "k": "branching"}


class NoReplayDataError(ValueError):
    """The run was recorded without what a replay needs (the adjacency rows of its passes), or the method replayed
    cannot run here (its library is missing: Drafter.unavailable)."""


# --- the recorded passes' rows, by context -------------------------------------------------------------

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


# --- the recording as the loop's target --------------------------------------------------------------

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


class RecordedTarget:
    """A recorded greedy run as the decoding loop's target: verifies a tree by walking it along the recorded
    continuation, and gives each node the row the recorded passes computed in its context (`PassRows`), else
    its token's latest recorded row at or before its place (`LatestRows`)."""

    def __init__(self, run: RunRecord, config: GooseConfig, method: str) -> None:
        self.run, self.method = run, method
        self.model, self.head, self.parallel = run.model, run.head, run.parallel
        self.eos: set[int] = set()  # the recording ends where it ends (ends_after), for whatever reason it did
        self.tokens = list(run.tokens)
        self.sequence = [*run.prompt_tokens, *run.tokens]
        self._prior = recorded_prior(run, config)
        self._pass_rows = PassRows(run)
        self._latest = LatestRows(run)
        self._texts = dict(run.token_texts)
        for step in run.steps:
            self._texts.update((node.token, node.text) for node in step.nodes)
            self._texts[step.bonus_token] = step.bonus_text
        self.position = 0  # new tokens committed before the step being verified

    def encode(self, prompt: str) -> list[int]:
        return list(self.run.prompt_tokens)

    def check_fits(self, prompt_tokens: int, max_new_tokens: int) -> None:
        pass

    def prior(self) -> tuple[str, Mapping[int, Row]] | None:
        return (self.run.prior, self._prior) if self._prior is not None else None

    def costs(self) -> dict[int, float]:
        return dict(self.run.costs)

    def tuner_start(self) -> dict | None:
        """Where the recorded run's tuner started: a replay of its method starts there too (another method's
        tuner has other knobs, and starts from nothing)."""
        return self.run.tuner_start if self.method == self.run.method else None

    def prefill(self, prompt: Sequence[int], table_rows: Sequence[int], table: AdjacencyTable | None
                ) -> tuple[int, list[Row | None]]:
        stored = {(previous, token): row for previous, token, row in self.run.prefill_rows or []}
        by_token = {token: row for _, token, row in self.run.prefill_rows or []}
        rows = [stored.get((prompt[i - 1] if i else None, prompt[i]), by_token.get(prompt[i])) for i in table_rows]
        self.position = 1
        return self.tokens[0], rows

    def verify(self, tree: DraftTree, before_anchor: int | None, table: AdjacencyTable | None) -> Verification:
        continuation = self.tokens[self.position:]
        accepted = tree.walk(continuation)
        # Past the recorded end the target's next token is unknown; the loop stops before it would commit one.
        bonus = continuation[len(accepted)] if len(accepted) < len(continuation) else -1
        targets: list[int | None] = [None] * len(tree)
        verdicts = {}
        for depth, node in enumerate([0, *accepted]):
            targets[node] = continuation[depth] if depth < len(continuation) else None
            verdicts.update(greedy_verdicts(tree, node, targets[node]))
        rows = self._rows(tree) if table is not None else None
        self.position += len(accepted) + 1
        return Verification(accepted, bonus, targets, verdicts, rows)

    def _rows(self, tree: DraftTree) -> list[Row | None]:
        start = len(self.run.prompt_tokens) + self.position  # the anchor's context: sequence[:start]
        return [self._pass_rows.get(context_key(self.sequence, start, path))
                or self._latest.row(token, self.position + len(path))
                for token, path in zip(tree.tokens, node_paths(tree.parents, tree.tokens))]

    def ends_after(self, new_tokens: int) -> str:
        return (self.run.stop_reason or "end of the recording") if new_tokens >= len(self.tokens) else ""

    def text(self, tokens: Sequence[int]) -> str:
        return "".join(self.token_texts(tokens))

    def token_texts(self, tokens: Sequence[int]) -> list[str]:
        return [self._texts.get(token, "") for token in tokens]


def known_continuation(run: RunRecord) -> list[int]:
    """The target's greedy continuation as far as the run knows it: its tokens, then what its last step's pass
    revealed past the point where the run stopped committing (max_new_tokens, a stop string)."""
    if not run.steps:
        return list(run.tokens)
    last = run.steps[-1]
    return [*run.tokens, *last.revealed[len(last.committed):]]


def check_replayable(run: RunRecord, method: str) -> None:
    """NoReplayDataError (a ValueError) unless `run` holds what replaying it under `method` needs, and `method` can
    run here."""
    if reason := METHODS[method].unavailable():
        raise NoReplayDataError(reason)
    if run.sampling.get("temperature", 0.0) != 0.0:
        raise ValueError("a replay needs a greedy run (temperature 0): a sampled run's tokens are one draw, "
                         "not the continuation every tree is walked along")
    if not run.has_replay_data:
        raise NoReplayDataError("this run was recorded without the adjacency rows a replay needs (an older "
                                "trace, or recorded without them): record it again with "
                                "goose.generate(..., record_sources=True)")
    if METHODS[method].uses_adjacency and not METHODS[run.method].uses_adjacency:
        raise NoReplayDataError(f"the recorded method {run.method!r} kept no adjacency table, so a {method!r} tree "
                                "cannot be rebuilt from it: record the run with a method that drafts from the table")


def recorded_store(run: RunRecord, method: str) -> SuffixStore | None:
    """The store of past outputs `run` read, as it was when the run started, for a `method` that reads one (a
    fixed copy: neither a replay nor a check adds to it); None when the run read none or `method` reads none."""
    return SuffixStore.from_snapshot(run.store) if run.store is not None and METHODS[method].uses_suffix else None


def replay_generation(run: RunRecord, method: str, config: GooseConfig) -> Generation:
    """The decoding loop over the recording of `run`, drafting with `method` and `config`: iterate it for the
    replayed steps (StepRecords, as a real run's)."""
    check_replayable(run, method)
    request = Request(tuple(run.prompt_tokens), method, run.max_new_tokens, config, Sampling(), (),
                      store=recorded_store(run, method))
    return Generation(RecordedTarget(run, config, method), request)


# --- settings ------------------------------------------------------------------------------------------

def own_setting(run: RunRecord, settings: Mapping[str, Any]) -> bool:
    """Whether `settings` are the run's own (as resolve_settings reads them): replaying them rebuilds the run."""
    return resolve_settings(run, settings) == resolve_settings(run, {})


def resolve_settings(run: RunRecord, settings: Mapping[str, Any]) -> tuple[str, GooseConfig]:
    """(method, config) of `settings` over the run's own: the run's own setting where `settings` is empty
    (the one rule for "the run's own setting"); a fixed budget where it names one. ValueError/TypeError when
    bad."""
    settings = {ALIASES.get(name, name): value for name, value in settings.items()}
    method = validate.choice("method", settings.pop("method", None) or run.method, list(METHODS))
    sources = sorted(set(settings) & set(SOURCE_SETTINGS))
    if sources:
        raise ValueError(f"{', '.join(sources)} change(s) the draft sources, not the tree shape: a recording cannot "
                         "answer for them (run again instead)")
    budget = settings.pop("budget", None)
    if budget is not None and budget != "auto":  # GooseConfig checks it, as it checks every knob
        settings.update(budget=budget, auto_budget=False)
    elif budget == "auto":
        settings["auto_budget"] = True
    return method, GooseConfig.from_dict(run.config).with_overrides(**settings)


# --- one step ------------------------------------------------------------------------------------------

@dataclass
class WhatIf:
    """One step rebuilt under other settings and scored against the recorded continuation.

    tree:     the rebuilt DraftTree; budget: its node budget.
    accepted: draft tokens the greedy walk accepts (the bonus not counted).
    revealed: the target's greedy continuation from the step on, as far as the run knows it.
    lower_bound: the tree holds all of `revealed` (the run ended inside it), so it may have accepted more.
    """

    tree: DraftTree
    budget: int
    accepted: int
    revealed: list[int]
    lower_bound: bool

    @property
    def exact(self) -> bool:
        """`accepted` equals what a real verification of this settings' tree would accept."""
        return not self.lower_bound

    @property
    def accepted_path(self) -> list[int]:
        """Accepted nodes of `tree`, root excluded."""
        return self.tree.walk(self.revealed)


class _StepAt(Observer):
    """An observer of a replay at the run's own setting: at step `index`, the tree `drafter` builds from the
    state the loop drafts that step from (None: the loop's own tree), at the base budget `base` grown as a real
    run grows it (None: the recorded step's node budget)."""

    def __init__(self, run: RunRecord, index: int, drafter: Drafter | None, base: int | None) -> None:
        self.index, self.drafter, self.base = index, drafter, base
        self.recorded_budget = run.steps[index].budget
        self.result: tuple[DraftTree, int] | None = None

    def drafted(self, generation: Generation, state: DraftState, tree: DraftTree) -> None:
        if len(generation.run.steps) != self.index or self.result is not None:
            return
        if self.drafter is None:
            self.result = tree, self.recorded_budget
            return
        budget = self.recorded_budget if self.base is None else self.drafter.budget(state, self.base)
        self.result = self.drafter.build(state, budget), budget


def what_if(run: RunRecord, step_index: int, **settings: Any) -> WhatIf:
    """Rebuild step `step_index` of `run` under `settings` and score it against the recorded continuation.

    The step's sources are rebuilt exactly by replaying the run at its own setting up to the step.
    Settings: method, budget (the base budget, grown with the step's match confidence as a
    real run grows it; none = the step's own node budget), any GooseConfig shape knob (spine_share,
    spine_branch_share alias rho, max_branch_depth, branch_order, branching, use_bigram,
    min_score, max_budget, spine_tiers); none at all = the step's own tree.
    Bad settings raise ValueError (TypeError for an unknown name).
    """
    if run.sampling.get("temperature", 0.0) != 0.0:
        raise ValueError("what-if needs a greedy run (temperature 0): a sampled step reveals a draw, "
                         "not the target's greedy continuation")
    if isinstance(step_index, bool) or not isinstance(step_index, int) or not 0 <= step_index < len(run.steps):
        raise ValueError(f"step_index must be a step of this run, 0..{len(run.steps) - 1}, got {step_index!r}")
    settings = {ALIASES.get(name, name): value for name, value in settings.items()}
    method, config = resolve_settings(run, settings)
    check_replayable(run, method)
    drafter = METHODS[method](config.with_overrides(auto_budget=False)) if settings else None
    watcher = _StepAt(run, step_index, drafter, settings.get("budget"))
    generation = replay_generation(run, run.method, GooseConfig.from_dict(run.config))
    generation.observers.append(watcher)
    for _ in generation:
        if watcher.result is not None:
            break
    tree, budget = watcher.result
    revealed = known_continuation(run)[anchor_positions(run)[step_index]:]
    accepted = len(tree.walk(revealed))
    return WhatIf(tree, budget, accepted, revealed, accepted == len(revealed))


# --- a whole run ---------------------------------------------------------------------------------------

@dataclass
class ReplayStep:
    """One step of a replay. position: new tokens committed before it (its anchor is tokens[position - 1]);
    budget: its node budget; nodes: its tree's size; accepted: draft tokens the walk accepts."""

    position: int
    budget: int
    nodes: int
    accepted: int
    step: StepRecord = field(repr=False)


def estimated_totals(run: RunRecord, nodes: Sequence[int], tokens: int) -> RunTotals:
    """Totals of a run of `tokens` new tokens whose steps verify trees of `nodes` nodes: the recorded
    prefill plus each step's cost from the run's cost table (wall 0 without a table)."""
    passes = 1 + len(nodes)
    wall = (run.totals.prefill_s or 0.0) + sum(interpolate_cost(run.costs, n) for n in nodes) if run.costs else 0.0
    totals = RunTotals(new_tokens=tokens, forward_passes=passes, wall_s=wall, prefill_s=run.totals.prefill_s)
    totals.tau, totals.tokens_per_s = metrics.tau(totals), metrics.tokens_per_s(totals)
    return totals


@dataclass
class RunWhatIf:
    """A whole run replayed under one setting with its own step boundaries.

    steps: the replay's steps; real: the recorded run's accepted length per step.
    totals: the replay's tokens, passes, tau and estimated wall time (the recorded prefill plus each
            tree's cost from the run's cost table; 0 without a table);
    baseline: the same estimate for autoregressive decoding (one node per pass).
    exact: the replay is what a real run at these settings does, pass for pass (the recorded setting, or
           a method that drafts from the context alone); otherwise the adjacency rows are approximated.
    measured: the real run at these settings (goose.check), or None.
    """

    settings: dict[str, Any]
    method: str
    steps: list[ReplayStep]
    real: list[int]
    totals: RunTotals
    baseline: RunTotals
    exact: bool
    has_costs: bool
    replayed: RunRecord | None = field(default=None, repr=False)
    measured: Any = None

    @property
    def tokens(self) -> int:
        return self.totals.new_tokens

    @property
    def passes(self) -> int:
        return self.totals.forward_passes

    @property
    def accepted(self) -> list[int]:
        return [step.accepted for step in self.steps]

    @property
    def budgets(self) -> list[int]:
        return [step.budget for step in self.steps]

    @property
    def nodes(self) -> list[int]:
        return [step.nodes for step in self.steps]

    @property
    def positions(self) -> list[int]:
        return [step.position for step in self.steps]

    @property
    def tau(self) -> float:
        return metrics.tau(self.totals) or 0.0

    @property
    def seconds(self) -> float | None:
        """Estimated wall seconds (None without a cost table)."""
        return self.totals.wall_s if self.has_costs else None

    @property
    def tokens_per_s(self) -> float | None:
        return metrics.tokens_per_s(self.totals) if self.has_costs else None

    @property
    def speedup(self) -> float | None:
        """Estimated speed-up over autoregressive decoding on the same cost table (None without one)."""
        return metrics.speedup(self.totals, self.baseline) if self.has_costs else None

    @property
    def tau_error(self) -> float | None:
        """The estimate's relative error against the real run: estimate / real - 1 (None unchecked)."""
        return relative_error(self.tau, self.measured.tau) if self.measured else None

    @property
    def speedup_error(self) -> float | None:
        return relative_error(self.speedup, self.measured.speedup) if self.measured else None


def relative_error(estimate: float | None, real: float | None) -> float | None:
    """estimate / real - 1; None when either is unknown."""
    share = metrics.ratio(estimate, real)
    return None if share is None else share - 1.0


def replay(run: RunRecord, **settings: Any) -> RunWhatIf:
    """`run` replayed under `settings` (see what_if; none: the run's own setting, which rebuilds the run itself)
    with its own step boundaries: tau, passes and an estimated speed from the run's cost table."""
    settings = {ALIASES.get(name, name): value for name, value in settings.items()}
    method, config = resolve_settings(run, settings)
    generation = replay_generation(run, method, config)
    steps, position = [], 1
    for step in generation:
        steps.append(ReplayStep(position, step.budget, len(step.nodes), step.accepted_length, step))
        position += len(step.committed)
    tokens = len(run.tokens)  # the replay commits the recorded tokens to the end
    return RunWhatIf(dict(settings), method, steps, run.accepted_lengths,
                     estimated_totals(run, [step.nodes for step in steps], tokens),
                     estimated_totals(run, [1] * (tokens - 1), tokens),
                     exact=own_setting(run, settings) or not METHODS[method].uses_adjacency,
                     has_costs=bool(run.costs),
                     replayed=generation.run)


@dataclass
class Estimated:
    """A run known by its totals alone (an estimate, or counts kept without the run), as goose.metrics reads one."""

    method: str
    totals: RunTotals
    tokens: list[int] = field(default_factory=list)
    accepted_lengths: list[int] = field(default_factory=list)


def pooled(runs: Sequence[RunRecord], **settings: Any) -> tuple[float, float | None]:
    """The replays of `runs` under `settings`, pooled (goose.metrics): tau (tokens over passes) and the
    estimated speed-up (tokens/s over the baseline's; None without cost tables)."""
    results = {str(i): replay(run, **settings) for i, run in enumerate(runs)}
    estimates = {i: Estimated(r.method, r.totals) for i, r in results.items()}
    baselines = {i: Estimated(metrics.BASELINE, r.baseline) for i, r in results.items()}
    costs = all(r.has_costs for r in results.values())
    return (metrics.pooled_tau(estimates.values()) or 0.0,
            metrics.pooled_speedup(estimates, baselines) if costs else None)


def best_budget(points: Sequence[tuple[int, float, float | None]]) -> int | None:
    """The budget with the highest estimated speed-up among sweep points (budget, tau, speed-up), the smallest of
    equals; None without cost estimates. The one rule, for the library, the bench and the Lab."""
    rated = [(speedup, -budget) for budget, _, speedup in points if speedup is not None]
    return -max(rated)[1] if rated else None


def sweep(runs: Sequence[RunRecord], methods: Sequence[str] = ("goose", "balanced"),
          budgets: Sequence[int] = (4, 8, 16, 24, 32, 48, 64),
          spine_shares: Sequence[float] = (0.0, 0.15, 0.3, 0.5, 0.75, 1.0)) -> dict[str, Any]:
    """Replayed tau (and estimated speed-up) vs budget per method, and tau vs spine share for goose,
    pooled over `runs`. Returns {"budget": {method: [(budget, tau, speedup)]}, "spine_share": [(share, tau)]}."""
    by_budget = {method: [(b, *pooled(runs, method=method, budget=b)) for b in budgets] for method in methods}
    by_share = [(share, pooled(runs, method=SpineTree.name, spine_share=share)[0]) for share in spine_shares]
    return {"budget": by_budget, "spine_share": by_share}


def agreement(traces: Sequence[RunRecord], real_tau: dict[str, float], budget: int | str | None) -> list[list[str]]:
    """Per method run for real: the replayed tau beside the real pooled tau (budget None: each method's default
    budget, as the real runs had it)."""
    rows = []
    for method, tau in real_tau.items():
        settings = {"method": method, "budget": METHODS[method].default_budget if budget is None else budget}
        results = [Estimated(method, replay(run, **settings).totals) for run in traces]
        estimate = metrics.pooled_tau(results) or 0.0
        rows.append([method, str(settings["budget"]), f"{estimate:.3f}", f"{tau:.3f}",
                     f"{100 * (estimate - tau) / tau:+.1f} %"])
    return rows
