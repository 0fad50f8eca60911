"""Run and suite metrics: the one place where speed-up, tau, acceptance and losslessness are defined.

The bench's summary and report and the app's Race tab all read their numbers
from here, so a figure means the same wherever it is shown. Definitions:

- tau = new tokens / target forward passes, the prefill pass counted.
- tokens/s = new tokens / wall seconds of the whole generation (prefill included).
- speed-up of one run = its tokens/s / the baseline's tokens/s on the same prompt. The baseline is our
  autoregressive decoding (same model, same LM head, same clock); the outside baseline is
  transformers' own greedy `generate`, what users would otherwise run.
- pooled speed-up = (sum of tokens / sum of seconds of a method) / (the same of the baseline),
  both summed over the prompts both ran: long generations weigh as much as they cost.
- median / worst speed-up: of the per-prompt speed-ups.
- CPU-time speed-up: the pooled speed-up with CPU seconds in place of wall seconds.
- acceptance of a draft source = accepted / drafted tokens of that source, pooled over runs; by source and
  depth, the same per (source, depth in the tree) over a run's steps.
- conditional acceptance (the rate model's, goose.optimal) = accepted / tried nodes, a node tried when its
  parent was accepted (the root counts as accepted) and no sibling before it was (the spine child first, then
  the ranks): spine nodes by depth, branch nodes by rank.
- accepted length of a step = draft tokens it accepted (the bonus token not counted).
- lossless = the run's tokens equal the baseline's (autoregressive greedy) on the same prompt.
- bandwidth achieved = parameter bytes x forward passes / wall seconds (a memory-bound yardstick).
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from goose.trace import RunTotals, StepRecord
from goose.tree import BRANCH, SPINE

BASELINE = "autoregressive"  # the method every speed-up and every lossless check is measured against
OUTSIDE_BASELINE = "hf-generate"  # transformers' greedy generate: the second speed-up column


class Measured(Protocol):
    """What the metrics read from a run: a RunRecord of the app, or a run of the bench."""

    @property
    def method(self) -> str: ...

    @property
    def tokens(self) -> list[int]: ...

    @property
    def totals(self) -> RunTotals: ...

    @property
    def accepted_lengths(self) -> Sequence[int]: ...


Clock = Callable[[Measured], float | None]  # the seconds a run took by some clock, None when not measured

Suite = Mapping[str, Mapping[str, Measured]]  # method -> prompt id -> run


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator; None when either is unknown or the denominator is zero."""
    return numerator / denominator if numerator is not None and denominator else None


# --- one run ----------------------------------------------------------------------------------------------------

def tau(totals: RunTotals) -> float | None:
    """New tokens per target forward pass (prefill counted); None when the passes were not counted."""
    return ratio(totals.new_tokens, totals.forward_passes)


def tokens_per_s(totals: RunTotals) -> float:
    """New tokens per wall second (0 for a run that took no time)."""
    return ratio(totals.new_tokens, totals.wall_s) or 0.0


def with_rates(totals: RunTotals) -> RunTotals:
    """`totals` with its tau and tokens/s filled in from its counts and wall time (totals made whole at once: an
    estimate's, transformers' generate's)."""
    totals.tau, totals.tokens_per_s = tau(totals), tokens_per_s(totals)
    return totals


def mean_totals(runs: Sequence[RunTotals]) -> RunTotals:
    """Repeats of one run (the same tokens and passes) as one: their mean wall, set-up and prefill times."""
    first, count = runs[0], len(runs)
    return with_rates(RunTotals(new_tokens=first.new_tokens, forward_passes=first.forward_passes,
                                wall_s=sum(t.wall_s for t in runs) / count,
                                prefill_s=sum(t.prefill_s or 0.0 for t in runs) / count,
                                setup_s=sum(t.setup_s for t in runs) / count))


def speedup(totals: RunTotals, baseline: RunTotals) -> float | None:
    """tokens/s of a run over the baseline's tokens/s on the same prompt; None when the baseline has no rate."""
    return ratio(tokens_per_s(totals), tokens_per_s(baseline))


def acceptance_rate(totals: RunTotals, source: str) -> float | None:
    """Accepted / drafted tokens of one source; None when the source drafted nothing."""
    return ratio(totals.accepted.get(source, 0), totals.drafted.get(source, 0))


def lossless(tokens: Sequence[int], reference: Sequence[int]) -> bool:
    """Whether a run produced exactly the reference (autoregressive greedy) tokens."""
    return list(tokens) == list(reference)


# --- pooled over runs -------------------------------------------------------------------------------------------

def wall_seconds(run: Measured) -> float | None:
    """The wall-clock seconds of a run (the default clock of the pooled rates)."""
    return run.totals.wall_s


def pooled_rate(runs: Iterable[Measured], clock: Clock = wall_seconds) -> float | None:
    """Total tokens / total seconds by `clock`; None when a run has no time on that clock or none passed."""
    runs = list(runs)
    seconds = [clock(run) for run in runs]
    if not runs or None in seconds:
        return None
    return ratio(sum(run.totals.new_tokens for run in runs), sum(seconds))


def pooled_tau(runs: Iterable[Measured]) -> float | None:
    """Total tokens / total forward passes; None when a run's passes were not counted."""
    totals = [run.totals for run in runs]
    if not totals or any(t.forward_passes is None for t in totals):
        return None
    return ratio(sum(t.new_tokens for t in totals), sum(t.forward_passes for t in totals))


def acceptance_by_source(runs: Iterable[Measured]) -> dict[str, float]:
    """source -> accepted / drafted tokens pooled over the runs (sources that drafted nothing left out)."""
    drafted: Counter[str] = Counter()
    accepted: Counter[str] = Counter()
    for run in runs:
        drafted.update(run.totals.drafted)
        accepted.update(run.totals.accepted)
    return {source: accepted[source] / n for source, n in sorted(drafted.items()) if n}


def acceptance_by_source_and_depth(steps: Iterable[StepRecord]) -> dict[str, dict[int, tuple[int, int]]]:
    """source -> depth -> (accepted, drafted) draft nodes over the steps, the root left out; the rate is their
    ratio. The spine stays reliable deep down where branches fade: why the spine tree is anisotropic."""
    counts: dict[str, dict[int, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for step in steps:
        for node in step.nodes[1:]:
            cell = counts[node.source][node.depth]
            cell[0] += node.status == "accepted"
            cell[1] += 1
    return {source: {depth: (cell[0], cell[1]) for depth, cell in sorted(by_depth.items())}
            for source, by_depth in sorted(counts.items())}


def branch_ranks(step: StepRecord) -> list[int]:
    """Per node of the step's tree, a branch node's rank: its place among its parent's branch children in the
    order they were drafted, which is the order of the table's row (1: the best successor left once the spine's
    own next token is skipped); 0 for the root and spine nodes. So under one parent the spine child comes first,
    then the ranks in order: the order goose.optimal's rate model tries a node's children in."""
    drafted: Counter[int] = Counter()  # parent -> branch children drafted so far
    ranks = [0]
    for node in step.nodes[1:]:
        if node.source == BRANCH:
            drafted[node.parent] += 1
        ranks.append(drafted[node.parent] if node.source == BRANCH else 0)
    return ranks


def acceptance_by_depth_and_rank(steps: Iterable[StepRecord]) -> dict[str, dict[int, tuple[int, int]]]:
    """The conditional acceptance the rate model (goose.optimal) speaks of, counted over the steps:
    {SPINE: depth -> (accepted, tried), BRANCH: rank -> (accepted, tried)}. The walk takes one child of a node at
    most, so a node is tried when its parent was accepted (status "accepted" or "rejected"; an unvisited node
    tells nothing) and no sibling before it (the spine child, then lower ranks: branch_ranks) was: below an
    accepted sibling a node's verdict tells nothing of its own chance, as the target's one choice went elsewhere."""
    counts: dict[str, dict[int, list[int]]] = {SPINE: defaultdict(lambda: [0, 0]), BRANCH: defaultdict(lambda: [0, 0])}
    for step in steps:
        ranks = branch_ranks(step)
        taken = {step.nodes[node].parent: ranks[node] for node in step.accepted}  # parent -> its accepted child's place
        for index, node in enumerate(step.nodes[1:], start=1):
            tried = node.status in ("accepted", "rejected") and ranks[index] <= taken.get(node.parent, ranks[index])
            if node.source in counts and tried:
                cell = counts[node.source][node.depth if node.source == SPINE else ranks[index]]
                cell[0] += node.status == "accepted"
                cell[1] += 1
    return {source: {key: (cell[0], cell[1]) for key, cell in sorted(by_key.items())}
            for source, by_key in counts.items()}


def accepted_length_shares(lengths: Iterable[int]) -> dict[int, float]:
    """Accepted length -> share of steps with it, in increasing length (empty without steps)."""
    counts = Counter(lengths)
    steps = sum(counts.values())
    return {length: counts[length] / steps for length in sorted(counts)}


def mean_accepted_length(lengths: Iterable[int]) -> float | None:
    """Mean draft tokens accepted per step; None without steps."""
    lengths = list(lengths)
    return statistics.fmean(lengths) if lengths else None


def pooled_speedup(runs: Mapping[str, Measured], baseline: Mapping[str, Measured],
                   clock: Clock = wall_seconds) -> float | None:
    """Pooled tokens/s of a method over the baseline's, both on the prompts both ran (prompt id -> run)."""
    shared = [prompt for prompt in runs if prompt in baseline]
    return ratio(pooled_rate((runs[p] for p in shared), clock), pooled_rate((baseline[p] for p in shared), clock))


def per_prompt_speedups(runs: Mapping[str, Measured], baseline: Mapping[str, Measured]) -> dict[str, float]:
    """prompt id -> speed-up of the run over the baseline's on that prompt (prompts without a rate left out)."""
    speedups = {prompt: speedup(run.totals, baseline[prompt].totals) for prompt, run in runs.items()
                if prompt in baseline}
    return {prompt: value for prompt, value in speedups.items() if value is not None}


def lossless_by_prompt(runs: Mapping[str, Measured], baseline: Mapping[str, Measured]) -> dict[str, bool]:
    """prompt id -> whether the run's tokens equal the baseline's on that prompt (prompts both ran)."""
    return {prompt: lossless(run.tokens, baseline[prompt].tokens) for prompt, run in runs.items()
            if prompt in baseline}


def bandwidth_gb_s(parameter_bytes: int, forward_passes: int | None, wall_s: float) -> float | None:
    """GB/s streamed if every forward pass reads every parameter once; None when unknown."""
    if not parameter_bytes or not forward_passes or not wall_s:
        return None
    return parameter_bytes * forward_passes / wall_s / 1e9


# --- a method over a suite --------------------------------------------------------------------------------------

@dataclass
class MethodMetrics:
    """One method over a suite of prompts (or over the single prompt of a race)."""

    method: str
    prompts: int
    new_tokens: int
    forward_passes: int | None  # None when some run's passes were not counted
    wall_s: float
    tokens_per_s: float
    tau: float | None
    speedup_pooled: float | None
    speedup_outside: float | None  # pooled, over the outside baseline (transformers' generate); None without it
    speedup_median: float | None
    speedup_min: float | None  # the worst prompt
    cpu_speedup: float | None  # pooled, by CPU seconds; None without CPU times
    mean_accepted_length: float | None
    acceptance: dict[str, float]
    bandwidth_gb_s: float | None
    lossless: bool | None  # None when not checked (no baseline, or sampled runs)
    speedups: dict[str, float] = field(default_factory=dict)  # per prompt
    accepted_length_shares: dict[int, float] = field(default_factory=dict)
    verdicts: dict[str, bool] = field(default_factory=dict)  # per prompt checked: same tokens as the baseline


def method_metrics(method: str, runs: Mapping[str, Measured], baseline: Mapping[str, Measured],
                   parameter_bytes: int = 0, cpu_clock: Clock | None = None,
                   check_lossless: bool = True, outside: Mapping[str, Measured] | None = None) -> MethodMetrics:
    """Every metric of one method's runs (prompt id -> run) against the baseline's runs on the same prompts."""
    chosen = list(runs.values())
    tokens = sum(run.totals.new_tokens for run in chosen)
    wall = sum(run.totals.wall_s for run in chosen)
    counted = [run.totals.forward_passes for run in chosen]
    forwards = None if None in counted else sum(counted)
    lengths = [n for run in chosen for n in run.accepted_lengths]
    speedups = per_prompt_speedups(runs, baseline)
    verdicts = lossless_by_prompt(runs, baseline) if check_lossless and baseline else {}
    return MethodMetrics(
        method=method, prompts=len(chosen), new_tokens=tokens, forward_passes=forwards, wall_s=wall,
        tokens_per_s=ratio(tokens, wall) or 0.0, tau=pooled_tau(chosen), speedup_pooled=pooled_speedup(runs, baseline),
        speedup_outside=pooled_speedup(runs, outside) if outside else None,
        speedup_median=statistics.median(speedups.values()) if speedups else None,
        speedup_min=min(speedups.values(), default=None),
        cpu_speedup=pooled_speedup(runs, baseline, cpu_clock) if cpu_clock else None,
        mean_accepted_length=mean_accepted_length(lengths), acceptance=acceptance_by_source(chosen),
        bandwidth_gb_s=bandwidth_gb_s(parameter_bytes, forwards, wall),
        lossless=all(verdicts.values()) if verdicts else None, speedups=speedups,
        accepted_length_shares=accepted_length_shares(lengths), verdicts=verdicts)


def suite_metrics(suite: Suite, parameter_bytes: int = 0, cpu_clock: Clock | None = None,
                  check_lossless: bool = True) -> list[MethodMetrics]:
    """Per method (method -> prompt id -> run), in the suite's order, each against the baseline method."""
    baseline, outside = suite.get(BASELINE, {}), suite.get(OUTSIDE_BASELINE)
    return [method_metrics(method, runs, baseline, parameter_bytes, cpu_clock, check_lossless, outside)
            for method, runs in suite.items()]


def group_runs(runs: Iterable[Measured], prompt_of: Callable[[Measured], str]) -> dict[str, dict[str, Measured]]:
    """method -> prompt id -> run, methods and prompts in the order they first appear."""
    suite: dict[str, dict[str, Measured]] = defaultdict(dict)
    for run in runs:
        suite[run.method][prompt_of(run)] = run
    return dict(suite)


def race_metrics(runs: Mapping[str, Measured]) -> list[MethodMetrics]:
    """The metrics of a race: every method (method -> run) on one and the same prompt."""
    return suite_metrics({method: {"race": run} for method, run in runs.items()})


def category_speedups(suite: Suite, categories: Mapping[str, str | None]) -> dict[str, dict[str, float | None]]:
    """method -> category -> pooled speed-up within that category (categories: prompt id -> category)."""
    baseline = suite.get(BASELINE, {})
    result: dict[str, dict[str, float | None]] = {}
    for method, runs in suite.items():
        by_category: dict[str, dict[str, Measured]] = defaultdict(dict)
        for prompt, run in runs.items():
            if categories.get(prompt) is not None:
                by_category[categories[prompt]][prompt] = run
        if by_category:
            result[method] = {category: pooled_speedup(group, baseline) for category, group in by_category.items()}
    return result
