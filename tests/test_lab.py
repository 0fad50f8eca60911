"""The Lab tab's callbacks without a browser: opening runs, rebuilding trees, the verdict and the charts."""

from __future__ import annotations

import json
import re

import pytest
from tiny import tiny_gemma3

import goose
from app import lab
from app.callbacks import EXAMPLE_TRACES
from app.race_trace import is_race
from goose.trace import RunRecord

PROMPT = "one two three four, one two three four, one two three four, one two"
CONTROLS = ("method", "budget", "fixed_share", "share", "rho", "depth", "branching", "bigram")


@pytest.fixture(scope="module")
def run() -> RunRecord:
    return goose.generate(tiny_gemma3(0), PROMPT, "goose", 32, budget=16, record_sources=True, spine_share=0.3,
                          branching=2)


def rebuild(run: RunRecord, index: int = 0, **changes):
    """The Lab's rebuild with the controls as opening the run sets them, then `changes`."""
    shape = dict(zip(CONTROLS, lab.open_run(run)[4:]))
    return lab.rebuild(run, index, **{**shape, **changes})


def would(verdict: str) -> tuple[int, int]:
    found = re.search(r'lab-would">(\d+)</span>.*lab-real">(\d+)<', verdict)
    return int(found.group(1)), int(found.group(2))


def test_open_says_why_a_run_cannot_be_rebuilt(run):
    state, status, _, sweep, *_ = lab.open_run(None)
    assert state is None and "Explore" in status and sweep is None
    plain = RunRecord.from_json(run.to_json())
    for step in plain.steps:
        step.snapshot = None
    state, status, *_ = lab.open_run(plain)
    assert state is None and "Cannot rebuild" in status and "record_sources=True" in status


def test_own_settings_reproduce_the_real_step(run):
    state, status, slider, sweep, *shape = lab.open_run(run)
    assert state is run and f"{len(run.steps)} steps" in status and sweep.data
    assert shape == ["goose", 0, True, 0.3, 0.5, 6, 2, True], "the controls start at the run's own shape"
    for index in range(len(run.steps)):
        verdict, real, rebuilt, chart = rebuild(run, index)
        assert would(verdict)[0] == would(verdict)[1] == run.steps[index].accepted_length
        assert 'title="rebuilt tree of step' in rebuilt and "speculation tree of step" in real
    assert list(chart.data[0].y) == list(chart.data[1].y) == [s.accepted_length for s in run.steps]


def test_budget_and_spine_share_change_the_rebuilt_tree(run):
    index = max(range(len(run.steps)), key=lambda i: len(run.steps[i].snapshot.match))
    trees = {rebuild(run, index, budget=b)[2] for b in (2, 12, 48)}
    assert len(trees) == 3
    assert run.steps[index].snapshot.match, "the prompt repeats itself: some step has a context match"
    shares = {rebuild(run, index, budget=4, fixed_share=True, share=s)[2] for s in (0.0, 1.0)}
    assert len(shares) == 2, "a small tree has no spine at share 0, only spine at share 1"


def test_rebuilt_step_marks_the_accepted_path_and_tried_children(run):
    step = run.steps[0]
    result = goose.what_if(run, 0, budget=32)
    record = lab.rebuilt_step(run, step, result)
    assert [record.nodes[n].status for n in record.accepted] == ["accepted"] * result.accepted
    assert record.nodes[0].status == "root" and len(record.nodes) == len(result.tree)
    tried = {c for n in record.path for c in result.tree.child_list(n)} - set(record.accepted)
    assert all(record.nodes[c].status == "rejected" for c in tried)
    assert all(node.text and not node.text.startswith("#") for node in record.nodes), "texts come with the trace"


def test_a_shipped_trace_opens_in_the_lab():
    runs = [path for path in EXAMPLE_TRACES.glob("*.json") if not is_race(json.loads(path.read_text()))]
    assert runs
    for path in runs:
        state, status, *_ = lab.open_run(RunRecord.load(path))
        assert state is not None or "Cannot rebuild" in status
