"""A recorded greedy run as the decoding loop's target (goose.whatif): the loop replays it, no model needed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from goose.config import GooseConfig
from goose.decode import Generation, Request
from goose.drafters import METHODS
from goose.sampling import Sampling
from goose.sources import AdjacencyTable, SuffixStore
from goose.sources.adjacency import Row
from goose.sources.prior import find_prior
from goose.trace import RunRecord
from goose.tree import DraftTree
from goose.walk import Verification, greedy_verdicts
from goose.whatif.rows import LatestRows, PassRows, context_key, node_paths


class NoReplayDataError(ValueError):
    """The run was recorded without what a replay needs (the adjacency rows of its passes), or the method replayed
    cannot run here (its library is missing: Drafter.unavailable)."""


def recorded_prior(run: RunRecord, config: GooseConfig) -> Mapping[int, Row] | None:
    """The rows of the prior the run's table started over, if the replay's `config` starts warm too (else None);
    NoReplayDataError when that prior is not on this machine."""
    if run.prior is None or not config.warm_start:
        return None
    prior = find_prior(run.model)
    if prior is None or prior.name != run.prior:
        raise NoReplayDataError(f"this run's adjacency table started over the prior {run.prior!r}, which is not on "
                                f"this machine (python -m goose build-prior --model {run.model} builds the model's "
                                "prior; a rebuilt one must be the same to replay the run)")
    return prior.rows


class RecordedTarget:
    """A recorded greedy run as the decoding loop's target: verifies a tree by walking it along the recorded
    continuation, and gives each node the row the recorded passes computed in its context (`PassRows`), else
    its token's latest recorded row at or before its place (`LatestRows`)."""

    def __init__(self, run: RunRecord, config: GooseConfig, method: str) -> None:
        self.run, self.method = run, method
        self.model, self.head, self.parallel = run.model, run.head, run.parallel
        self.eos: set[int] = set()  # the recording ends where it ends (ends_after), for whatever reason it did
        self.tokens = list(run.tokens)
        self.sequence = [*run.prompt_tokens, *run.tokens]
        self._prior = recorded_prior(run, config)
        self._pass_rows = PassRows(run)
        self._latest = LatestRows(run)
        self._texts = recorded_texts(run)
        self.position = 0  # new tokens committed before the step being verified

    def encode(self, prompt: str) -> list[int]:
        return list(self.run.prompt_tokens)

    def check_fits(self, prompt_tokens: int, max_new_tokens: int) -> None:
        pass

    def prior(self) -> tuple[str, Mapping[int, Row]] | None:
        return (self.run.prior, self._prior) if self._prior is not None else None

    def costs(self) -> dict[int, float]:
        return dict(self.run.costs)

    def autoregressive_cost(self) -> float | None:
        return self.run.autoregressive_s

    def prefill_row_cost(self) -> float | None:
        return self.run.prefill_row_s

    def tuner_start(self) -> dict | None:
        """Where the recorded run's tuner started: a replay of its method starts there too (another method's
        tuner has other knobs, and starts from nothing)."""
        return self.run.tuner_start if self.method == self.run.method else None

    def prefill(self, prompt: Sequence[int], table_rows: Sequence[int], table: AdjacencyTable | None
                ) -> tuple[int, list[Row | None]]:
        stored = {(previous, token): row for previous, token, row in self.run.prefill_rows or []}
        by_token = {token: row for _, token, row in self.run.prefill_rows or []}
        rows = [stored.get((prompt[i - 1] if i else None, prompt[i]), by_token.get(prompt[i])) for i in table_rows]
        self.position = 1
        return self.tokens[0], rows

    def verify(self, tree: DraftTree, before_anchor: int | None, table: AdjacencyTable | None) -> Verification:
        continuation = self.tokens[self.position:]
        accepted = tree.walk(continuation)
        # Past the recorded end the target's next token is unknown; the loop stops before it would commit one.
        bonus = continuation[len(accepted)] if len(accepted) < len(continuation) else -1
        targets: list[int | None] = [None] * len(tree)
        verdicts = {}
        for depth, node in enumerate([0, *accepted]):
            targets[node] = continuation[depth] if depth < len(continuation) else None
            verdicts.update(greedy_verdicts(tree, node, targets[node]))
        rows = self._rows(tree) if table is not None else None
        self.position += len(accepted) + 1
        return Verification(accepted, bonus, targets, verdicts, rows)

    def _rows(self, tree: DraftTree) -> list[Row | None]:
        start = len(self.run.prompt_tokens) + self.position  # the anchor's context: sequence[:start]
        return [self._pass_rows.get(context_key(self.sequence, start, path))
                or self._latest.row(token, self.position + len(path))
                for token, path in zip(tree.tokens, node_paths(tree.parents, tree.tokens))]

    def ends_after(self, new_tokens: int) -> str:
        return (self.run.stop_reason or "end of the recording") if new_tokens >= len(self.tokens) else ""

    def text(self, tokens: Sequence[int]) -> str:
        return "".join(self.token_texts(tokens))

    def token_texts(self, tokens: Sequence[int]) -> list[str]:
        return [self._texts.get(token, "") for token in tokens]


def known_continuation(run: RunRecord) -> list[int]:
    """The target's greedy continuation as far as the run knows it: its tokens, then what its last step's pass
    revealed past the point where the run stopped committing (max_new_tokens, a stop string)."""
    if not run.steps:
        return list(run.tokens)
    last = run.steps[-1]
    return [*run.tokens, *last.revealed[len(last.committed):]]


def replay_refusal(run: RunRecord, method: str | None = None) -> ValueError | None:
    """Why `run` cannot be replayed under `method` (default: its own) here, as the error to raise (a
    NoReplayDataError where data or the method's library is missing, a ValueError for a sampled run), or None.
    The one rule: replays raise it (`check_replayable`), the Lab shows it."""
    method = method or run.method
    if reason := METHODS[method].unavailable():
        return NoReplayDataError(reason)
    if run.sampling.get("temperature", 0.0) != 0.0:
        return ValueError("a replay needs a greedy run (temperature 0): a sampled run's tokens are one draw, "
                          "not the continuation every tree is walked along")
    if not run.has_replay_data:
        return NoReplayDataError("this run was recorded without the adjacency rows a replay needs (an older "
                                 "trace, or recorded without them): record it again with "
                                 "goose.generate(..., record_sources=True)")
    if METHODS[method].uses_adjacency and not METHODS[run.method].uses_adjacency:
        return NoReplayDataError(f"the recorded method {run.method!r} kept no adjacency table, so a {method!r} tree "
                                 "cannot be rebuilt from it: record the run with a method that drafts from the "
                                 "table")
    return None


def check_replayable(run: RunRecord, method: str) -> None:
    """NoReplayDataError (a ValueError) unless `run` holds what replaying it under `method` needs, and `method` can
    run here (`replay_refusal`)."""
    if (refusal := replay_refusal(run, method)) is not None:
        raise refusal


def recorded_texts(run: RunRecord) -> dict[int, str]:
    """Every token's text the run recorded (its prompt's and output's, every step's nodes and bonus tokens): what a
    rebuilt tree's nodes are named by, with no tokenizer at hand."""
    texts = dict(run.token_texts)
    for step in run.steps:
        texts.update((node.token, node.text) for node in step.nodes)
        texts[step.bonus_token] = step.bonus_text
    return texts


def recorded_store(run: RunRecord, method: str) -> SuffixStore | None:
    """The store of past outputs `run` read, as it was when the run started, for a `method` that reads one (a
    fixed copy: neither a replay nor a check adds to it); None when the run read none or `method` reads none."""
    return SuffixStore.from_snapshot(run.store) if run.store is not None and METHODS[method].uses_suffix else None


def replay_generation(run: RunRecord, method: str, config: GooseConfig) -> Generation:
    """The decoding loop over the recording of `run`, drafting with `method` and `config`: iterate it for the
    replayed steps (StepRecords, as a real run's)."""
    check_replayable(run, method)
    request = Request(tuple(run.prompt_tokens), method, run.max_new_tokens, config, Sampling(), (),
                      store=recorded_store(run, method))
    return Generation(RecordedTarget(run, config, method), request)
