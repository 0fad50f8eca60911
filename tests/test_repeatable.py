"""A run is a function of its inputs: the same prompt, model, settings and seed draft the same trees and commit
the same tokens, in one process or two, whatever ran before (the tuner starts afresh in every run, over a cost
table fixed before the run and recorded in it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tiny import tiny_gemma3, tiny_llama

import goose
from goose.trace import RunRecord

PROMPT = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n"
OTHER = "one two three four one two three four one two"
SPECULATIVE = [name for name, drafter in goose.METHODS.items() if drafter.speculative]
ROOT = Path(__file__).resolve().parent.parent


def trees(run: RunRecord) -> list[tuple]:
    """Every step's tree as the trace keeps it: node count, tokens and parents, and the budget."""
    return [(len(s.nodes), tuple(n.token for n in s.nodes), tuple(n.parent for n in s.nodes), s.budget)
            for s in run.steps]


@pytest.fixture(scope="module")
def models():
    return [tiny_llama(0), tiny_gemma3(0)]


@pytest.mark.parametrize("method", SPECULATIVE)
def test_the_same_call_twice_drafts_the_same_trees(models, method):
    for goose_model in models:
        first = goose.generate(goose_model, PROMPT, method, 40)
        goose.generate(goose_model, OTHER, method, 30)  # another prompt in between leaves nothing behind
        again = goose.generate(goose_model, PROMPT, method, 40)
        assert again.tokens == first.tokens and trees(again) == trees(first), (goose_model.name, method)


def test_a_sampled_run_repeats_with_its_seed(models):
    for goose_model in models:
        runs = [goose.generate(goose_model, PROMPT, "goose", 30, temperature=0.8, seed=7) for _ in range(2)]
        assert runs[0].tokens == runs[1].tokens and trees(runs[0]) == trees(runs[1])


def test_recording_changes_no_tree(models):
    for goose_model in models:
        plain = goose.generate(goose_model, PROMPT, "goose", 40)
        recorded = goose.generate(goose_model, PROMPT, "goose", 40, record_sources=True)
        assert recorded.tokens == plain.tokens and trees(recorded) == trees(plain)
        assert recorded.costs == plain.costs, "the tuner's table, recorded either way"


CHILD = """
import json, sys
sys.path.insert(0, {tests!r})
import goose
from tiny import tiny_llama
run = goose.generate(tiny_llama(0), {prompt!r}, "goose", 40)
print(json.dumps([[len(s.nodes), [n.token for n in s.nodes], [n.parent for n in s.nodes], s.budget] for s in run.steps]
                 + [run.tokens]))
"""


def test_two_processes_draft_the_same_trees(tmp_path):
    """The cost table is measured once per machine and kept (goose.costs): the second process reads the first's."""
    env = {**os.environ, "GOOSE_CACHE": str(tmp_path), "PYTHONPATH": str(ROOT)}
    script = CHILD.format(tests=str(ROOT / "tests"), prompt=PROMPT)
    outputs = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True,
                              timeout=300).stdout for _ in range(2)]
    first, second = (json.loads(out.splitlines()[-1]) for out in outputs)
    assert first == second and len(first) > 2


@pytest.mark.slow
def test_the_embedded_model_repeats_its_runs_and_checks_its_own_setting_exactly(gemma):
    """Explore's recording of the default goose run, run again in between other work, and checked at its own
    setting: the same tokens and trees every time, and a check whose tau error is exactly 0."""
    prompt = "def fibonacci(n):"
    first = goose.generate(gemma, prompt, "goose", 64, record_sources=True)
    goose.generate(gemma, "Monday, Tuesday,", "goose", 32)
    again = goose.generate(gemma, prompt, "goose", 64)
    assert again.tokens == first.tokens and trees(again) == trees(first)
    checked = goose.run_what_if(first, check=True, model=gemma)
    assert checked.tau_error == 0.0 and checked.measured.run.tokens == first.tokens
    assert trees(checked.measured.run) == trees(first)
