"""A whole run replayed under one setting, with its passes priced by the run's cost table (goose.whatif)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from goose import metrics
from goose.budget import interpolate_cost
from goose.config import GooseConfig
from goose.drafters import METHODS
from goose.sources import AdjacencyTable
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


@dataclass(frozen=True)
class PassPrices:
    """Seconds of one verification pass as a run's cost table prices it (goose.costs).

    table: seconds per tree size, each pass with the adjacency table's top-k of its rows;
    autoregressive_s: the plain autoregressive pass, the root alone without that top-k (None: not measured,
                      as in traces recorded before it was; then a pass without the top-k is priced as one with it);
    prefill_row_s: the head's top-k of one prompt row, which a prefill that keeps an adjacency table pays for each
                   row the table keeps (None: not measured; then priced at nothing).

    A method that keeps no adjacency table (autoregressive decoding, pld, suffix) skips the top-k: its passes cost
    the table's less the top-k, taken as the gap between the table's 1-node pass and the autoregressive pass (the
    top-k barely depends on the rows: 5.0, 3.9, 4.3 ms at 1, 8 and 16 nodes in a fresh process, 2-core EPYC)."""

    table: dict[int, float]
    autoregressive_s: float | None = None
    prefill_row_s: float | None = None

    @classmethod
    def of(cls, run: RunRecord) -> PassPrices:
        return cls(dict(run.costs), run.autoregressive_s, run.prefill_row_s)

    def __bool__(self) -> bool:
        return bool(self.table)

    def __call__(self, nodes: int, refreshes_adjacency: bool = True) -> float:
        seconds = interpolate_cost(self.table, nodes)
        if refreshes_adjacency or self.autoregressive_s is None:
            return seconds
        return seconds - max(0.0, interpolate_cost(self.table, 1) - self.autoregressive_s)

    def total(self, nodes: Sequence[int], refreshes_adjacency: bool = True) -> float:
        return sum(self(n, refreshes_adjacency) for n in nodes)

    def prefill_rows(self, rows: int) -> float:
        """What the top-k of `rows` prompt rows adds to a prefill."""
        return rows * (self.prefill_row_s or 0.0)


def estimated_totals(run: RunRecord, nodes: Sequence[int], tokens: int, prefill_rows: int = 0,
                     refreshes_adjacency: bool = True) -> RunTotals:
    """Totals of a run of `tokens` new tokens whose steps verify trees of `nodes` nodes: the recorded prefill (less
    the top-k of the prompt rows its own adjacency table kept, plus that of the `prefill_rows` this one keeps) and
    each step's cost from the run's cost table (wall 0 without a table). `refreshes_adjacency`: the method keeps an
    adjacency table, whose top-k each pass pays (PassPrices)."""
    prices = PassPrices.of(run)
    prefill = (run.totals.prefill_s or 0.0) - prices.prefill_rows(len(run.prefill_rows or ()))
    prefill += prices.prefill_rows(prefill_rows)
    wall = prefill + prices.total(nodes, refreshes_adjacency) if prices else 0.0
    return metrics.with_rates(RunTotals(new_tokens=tokens, forward_passes=1 + len(nodes), wall_s=wall,
                                        prefill_s=prefill))


def head_start(run: RunRecord) -> float:
    """What a run spent before its first step: set-up and prefill."""
    return run.totals.setup_s + (run.totals.prefill_s or 0.0)


def table_pace(runs: Sequence[RunRecord], prices: PassPrices) -> float | None:
    """How much slower than their table's passes runs' steps ran: their wall time (each run's less its set-up and
    prefill) over the table's seconds for their trees. None without a table or without steps."""
    steps_s = table_s = 0.0
    for run in runs:
        if prices and run.method in METHODS:
            steps_s += run.totals.wall_s - head_start(run)
            table_s += prices.total([len(step.nodes) for step in run.steps], METHODS[run.method].uses_adjacency)
    return steps_s / table_s if table_s > 0 else None


def paced_totals(prices: PassPrices, nodes: Sequence[int], tokens: int, baselines: Sequence[RunRecord],
                 refreshes_adjacency: bool = True, prefill_rows: int = 0) -> RunTotals | None:
    """Totals of the same run priced at the pace of `baselines`, autoregressive decoding of the run's prompt measured
    just before each round of a check (goose.check): the baselines' mean set-up and prefill, plus the top-k of the
    `prefill_rows` prompt rows a method with an adjacency table keeps (PassPrices.prefill_rows), then each step the
    cost table's seconds for its tree times how much slower than the table's the baselines' steps ran (their pace,
    `table_pace`).

    Why: the table holds each size's least time, measured once on a quiet machine; what a later run pays for a pass
    depends on what else shares the cores then (a browser on a 2-core machine doubled every pass, measured), and only
    the table's ratios carry over. The tuner reads the ratios alone; an estimate set beside a measurement reads
    them at the pace the measurement's own baseline ran. The prefill is the baselines' own, measured under the same
    load, with the rows' top-k at the table's price: a prefill is one long pass, which a browser slowed far less
    than the steps (measured: 1.6x where the steps ran 2.2x). None without a cost table or without baseline steps."""
    pace = table_pace(baselines, prices)
    if pace is None:
        return None
    start = sum(map(head_start, baselines)) / len(baselines)
    if refreshes_adjacency:
        start += prices.prefill_rows(prefill_rows)
    wall = start + pace * prices.total(nodes, refreshes_adjacency)
    return metrics.with_rates(RunTotals(new_tokens=tokens, forward_passes=1 + len(nodes), wall_s=wall))


def table_rows_at_prefill(prompt: Sequence[int], config: GooseConfig) -> int:
    """How many prompt rows the adjacency table keeps at the prefill (AdjacencyTable.prompt_rows)."""
    return len(AdjacencyTable.from_config(config).prompt_rows(prompt))


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
    paced_speedup: with `measured`, the estimate at the pace its baseline ran (paced_totals), its passes priced as
                   the check measured them just before its rounds (goose.check.prices_now; the run's table where it
                   measured none); `speedup_error` compares that one with the measurement, `table_speedup_error`
                   the table's own.
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
    prices: PassPrices = field(default_factory=lambda: PassPrices({}), repr=False)  # the run's table, which priced it
    prefill_rows: int = 0  # the prompt rows the method's adjacency table keeps at the prefill, whose top-k it pays

    @property
    def has_costs(self) -> bool:
        return bool(self.prices)

    @property
    def refreshes_adjacency(self) -> bool:
        """The replayed method keeps an adjacency table, whose top-k each of its passes pays."""
        return METHODS[self.method].uses_adjacency

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
        prices = self.measured.prices or self.prices  # the passes measured with the check, if any
        paced = paced_totals(prices, self.nodes, self.tokens, self.measured.baselines, self.refreshes_adjacency,
                             self.prefill_rows)
        return metrics.speedup(paced, self.measured.baseline_totals) if paced else None

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
    refreshes = METHODS[method].uses_adjacency
    rows = table_rows_at_prefill(run.prompt_tokens, config) if refreshes else 0
    return RunWhatIf(dict(settings), method, steps, run.accepted_lengths,
                     estimated_totals(run, [step.nodes for step in steps], tokens, rows, refreshes),
                     estimated_totals(run, [1] * (tokens - 1), tokens, refreshes_adjacency=False),
                     exact=own_setting(run, settings) or not refreshes,
                     replayed=generation.run, prices=PassPrices.of(run), prefill_rows=rows)
