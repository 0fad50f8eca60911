"""One decoding loop for every method, and for every replay of a recorded run.

The methods differ only in how they draft (goose.drafters); a real run and a replay
differ only in their target (goose.target): the model, or a recording of what it said.
State carried across steps (docs/METHOD.md): the anchor (the last committed token, the
tree root) and the token before it; the target keeps its own (the KV cache). Each step
drafts a tree, has the target verify it, commits the accepted tokens plus one bonus
token, and lets the drafter and the sources learn from what the step revealed.

A run is a function of its inputs: the budget tuner starts fresh in every run and reads
a cost table fixed before the run starts, so the same prompt, model, settings and seed
draft the same trees, in any process, whatever ran before. The run's clock holds decoding work
alone: what a recorded run keeps is taken by observers of the loop, node texts are named, and a
caller's work between two steps is done, outside it. The output's text is decoded as it grows
(goose.text), a short window per step, so text work per token does not grow with the output.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

from goose import metrics, validate
from goose.budget import BudgetTuner
from goose.config import GooseConfig
from goose.costs import autoregressive_cost, choose_head, cost_key, cost_table, prefill_row_cost
from goose.drafters import METHODS, Drafter, DraftState
from goose.heads.factory import HEAD_CHOICES, known_head
from goose.model import GooseModel
from goose.sampling import Sampling
from goose.sources import AdjacencyTable, ContextMatch, ContextMatcher, SuffixSource, SuffixStore
from goose.target import ModelTarget, Target
from goose.text import OutputText
from goose.trace import NodeRecord, RunRecord, StepRecord
from goose.tree import ROOT, DraftTree
from goose.tuning import CALIBRATION_TOKENS, learnt_start
from goose.walk import Verification


class Observer:
    """Watches a generation without changing it (subclasses override what they watch); what it does is taken
    off the run's clock."""

    def prefilled(self, generation: Generation, keyed_rows: list[tuple[int | None, int, list | None]]) -> None:
        """After the prefill: the (previous, token, row) triples it stored in the adjacency table."""

    def drafted(self, generation: Generation, state: DraftState, tree: DraftTree) -> None:
        """A step's tree, drafted from `state`, before its verification."""

    def stepped(self, generation: Generation, step: StepRecord, verification: Verification) -> None:
        """A step verified, committed and recorded."""


class Generation:
    """A generation in progress: iterate it for steps; `run` is filled in as it goes.

    The run's clock starts at `started` (the moment the user asked, by default now), so that its wall
    time holds everything the user waits for: encoding and set-up as well as the steps, but not what
    `observers` do, nor the naming of each step's node texts (for the trace), nor what the caller does with a
    step before it asks for the next (rendering it, streaming it to a page): `goose.generate`, which does
    nothing between steps, and any front end measure the same run the same.
    """

    def __init__(self, target: Target, request: Request, started: float | None = None,
                 observers: Sequence[Observer] = ()) -> None:
        self._start = time.perf_counter() if started is None else started
        self.target = target
        self.config, self.stop = request.config, request.stop
        text = isinstance(request.prompt, str)
        self.prompt_tokens = target.encode(request.prompt) if text else list(request.prompt)
        target.check_fits(len(self.prompt_tokens), request.max_new_tokens)
        self.run = RunRecord(prompt=request.prompt if text else target.text(self.prompt_tokens),
                             method=request.method, model=target.model, config=request.config.to_dict(),
                             sampling=request.sampling.to_dict(), max_new_tokens=request.max_new_tokens,
                             prompt_tokens=list(self.prompt_tokens), head=target.head,
                             costs=dict(target.costs()), autoregressive_s=target.autoregressive_cost(),
                             prefill_row_s=target.prefill_row_cost(), parallel=target.parallel)
        drafter_class = METHODS[request.method]
        tuner = BudgetTuner(self.run.costs) if self.config.tuned and drafter_class.speculative else None
        self.drafter: Drafter = drafter_class(self.config, tuner)
        if tuner is not None and self.config.warm_tuner:
            self.run.tuner_start = target.tuner_start()
            if self.run.tuner_start is not None:
                tuner.start_from(self.run.tuner_start)
        self.matcher = ContextMatcher.from_config(self.config)
        self.suffix: SuffixSource | None = None
        self.store = request.store
        if drafter_class.uses_suffix:
            self.run.store = request.store.snapshot() if request.store is not None else None
            self.suffix = SuffixSource(self.config, self.run.store["outputs"] if self.run.store else ())
        self.pools = [pool for pool in (self.matcher, self.suffix) if pool is not None]  # fed every committed token
        self.adjacency: AdjacencyTable | None = None
        if drafter_class.uses_adjacency:
            prior = target.prior() if self.config.warm_start else None
            self.adjacency = AdjacencyTable.from_config(self.config, prior[1] if prior else None)
            self.run.prior = prior[0] if prior else None
        self.observers = list(observers)
        self.output = OutputText(target.text, self.stop)
        self.drafted: Counter = Counter()
        self.accepted_by_source: Counter = Counter()

    def __iter__(self) -> Iterator[StepRecord]:
        return self._steps()

    @torch.inference_mode()
    def _steps(self) -> Iterator[StepRecord]:
        """Prefill, then per step: draft -> verify -> commit -> observe -> record."""
        self.run.totals.setup_s = time.perf_counter() - self._start
        first = self._prefill()
        done = self._commit([first])
        self._clock()
        if done:
            self._remember()
            return
        anchor, before_anchor = first, self.prompt_tokens[-1]
        while True:
            t0 = time.perf_counter()
            state = self._draft_state(anchor, before_anchor)
            tree, budget = self.drafter.draft(state)
            t0 += self._notify("drafted", state, tree)  # the observers' time is neither the run's nor the step's
            t1 = time.perf_counter()
            verification = self.target.verify(tree, before_anchor, self.adjacency)
            t2 = time.perf_counter()
            new_tokens = verification.new_tokens(tree)
            before = len(self.run.tokens)
            done = self._commit(new_tokens, tree, verification)
            self._observe(state, tree, verification)
            t3 = time.perf_counter()
            step = self._record(tree, verification, self.run.tokens[before:], t1 - t0, t2 - t1, t3 - t2, budget)
            self.run.steps.append(step)
            self._notify("stepped", step, verification)
            self._clock()
            if done:  # before the last step is handed out: a caller may stop iterating at it
                self._remember()
            handed = time.perf_counter()
            yield step
            self._off_clock(handed)  # the caller's time with the step is not the run's
            if done:
                return
            path = [anchor, *new_tokens]
            anchor, before_anchor = path[-1], path[-2]

    def _notify(self, event: str, *args) -> float:
        """Tell the observers; their time leaves the run's clock. Returns the seconds they took."""
        if not self.observers:
            return 0.0
        started = time.perf_counter()
        for observer in self.observers:
            getattr(observer, event)(self, *args)
        return self._off_clock(started)

    def _off_clock(self, since: float) -> float:
        """Take the time from `since` to now off the run's clock; returns it."""
        paused = time.perf_counter() - since
        self._start += paused
        return paused

    def _prefill(self) -> int:
        """One pass over the whole prompt: the first new token; the prompt's rows seed the adjacency table."""
        start = time.perf_counter()
        prompt = self.prompt_tokens
        for pool in self.pools:
            pool.extend(prompt)
        previous = [None, *prompt[:-1]]
        kept = self.adjacency.prompt_rows(prompt) if self.adjacency is not None else []
        first, rows = self.target.prefill(prompt, kept, self.adjacency)
        keyed = [(previous[i], prompt[i], row) for i, row in zip(kept, rows)]
        if self.adjacency is not None:
            self.adjacency.store([token for _, token, _ in keyed], [p for p, _, _ in keyed], rows)
        self.run.totals.prefill_s = time.perf_counter() - start
        self.run.totals.forward_passes = 1
        self._notify("prefilled", keyed)
        return first

    def _draft_state(self, anchor: int, before_anchor: int) -> DraftState:
        """The sources at this step, as the drafter sees them."""
        match = self.matcher.match() if self.drafter.uses_context else ContextMatch()
        room = max(0, self.run.max_new_tokens - len(self.run.tokens) - 1)
        match.tokens = match.tokens[:room]
        return DraftState(anchor, before_anchor, match, self.adjacency, self.drafter.spine_acceptance, self.suffix,
                          room)

    def _remember(self) -> None:
        """A run that ended gives its output to the store it read, if the store remembers."""
        if self.store is not None and self.store.remember:
            self.store.add(self.run.tokens)

    def _observe(self, state: DraftState, tree: DraftTree, verification: Verification) -> None:
        """The drafter learns from the step (before the sources change: it rescores the state it drafted
        from), then every row's successors are recycled into the adjacency table, rejected nodes too."""
        self.drafter.observe(state, tree, verification.accepted, verification.new_tokens(tree))
        if self.adjacency is not None and verification.rows is not None:
            previous = [tree.tokens[p] if p >= 0 else state.before_anchor for p in tree.parents]
            self.adjacency.store(tree.tokens, previous, verification.rows)

    def _commit(self, new_tokens: list[int], tree: DraftTree | None = None,
                verification: Verification | None = None) -> bool:
        """Append tokens (EOS, max_new_tokens and stop strings applied) and update the totals;
        True when the run is over. `tree` and `verification` are None for the prefill's token."""
        run = self.run
        reason = ""
        before = len(run.tokens)
        for token in new_tokens:
            run.tokens.append(token)
            for pool in self.pools:
                pool.extend([token])
            if token in self.target.eos:
                reason = "eos"
            elif len(run.tokens) >= run.max_new_tokens:
                reason = "max_new_tokens"
            else:
                reason = self.target.ends_after(len(run.tokens))
            if reason:
                break
        if self.output.extend(run.tokens[before:]):
            reason = "stop_string"
        run.text = self.output.finish() if reason else self.output.text  # a finished run's text: the full decode
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
        """The step as the trace keeps it: every node with its text (named off the run's clock: text work, not
        decoding), source, status and the target's choice."""
        named = time.perf_counter()
        texts = self.target.token_texts(tree.tokens + [verification.bonus])
        self._off_clock(named)
        nodes = []
        for i in range(len(tree)):
            verdict = verification.verdicts.get(i)
            status = ROOT if i == 0 else verdict.status if verdict else "unvisited"
            nodes.append(NodeRecord(token=tree.tokens[i], text=texts[i], source=tree.sources[i],
                                    parent=tree.parents[i], depth=tree.depths[i], score=tree.scores[i],
                                    target=verification.targets[i], status=status,
                                    accept_prob=verdict.accept_prob if verdict else None,
                                    reason=verdict.reason if verdict else ""))
        return StepRecord(index=len(self.run.steps), nodes=nodes, accepted=verification.accepted,
                          bonus_token=verification.bonus, bonus_text=texts[-1], committed=committed,
                          draft_s=draft_s, verify_s=verify_s, observe_s=observe_s, budget=budget)


class Recorder(Observer):
    """What a replay of the run needs (goose.whatif), kept as the loop goes: the adjacency rows the prefill and
    every pass stored, the shape the tuner gave each tree, and the texts of the tokens those rows name (a
    rebuilt tree may draft any of them: the Lab draws it without a tokenizer). With a shadow drafter it also
    verifies, beside the run, the tree a bigger fixed budget would build at each step, and keeps the rows of
    the nodes the step's tree lacks (parents numbered in the merged tree, the step's nodes first): a replay at
    budgets up to it then reads its rejected nodes' rows wherever the two trees share them."""

    def __init__(self, shadow: Drafter | None = None) -> None:
        self.shadow = shadow
        self._shape: dict | None = None
        self._shadow_rows: list | None = None

    def prefilled(self, generation: Generation, keyed_rows: list) -> None:
        generation.run.prefill_rows = list(keyed_rows)
        prompt = [(token, 1.0) for token in generation.prompt_tokens]  # a spine copies them
        self._name_tokens(generation, [prompt, *(row for _, _, row in keyed_rows)])

    def drafted(self, generation: Generation, state: DraftState, tree: DraftTree) -> None:
        self._shape = generation.drafter.shape_for(state)
        if self.shadow is not None:
            merged = tree.merged_with(self.shadow.build(state, self.shadow.budget(state)))
            extra = range(len(tree), len(merged))  # the shadow's nodes the step's tree lacks
            rows = generation.target.rows_beside(merged, generation.adjacency, len(tree)) if extra else []
            self._shadow_rows = [(merged.parents[i], merged.tokens[i], row) for i, row in zip(extra, rows)]

    def stepped(self, generation: Generation, step: StepRecord, verification: Verification) -> None:
        step.rows = list(verification.rows) if verification.rows is not None else []
        step.shape = self._shape
        step.shadow = self._shadow_rows
        self._name_tokens(generation, [*step.rows, *(row for _, _, row in self._shadow_rows or [])])

    @staticmethod
    def _name_tokens(generation: Generation, rows: list) -> None:
        texts = generation.run.token_texts
        unnamed = sorted({token for row in rows for token, _ in row or ()} - texts.keys())
        texts.update(zip(unnamed, generation.target.token_texts(unnamed)))


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
    store: SuffixStore | None = None


def check_request(prompt: str | Sequence[int], method: str = "goose", max_new_tokens: int = 128,
                  budget: int | str | None = None, *, stop: Sequence[str] | str | None = None,
                  temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int | None = None,
                  config: GooseConfig | None = None, record_sources: bool = False, head: str = "auto",
                  shadow_budget: int = 0, store: SuffixStore | None = None, **overrides) -> Request:
    """Check every argument before any work: ValueError (TypeError for an unknown option) on bad input.

    budget: a whole number of tree nodes (root included: a budget B drafts at most B - 1 tokens), "auto" (the tuner
    picks it every step) or None, the method's default (`Drafter.default_budget`: "auto" for every method but
    suffix and suffix-path, which take vLLM's 24 speculative tokens, 25 nodes).
    store: past outputs a suffix method may draft from (goose.sources.suffix.SuffixStore; recorded in the run, which
    adds its output to it once it ends if the store remembers); None: the run reads its own prompt and output only.

    record_sources: keep what a replay needs (goose.whatif): every pass's adjacency rows and each tree's shape.
    shadow_budget: with record_sources, also verify at every step, outside the run (its cache, table and clock
    are left as they were), the tree the method would build at this fixed budget, and record the adjacency
    rows of its nodes the step's tree lacks (`Recorder`). 0: none.
    head: "int8" or "screened" (the exact float32 argmax through an int8 or a bf16 screen), "full" (the
    textbook float32 head) or "auto" (the default: whichever is fastest on this device, timed once per
    model); every method, the autoregressive baseline included, uses the one chosen."""
    validate.choice("method", method, list(METHODS))
    drafter = METHODS[method]
    if reason := drafter.unavailable():
        raise validate.InputError(reason)
    if store is not None and not isinstance(store, SuffixStore):
        raise validate.InputError(f"store must be a goose.SuffixStore or None, got {validate.shown(store)}")
    if store is not None and not drafter.uses_suffix:
        readers = ", ".join(name for name, d in METHODS.items() if d.uses_suffix)
        raise validate.InputError(f"store holds past outputs for the methods {readers}; method {method!r} reads none")
    if isinstance(prompt, str):
        validate.prompt(prompt)
    elif not isinstance(prompt, Sequence):
        raise validate.InputError(f"prompt must be text or a list of token ids, got {validate.shown(prompt)}")
    else:
        prompt = validate.token_ids(prompt)
    if not isinstance(head, str) or not known_head(head):
        raise validate.InputError(f"unknown head {validate.shown(head)}; choose one of {', '.join(HEAD_CHOICES)}")
    validate.whole_number("shadow_budget", shadow_budget, 0, validate.MAX_BUDGET)
    if shadow_budget and not record_sources:
        raise validate.InputError("shadow_budget records rows for replays: it needs record_sources=True")
    validate.whole_number("max_new_tokens", max_new_tokens, 1)
    stops = validate.stops(stop)
    config = (config or GooseConfig()).with_overrides(budget=requested_budget(method, budget), **overrides)
    return Request(prompt, method, max_new_tokens, config, Sampling(temperature, top_k, top_p, seed),
                   stops, bool(record_sources), head, shadow_budget, store)


def stream(goose_model: GooseModel, prompt: str | Sequence[int], method: str = "goose", max_new_tokens: int = 128,
           budget: int | str | None = None, **kwargs) -> Generation:
    """Start a generation; iterate the result for its steps as they happen.

    prompt: text (encoded with the tokenizer's special tokens) or token ids, used as they are.
    Keyword arguments: stop, temperature, top_k, top_p, seed, config, head, record_sources
    (keep what a replay needs, for goose.what_if), shadow_budget (with them, rows for replays at bigger
    budgets: check_request), store (past outputs the suffix methods draft from: check_request), and any
    GooseConfig field as an override.
    Bad input raises before any work. The run's wall time starts here.
    """
    started = time.perf_counter()
    request = check_request(prompt, method, max_new_tokens, budget, **kwargs)
    if not isinstance(request.prompt, str):
        goose_model.check_token_ids(request.prompt)
    for i, output in enumerate(request.store.outputs if request.store is not None else ()):
        goose_model.check_token_ids(output, f"the token ids of output {i} in store {request.store.name!r}")
    return Generation(model_target(goose_model, request), request, started, recorders(request))


def model_target(goose_model: GooseModel, request: Request) -> ModelTarget:
    """The model as the loop's target, with the head the request names ("auto": the one timed fastest here)
    and, where a tuner reads it or a recording keeps it, this device's cost table; where a tuner starts warm,
    what the method's tuner learnt on this model and machine (goose.tuning)."""
    head = choose_head(goose_model, request.head)
    drafter = METHODS[request.method]
    tuned = request.config.tuned and drafter.speculative
    priced = tuned or request.record_sources
    costs = cost_table(goose_model, head=head) if priced else {}
    start = None
    if tuned and request.config.warm_tuner:
        start = learnt_start(goose_model, request.method, cost_key(goose_model, torch.get_num_threads(), head), costs,
                             lambda start, prompt: calibrate(goose_model, request.method, head, costs, start, prompt))
    return ModelTarget(goose_model, head, request.sampling, request.config.warm_start, costs, start,
                       autoregressive_cost(goose_model, head=head) if priced else None,
                       prefill_row_cost(goose_model, head=head) if priced else None)


def calibrate(goose_model: GooseModel, method: str, head: str, costs: dict[int, float],
              start: dict | None, prompt: str) -> dict:
    """One greedy run of `method` at an auto budget over a calibration prompt (goose.tuning), its tuner starting
    from `start`: what the tuner learnt by its end."""
    request = check_request(prompt, method, CALIBRATION_TOKENS, validate.AUTO)
    generation = Generation(ModelTarget(goose_model, head, request.sampling, request.config.warm_start, costs,
                                        start), request)
    for _ in generation:
        pass
    return generation.drafter.tuner.learnt()


def recorders(request: Request) -> list[Observer]:
    """The observers a request asks for: none, or the recorder (with its shadow drafter)."""
    if not request.record_sources:
        return []
    drafter = METHODS[request.method]
    shadow = (drafter(request.config.with_overrides(budget=request.shadow_budget))
              if request.shadow_budget and drafter.uses_adjacency else None)
    return [Recorder(shadow)]


WARM_UP_PROMPT = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef mul(a, b):\n"
WARM_UP_TOKENS = 8


def warm_up(goose_model: GooseModel, method: str = "goose", budget: int | str | None = None, head: str = "auto",
            temperature: float = 0.0, prompt: str | Sequence[int] = WARM_UP_PROMPT,
            max_new_tokens: int = WARM_UP_TOKENS) -> bool:
    """Pay, outside any clock, what the first run of a request pays once per process: the head chosen (timed once
    per model) and built, the cost table measured or read, the tuner's start learnt or read (goose.tuning), the
    packed weights and the kernels' first calls. One short untimed run, its sources recorded as a recording run's
    are; kept in the model's cache, so a second call for the same method, budget, head and kind of decoding does
    nothing. Returns whether it ran. The one warm-up of the CLI, the bench and the app; a caller warming on its
    own prompt passes a `max_new_tokens` no longer than its run's (the prompt must fit the context with it)."""
    if is_warm(goose_model, method, budget, head, temperature):
        return False
    generate(goose_model, prompt, method, max_new_tokens, budget, head=head, temperature=temperature,
             seed=0 if temperature else None, record_sources=True)
    goose_model.cache.warmed.add(_warm_key(method, budget, head, temperature))
    return True


def is_warm(goose_model: GooseModel, method: str = "goose", budget: int | str | None = None, head: str = "auto",
            temperature: float = 0.0) -> bool:
    """Whether this process has warmed the model for that request (`warm_up`)."""
    return _warm_key(method, budget, head, temperature) in goose_model.cache.warmed


def requested_budget(method: str, budget: int | str | None) -> int | str:
    """The budget a request runs at: `budget` as a person types it or the library takes it (goose.validate), blank
    or None being the method's default."""
    parsed = validate.parse_budget(budget)
    return METHODS[method].default_budget if parsed is None else parsed


def _warm_key(method: str, budget: int | str | None, head: str, temperature: float) -> tuple:
    """The request a warm-up stands for: its budget read as a run reads it (requested_budget), so that "auto" and
    None name one warm-up for a method whose default is the tuner."""
    return method, requested_budget(method, budget), head, bool(temperature)


def generate(goose_model: GooseModel, prompt: str | Sequence[int], method: str = "goose", max_new_tokens: int = 128,
             budget: int | str | None = None, **kwargs) -> RunRecord:
    """Generate to the end and return the run record."""
    generation = stream(goose_model, prompt, method, max_new_tokens, budget, **kwargs)
    for _ in generation:
        pass
    return generation.run
