"""One decoding loop for every method; the methods differ only in how they draft.

State carried across steps (DESIGN.md §1): the KV cache of every committed
token but the last; the anchor (the last committed token, the tree root); the
token before it. Each step drafts a tree, verifies it in one forward pass,
walks it, keeps the accepted path in the cache and commits the accepted tokens
plus one bonus token.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

from goose.budget import tuner_for
from goose.config import GooseConfig
from goose.head import make_head
from goose.model import GooseModel
from goose.sampling import Sampling, Verdict, choose_child
from goose.sources import AdjacencyTable, ContextMatch, ContextMatcher
from goose.trace import NodeRecord, RunRecord, StepRecord
from goose.tree import (
    ROOT,
    SPINE,
    DraftTree,
    build_balanced_tree,
    build_chain_tree,
    build_goose_tree,
    build_recycling_tree,
)
from goose.verify import Verifier

METHODS = ("autoregressive", "pld", "recycling", "balanced", "goose")


@dataclass
class DraftState:
    """What a drafter may look at: the sources and the decoding state."""

    anchor: int
    before_anchor: int | None
    adjacency: AdjacencyTable | None
    config: GooseConfig
    spine_acceptance: float
    match: ContextMatch  # this step's context match, already cut to what can still be generated


def draft(method: str, state: DraftState, base_budget: int) -> tuple[DraftTree, int]:
    """The one place where the methods differ. Returns the tree and the step's node budget."""
    if method == "autoregressive":
        return DraftTree.rooted_at(state.anchor), 1
    match = state.match
    budget = state.config.grown_budget(match.confidence, base_budget)  # the same for every tree method
    if method == "pld":
        tree = build_chain_tree(state.anchor, match, budget)
    elif method == "recycling":
        tree = build_recycling_tree(state.anchor, state.before_anchor, state.adjacency, state.config, budget)
    elif method == "balanced":
        tree = build_balanced_tree(state.anchor, state.before_anchor, state.adjacency, state.config, budget)
    else:
        tree = build_goose_tree(state.anchor, state.before_anchor, match, state.adjacency, state.config, budget,
                                state.spine_acceptance)
    return tree, budget


def uses_adjacency(method: str) -> bool:
    return method in ("recycling", "balanced", "goose")


def walk_greedy(tree: DraftTree, argmax: list[int]) -> tuple[list[int], int, dict[int, Verdict]]:
    """Follow the child equal to the target's argmax at its parent; the argmax where it stops is the bonus.

    Returns (accepted nodes, root excluded; bonus token; verdict per child of a visited node).
    """
    verdicts: dict[int, Verdict] = {}
    accepted: list[int] = []
    node = 0
    while True:
        target = argmax[node]
        for child in tree.child_list(node):
            verdicts[child] = (Verdict("accepted", None, "") if tree.tokens[child] == target else
                               Verdict("rejected", None, "the target model predicted another token here"))
        child = tree.children[node].get(target)
        if child is None:
            return accepted, target, verdicts
        accepted.append(child)
        node = child


def walk_sampling(tree: DraftTree, logits: torch.Tensor, sampling: Sampling, generator: torch.Generator
                  ) -> tuple[list[int], int, list[int | None], dict[int, Verdict]]:
    """Lossless sampling walk (goose.sampling): returns (accepted, bonus, the token chosen after each
    visited node, verdict per tried node)."""
    chosen: list[int | None] = [None] * len(tree)
    verdicts: dict[int, Verdict] = {}
    accepted: list[int] = []
    node = 0
    while True:
        children = [(c, tree.tokens[c]) for c in tree.child_list(node)]
        child, bonus, tried = choose_child(sampling.warp(logits[node]), children, generator)
        verdicts.update(tried)
        if child is None:
            chosen[node] = bonus
            return accepted, bonus, chosen, verdicts
        chosen[node] = tree.tokens[child]
        accepted.append(child)
        node = child


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
    """A generation in progress: iterate it for steps; `run` is filled in as it goes."""

    def __init__(self, goose_model: GooseModel, request: Request) -> None:
        self.goose_model = goose_model
        self.method, self.config, self.sampling, self.stop = (request.method, request.config, request.sampling,
                                                              request.stop)
        self.prompt_tokens = goose_model.encode(request.prompt)
        goose_model.check_fits(len(self.prompt_tokens), request.max_new_tokens)
        self.run = RunRecord(prompt=request.prompt, method=request.method, model=goose_model.name,
                             config=request.config.to_dict(), sampling=request.sampling.to_dict(),
                             max_new_tokens=request.max_new_tokens, prompt_tokens=list(self.prompt_tokens))
        self.eos = eos_ids(goose_model)
        # Speculative methods verify with the screened LM head (the same argmax, cheaper); the
        # autoregressive baseline stays the textbook full forward.
        self.head = make_head(goose_model.model, screened=self.method != "autoregressive")

    def __iter__(self) -> Iterator[StepRecord]:
        return self._steps()

    @torch.inference_mode()
    def _steps(self) -> Iterator[StepRecord]:
        run, config, sampling, method = self.run, self.config, self.sampling, self.method
        verifier = Verifier(self.goose_model.model)
        matcher = ContextMatcher(config.ngram_lengths, config.max_chain, config.long_match, config.extend_above,
                                 config.max_extended_chain)
        adjacency = (AdjacencyTable(self.goose_model.vocab_size, config.top_k, config.min_score, config.use_bigram)
                     if uses_adjacency(method) else None)
        generator = None if sampling.greedy else sampling.generator()
        tuner = tuner_for(self.goose_model, method) if config.auto_budget and method != "autoregressive" else None
        drafted: Counter = Counter()
        accepted_by_source: Counter = Counter()
        spine_acceptance = config.ema_start

        start = time.perf_counter()
        prompt = list(self.prompt_tokens)
        matcher.extend(prompt)
        hidden = verifier.forward_chain(prompt)
        argmax, logits, top = self._verify_rows(hidden if adjacency else hidden[-1:], adjacency)
        if adjacency is not None:
            adjacency.refresh(prompt, [None, *prompt[:-1]], top.indices, top.values)
        first = argmax[-1] if logits is None else choose_child(sampling.warp(logits[-1]), [], generator)[1]
        verifier.truncate(len(prompt))  # the whole prompt is committed
        run.totals.prefill_s = time.perf_counter() - start
        run.totals.forward_passes = 1
        if self._commit([first], start):
            return
        matcher.extend([first])
        anchor, before_anchor = first, prompt[-1]

        while True:
            t0 = time.perf_counter()
            match = matcher.match() if method != "autoregressive" else ContextMatch()
            match.tokens = match.tokens[:max(0, run.max_new_tokens - len(run.tokens) - 1)]
            state = DraftState(anchor, before_anchor, adjacency, config, spine_acceptance, match)
            tree, budget = draft(method, state, tuner.best() if tuner else config.budget)
            t1 = time.perf_counter()
            hidden = verifier.forward_tree(tree)
            previous = [tree.tokens[p] if p >= 0 else before_anchor for p in tree.parents]
            targets, logits, top = self._verify_rows(hidden, adjacency)
            if logits is None:
                accepted, bonus, verdicts = walk_greedy(tree, targets)
            else:
                accepted, bonus, targets, verdicts = walk_sampling(tree, logits, sampling, generator)
            verifier.commit([0, *accepted])
            if tuner is not None and sampling.greedy:  # before the adjacency refresh: the state it drafted from
                revealed = [tree.tokens[n] for n in accepted] + [bonus]
                tuner.observe({n: draft(method, state, n)[0] for n in tuner.costs}, revealed)
            if adjacency is not None:
                adjacency.refresh(tree.tokens, previous, top.indices, top.values)
            t2 = time.perf_counter()

            for node in range(1, len(tree)):
                drafted[tree.sources[node]] += 1
            for node in accepted:
                accepted_by_source[tree.sources[node]] += 1
            spine = [n for n in range(1, len(tree)) if tree.sources[n] == SPINE]
            if spine and method == "goose":
                rate = sum(tree.sources[n] == SPINE for n in accepted) / len(spine)
                spine_acceptance = (1 - config.ema_alpha) * spine_acceptance + config.ema_alpha * rate

            new_tokens = [tree.tokens[n] for n in accepted] + [bonus]
            before = len(run.tokens)
            run.totals.forward_passes += 1
            done = self._commit(new_tokens, start)
            run.totals.drafted, run.totals.accepted = dict(drafted), dict(accepted_by_source)
            step = self._record(len(run.steps), tree, accepted, bonus, targets, verdicts,
                                run.tokens[before:], t1 - t0, t2 - t1, budget)
            run.steps.append(step)
            yield step
            if done:
                return
            matcher.extend(new_tokens)
            path = [anchor, *new_tokens]
            anchor, before_anchor = path[-1], path[-2]

    def _verify_rows(self, hidden: torch.Tensor, adjacency: AdjacencyTable | None):
        """Apply the LM head to verified rows: (exact argmax per row, None, top-k) when greedy,
        (None, exact float32 logits, top-k) when sampling; top-k (for the adjacency table) is None
        when no table is kept."""
        top_k = adjacency.top_k if adjacency is not None else 0
        if self.sampling.greedy:
            argmax, top = self.head.greedy(hidden, top_k)
            return argmax.tolist(), None, top
        logits = self.head.logits(hidden)
        return None, logits, torch.topk(logits, top_k, dim=-1) if top_k else None

    def _commit(self, new_tokens: list[int], start: float) -> bool:
        """Append tokens, applying EOS, max_new_tokens and stop strings; True when the run is over."""
        run = self.run
        reason = ""
        for token in new_tokens:
            run.tokens.append(token)
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
        totals = run.totals
        totals.new_tokens = len(run.tokens)
        totals.wall_s = time.perf_counter() - start
        totals.tau = totals.new_tokens / totals.forward_passes
        totals.tokens_per_s = totals.new_tokens / totals.wall_s if totals.wall_s > 0 else 0.0
        run.stop_reason = reason
        return bool(reason)

    def _record(self, index: int, tree: DraftTree, accepted: list[int], bonus: int, targets: list[int | None],
                verdicts: dict[int, Verdict], committed: list[int], draft_s: float, verify_s: float,
                budget: int) -> StepRecord:
        texts = self.goose_model.token_texts(tree.tokens + [bonus])
        nodes = []
        for i in range(len(tree)):
            verdict = verdicts.get(i)
            status = ROOT if i == 0 else verdict.status if verdict else "unvisited"
            nodes.append(NodeRecord(token=tree.tokens[i], text=texts[i], source=tree.sources[i],
                                    parent=tree.parents[i], depth=tree.depths[i], score=tree.scores[i],
                                    target=targets[i], status=status,
                                    accept_prob=verdict.accept_prob if verdict else None,
                                    reason=verdict.reason if verdict else ""))
        return StepRecord(index=index, nodes=nodes, accepted=accepted, bonus_token=bonus, bonus_text=texts[-1],
                          committed=committed, draft_s=draft_s, verify_s=verify_s, budget=budget)


@dataclass(frozen=True)
class Request:
    """A checked generation request: everything but the model."""

    prompt: str
    method: str
    max_new_tokens: int
    config: GooseConfig
    sampling: Sampling
    stop: tuple[str, ...]


def check_request(prompt: str, method: str = "goose", max_new_tokens: int = 128, budget: int | str | None = None, *,
                  stop: Sequence[str] | str | None = None, temperature: float = 0.0, top_k: int = 0,
                  top_p: float = 1.0, seed: int | None = None, config: GooseConfig | None = None,
                  **overrides) -> Request:
    """Check every argument before any work: ValueError (TypeError for an unknown option) on bad input."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError("the prompt is empty: give some text to continue")
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be a whole number >= 1, got {max_new_tokens!r}")
    if budget is None or budget == "auto":
        overrides.setdefault("auto_budget", True)
    else:
        overrides["budget"], overrides["auto_budget"] = budget, False
    config = (config or GooseConfig()).with_overrides(**overrides)
    return Request(prompt, method, max_new_tokens, config, Sampling(temperature, top_k, top_p, seed),
                   resolve_stops(stop))


def stream(goose_model: GooseModel, prompt: str, method: str = "goose", max_new_tokens: int = 128,
           budget: int | str | None = None, **kwargs) -> Generation:
    """Start a generation; iterate the result for its steps as they happen.

    Keyword arguments: stop, temperature, top_k, top_p, seed, config, and any
    GooseConfig field as an override. Bad input raises before any work.
    """
    request = check_request(prompt, method, max_new_tokens, budget, **kwargs)
    return Generation(goose_model, request)


def generate(goose_model: GooseModel, prompt: str, method: str = "goose", max_new_tokens: int = 128,
             budget: int | str | None = None, **kwargs) -> RunRecord:
    """Generate to the end and return the run record."""
    generation = stream(goose_model, prompt, method, max_new_tokens, budget, **kwargs)
    for _ in generation:
        pass
    return generation.run
