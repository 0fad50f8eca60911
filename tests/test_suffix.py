"""suffix and suffix-path: Snowflake's own SuffixDecoding (arctic-inference) as Goose methods.

Their trees are arctic's drafts, node for node; they are lossless; a run reads its own prompt and output only,
unless it is given a store of past outputs, which it records so that a replay rebuilds its trees; where
arctic-inference is missing they are listed as unavailable, in one line, and everything else works.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from arctic_inference.suffix_decoding import SuffixDecodingCache
from tiny import tiny_gemma3, tiny_llama

import goose
from goose.drafters import METHODS, SUFFIX_BUDGET, DraftState
from goose.sources import ContextMatch, SuffixSource
from goose.tree import SUFFIX
from goose.validate import InputError
from goose.whatif import anchor_positions

SUFFIX_METHODS = ["suffix", "suffix-path"]
TREE_FORM = {"suffix": True, "suffix-path": False}
PROMPT = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n"
OTHER = "one two three four one two three four one two"
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def models() -> list[goose.GooseModel]:
    return [tiny_llama(0), tiny_gemma3(2, 5)]


def greedy(model: goose.GooseModel, prompt: str, new_tokens: int) -> list[int]:
    """transformers' own greedy continuation: the reference every method must reproduce."""
    ids = torch.tensor([model.encode(prompt)])
    with torch.no_grad():
        out = model.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                                   do_sample=False, min_new_tokens=new_tokens)
    return out[0, ids.shape[1]:].tolist()


def arctic_draft(sequence: list[int], max_tokens: int, tree: bool, outputs: list[list[int]] = ()):
    """arctic-inference's own draft for the context `sequence`, called as vLLM calls it (defaults: depth 24,
    factor 1.0, offset 0.0, min probability 0.1), with `outputs` as cached responses."""
    cache = SuffixDecodingCache(24, max_cached_requests=-1 if outputs else 0)
    for i, output in enumerate(outputs):
        cache.start_request(("past", i), [])
        cache.add_active_response(("past", i), output)
        cache.stop_request(("past", i))
    cache.start_request("this", sequence)
    return cache.speculate("this", sequence[-24:], max_spec_tokens=max_tokens, max_spec_factor=1.0,
                           max_spec_offset=0.0, min_token_prob=0.1, use_tree_spec=tree)


def trees(run: goose.RunRecord) -> list[tuple]:
    return [(tuple(n.token for n in s.nodes), tuple(n.parent for n in s.nodes), s.budget) for s in run.steps]


# --- the trees are arctic's drafts -------------------------------------------------------------------------------

def contexts() -> list[list[int]]:
    """Token sequences over small alphabets: repeats with several continuations, where suffix trees branch."""
    rng = random.Random(0)
    return [[rng.randrange(alphabet) for _ in range(length)] for alphabet in (2, 3, 5) for length in (8, 60, 200)]


@pytest.mark.parametrize("method", SUFFIX_METHODS)
def test_a_drafted_tree_is_arctics_own_draft_node_for_node(method):
    """Parents before children, at most `budget` nodes (B - 1 drafted), and the draft arctic gives for the same
    context: tokens, parents (shifted by the root) and probabilities; the path form is one chain."""
    drafter = METHODS[method](goose.GooseConfig())
    branched = 0
    for sequence in contexts():
        source = SuffixSource(goose.GooseConfig())
        source.extend(sequence)
        state = DraftState(sequence[-1], sequence[-2], ContextMatch(), None, 0.5, source)
        for budget in (1, 2, 5, SUFFIX_BUDGET, 60):
            tree = drafter.build(state, budget)
            draft = arctic_draft(sequence, budget - 1, TREE_FORM[method])
            assert len(tree) <= budget and tree.tokens[0] == sequence[-1]
            assert all(0 <= parent < node for node, parent in enumerate(tree.parents) if node)
            assert tree.tokens[1:] == list(draft.token_ids)
            assert tree.parents[1:] == [parent + 1 for parent in draft.parents]
            assert tree.scores[1:] == pytest.approx(list(draft.probs))
            assert set(tree.sources[1:]) <= {SUFFIX}
            children = [tree.parents.count(node) for node in range(len(tree))]
            branched += max(children) > 1
            if not TREE_FORM[method]:
                assert tree.parents == list(range(-1, len(tree) - 1)), "the path form drafts one chain"
    assert branched > 0 if TREE_FORM[method] else branched == 0


@pytest.mark.parametrize("method", SUFFIX_METHODS)
def test_every_step_of_a_run_drafts_arctics_tree_for_its_context(models, method):
    """A run feeds the cache the prompt and every committed token: each step's tree is arctic's draft for the
    prompt plus the tokens committed before it (cut to what can still be generated)."""
    new_tokens = 40
    for model in models:
        prompt = PROMPT + model.decode(greedy(model, PROMPT, 12))  # the model's own words: matches get drafted
        run = goose.generate(model, prompt, method, new_tokens)
        assert run.config["budget"] == SUFFIX_BUDGET
        drafted = 0
        for step, position in zip(run.steps, anchor_positions(run)):
            room = new_tokens - position - 1
            draft = arctic_draft(run.prompt_tokens + run.tokens[:position], min(SUFFIX_BUDGET - 1, room),
                                 TREE_FORM[method])
            assert [n.token for n in step.nodes[1:]] == list(draft.token_ids)
            assert [n.parent for n in step.nodes[1:]] == [parent + 1 for parent in draft.parents]
            drafted += len(draft.token_ids)
        assert drafted > 0


# --- lossless ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("method", SUFFIX_METHODS)
def test_drafting_from_a_store_is_lossless_and_accepts_what_it_remembers(models, method, flat_costs):
    """With the model's own continuation in the store the drafts are long and right; with another prompt's
    output they are wrong: greedy output is transformers' own either way, at every budget (None: the default)."""
    for model in models:
        reference = greedy(model, PROMPT, 48)
        other = greedy(model, OTHER, 48)
        for budget in (2, 7, None, "auto"):
            remembered = goose.generate(model, PROMPT, method, 48, budget, store=goose.SuffixStore("r", [reference]))
            assert remembered.tokens == reference, budget
            # B nodes take at most B tokens a pass; the tuner starts small and learns
            assert remembered.totals.tau > {2: 1.5, "auto": 2.0}.get(budget, 4.0), budget
            if budget != "auto":
                assert all(len(step.nodes) <= step.budget == (budget or SUFFIX_BUDGET) for step in remembered.steps)
            misled = goose.generate(model, PROMPT, method, 48, budget, store=goose.SuffixStore("o", [other]))
            assert misled.tokens == reference, budget


@pytest.mark.slow
@pytest.mark.parametrize("method", SUFFIX_METHODS)
def test_the_embedded_model_is_lossless_with_suffix_decoding(gemma, method):
    store = goose.SuffixStore("embedded")
    for prompt in ("def quicksort(arr):\n", "Monday, Tuesday, Wednesday, Thursday, Friday, Monday, Tuesday,",
                   "def quicksort(arr):\n"):  # the third reads the first's output
        ids = torch.tensor([gemma.encode(prompt)])
        with torch.no_grad():
            expected = gemma.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=48,
                                            do_sample=False)[0, ids.shape[1]:].tolist()
        run = goose.generate(gemma, prompt, method, 48, store=store)
        assert run.tokens == expected[:len(run.tokens)] and (len(run.tokens) == 48 or run.stop_reason == "eos")
    assert run.totals.tau > 3.0, "the repeated prompt drafts from the first run's output"


# --- a run is a function of its inputs ---------------------------------------------------------------------------

CHILD = """
import json, sys
sys.path.insert(0, {tests!r})
import goose
from tiny import tiny_llama
model = tiny_llama(0)
runs = []
for method in {methods!r}:
    first = goose.generate(model, {prompt!r}, method, 40)
    goose.generate(model, {other!r}, method, 30)
    again = goose.generate(model, {prompt!r}, method, 40)
    runs += [[[[n.token, n.parent] for n in s.nodes] for s in run.steps] + [run.tokens] for run in (first, again)]
print(json.dumps(runs))
"""


def test_two_processes_draft_the_same_trees_whatever_ran_between(tmp_path):
    """The same prompt twice, another one between, in two processes: the same trees and tokens all four times."""
    env = {**os.environ, "GOOSE_CACHE": str(tmp_path), "PYTHONPATH": str(ROOT)}
    script = CHILD.format(tests=str(ROOT / "tests"), prompt=PROMPT, other=OTHER, methods=SUFFIX_METHODS)
    outputs = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True,
                              timeout=300).stdout for _ in range(2)]
    first, second = (json.loads(out.splitlines()[-1]) for out in outputs)
    for method in range(len(SUFFIX_METHODS)):
        runs = [*first[2 * method:2 * method + 2], *second[2 * method:2 * method + 2]]
        assert all(run == runs[0] for run in runs) and len(runs[0]) > 2


def test_a_run_without_a_store_reads_no_past_output(models):
    """By default a run reads its own prompt and output only: a second run of the same prompt drafts the first's
    trees (nothing carried over), and records no store."""
    model = models[0]
    first = goose.generate(model, PROMPT, "suffix", 40)
    again = goose.generate(model, PROMPT, "suffix", 40)
    assert trees(again) == trees(first) and again.store is None


def test_a_store_is_an_input_the_run_records_and_adds_its_output_to(models):
    model = models[0]
    store = goose.SuffixStore("mine")
    first = goose.generate(model, PROMPT, "suffix", 40, store=store)
    assert first.store == {"name": "mine", "outputs": []}
    assert store.outputs == [first.tokens], "the store remembers the output once the run ends"
    second = goose.generate(model, PROMPT, "suffix", 40, store=store)
    assert second.tokens == first.tokens and second.store == {"name": "mine", "outputs": [first.tokens]}
    assert second.totals.tau > 2 * first.totals.tau, "the second run drafts from the first's output"
    fixed = goose.SuffixStore("fixed", [first.tokens], remember=False)
    goose.generate(model, PROMPT, "suffix", 40, store=fixed)
    assert fixed.outputs == [first.tokens]
    capped = goose.SuffixStore("capped", [[1], [2]], max_outputs=2)
    goose.generate(model, OTHER, "suffix", 8, store=capped)
    assert len(capped.outputs) == 2 and capped.outputs[0] == [2], "the oldest output leaves first"


def test_a_stopped_run_adds_nothing_to_its_store(models):
    store = goose.SuffixStore("mine")
    generation = goose.stream(models[0], PROMPT, "suffix", 40, store=store)
    next(iter(generation))
    assert store.outputs == []


def test_the_trace_keeps_the_store_and_a_replay_rebuilds_the_trees(models, tmp_path):
    model = models[1]
    past = goose.generate(model, PROMPT, "autoregressive", 40).tokens
    run = goose.generate(model, PROMPT, "suffix", 40, store=goose.SuffixStore("mine", [past]), record_sources=True)
    run.save(tmp_path / "run.json")
    loaded = goose.RunRecord.load(tmp_path / "run.json")
    assert loaded.store == {"name": "mine", "outputs": [past]} == run.store
    replayed = goose.run_what_if(loaded)
    assert replayed.exact and trees(replayed.replayed) == trees(run) and replayed.replayed.store == run.store
    assert replayed.tau == pytest.approx(run.totals.tau)
    step = max(range(len(run.steps)), key=lambda i: len(run.steps[i].nodes))
    assert goose.what_if(loaded, step).tree.tokens == [n.token for n in run.steps[step].nodes]
    smaller = goose.what_if(loaded, step, budget=3)
    assert len(smaller.tree) <= 3 and smaller.tree.tokens == [n.token for n in run.steps[step].nodes][:3]
    path = goose.run_what_if(loaded, method="suffix-path", budget=8)
    assert path.exact and all(n <= 8 for n in path.nodes)
    checked = goose.run_what_if(loaded, check=True, model=model)
    assert checked.tau_error == 0.0 and trees(checked.measured.run) == trees(run)
    loaded.store = None  # without it the replay would draft other trees: the record is what rebuilds them
    assert trees(goose.run_what_if(loaded).replayed) != trees(run)


def test_diagnose_refuses_a_suffix_run_in_one_line(models):
    run = goose.generate(models[0], PROMPT, "suffix", 16, record_sources=True)
    with pytest.raises(ValueError, match=r"^diagnose splits .* method 'suffix' drafts from SuffixDecoding's") as error:
        goose.diagnose(run)
    assert "\n" not in str(error.value)


# --- refused in one line -----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("option", "value", "message"), [
    ("suffix_max_tree_depth", 0, "suffix_max_tree_depth must be a whole number between 1 and 1024, got 0"),
    ("suffix_max_spec_factor", -1.0, "suffix_max_spec_factor must be a number between 0 and 1024, got -1.0"),
    ("suffix_min_token_prob", 1.5, "suffix_min_token_prob must be a number between 0 and 1, got 1.5"),
    ("suffix_max_spec_offset", float("nan"), "suffix_max_spec_offset must be a number between -1024 and 1024"),
])
def test_a_bad_suffix_option_is_refused_in_one_line(models, option, value, message):
    with pytest.raises(InputError, match=message) as error:
        goose.stream(models[0], PROMPT, "suffix", **{option: value})
    assert "\n" not in str(error.value)


def test_a_bad_store_is_refused_in_one_line(models):
    with pytest.raises(InputError, match="store must be a goose.SuffixStore or None, got"):
        goose.stream(models[0], PROMPT, "suffix", store=[[1, 2]])
    with pytest.raises(InputError, match="store holds past outputs for the methods suffix, suffix-path; "
                                         "method 'goose' reads none"):
        goose.stream(models[0], PROMPT, "goose", store=goose.SuffixStore("s"))
    with pytest.raises(InputError, match="whole numbers >= 0"):
        goose.SuffixStore("s", [[1, -2]])
    with pytest.raises(InputError, match="max_outputs must be a whole number >= 1"):
        goose.SuffixStore("s", max_outputs=0)
    vocabulary = models[0].model.config.vocab_size
    other = goose.SuffixStore("other", [[1], [1, 2, vocabulary]])
    with pytest.raises(InputError, match=f"^the token ids of output 1 in store 'other' must be below the model's "
                                         f"vocabulary size {vocabulary}: id {vocabulary} at position 2 is not$"):
        goose.stream(models[0], PROMPT, "suffix", store=other)


def test_the_default_budget_is_vllms_and_auto_tunes_it(models):
    """vLLM drafts 24 speculative tokens: a budget of 25 nodes; "auto" is the tuner's, a number fixed."""
    from goose.decode import check_request

    assert check_request(PROMPT, "suffix").config.budget == SUFFIX_BUDGET == 25
    assert check_request(PROMPT, "suffix", budget="auto").config.tuned
    assert check_request(PROMPT, "goose").config.budget == "auto", "every other method's default is auto"
    fixed = check_request(PROMPT, "suffix-path", budget=8).config
    assert fixed.budget == 8 and not fixed.tuned


MISSING = "method 'suffix' is unavailable here: arctic-inference is not installed " \
          "(pip install --no-build-isolation -r requirements-suffix.txt)"


@pytest.fixture
def without_arctic(monkeypatch):
    """arctic-inference as on a machine that lacks it: importing it fails."""
    for name in ("arctic_inference", "arctic_inference.suffix_decoding"):
        monkeypatch.setitem(sys.modules, name, None)


def test_without_arctic_the_suffix_methods_are_unavailable_in_one_line(without_arctic, models, capsys, tmp_path):
    from goose.bench import bench_methods, parse_methods
    from goose.cli import build_parser, main

    assert goose.unavailable_methods() == {"suffix": MISSING, "suffix-path": MISSING.replace("'suffix'",
                                                                                             "'suffix-path'")}
    assert goose.available_methods() == ["autoregressive", "pld", "recycling", "balanced", "goose"]
    with pytest.raises(InputError, match=f"^{MISSING}$".replace("(", r"\(").replace(")", r"\)")):
        goose.generate(models[0], PROMPT, "suffix", 8)
    assert len(goose.generate(models[0], PROMPT, "goose", 8).tokens) == 8, "everything else works"
    assert "suffix" not in bench_methods() and "goose" in bench_methods()
    with pytest.raises(ValueError, match="method 'suffix-path' is unavailable here"):
        parse_methods("goose,suffix-path")
    assert main(["generate", "--prompt", "x", "--method", "suffix"]) == 2
    assert capsys.readouterr().err.strip() == f"error: {MISSING}"
    assert "unavailable here" in build_parser()._subparsers._group_actions[0].choices["generate"].format_help()
    run = goose.RunRecord.from_json(json.dumps(goose.generate(models[0], PROMPT, "pld", 8,
                                                              record_sources=True).to_dict()))
    with pytest.raises(goose.whatif.NoReplayDataError, match=MISSING.replace("(", r"\(").replace(")", r"\)")):
        goose.run_what_if(run, method="suffix")


def test_without_arctic_the_app_offers_the_other_methods_and_says_why(without_arctic):
    import gradio as gr

    from app.models import ModelRegistry
    from app.ui import build_app

    registry = ModelRegistry()
    registry.register("tiny-llama", tiny_llama(3))
    demo = build_app(registry, "tiny-llama")
    choices = {component.elem_id or component.label: [value for value, _ in component.choices]
               for component in demo.blocks.values() if isinstance(component, (gr.Dropdown, gr.CheckboxGroup))}
    for box in ("explore-method", "Also race", "lab-method"):
        assert "goose" in choices[box] or "pld" in choices[box]
        assert not set(SUFFIX_METHODS) & set(choices[box]), box
    notes = [c.value for c in demo.blocks.values() if getattr(c, "elem_id", None) == "explore-unavailable"]
    assert notes and MISSING in notes[0]
