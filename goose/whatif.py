"""What if a step, or a whole run, had drafted other trees? Counterfactuals from recorded runs, no model needed.

Under greedy decoding a verified step reveals the target's greedy continuation
(the accepted tokens plus the bonus), and any tree accepts the longest prefix of
it that is one of its paths (goose.budget.accepted_length). A step recorded with
`record_sources=True` keeps what its builder read (goose.snapshot), so any other
tree shape can be rebuilt from exactly the same sources and scored (`what_if`). The count is
exact unless the rebuilt tree holds the whole revealed continuation (the target's
choice after the bonus is unknown: then it is a lower bound) or the tree needed
adjacency rows the snapshot did not record (then the tree itself is uncertain).

A whole run at other settings is replayed with its own step boundaries (goose.replay,
`run_what_if`): tau and passes, an estimated wall time from the run's cost table, and on
request the real run at those settings beside the estimate (`check=True`). Rates and
speed-ups are goose.metrics' (pooled over runs).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from goose import metrics
from goose.budget import CostCalibration, accepted_length
from goose.config import GooseConfig
from goose.decode import generate, stream
from goose.drafters import METHODS, SpineTree
from goose.model import GooseModel
from goose.replay import NoReplayDataError, ReplayStep, own_shapes, replay
from goose.snapshot import RecordedRows
from goose.trace import RunRecord, RunTotals, StepRecord
from goose.tree import DraftTree

# Knobs that change the sources themselves (the matcher, the table, the EMA), not the shape built from them:
# a snapshot cannot answer for them.
SOURCE_SETTINGS = ("ngram_lengths", "max_chain", "long_match", "extend_above", "max_extended_chain", "top_k",
                   "ema_alpha", "ema_start", "auto_budget")
ALIASES = {"rho": "spine_branch_share", "branch_depth": "max_branch_depth", "k": "branching"}


class NoSnapshotError(ValueError):
    """The step (or run) was recorded without source snapshots, so it cannot be rebuilt."""


@dataclass
class WhatIf:
    """One step rebuilt under other settings and scored against what the step revealed.

    tree:     the rebuilt DraftTree; budget: its node budget.
    accepted: draft tokens the greedy walk accepts (the bonus not counted).
    revealed: the target's greedy continuation the step revealed (accepted tokens + bonus).
    lower_bound: the tree holds all of `revealed`, so it may have accepted more.
    missing_rows: adjacency rows the builder asked for that the snapshot lacks (answered as empty).
    """

    tree: DraftTree
    budget: int
    accepted: int
    revealed: list[int]
    lower_bound: bool
    missing_rows: int

    @property
    def complete(self) -> bool:
        """The tree is the one these settings would have built (no missing row)."""
        return self.missing_rows == 0

    @property
    def exact(self) -> bool:
        """`accepted` equals what a real verification of this settings' tree would accept."""
        return self.complete and not self.lower_bound

    @property
    def accepted_path(self) -> list[int]:
        """Accepted nodes of `tree`, root excluded."""
        node, path = 0, []
        for token in self.revealed[:self.accepted]:
            node = self.tree.children[node][token]
            path.append(node)
        return path


def resolve_settings(run: RunRecord, settings: dict[str, Any]) -> tuple[str, GooseConfig, int | None]:
    """(method, config, base budget or None) for `settings` over the run's own; ValueError/TypeError when bad."""
    settings = {ALIASES.get(name, name): value for name, value in settings.items()}
    method = settings.pop("method", None) or run.method
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    sources = sorted(set(settings) & set(SOURCE_SETTINGS))
    if sources:
        raise ValueError(f"{', '.join(sources)} change(s) the draft sources, not the tree shape: a snapshot cannot "
                         "answer for them (run again instead)")
    budget = settings.pop("budget", None)
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 1):
        raise ValueError(f"budget must be a whole number of tree nodes >= 1, got {budget!r}")
    config = GooseConfig.from_dict(run.config).with_overrides(auto_budget=False, **settings)
    return method, config, budget


def _step(run: RunRecord, step_index: int) -> StepRecord:
    if not run.sampling.get("temperature", 0.0) == 0.0:
        raise ValueError("what-if needs a greedy run (temperature 0): a sampled step reveals a draw, "
                         "not the target's greedy continuation")
    if not isinstance(step_index, int) or not 0 <= step_index < len(run.steps):
        raise ValueError(f"step_index must be a step of this run, 0..{len(run.steps) - 1}, got {step_index!r}")
    step = run.steps[step_index]
    if step.snapshot is None:
        raise NoSnapshotError("this run was recorded without source snapshots, so its trees cannot be rebuilt: "
                              "record it again with goose.generate(..., record_sources=True)")
    return step


def _rebuild(run: RunRecord, step: StepRecord, method: str, config: GooseConfig, base: int | None) -> WhatIf:
    snapshot = step.snapshot
    rows = RecordedRows(snapshot, config)
    state = snapshot.state(rows)
    drafter = METHODS[method](config)
    if base is not None and base > snapshot.max_budget:
        raise ValueError(f"a budget of {base} nodes exceeds the {snapshot.max_budget} the snapshot was "
                         "recorded for")
    budget = step.budget if base is None else drafter.budget(state, base)
    tree = drafter.build(state, budget)
    revealed = step.revealed
    accepted = accepted_length(tree, revealed)
    return WhatIf(tree, budget, accepted, revealed, accepted == len(revealed), len(rows.missing))


def what_if(run: RunRecord, step_index: int, **settings: Any) -> WhatIf:
    """Rebuild step `step_index` of `run` under `settings` and score it.

    Settings: method, budget (the base budget, grown with the step's match confidence as a
    real run grows it; none = the step's own node budget), any GooseConfig shape knob
    (spine_share, spine_branch_share alias rho, max_branch_depth, branch_order, branching, use_bigram,
    min_score, max_budget, spine_tiers); none at all = the step's own tree.
    Bad settings raise ValueError (TypeError for an unknown name).
    """
    step = _step(run, step_index)
    method, config, base = resolve_settings(run, settings)
    return _rebuild(run, step, method, config, base)


@dataclass
class RealRun:
    """The model run for real at a what-if's settings on the same prompt, beside the autoregressive baseline.

    tau, wall_s, tokens_per_s: the real run's (stopwatch from the call); speedup: over the baseline
    (goose.metrics); same_tokens: it produced the recorded tokens (lossless and deterministic)."""

    run: RunRecord
    baseline: RunRecord

    @property
    def tau(self) -> float | None:
        return metrics.tau(self.run.totals)

    @property
    def wall_s(self) -> float:
        return self.run.totals.wall_s

    @property
    def tokens_per_s(self) -> float:
        return metrics.tokens_per_s(self.run.totals)

    @property
    def speedup(self) -> float | None:
        return metrics.speedup(self.run.totals, self.baseline.totals)

    @property
    def same_tokens(self) -> bool:
        return metrics.lossless(self.run.tokens, self.baseline.tokens)


@dataclass
class RunWhatIf:
    """A whole run replayed under one setting with its own step boundaries (goose.replay).

    steps: the replay's steps; real: the recorded run's accepted length per step.
    totals: the replay's tokens, passes, tau and estimated wall time (the recorded prefill plus each
            tree's verification cost from the run's cost table, calibrated by the run's own measured
            steps; 0 without a table);
    baseline: the same estimate for autoregressive decoding (one node per pass).
    exact: the replay is what a real run at these settings does, pass for pass (the recorded setting, or
           a method that drafts from the context alone); otherwise the adjacency rows are approximated.
    measured: the real run at these settings (run_what_if(..., check=True)), or None.
    """

    settings: dict[str, Any]
    method: str
    steps: list[ReplayStep]
    real: list[int]
    totals: RunTotals
    baseline: RunTotals
    exact: bool
    has_costs: bool
    measured: RealRun | None = None

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


def calibrated_costs(run: RunRecord) -> CostCalibration | None:
    """The run's cost table calibrated by its own steps' measured verification time, as the tuner calibrates
    it while decoding (goose.budget.CostCalibration): a real pass costs more than the table's chain of text,
    by a factor that grows or shrinks with the tree (measured: 73-node steps 354 ms against a table's 289;
    6-node steps 85 against 93). None without a table."""
    if not run.costs:
        return None
    calibration = CostCalibration(dict(sorted(run.costs.items())))
    for step in run.steps:
        if step.verify_s > 0:
            calibration.observe(len(step.nodes), step.verify_s)
    return calibration


def estimated_totals(run: RunRecord, nodes: Sequence[int], tokens: int,
                     costs: CostCalibration | None = None) -> RunTotals:
    """Totals of a run of `tokens` new tokens whose steps verify trees of `nodes` nodes: the recorded
    prefill plus each pass's cost from the run's cost table, calibrated by its own steps (`calibrated_costs`;
    wall 0 without a table)."""
    passes = 1 + len(nodes)
    costs = costs or calibrated_costs(run)
    wall = run.totals.prefill_s + sum(costs.cost(n) for n in nodes) if costs else 0.0
    totals = RunTotals(new_tokens=tokens, forward_passes=passes, wall_s=wall, prefill_s=run.totals.prefill_s)
    totals.tau, totals.tokens_per_s = metrics.tau(totals), metrics.tokens_per_s(totals)
    return totals


_BASELINES: dict[tuple, RunRecord] = {}  # (model, prompt, tokens, head) -> the autoregressive run, measured once


def baseline_run(goose_model: GooseModel, run: RunRecord) -> RunRecord:
    """The autoregressive run on `run`'s prompt and length with its head: run once per model and kept."""
    key = (id(goose_model), goose_model.name, tuple(run.prompt_tokens), run.max_new_tokens, run.head)
    if key not in _BASELINES:
        _BASELINES[key] = generate(goose_model, run.prompt, metrics.BASELINE, run.max_new_tokens, head=run.head)
    return _BASELINES[key]


class CheckCancelled(RuntimeError):
    """A check's real run was cancelled before its end (nothing was measured)."""


def real_run(goose_model: GooseModel, run: RunRecord, method: str, settings: dict[str, Any],
             cancel: Callable[[], bool] | None = None) -> RealRun:
    """Run the model at `settings` over the run's own config on `run`'s prompt: what a replay estimates, measured.
    `cancel` is asked after every step; when it answers True the run stops and CheckCancelled is raised."""
    shape = {name: value for name, value in settings.items() if name not in ("method", "budget")}
    budget = settings.get("budget")
    if budget is None:
        budget = "auto" if run.config.get("auto_budget") else run.config.get("budget")
    baseline = baseline_run(goose_model, run)
    generation = stream(goose_model, run.prompt, method, run.max_new_tokens, budget, head=run.head,
                        config=GooseConfig.from_dict(run.config), **shape)
    for _ in generation:
        if cancel is not None and cancel():
            raise CheckCancelled("the check was cancelled before its real run ended")
    return RealRun(generation.run, baseline)


def run_what_if(run: RunRecord, *, check: bool = False, model: GooseModel | None = None,
                cancel: Callable[[], bool] | None = None, **settings: Any) -> RunWhatIf:
    """`run` replayed under `settings` (see what_if) with its own step boundaries: tau, passes and an estimated
    speed from the run's cost table. No settings: the recorded run itself, step for step.

    check=True runs `model` at these settings on the same prompt (and autoregressive decoding once) and
    keeps the real run in `.measured` beside the estimate (`.tau_error`, `.speedup_error`); `cancel` (asked
    after every step of it) stops it with CheckCancelled."""
    if check and model is None:
        raise ValueError("check=True runs the model: pass model=goose.load_model(...)")
    settings = {ALIASES.get(name, name): value for name, value in settings.items()}
    method, config, base = resolve_settings(run, settings)
    own = not settings
    shapes = own_shapes(run) if own else None
    try:
        steps = replay(run, method, config, base, shapes)
    except NoReplayDataError as error:
        raise NoSnapshotError(str(error)) from error
    tokens = len(run.tokens)  # the replay commits the recorded tokens to the end
    costs = calibrated_costs(run)
    result = RunWhatIf(dict(settings), method, steps, run.accepted_lengths,
                       estimated_totals(run, [step.nodes for step in steps], tokens, costs),
                       estimated_totals(run, [1] * (tokens - 1), tokens, costs),
                       exact=own or not METHODS[method].uses_adjacency, has_costs=bool(run.costs))
    if check:
        result.measured = real_run(model, run, method, settings, cancel)
    return result


def sweep(runs: Sequence[RunRecord], methods: Sequence[str] = ("goose", "balanced"),
          budgets: Sequence[int] = (4, 8, 16, 24, 32, 48, 64),
          spine_shares: Sequence[float] = (0.0, 0.15, 0.3, 0.5, 0.75, 1.0)) -> dict[str, Any]:
    """Replayed tau (and estimated speed-up) vs budget per method, and tau vs spine share for goose,
    pooled over `runs` (goose.metrics: tokens over passes, tokens/s over the baseline's). Returns
    {"budget": {method: [(budget, tau, speedup)]}, "spine_share": [(share, tau)]}."""
    def pooled(**settings: Any) -> tuple[float, float | None]:
        results = {str(i): run_what_if(run, **settings) for i, run in enumerate(runs)}
        estimates = {i: Estimated(r.method, r.totals) for i, r in results.items()}
        baselines = {i: Estimated(metrics.BASELINE, r.baseline) for i, r in results.items()}
        costs = all(r.has_costs for r in results.values())
        return (metrics.pooled_tau(estimates.values()) or 0.0,
                metrics.pooled_speedup(estimates, baselines) if costs else None)

    by_budget = {method: [(b, *pooled(method=method, budget=b)) for b in budgets] for method in methods}
    by_share = [(share, pooled(method=SpineTree.name, spine_share=share)[0]) for share in spine_shares]
    return {"budget": by_budget, "spine_share": by_share}


@dataclass
class Estimated:
    """A run known by its totals alone (an estimate, or counts kept without the run), as goose.metrics reads one."""

    method: str
    totals: RunTotals
    tokens: list[int] = field(default_factory=list)
    accepted_lengths: list[int] = field(default_factory=list)


# --- checking the replay against real runs ---------------------------------------------------------------

def agreement(traces: Sequence[RunRecord], real_tau: dict[str, float], budget: int | None) -> list[list[str]]:
    """Per method run for real: the replayed tau beside the real pooled tau. With an auto budget the replay
    takes each position's budget from the recorded step that holds it."""
    rows = []
    for method, tau in real_tau.items():
        settings = {"method": method} if budget is None else {"method": method, "budget": budget}
        results = [Estimated(method, run_what_if(run, **settings).totals) for run in traces]
        estimate = metrics.pooled_tau(results) or 0.0
        rows.append([method, str(budget or "each step's own"), f"{estimate:.3f}", f"{tau:.3f}",
                     f"{100 * (estimate - tau) / tau:+.1f} %"])
    return rows
