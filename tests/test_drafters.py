"""The drafter interface: a method is one registered class, and the loop knows nothing else of it."""

from __future__ import annotations

import pytest
from tiny import tiny_gemma3, tiny_llama

import goose
from goose.drafters import METHODS, Drafter, DraftState, register
from goose.sources import ContextMatch
from goose.tree import BRANCH, DraftTree

PROMPTS = ["the cat sat on the mat. the cat sat on the", "def f(x):\n    return x", "q8#Lz!pW2"]


class AdjacencyArgmaxChain(Drafter):
    """A toy method: follow the adjacency table's most likely successor, as a chain."""

    name = "toy-argmax-chain"
    uses_context = False
    uses_adjacency = True

    def build(self, state: DraftState, budget: int) -> DraftTree:
        tree = DraftTree.rooted_at(state.anchor)
        previous = state.before_anchor
        while len(tree) < budget:
            successors = state.adjacency.successors(tree.tokens[-1], previous)
            if not successors:
                break
            token, score = successors[0]
            previous = tree.tokens[-1]
            if tree.add(token, len(tree) - 1, BRANCH, score) is None:
                break
        return tree


@pytest.fixture
def toy_method():
    """The toy drafter registered for one test, and removed again after it."""
    register(AdjacencyArgmaxChain)
    yield AdjacencyArgmaxChain.name
    del METHODS[AdjacencyArgmaxChain.name]


def test_registry_lists_the_seven_methods_in_order():
    assert list(goose.METHODS) == ["autoregressive", "pld", "recycling", "balanced", "goose", "suffix", "suffix-path"]
    assert all(issubclass(cls, Drafter) and cls.name == name for name, cls in goose.METHODS.items())


@pytest.mark.parametrize("factory", [lambda: tiny_llama(3), lambda: tiny_gemma3(1, 6)], ids=["llama", "gemma3"])
@pytest.mark.parametrize("budget", [4, 12, "auto"])
def test_a_registered_toy_method_runs_losslessly_in_generate(toy_method, factory, budget, flat_costs):
    model = factory()
    accepted = 0
    for prompt in PROMPTS:
        reference = goose.generate(model, prompt, "autoregressive", 40, 1)
        run = goose.generate(model, prompt, toy_method, 40, budget)
        assert run.method == toy_method
        assert run.tokens == reference.tokens
        assert all(node.source in ("root", "branch") for step in run.steps for node in step.nodes)
        accepted += sum(step.accepted_length for step in run.steps)
    assert accepted > 0  # the toy drafts were really verified and used


def test_a_registered_toy_method_runs_in_the_bench(toy_method):
    from goose.bench import BenchPrompt, parse_methods, run_prompt, summarize

    assert toy_method in parse_methods(f"autoregressive,{toy_method}")
    runs = run_prompt(tiny_llama(3), BenchPrompt("p1", PROMPTS[0]), ["autoregressive", toy_method], 30, 8)
    assert [run.method for run in runs] == ["autoregressive", toy_method]
    assert all(run.matches_autoregressive for run in runs)
    toy = next(m for m in summarize(runs) if m.method == toy_method)
    assert toy.tau > 1.0 and toy.lossless


def test_a_registered_toy_method_is_offered_and_run_by_the_app(toy_method):
    import gradio as gr

    from app import callbacks
    from app.models import ModelRegistry
    from app.ui import build_app

    registry = ModelRegistry()
    registry.register("tiny-llama", tiny_llama(3))
    demo = build_app(registry, "tiny-llama")
    choices = {component.elem_id or component.label: [value for value, _ in component.choices]
               for component in demo.blocks.values() if isinstance(component, (gr.Dropdown, gr.CheckboxGroup))}
    assert toy_method in choices["explore-method"] and toy_method in choices["Also race"]
    assert toy_method in choices["lab-method"]
    *_, last = callbacks.explore(registry, PROMPTS[0], "tiny-llama", toy_method, "8", 24)
    run = last.run
    assert run.method == toy_method and run.tokens == goose.generate(registry.get("tiny-llama"), PROMPTS[0],
                                                                       "autoregressive", 24, 1).tokens


def test_unregistered_method_is_refused_by_name(toy_method):
    del METHODS[toy_method]
    with pytest.raises(ValueError, match="unknown method 'toy-argmax-chain'"):
        goose.generate(tiny_llama(0), "abc", toy_method, 4)
    register(AdjacencyArgmaxChain)


class Recorder(goose.drafters.PromptLookup):
    """pld that remembers what the loop told it, to pin the order draft -> verify -> observe."""

    name = "test-recorder"
    seen: list = []

    def observe(self, state, tree, accepted, revealed):
        super().observe(state, tree, accepted, revealed)
        self.seen.append((state, tree, list(accepted), None if revealed is None else list(revealed)))


def test_observe_sees_the_drafted_tree_and_the_revealed_continuation():
    register(Recorder)
    try:
        Recorder.seen = []
        run = goose.generate(tiny_llama(0), PROMPTS[0], Recorder.name, 30, 8)
    finally:
        del METHODS[Recorder.name]
    assert len(Recorder.seen) == len(run.steps)
    for (state, tree, accepted, revealed), step in zip(Recorder.seen, run.steps):
        assert isinstance(state.match, ContextMatch)
        assert tree.tokens == [node.token for node in step.nodes]
        assert accepted == step.accepted
        assert revealed == [tree.tokens[n] for n in accepted] + [step.bonus_token]


def test_sampled_steps_reveal_their_draws():
    register(Recorder)
    try:
        Recorder.seen = []
        run = goose.generate(tiny_llama(0), PROMPTS[0], Recorder.name, 20, 8, temperature=0.8, seed=1)
    finally:
        del METHODS[Recorder.name]
    assert len(Recorder.seen) == len(run.steps)
    for (_, tree, accepted, revealed), step in zip(Recorder.seen, run.steps):
        assert revealed == [tree.tokens[n] for n in accepted] + [step.bonus_token]


def test_spine_tree_keeps_its_acceptance_ema_from_observed_steps():
    config = goose.GooseConfig(ema_alpha=0.5, ema_start=0.5)
    drafter = goose.drafters.SpineTree(config)
    tree = DraftTree.rooted_at(1)
    spine = tree.add(2, 0, "spine")
    tree.add(3, spine, "spine")
    tree.add(4, 0, "branch")
    state = DraftState(1, None, ContextMatch([2, 3], 0.5), None, drafter.spine_acceptance)
    drafter.observe(state, tree, [spine], [2, 9])  # half the spine accepted
    assert drafter.spine_acceptance == pytest.approx(0.5)
    drafter.observe(state, tree, [], [9])
    assert drafter.spine_acceptance == pytest.approx(0.25)
    no_spine = DraftTree.rooted_at(1)
    no_spine.add(4, 0, "branch")
    drafter.observe(state, no_spine, [], [9])  # no spine drafted: nothing learnt
    assert drafter.spine_acceptance == pytest.approx(0.25)


def test_autoregressive_drafts_the_root_alone():
    drafter = goose.drafters.Autoregressive(goose.GooseConfig())
    state = DraftState(7, 3, ContextMatch([1, 2, 3], 1.0), None, 0.5)
    tree, budget = drafter.draft(state)
    assert (tree.tokens, budget) == ([7], 1)
    assert tree.parents == [-1]
