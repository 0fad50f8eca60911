"""How and when each generated token of a run was obtained: its kind (spine, branch, bonus, prefill) and time.

The coloured text of Explore and the race lanes both read a run through these.
"""

from __future__ import annotations

from app.tree_view import BONUS, BONUS_COLOUR, SOURCE_COLOURS
from goose.trace import RunRecord
from goose.tree import BRANCH, SPINE

PREFILL = "prefill"  # the first generated token's kind: the prefill pass chose it
TOKEN_KINDS = {
    SPINE: (SOURCE_COLOURS[SPINE], "accepted from the spine (context match)"),
    BRANCH: (SOURCE_COLOURS[BRANCH], "accepted from a branch (adjacency table)"),
    BONUS: (BONUS_COLOUR, "bonus token (chosen by the target model)"),
    PREFILL: ("#9ca3af", "first token, from the prefill pass"),
}


def token_spans(run: RunRecord) -> list[tuple[str, str, int | None]]:
    """(text, kind, step) for each generated token; kind is spine, branch, bonus or prefill."""
    if not run.tokens:
        return []
    first = run.steps[0].nodes[0].text if run.steps else run.text
    spans: list[tuple[str, str, int | None]] = [(first, PREFILL, None)]
    for step in run.steps:
        drafted = [(step.nodes[i].text, step.nodes[i].source) for i in step.accepted]
        made = drafted + [(step.bonus_text, BONUS)]
        spans.extend((text, kind, step.index) for text, kind in made[:len(step.committed)])
    return spans


def token_times(run: RunRecord) -> list[float]:
    """Seconds from the start of the run at which each generated token was committed.

    The first token lands at the end of the prefill; a step's tokens land when its draft and
    verification are done. Steps are stretched evenly over the rest of the measured wall time
    (bookkeeping between steps is not timed per step), so the last token lands at wall_s."""
    if not run.tokens:
        return []
    totals = run.totals
    timed = sum(step.seconds for step in run.steps)
    stretch = (totals.wall_s - totals.prefill_s) / timed if timed > 0 else 0.0
    times = [totals.prefill_s]
    clock = totals.prefill_s
    for step in run.steps:
        clock += step.seconds * stretch
        times.extend([clock] * len(step.committed))
    return times[:len(run.tokens)]
