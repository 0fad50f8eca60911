"""The target model as the decoding loop sees it: encode, prefill, verify a tree, name tokens.

The loop (goose.decode) drafts, commits and learns; everything it asks of the model goes
through a `Target`. `ModelTarget` runs the model: a tree's forward pass against its KV cache
(goose.verify), the walk along it through the run's LM head (goose.walk), and each node's
adjacency row from the same pass. A replay (goose.whatif) is the same loop with a target that
reads a recorded run instead of running the model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from goose.heads.factory import head_for
from goose.model import GooseModel
from goose.sampling import Sampling
from goose.sources.adjacency import AdjacencyTable, Row
from goose.sources.prior import find_prior
from goose.tree import DraftTree
from goose.verify import Verifier
from goose.walk import Verification, make_walker


class Target(Protocol):
    """What the decoding loop asks of the target model.

    model:  the model's name (recorded in the run).
    head:   the LM head every pass applies (recorded in the run).
    eos:    the token ids that end a run.
    parallel: how the model is spread over processes (goose.parallel, recorded in the run), or None.
    """

    model: str
    head: str
    eos: set[int]
    parallel: dict | None

    def encode(self, prompt: str) -> list[int]:
        """A text prompt as token ids (the tokenizer's special tokens added)."""
        ...

    def check_fits(self, prompt_tokens: int, max_new_tokens: int) -> None:
        """ValueError when the prompt and the new tokens do not fit the model's context."""
        ...

    def prior(self) -> tuple[str, Mapping[int, Row]] | None:
        """The warm start of the adjacency table: (its name, its rows), or None."""
        ...

    def costs(self) -> dict[int, float]:
        """Seconds of one verification step per tree size: what the budget tuner reads, fixed before the run."""
        ...

    def autoregressive_cost(self) -> float | None:
        """Seconds of one plain autoregressive pass, measured with the costs (goose.costs), or None."""
        ...

    def prefill_row_cost(self) -> float | None:
        """Seconds per prompt row of the head's top-k a prefill pays for the adjacency table (goose.costs), or None."""
        ...

    def tuner_start(self) -> dict | None:
        """Where the run's budget tuner starts (goose.tuning: what a tuner learnt before), or None: from nothing."""
        ...

    def prefill(self, prompt: Sequence[int], table_rows: Sequence[int], table: AdjacencyTable | None
                ) -> tuple[int, list[Row | None]]:
        """One pass over the prompt: the first new token, and the adjacency rows of the prompt positions
        `table_rows` (the ones `table` keeps; none without a table)."""
        ...

    def verify(self, tree: DraftTree, before_anchor: int | None, table: AdjacencyTable | None) -> Verification:
        """Verify `tree` (its root the anchor, the last committed token): the accepted path, the bonus token
        and, with a table, each node's row. The accepted path stays committed."""
        ...

    def ends_after(self, new_tokens: int) -> str:
        """Why the target's continuation ends after `new_tokens` new tokens (a recording's end), or ''."""
        ...

    def text(self, tokens: Sequence[int]) -> str:
        """The text of the new tokens."""
        ...

    def token_texts(self, tokens: Sequence[int]) -> list[str]:
        """Each token's own text."""
        ...


def eos_ids(goose_model: GooseModel) -> set[int]:
    ids = goose_model.model.generation_config.eos_token_id if goose_model.model.generation_config else None
    ids = set(ids if isinstance(ids, list) else [ids] if ids is not None else [])
    if goose_model.tokenizer.eos_token_id is not None:
        ids.add(goose_model.tokenizer.eos_token_id)
    return ids


class ModelTarget:
    """The model itself: one forward pass per tree through a KV cache it owns, walked with the run's head."""

    def __init__(self, goose_model: GooseModel, head: str, sampling: Sampling, warm_start: bool,
                 costs: dict[int, float], tuner_start: dict | None = None,
                 autoregressive_s: float | None = None, prefill_row_s: float | None = None) -> None:
        self.goose_model = goose_model
        self.model = goose_model.name
        self.eos = eos_ids(goose_model)
        self.parallel = goose_model.parallel.to_dict() if goose_model.parallel else None
        self.head = head
        self.walker = make_walker(head_for(goose_model, head), sampling)
        self.verifier = Verifier(goose_model.model)
        self._prior = find_prior(goose_model.name) if warm_start else None
        self._costs = costs  # this device's cost table (goose.costs), measured before the run
        self._autoregressive_s = autoregressive_s  # and its autoregressive pass, measured with it
        self._prefill_row_s = prefill_row_s  # and a prefill row's top-k
        self._tuner_start = tuner_start  # what the method's tuner learnt on this model and machine (goose.tuning)

    def encode(self, prompt: str) -> list[int]:
        return self.goose_model.encode(prompt)

    def check_fits(self, prompt_tokens: int, max_new_tokens: int) -> None:
        self.goose_model.check_fits(prompt_tokens, max_new_tokens)

    def prior(self) -> tuple[str, Mapping[int, Row]] | None:
        return (self._prior.name, self._prior.rows) if self._prior is not None else None

    def costs(self) -> dict[int, float]:
        return self._costs

    def autoregressive_cost(self) -> float | None:
        return self._autoregressive_s

    def prefill_row_cost(self) -> float | None:
        return self._prefill_row_s

    def tuner_start(self) -> dict | None:
        return self._tuner_start

    def prefill(self, prompt: Sequence[int], table_rows: Sequence[int], table: AdjacencyTable | None
                ) -> tuple[int, list[Row | None]]:
        if self.verifier.device.type == "cpu":
            self.goose_model.cache.threads.note()  # a run's first model work, on the thread that runs it
        hidden = self.verifier.forward_chain(list(prompt))
        first = self.walker.first_token(hidden[-1:])
        rows: list[Row | None] = []
        if table is not None and table_rows:
            # Only the rows the table keeps need the head's top-k: the table comes out the same, for a fraction
            # of the prefill's heaviest work. And over the run's prior, their successors are ranked among the
            # tokens the prior holds and the prompt's own, not the whole vocabulary (Prior.harvest_vocabulary).
            vocabulary = self._prior.harvest_vocabulary(prompt) if self._prior is not None else None
            top = self.walker.head.top_among(hidden[list(table_rows)], vocabulary, table.top_k)
            rows = list(table.rows(top.indices, top.values))
        self.verifier.truncate(len(prompt))  # the whole prompt is committed
        return first, rows

    def verify(self, tree: DraftTree, before_anchor: int | None, table: AdjacencyTable | None) -> Verification:
        hidden = self.verifier.forward_tree(tree)
        verification, top = self.walker.walk(tree, hidden, table.top_k if table is not None else 0)
        self.verifier.commit([0, *verification.accepted])
        if table is not None:
            verification.rows = list(table.rows(top.indices, top.values))
        return verification

    def rows_beside(self, tree: DraftTree, table: AdjacencyTable, start: int) -> list[Row]:
        """The rows of `tree`'s nodes from `start` on, verified beside the run, not in it: the cache is cut back
        to the committed prefix afterwards and nothing else changes (a recording's shadow tree)."""
        hidden = self.verifier.forward_tree(tree)[start:]
        self.verifier.truncate(self.verifier.prefix_length)
        top = self.walker.head.top(hidden, table.top_k)
        return list(table.rows(top.indices, top.values))

    def ends_after(self, new_tokens: int) -> str:
        return ""  # the model goes on as long as the loop asks

    def text(self, tokens: Sequence[int]) -> str:
        return self.goose_model.decode(list(tokens))

    def token_texts(self, tokens: Sequence[int]) -> list[str]:
        return self.goose_model.token_texts(list(tokens))
