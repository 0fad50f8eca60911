"""How and when each generated token of a run was obtained: its kind (spine, branch, suffix, bonus, prefill) and
time.

The coloured text of Explore and the race lanes both read a run through these.
"""

from __future__ import annotations

from app.tree_view import BONUS, BONUS_COLOUR, SOURCE_COLOURS
from goose.trace import RunRecord
from goose.tree import BRANCH, SPINE, SUFFIX

SHOWN_TOKENS = 2048  # the most generated tokens of one run a viewer draws (a trace may hold any number)...
SHOWN_CHARS = 32_000  # ... and the most of their text
SHOWN_PROMPT_CHARS = 16_000  # the most of a prompt it draws: about the 4096 tokens a server takes by default
SHOWN_NAME_CHARS = 120  # the most of a method's or a model's name it draws
PREFILL = "prefill"  # the first generated token's kind: the prefill pass chose it
TOKEN_KINDS = {
    SPINE: (SOURCE_COLOURS[SPINE], "accepted from the spine (context match)"),
    BRANCH: (SOURCE_COLOURS[BRANCH], "accepted from a branch (adjacency table)"),
    SUFFIX: (SOURCE_COLOURS[SUFFIX], "accepted from SuffixDecoding's suffix trees"),
    BONUS: (BONUS_COLOUR, "bonus token (chosen by the target model)"),
    PREFILL: ("#9ca3af", "first token, from the prefill pass"),
}


def token_spans(run: RunRecord, shown: bool = False) -> list[tuple[str, str, int | None]]:
    """(text, kind, step) for each generated token; kind is spine, branch, suffix, bonus or prefill. `shown`: only as
    many as a viewer draws (SHOWN_TOKENS, holding at most SHOWN_CHARS of text)."""
    if not run.tokens:
        return []
    first = run.steps[0].nodes[0].text if run.steps else run.text
    spans: list[tuple[str, str, int | None]] = [(first, PREFILL, None)]
    chars = len(first)
    for step in run.steps:
        if shown and (chars >= SHOWN_CHARS or len(spans) >= SHOWN_TOKENS):
            break
        drafted = [(step.nodes[i].text, step.nodes[i].source) for i in step.accepted]
        made = drafted + [(step.bonus_text, BONUS)]
        spans.extend((text, kind, step.index) for text, kind in made[:len(step.committed)])
        chars += sum(len(text) for text, _ in made[:len(step.committed)])
    return _cut(spans[:SHOWN_TOKENS], SHOWN_CHARS) if shown else spans


def _cut(spans: list[tuple[str, str, int | None]], max_chars: int) -> list[tuple[str, str, int | None]]:
    """The first spans that hold max_chars characters, the last one cut to fit."""
    kept, left = [], max_chars
    for text, kind, step in spans:
        if left <= 0:
            break
        kept.append((text[:left], kind, step))
        left -= len(text)
    return kept


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
