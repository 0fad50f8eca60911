"""Replays pooled over runs: tau and estimated speed-up against budget and spine share (goose.whatif)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from goose import metrics
from goose.drafters import METHODS, SpineTree
from goose.trace import RunRecord, RunTotals
from goose.whatif.run import replay


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
