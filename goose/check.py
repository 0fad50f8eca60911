"""An estimate beside the measurement that checks it: a replay's what-if, and the real run at its settings.

A replay (goose.whatif) estimates what a setting would have done on a recorded run;
this module runs the model at that setting on the same prompt, and autoregressive
decoding just before it, every time (the two alternate, so a speed-up divides two runs made
under the same load), so that every estimate can be shown with its error. The run's
own setting reproduces the recorded trees exactly (a run is a function of its
inputs), so its check differs from the estimate in time alone.

A check may alternate the two for several rounds and divide their mean times: one short run on a shared machine
is a noisy clock (a 64-token run of the embedded model takes about a second; its speed-up over the baseline just
before it spread over 3.7x-4.8x in seven checks in one quiet process, 2-core EPYC).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from goose import metrics
from goose.costs import BUDGET_GRID, measure_costs, split_costs
from goose.decode import Generation, stream
from goose.model import GooseModel
from goose.trace import RunRecord, RunTotals
from goose.whatif import ALIASES, PassPrices, RunWhatIf, recorded_store, replay, resolve_settings

# Rounds of the pass costs a check measures before its first round (`prices_now`): each size's least over them.
PROBE_ROUNDS = 3


class CheckCancelled(RuntimeError):
    """A check's real run was cancelled before its end (nothing was measured)."""


@dataclass
class RealRun:
    """The model run for real at a what-if's settings on the same prompt, each round just after the autoregressive
    baseline.

    runs, baselines: each round's real run and the baseline measured just before it (every round makes the same
    tokens and trees: runs repeat); run, baseline: the first round's. totals, baseline_totals: each one's mean over
    the rounds. tau, wall_s, tokens_per_s: the real run's (its clock: goose.decode, the rounds' mean); speedup: its
    tokens/s over the baseline's; same_tokens: every round produced the baseline's tokens (lossless); prices: the
    passes of the sizes the estimate prices, measured just before the first round (None where not measured)."""

    runs: list[RunRecord]
    baselines: list[RunRecord] = field(repr=False)
    prices: PassPrices | None = field(default=None, repr=False)  # the replay's passes measured with it (prices_now)

    @property
    def run(self) -> RunRecord:
        return self.runs[0]

    @property
    def baseline(self) -> RunRecord:
        return self.baselines[0]

    @property
    def rounds(self) -> int:
        return len(self.runs)

    @property
    def totals(self) -> RunTotals:
        return metrics.mean_totals([run.totals for run in self.runs])

    @property
    def baseline_totals(self) -> RunTotals:
        return metrics.mean_totals([run.totals for run in self.baselines])

    @property
    def tau(self) -> float | None:
        return metrics.tau(self.run.totals)

    @property
    def wall_s(self) -> float:
        return self.totals.wall_s

    @property
    def tokens_per_s(self) -> float:
        return metrics.tokens_per_s(self.totals)

    @property
    def speedup(self) -> float | None:
        return metrics.speedup(self.totals, self.baseline_totals)

    @property
    def same_tokens(self) -> bool:
        return all(metrics.lossless(run.tokens, base.tokens) for run, base in zip(self.runs, self.baselines))


def to_the_end(generation: Generation, cancel: Callable[[], bool] | None) -> RunRecord:
    """The generation run to its end; CheckCancelled as soon as `cancel`, asked after every step, answers True."""
    for _ in generation:
        if cancel is not None and cancel():
            raise CheckCancelled("the check was cancelled before its real run ended")
    return generation.run


def baseline_run(goose_model: GooseModel, run: RunRecord, cancel: Callable[[], bool] | None = None) -> RunRecord:
    """The autoregressive run on `run`'s prompt and length with its head, measured now: a baseline kept from
    earlier was measured under another load than the run it is set beside."""
    return to_the_end(stream(goose_model, list(run.prompt_tokens), metrics.BASELINE, run.max_new_tokens,
                             head=run.head), cancel)


def grid_brackets(nodes: list[int]) -> list[int]:
    """The cost grid's sizes that price trees of `nodes` nodes: each size's neighbours on the grid (or itself)."""
    grid = sorted(BUDGET_GRID)
    kept = {1}
    for n in set(nodes):
        kept.add(max((g for g in grid if g <= n), default=grid[0]))
        kept.add(min((g for g in grid if g >= n), default=grid[-1]))
    return sorted(kept)


def prices_now(goose_model: GooseModel, run: RunRecord, nodes: list[int],
               cancel: Callable[[], bool] | None = None) -> PassPrices:
    """The passes that price trees of `nodes` nodes, the autoregressive pass and a prompt row's top-k, measured now
    with the run's head (goose.costs.measure_costs on the grid's sizes around them).

    Why: the run's cost table was measured once, and its ratios drift with what else the machine does. Measured
    afresh on this 2-core EPYC a day later, 32-64 node passes cost 70-125 ms where the kept table read 58-95 ms, while
    the 1-node pass was unchanged; and autoregressive steps, which stream every weight for one row, swung from 1.41
    to 1.70 s between checks of one process while goose's six bigger passes held at 0.23-0.25 s. Scaling the kept
    table by the baselines' pace then read +4.7 to +19.3%. `cancel` is asked after every pass, as in a real run."""
    def stop_if_cancelled() -> None:
        if cancel is not None and cancel():
            raise CheckCancelled("the check was cancelled while it measured its passes")

    seconds = measure_costs(goose_model, sizes=grid_brackets(nodes), repeats=PROBE_ROUNDS, head=run.head,
                            between=stop_if_cancelled)
    return PassPrices(*split_costs(seconds))


def real_run(goose_model: GooseModel, run: RunRecord, settings: dict[str, Any],
             cancel: Callable[[], bool] | None = None, rounds: int = 1,
             on_round: Callable[[int], object] | None = None, probe: list[int] | None = None) -> RealRun:
    """Run the model at `settings` over the run's own (the rule of goose.whatif.resolve_settings) on `run`'s prompt,
    with the store of past outputs it read (as it was then): what a replay estimates, measured. `cancel` is asked
    after every step; when it answers True the run stops and CheckCancelled is raised. The baseline runs just
    before it, every time: a sweep of checks alternates the two, and so do `rounds` rounds of one check
    (`on_round(r)` told as round r starts). `probe`: tree sizes whose passes are measured before the first round
    (prices_now), to price an estimate set beside this measurement."""
    if not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds must be a whole number >= 1, got {rounds!r}")
    method, config = resolve_settings(run, settings)
    runs, baselines, prices = [], [], None
    for r in range(rounds):
        if on_round is not None:
            on_round(r)
        if r == 0 and probe is not None:
            prices = prices_now(goose_model, run, probe, cancel)
        baselines.append(baseline_run(goose_model, run, cancel))
        generation = stream(goose_model, list(run.prompt_tokens), method, run.max_new_tokens, config.budget,
                            head=run.head, config=config, store=recorded_store(run, method))
        runs.append(to_the_end(generation, cancel))
    return RealRun(runs, baselines, prices)


def run_what_if(run: RunRecord, *, check: bool = False, model: GooseModel | None = None,
                cancel: Callable[[], bool] | None = None, rounds: int = 1,
                on_round: Callable[[int], object] | None = None, **settings: Any) -> RunWhatIf:
    """`run` replayed under `settings` (goose.whatif.replay; none: the run's own setting, which rebuilds the run
    itself): tau, passes and an estimated speed from the run's cost table.

    check=True runs `model` at these settings on the same prompt (and autoregressive decoding just before it)
    and keeps the real run in `.measured` beside the estimate (`.tau_error`, `.speedup_error`); `cancel` (asked
    after every step of it) stops it with CheckCancelled; `rounds` alternates the two that many times, and the
    measurement is their mean times (real_run)."""
    if check and model is None:
        raise ValueError("check=True runs the model: pass model=goose.load_model(...)")
    settings = {ALIASES.get(name, name): value for name, value in settings.items()}
    result = replay(run, **settings)
    if check:
        result.measured = real_run(model, run, settings, cancel, rounds, on_round,
                                   probe=result.nodes if result.has_costs else None)
    return result


