"""An estimate beside the measurement that checks it: a replay's what-if, and the real run at its settings.

A replay (goose.whatif) estimates what a setting would have done on a recorded run;
this module runs the model at that setting on the same prompt, and autoregressive
decoding just before it, every time (the two alternate, so a speed-up divides two runs made
under the same load), so that every estimate can be shown with its error. The run's
own setting reproduces the recorded trees exactly (a run is a function of its
inputs), so its check differs from the estimate in time alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from goose import metrics
from goose.decode import Generation, stream
from goose.model import GooseModel
from goose.trace import RunRecord
from goose.whatif import ALIASES, RunWhatIf, recorded_store, replay, resolve_settings


class CheckCancelled(RuntimeError):
    """A check's real run was cancelled before its end (nothing was measured)."""


@dataclass
class RealRun:
    """The model run for real at a what-if's settings on the same prompt, beside the autoregressive baseline
    measured just before it.

    tau, wall_s, tokens_per_s: the real run's (its clock: goose.decode); speedup: over the baseline's tokens/s
    (goose.metrics); same_tokens: it produced the baseline's tokens (lossless)."""

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


def real_run(goose_model: GooseModel, run: RunRecord, settings: dict[str, Any],
             cancel: Callable[[], bool] | None = None) -> RealRun:
    """Run the model at `settings` over the run's own (the rule of goose.whatif.resolve_settings) on `run`'s prompt,
    with the store of past outputs it read (as it was then): what a replay estimates, measured. `cancel` is asked
    after every step; when it answers True the run stops and CheckCancelled is raised. The baseline runs just
    before it, every time: a sweep of checks alternates the two."""
    method, config = resolve_settings(run, settings)
    baseline = baseline_run(goose_model, run, cancel)
    generation = stream(goose_model, list(run.prompt_tokens), method, run.max_new_tokens, config.budget,
                        head=run.head, config=config, store=recorded_store(run, method))
    return RealRun(to_the_end(generation, cancel), baseline)


def run_what_if(run: RunRecord, *, check: bool = False, model: GooseModel | None = None,
                cancel: Callable[[], bool] | None = None, **settings: Any) -> RunWhatIf:
    """`run` replayed under `settings` (goose.whatif.replay; none: the run's own setting, which rebuilds the run
    itself): tau, passes and an estimated speed from the run's cost table.

    check=True runs `model` at these settings on the same prompt (and autoregressive decoding just before it)
    and keeps the real run in `.measured` beside the estimate (`.tau_error`, `.speedup_error`); `cancel` (asked
    after every step of it) stops it with CheckCancelled."""
    if check and model is None:
        raise ValueError("check=True runs the model: pass model=goose.load_model(...)")
    settings = {ALIASES.get(name, name): value for name, value in settings.items()}
    result = replay(run, **settings)
    if check:
        result.measured = real_run(model, run, settings, cancel)
    return result


