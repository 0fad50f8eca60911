"""Where a run's budget tuner starts (goose.tuning): learnt once per model, method and machine, kept on disk,
recorded in the run, and read again by its replays."""

from __future__ import annotations

import json

import pytest
from tiny import tiny_llama

import goose
import goose.decode
import goose.tuning
from goose.budget import BudgetTuner
from goose.tree import DraftTree
from goose.whatif import replay_generation

TABLE = {n: 1.0 + 0.02 * n for n in (1, 2, 4, 8, 16)}
PROMPT = "the cat sat on the mat. the cat sat on the"


def chain(*tokens: int) -> DraftTree:
    tree = DraftTree.rooted_at(0)
    for token in tokens:
        tree.add(token, len(tree) - 1, "spine")
    return tree


@pytest.fixture
def tuned(monkeypatch, tmp_path):
    """A fixed cost table and an empty cache folder: each test trains its own start."""
    monkeypatch.setattr(goose.decode, "cost_table", lambda model, head="screened": dict(TABLE))
    monkeypatch.setenv("GOOSE_CACHE", str(tmp_path))
    return tmp_path


def test_a_tuner_started_from_what_another_learnt_picks_what_that_one_picked():
    learner = BudgetTuner({2: 1.0, 4: 1.5, 8: 2.0})
    for _ in range(10):
        learner.observe({((), 2): chain(1), ((), 4): chain(1, 2, 3), ((), 8): chain(9, 9, 9, 9, 9, 9, 9)},
                        list(range(1, 10)))
    fresh = BudgetTuner({2: 1.0, 4: 1.5, 8: 2.0})
    assert fresh.best() != learner.best()  # from nothing, the weak prior prefers the big tree
    started = BudgetTuner({2: 1.0, 4: 1.5, 8: 2.0})
    started.start_from(json.loads(json.dumps(learner.learnt())))  # as kept on disk
    assert started.best() == learner.best() == ((), 4)
    weight = started.estimates[(), 4].count
    assert weight == 8, "a learnt key counts as a few steps, so that the run's own steps soon outweigh it"


def test_a_start_of_other_knobs_is_refused():
    learner = BudgetTuner({2: 1.0}, knobs={"top_k": (2, 4)}, start={"top_k": 2})
    with pytest.raises(ValueError, match="knobs"):
        BudgetTuner({2: 1.0}).start_from(learner.learnt())


def test_the_start_is_trained_once_per_model_and_method_then_read_from_disk(tuned, monkeypatch):
    model = tiny_llama(0)
    trained = []
    real_train = goose.tuning.train
    monkeypatch.setattr(goose.tuning, "train", lambda calibrate: trained.append(1) or real_train(calibrate))
    first = goose.generate(model, PROMPT, "goose", 20)
    goose.generate(model, PROMPT, "goose", 20)
    goose.generate(tiny_llama(0), PROMPT, "goose", 20)  # another process's model object: read from the file
    assert len(trained) == 1
    assert first.tuner_start is not None and first.tuner_start["situations"]
    kept = json.loads((tuned / "tuner-starts.json").read_text())
    assert list(kept.values()) == [first.tuner_start]
    goose.generate(model, PROMPT, "balanced", 10)
    assert len(trained) == 2, "each method's tuner has its own knobs: its own start"


def test_a_warm_run_is_a_function_of_its_inputs_and_records_where_it_started(tuned):
    model = tiny_llama(0)
    first = goose.generate(model, PROMPT, "goose", 30)
    goose.generate(model, "abc abc abc", "goose", 10)
    again = goose.generate(model, PROMPT, "goose", 30)
    assert [[n.token for n in s.nodes] for s in again.steps] == [[n.token for n in s.nodes] for s in first.steps]
    cold = goose.generate(model, PROMPT, "goose", 30, warm_tuner=False)
    assert cold.tuner_start is None
    assert goose.generate(model, PROMPT, "goose", 10, budget=8).tuner_start is None  # no tuner, no start


def test_a_replay_of_a_warm_run_starts_where_it_started_and_rebuilds_it(tuned):
    run = goose.generate(tiny_llama(0), PROMPT, "goose", 30, record_sources=True)
    saved = goose.RunRecord.from_json(run.to_json())
    assert saved.tuner_start == run.tuner_start
    replay = replay_generation(saved, "goose", goose.GooseConfig.from_dict(saved.config))
    steps = list(replay)
    assert [[n.token for n in s.nodes] for s in steps] == [[n.token for n in s.nodes] for s in run.steps]
