"""One step rebuilt under other settings and scored against the recorded continuation (goose.whatif)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from goose.config import GooseConfig
from goose.decode import Generation, Observer
from goose.drafters import METHODS, Drafter, DraftState
from goose.trace import NodeRecord, RunRecord, StepRecord
from goose.tree import ROOT, DraftTree
from goose.walk import greedy_verdicts
from goose.whatif.recorded import check_replayable, known_continuation, recorded_texts, replay_generation
from goose.whatif.rows import anchor_positions
from goose.whatif.settings import ALIASES, resolve_settings


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


def rebuilt_record(run: RunRecord, step_index: int, result: WhatIf) -> StepRecord:
    """The rebuilt tree of `what_if(run, step_index, ...)` as a StepRecord, judged by the greedy walk's own rule
    (goose.walk.greedy_verdicts) along the revealed continuation and named by the run's recorded texts, so that it
    is drawn as a real step is: accepted path, tried children rejected, the next revealed token as the bonus (-1
    and '?' where the tree holds all that was revealed)."""
    tree, path, revealed = result.tree, result.accepted_path, result.revealed
    texts = recorded_texts(run)
    on_path = [0, *path]
    targets = {node: revealed[k] for k, node in enumerate(on_path) if k < len(revealed)}
    verdicts = {}
    for node in on_path:
        verdicts.update(greedy_verdicts(tree, node, targets.get(node)))
    nodes = []
    for i in range(len(tree)):
        verdict = verdicts.get(i)
        status = ROOT if i == 0 else verdict.status if verdict else "unvisited"
        nodes.append(NodeRecord(token=tree.tokens[i], text=texts.get(tree.tokens[i], f"#{tree.tokens[i]}"),
                                source=tree.sources[i], parent=tree.parents[i], depth=tree.depths[i],
                                score=tree.scores[i], target=targets.get(i), status=status,
                                reason=verdict.reason if verdict else ""))
    bonus = revealed[result.accepted] if not result.lower_bound else -1
    return StepRecord(index=step_index, nodes=nodes, accepted=path, bonus_token=bonus, bonus_text=texts.get(bonus, "?"),
                      committed=revealed[:result.accepted + 1], draft_s=0.0, verify_s=0.0, budget=result.budget)


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
    if config.tuned and settings.get("budget") is not None:  # refused before the replay up to the step
        raise ValueError("budget 'auto' is the tuner's pick over a whole run; one step's what-if rebuilds at a node "
                         "budget (leave budget out for the step's own, or replay the whole run: run_what_if)")
    check_replayable(run, method)
    drafter = METHODS[method](config) if settings else None  # no tuner: it builds at the step's budget or `budget`
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
