"""A model run on a second live thread, each with an OpenMP team, warns once (goose.model_threads)."""

from __future__ import annotations

import threading
import warnings

import pytest
import torch
from tiny import tiny_llama

import goose
import goose.model_threads
from goose.model_threads import ThreadsWarning


def run(model) -> None:
    goose.generate(model, "abc abc", "goose", 4)


def in_thread(call, *args) -> list[warnings.WarningMessage]:
    """Run `call` in a new thread, which ends before this returns; the warnings it raised."""
    caught: list[warnings.WarningMessage] = []

    def target() -> None:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            call(*args)
        caught.extend(seen)
    thread = threading.Thread(target=target, name="worker")
    thread.start()
    thread.join()
    return [w for w in caught if issubclass(w.category, ThreadsWarning)]


@pytest.fixture
def two_cpus(monkeypatch):
    monkeypatch.setattr(goose.model_threads, "cpus", lambda: 2)
    assert torch.get_num_threads() == 2  # tests/conftest.py: two threads, so two teams outnumber two CPUs


def test_a_run_beside_another_live_thread_that_ran_the_model_warns_once(two_cpus):
    model = tiny_llama(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ThreadsWarning)
        run(model)  # the main thread, which stays alive
        run(model)
    caught = in_thread(run, model)
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "2 threads that are still alive ('worker', 'MainThread')" in message and "on 2 CPUs" in message
    assert in_thread(run, model) == []  # once per model
    assert len(in_thread(run, tiny_llama(0))) == 0  # another model: its first thread


def test_threads_that_ended_keep_no_team_and_teams_that_fit_the_cpus_do_not_warn(two_cpus, monkeypatch):
    model = tiny_llama(0)
    assert in_thread(run, model) == []
    assert in_thread(run, model) == []  # the first worker has ended: its team with it
    run(model)  # the main thread beside no live one
    monkeypatch.setattr(goose.model_threads, "cpus", lambda: 4)
    assert in_thread(run, model) == []  # two teams of two on four CPUs: they spin
    monkeypatch.setattr(goose.model_threads, "cpus", lambda: 2)
    assert len(in_thread(run, model)) == 1
