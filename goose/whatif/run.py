"""A whole run replayed under one setting, with its passes priced by the run's cost table (goose.whatif)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from goose import metrics
from goose.budget import interpolate_cost
from goose.drafters import METHODS
from goose.trace import RunRecord, RunTotals, StepRecord
from goose.whatif.recorded import replay_generation
from goose.whatif.settings import ALIASES, own_setting, resolve_settings


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
    return metrics.with_rates(RunTotals(new_tokens=tokens, forward_passes=passes, wall_s=wall,
                                        prefill_s=run.totals.prefill_s))


def paced_totals(costs: dict[int, float], nodes: Sequence[int], tokens: int, baseline: RunRecord) -> RunTotals | None:
    """Totals of the same run priced at the pace of `baseline`, autoregressive decoding of the run's prompt measured
    just before a check (goose.check): the baseline's own set-up and prefill, then each step the cost table's
    seconds for its tree times how much slower than the table's 1-node pass the baseline's steps ran (its pace).

    Why: the table holds each size's least time, measured once on a quiet machine; what a later run pays for a pass
    depends on what else shares the cores then (a browser on a 2-core machine doubled every pass, measured), and only
    the table's ratios carry over. The tuner reads the ratios alone; an estimate set beside a measurement reads
    them at the pace the measurement's own baseline ran. None without a cost table or without baseline steps."""
    steps = baseline.totals.forward_passes - 1 if baseline.totals.forward_passes else 0
    if not costs or steps <= 0:
        return None
    head_start = baseline.totals.setup_s + (baseline.totals.prefill_s or 0.0)
    pace = (baseline.totals.wall_s - head_start) / (steps * interpolate_cost(costs, 1))
    wall = head_start + pace * sum(interpolate_cost(costs, n) for n in nodes)
    return metrics.with_rates(RunTotals(new_tokens=tokens, forward_passes=1 + len(nodes), wall_s=wall,
                                        prefill_s=baseline.totals.prefill_s, setup_s=baseline.totals.setup_s))


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
    paced_speedup: with `measured`, the estimate at the pace its baseline ran (paced_totals); `speedup_error`
                   compares that one with the measurement, `table_speedup_error` the table's own.
    """

    settings: dict[str, Any]
    method: str
    steps: list[ReplayStep]
    real: list[int]
    totals: RunTotals
    baseline: RunTotals
    exact: bool
    replayed: RunRecord | None = field(default=None, repr=False)
    measured: Any = None
    costs: dict[int, float] = field(default_factory=dict, repr=False)  # the run's cost table, which priced it

    @property
    def has_costs(self) -> bool:
        return bool(self.costs)

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
    def paced_speedup(self) -> float | None:
        """The estimated speed-up at the pace of the measured baseline (None unchecked or without a cost table)."""
        if not self.measured:
            return None
        paced = paced_totals(self.costs, self.nodes, self.tokens, self.measured.baseline)
        return metrics.speedup(paced, self.measured.baseline.totals) if paced else None

    @property
    def speedup_error(self) -> float | None:
        """The paced estimate's relative error against the real run's speed-up (None unchecked)."""
        return relative_error(self.paced_speedup, self.measured.speedup) if self.measured else None

    @property
    def table_speedup_error(self) -> float | None:
        """The cost table's own estimate against the real run: off by however far the machine's pace then was
        from the table's."""
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
                     replayed=generation.run, costs=dict(run.costs))
