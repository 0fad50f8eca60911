"""What if a step had built another tree? Counterfactual acceptance from recorded snapshots, no model needed.

Under greedy decoding a verified step reveals the target's greedy continuation
(the accepted tokens plus the bonus), and any tree accepts the longest prefix of
it that is one of its paths (goose.budget.accepted_length). A step recorded with
`record_sources=True` keeps what its builder read (goose.snapshot), so any other
tree shape can be rebuilt from exactly the same sources and scored. The count is
exact unless the rebuilt tree holds the whole revealed continuation (the target's
choice after the bonus is unknown: then it is a lower bound) or the tree needed
adjacency rows the snapshot did not record (then the tree itself is uncertain).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from goose.budget import accepted_length
from goose.config import GooseConfig
from goose.drafters import METHODS
from goose.snapshot import RecordedRows
from goose.trace import RunRecord, StepRecord
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
    (spine_share, spine_branch_share alias rho, max_branch_depth, branching, use_bigram,
    min_score, max_budget, spine_tiers); none at all = the step's own tree.
    Bad settings raise ValueError (TypeError for an unknown name).
    """
    step = _step(run, step_index)
    method, config, base = resolve_settings(run, settings)
    return _rebuild(run, step, method, config, base)


def step_cost(costs: dict[int, float], nodes: int) -> float:
    """Seconds of one verification of `nodes` tree nodes: the cost table interpolated (linearly extrapolated)."""
    sizes = sorted(costs)
    if len(sizes) == 1:
        return costs[sizes[0]]
    i = min(max(1, bisect.bisect_left(sizes, nodes)), len(sizes) - 1)
    low, high = sizes[i - 1], sizes[i]
    slope = (costs[high] - costs[low]) / (high - low)
    return max(costs[sizes[0]], costs[low] + slope * (nodes - low))


@dataclass
class RunWhatIf:
    """A whole run's steps rebuilt under one setting.

    accepted / real: accepted length per step, counterfactual and as recorded.
    tokens: new tokens over the same passes (the last step cut where the run stopped, as the real one was).
    tau:   counterfactual tokens per target pass (prefill counted, as the run's own tau).
    tokens_per_s: estimated from the run's cost table (None without one).
    speedup: estimated speed-up over one token per verification of a single node (None without costs).
    exact_steps: steps whose count is exact.
    """

    settings: dict[str, Any]
    accepted: list[int]
    real: list[int]
    budgets: list[int]
    tau: float
    tokens_per_s: float | None
    speedup: float | None
    exact_steps: int
    missing_steps: int
    tokens: int
    steps: list[WhatIf] = field(repr=False, default_factory=list)

    @property
    def passes(self) -> int:
        return 1 + len(self.accepted)


def run_what_if(run: RunRecord, **settings: Any) -> RunWhatIf:
    """Every step of `run` rebuilt under `settings` (see what_if): counterfactual tau and speed."""
    if not run.has_snapshots:
        raise NoSnapshotError("this run was recorded without source snapshots, so its trees cannot be rebuilt: "
                              "record it again with goose.generate(..., record_sources=True)")
    method, config, base = resolve_settings(run, settings)
    results = [_rebuild(run, _step(run, i), method, config, base) for i in range(len(run.steps))]
    accepted = [r.accepted for r in results]
    last = run.steps[-1]  # the stop (EOS, max_new_tokens, a stop string) cut its commit short
    tokens = 1 + sum(a + 1 for a in accepted[:-1]) + min(accepted[-1] + 1, len(last.committed))
    passes = 1 + len(results)
    tokens_per_s = speedup = None
    if run.costs:
        seconds = step_cost(run.costs, 1) + sum(step_cost(run.costs, r.budget) for r in results)
        tokens_per_s = tokens / seconds
        speedup = tokens_per_s * step_cost(run.costs, 1)
    return RunWhatIf(dict(settings), accepted, [s.accepted_length for s in run.steps], [r.budget for r in results],
                     tokens / passes, tokens_per_s, speedup, sum(r.exact for r in results),
                     sum(not r.complete for r in results), tokens, results)


def sweep(runs: Sequence[RunRecord], methods: Sequence[str] = ("goose", "balanced"),
          budgets: Sequence[int] = (4, 8, 16, 24, 32, 48, 64),
          spine_shares: Sequence[float] = (0.0, 0.15, 0.3, 0.5, 0.75, 1.0)) -> dict[str, Any]:
    """Counterfactual tau (and estimated speed-up) vs budget per method, and tau vs spine share for goose,
    pooled over `runs` (tokens over passes). Returns {"budget": {method: [(budget, tau, speedup)]},
    "spine_share": [(share, tau)]}."""
    def pooled(**settings: Any) -> tuple[float, float | None]:
        results = [run_what_if(run, **settings) for run in runs]
        tokens, passes = sum(r.tokens for r in results), sum(r.passes for r in results)
        speedups = [r.speedup for r in results if r.speedup is not None]
        return tokens / passes, (sum(speedups) / len(speedups) if len(speedups) == len(results) else None)

    by_budget = {method: [(b, *pooled(method=method, budget=b)) for b in budgets] for method in methods}
    by_share = [(share, pooled(method="goose", spine_share=share)[0]) for share in spine_shares]
    return {"budget": by_budget, "spine_share": by_share}


# --- checking the counterfactual against real runs ---------------------------------------------------------

def agreement(traces: Sequence[RunRecord], real_tau: dict[str, float], budget: int | None) -> list[list[str]]:
    """Per method run for real: the counterfactual tau from the snapshots beside the real pooled tau, and the
    share of exact steps. With an auto budget the counterfactual keeps each recorded step's own budget."""
    rows = []
    for method, tau in real_tau.items():
        settings = {"method": method} if budget is None else {"method": method, "budget": budget}
        results = [run_what_if(run, **settings) for run in traces]
        estimate = sum(r.tokens for r in results) / sum(r.passes for r in results)
        exact = sum(r.exact_steps for r in results) / max(1, sum(len(r.accepted) for r in results))
        rows.append([method, str(budget or "each step's own"), f"{estimate:.3f}", f"{tau:.3f}",
                     f"{100 * (estimate - tau) / tau:+.1f} %", f"{100 * exact:.0f} %"])
    return rows
