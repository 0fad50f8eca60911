"""One decoding loop for every method; the methods differ only in how they draft (goose.drafters).

State carried across steps (docs/METHOD.md): the KV cache of every committed
token but the last; the anchor (the last committed token, the tree root); the
token before it. Each step drafts a tree, verifies it in one forward pass,
walks it (goose.walk), keeps the accepted path in the cache, commits the
accepted tokens plus one bonus token, and lets the drafter and the sources
learn from what the step revealed.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

from goose import metrics
from goose.budget import tuner_for
from goose.config import GooseConfig
from goose.costs import choose_head, cost_table
from goose.drafters import METHODS, Drafter, DraftState
from goose.heads.factory import HEAD_CHOICES, head_for, known_head
from goose.model import GooseModel
from goose.sampling import Sampling
from goose.snapshot import Snapshot, take_snapshot
from goose.sources import AdjacencyTable, ContextMatch, ContextMatcher
from goose.sources.prior import find_prior
from goose.trace import NodeRecord, RunRecord, StepRecord
from goose.tree import ROOT, DraftTree
from goose.verify import Verifier
from goose.walk import Verification, make_walker


def resolve_stops(stop: Sequence[str] | str | None) -> tuple[str, ...]:
    if stop is None:
        return ()
    return (stop,) if isinstance(stop, str) else tuple(s for s in stop if s)


def eos_ids(goose_model: GooseModel) -> set[int]:
    ids = goose_model.model.generation_config.eos_token_id if goose_model.model.generation_config else None
    ids = set(ids if isinstance(ids, list) else [ids] if ids is not None else [])
    if goose_model.tokenizer.eos_token_id is not None:
        ids.add(goose_model.tokenizer.eos_token_id)
    return ids


class Generation:
    """A generation in progress: iterate it for steps; `run` is filled in as it goes.

    The run's clock starts at `started` (the moment the user asked, by default now), so that its wall
    time holds everything the user waits for: encoding and set-up as well as the steps.
    """

    def __init__(self, goose_model: GooseModel, request: Request, started: float | None = None) -> None:
        self._start = time.perf_counter() if started is None else started
        self.goose_model = goose_model
        self.config, self.stop = request.config, request.stop
        text = isinstance(request.prompt, str)
        self.prompt_tokens = goose_model.encode(request.prompt) if text else list(request.prompt)
        goose_model.check_fits(len(self.prompt_tokens), request.max_new_tokens)
        head = choose_head(goose_model, request.head)
        self.run = RunRecord(prompt=request.prompt if text else goose_model.decode(self.prompt_tokens),
                             method=request.method, model=goose_model.name,
                             config=request.config.to_dict(), sampling=request.sampling.to_dict(),
                             max_new_tokens=request.max_new_tokens, prompt_tokens=list(self.prompt_tokens),
                             head=head)
        self.eos = eos_ids(goose_model)
        drafter_class = METHODS[request.method]
        tuner = (tuner_for(goose_model, request.method, head, sampled=not request.sampling.greedy)
                 if self.config.auto_budget and drafter_class.speculative else None)
        self.drafter: Drafter = drafter_class(self.config, tuner)
        # Every method, the baseline too, applies the same head (built once per model).
        self.walker = make_walker(head_for(goose_model, head), request.sampling)
        self.verifier = Verifier(goose_model.model)
        self.matcher = ContextMatcher.from_config(self.config)
        self.adjacency = None
        if drafter_class.uses_adjacency:
            prior = find_prior(goose_model.name) if self.config.warm_start else None
            self.adjacency = AdjacencyTable.from_config(self.config, prior.rows if prior else None)
            self.run.prior = prior.name if prior else None
        self.drafted: Counter = Counter()
        self.accepted_by_source: Counter = Counter()
        self.record_sources = request.record_sources
        self._snapshot: Snapshot | None = None
        self._rows: list | None = None  # the adjacency rows this step stored, one per node (recorded runs)
        self._shape: dict | None = None  # the shape knobs the tuner set for this step's tree (recorded runs)
        self.shadow = (drafter_class(self.config.with_overrides(budget=request.shadow_budget, auto_budget=False))
                       if request.shadow_budget and drafter_class.uses_adjacency else None)
        self._shadow_rows: list | None = None  # (parent, token, row) of the shadow tree's extra nodes
        if self.record_sources:  # what-if speed estimates need this device's verification costs
            self.run.prefill_rows = []
            self.run.costs = cost_table(goose_model, head=head)

    def __iter__(self) -> Iterator[StepRecord]:
        return self._steps()

    @torch.inference_mode()
    def _steps(self) -> Iterator[StepRecord]:
        """Prefill, then per step: draft -> verify -> walk -> commit -> observe -> record."""
        self.run.totals.setup_s = time.perf_counter() - self._start
        first = self._prefill()
        done = self._commit([first])
        self._clock()
        if done:
            return
        anchor, before_anchor = first, self.prompt_tokens[-1]
        while True:
            t0 = time.perf_counter()
            state = self._draft_state(anchor, before_anchor)
            tree, budget = self.drafter.draft(state)
            if self.record_sources:
                self._shape = self.drafter.shape_for(state)
            if self.shadow is not None:  # not part of the run: its time leaves the run's clock
                paused = self._record_shadow(state, tree)
                self._start, t0 = self._start + paused, t0 + paused
            t1 = time.perf_counter()
            verification = self._verify(tree)
            t2 = time.perf_counter()
            if self.drafter.tuner is not None:  # what this tree really cost, against the tuner's table
                self.drafter.tuner.calibration.observe(len(tree), t2 - t1)
            new_tokens = verification.new_tokens(tree)
            before = len(self.run.tokens)
            done = self._commit(new_tokens, tree, verification)
            self._observe(state, tree, verification)
            t3 = time.perf_counter()
            step = self._record(tree, verification, self.run.tokens[before:], t1 - t0, t2 - t1, t3 - t2, budget)
            self.run.steps.append(step)
            self._clock()
            yield step
            if done:
                return
            path = [anchor, *new_tokens]
            anchor, before_anchor = path[-1], path[-2]

    def _prefill(self) -> int:
        """One pass over the whole prompt: the first new token; the prompt's rows seed the adjacency table."""
        start = time.perf_counter()
        prompt = self.prompt_tokens
        self.matcher.extend(prompt)
        hidden = self.verifier.forward_chain(prompt)
        first = self.walker.first_token(hidden[-1:])
        if self.adjacency is not None:
            # Only the rows the table would keep (a later occurrence overwrites an earlier one) need the head's
            # top-k: the table comes out the same, for a fraction of the prefill's heaviest work.
            previous = [None, *prompt[:-1]]
            rows = self.adjacency.last_occurrences(prompt, previous)
            top = self.walker.head.top(hidden[rows], self._top_k)
            tokens, before = [prompt[i] for i in rows], [previous[i] for i in rows]
            stored = self.adjacency.refresh(tokens, before, top.indices, top.values)
            if self.record_sources:  # the replay (goose.replay) rebuilds the table from these and the steps' rows
                self.run.prefill_rows = list(zip(before, tokens, stored))
        self.verifier.truncate(len(prompt))  # the whole prompt is committed
        self.run.totals.prefill_s = time.perf_counter() - start
        self.run.totals.forward_passes = 1
        return first

    @property
    def _top_k(self) -> int:
        """Successors per row the adjacency table wants from each pass (0: no table)."""
        return self.adjacency.top_k if self.adjacency is not None else 0

    def _draft_state(self, anchor: int, before_anchor: int) -> DraftState:
        """The sources at this step, as the drafter sees them."""
        match = self.matcher.match() if self.drafter.uses_context else ContextMatch()
        match.tokens = match.tokens[:max(0, self.run.max_new_tokens - len(self.run.tokens) - 1)]
        state = DraftState(anchor, before_anchor, match, self.adjacency, self.drafter.spine_acceptance)
        if self.record_sources:
            self._snapshot, state = take_snapshot(state, self.config)
        return state

    def _record_shadow(self, state: DraftState, tree: DraftTree) -> float:
        """Verify the shadow drafter's tree merged with `tree` and keep the rows of the nodes `tree` lacks (their
        parents numbered in the merged tree: `tree`'s nodes first); the cache is cut back to the prefix and
        the table is not touched. Returns the seconds it took."""
        started = time.perf_counter()
        shadow = self.shadow.build(state, self.shadow.budget(state))
        merged = tree.merged_with(shadow)
        self._shadow_rows = []
        if len(merged) > len(tree):
            hidden = self.verifier.forward_tree(merged)[len(tree):]
            self.verifier.truncate(self.verifier.prefix_length)
            top = self.walker.head.top(hidden, self._top_k)
            extra = range(len(tree), len(merged))
            self._shadow_rows = [(merged.parents[i], merged.tokens[i], row)
                                 for i, row in zip(extra, self.adjacency.rows(top.indices, top.values))]
        return time.perf_counter() - started

    def _verify(self, tree: DraftTree) -> Verification:
        """One forward pass over the tree, the walk, and the accepted path kept in the KV cache."""
        hidden = self.verifier.forward_tree(tree)
        verification = self.walker.walk(tree, hidden, self._top_k)
        self.verifier.commit([0, *verification.accepted])
        return verification

    def _observe(self, state: DraftState, tree: DraftTree, verification: Verification) -> None:
        """The drafter learns from the step (before the sources change: it rescores the state it drafted
        from), then every row's successors are recycled into the adjacency table, rejected nodes too."""
        self.drafter.observe(state, tree, verification.accepted, verification.new_tokens(tree))
        if self.adjacency is not None:
            previous = [tree.tokens[p] if p >= 0 else state.before_anchor for p in tree.parents]
            rows = self.adjacency.refresh(tree.tokens, previous, verification.top.indices, verification.top.values)
            self._rows = rows if self.record_sources else None

    def _commit(self, new_tokens: list[int], tree: DraftTree | None = None,
                verification: Verification | None = None) -> bool:
        """Append tokens (EOS, max_new_tokens and stop strings applied) and update the totals;
        True when the run is over. `tree` and `verification` are None for the prefill's token."""
        run = self.run
        reason = ""
        for token in new_tokens:
            run.tokens.append(token)
            self.matcher.extend([token])
            if token in self.eos:
                reason = "eos"
                break
            if len(run.tokens) >= run.max_new_tokens:
                reason = "max_new_tokens"
                break
        text = self.goose_model.decode(run.tokens)
        for stop in self.stop:
            cut = text.find(stop)
            if cut >= 0:
                text, reason = text[:cut], "stop_string"
        run.text = text
        run.stop_reason = reason
        totals = run.totals
        if tree is not None:
            totals.forward_passes += 1
            self.drafted.update(tree.sources[1:])
            self.accepted_by_source.update(tree.sources[n] for n in verification.accepted)
            totals.drafted, totals.accepted = dict(self.drafted), dict(self.accepted_by_source)
        totals.new_tokens = len(run.tokens)
        totals.tau = metrics.tau(totals)
        return bool(reason)

    def _clock(self) -> None:
        """Wall time and tokens/s so far, from the call to now (a step counts once it is recorded)."""
        totals = self.run.totals
        totals.wall_s = time.perf_counter() - self._start
        totals.tokens_per_s = metrics.tokens_per_s(totals)

    def _record(self, tree: DraftTree, verification: Verification, committed: list[int], draft_s: float,
                verify_s: float, observe_s: float, budget: int) -> StepRecord:
        """The step as the trace keeps it: every node with its text, source, status and the target's choice."""
        texts = self.goose_model.token_texts(tree.tokens + [verification.bonus])
        nodes = []
        for i in range(len(tree)):
            verdict = verification.verdicts.get(i)
            status = ROOT if i == 0 else verdict.status if verdict else "unvisited"
            nodes.append(NodeRecord(token=tree.tokens[i], text=texts[i], source=tree.sources[i],
                                    parent=tree.parents[i], depth=tree.depths[i], score=tree.scores[i],
                                    target=verification.targets[i], status=status,
                                    accept_prob=verdict.accept_prob if verdict else None,
                                    reason=verdict.reason if verdict else ""))
        if self._snapshot is not None:
            unknown = sorted(self._snapshot.tokens() - self.run.token_texts.keys())
            self.run.token_texts.update(zip(unknown, self.goose_model.token_texts(unknown)))
        return StepRecord(index=len(self.run.steps), nodes=nodes, accepted=verification.accepted,
                          bonus_token=verification.bonus, bonus_text=texts[-1], committed=committed,
                          draft_s=draft_s, verify_s=verify_s, observe_s=observe_s, budget=budget,
                          snapshot=self._snapshot, rows=self._rows, shape=self._shape, shadow=self._shadow_rows)


@dataclass(frozen=True)
class Request:
    """A checked generation request: everything but the model."""

    prompt: str | tuple[int, ...]  # text, or token ids used as they are (no special tokens added)
    method: str
    max_new_tokens: int
    config: GooseConfig
    sampling: Sampling
    stop: tuple[str, ...]
    record_sources: bool = False
    head: str = "auto"
    shadow_budget: int = 0


def check_request(prompt: str | Sequence[int], method: str = "goose", max_new_tokens: int = 128,
                  budget: int | str | None = None, *, stop: Sequence[str] | str | None = None,
                  temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int | None = None,
                  config: GooseConfig | None = None, record_sources: bool = False, head: str = "auto",
                  shadow_budget: int = 0, **overrides) -> Request:
    """Check every argument before any work: ValueError (TypeError for an unknown option) on bad input.

    record_sources: keep a snapshot of the sources in every step (for goose.what_if).
    shadow_budget: with record_sources, also verify at every step, outside the run (its cache, table and clock
    are left as they were), the tree the method would build at this fixed budget, and record the adjacency
    rows of its nodes the step's tree lacks: a replay at a budget up to it then reads its own rejected nodes'
    rows exactly where the two trees share them (goose.replay). 0: none.
    head: "int8" or "screened" (the exact float32 argmax through an int8 or a bf16 screen), "full" (the
    textbook float32 head) or "auto" (the default: whichever is fastest on this device, timed once per
    model); every method, the autoregressive baseline included, uses the one chosen."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    if not isinstance(prompt, str):  # token ids
        prompt = tuple(prompt) if isinstance(prompt, Sequence) else ()
        if not all(isinstance(t, int) and t >= 0 for t in prompt):
            raise ValueError("a prompt of token ids holds whole numbers >= 0 only")
    if not (prompt.strip() if isinstance(prompt, str) else prompt):
        raise ValueError("the prompt is empty: give some text to continue")
    if not known_head(head):
        raise ValueError(f"unknown head {head!r}; choose one of {', '.join(HEAD_CHOICES)}")
    if not isinstance(shadow_budget, int) or shadow_budget < 0:
        raise ValueError(f"shadow_budget must be a whole number >= 0, got {shadow_budget!r}")
    if shadow_budget and not record_sources:
        raise ValueError("shadow_budget records rows for replays: it needs record_sources=True")
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be a whole number >= 1, got {max_new_tokens!r}")
    if budget is None or budget == "auto":
        overrides.setdefault("auto_budget", True)
    else:
        overrides["budget"], overrides["auto_budget"] = budget, False
    config = (config or GooseConfig()).with_overrides(**overrides)
    return Request(prompt, method, max_new_tokens, config, Sampling(temperature, top_k, top_p, seed),
                   resolve_stops(stop), bool(record_sources), head, shadow_budget)


def stream(goose_model: GooseModel, prompt: str | Sequence[int], method: str = "goose", max_new_tokens: int = 128,
           budget: int | str | None = None, **kwargs) -> Generation:
    """Start a generation; iterate the result for its steps as they happen.

    prompt: text (encoded with the tokenizer's special tokens) or token ids, used as they are.
    Keyword arguments: stop, temperature, top_k, top_p, seed, config, head, record_sources
    (snapshot each step's sources, for goose.what_if), shadow_budget (with them, rows for replays at bigger
    budgets: check_request), and any GooseConfig field as an override.
    Bad input raises before any work. The run's wall time starts here.
    """
    started = time.perf_counter()
    request = check_request(prompt, method, max_new_tokens, budget, **kwargs)
    return Generation(goose_model, request, started)


def generate(goose_model: GooseModel, prompt: str | Sequence[int], method: str = "goose", max_new_tokens: int = 128,
             budget: int | str | None = None, **kwargs) -> RunRecord:
    """Generate to the end and return the run record."""
    generation = stream(goose_model, prompt, method, max_new_tokens, budget, **kwargs)
    for _ in generation:
        pass
    return generation.run
