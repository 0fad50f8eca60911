"""This device's costs (goose.costs): the verification cost table, measured once and cached, and read between
its sizes."""

from __future__ import annotations

import json
import os
import time

import pytest
import torch
from tiny import tiny_llama

from goose import costs as costs_module
from goose.budget import interpolate_cost
from goose.costs import cost_table


def test_the_cost_grid_holds_the_autoregressive_step():
    assert costs_module.BUDGET_GRID[0] == 1


def test_interpolated_cost_between_below_and_above_the_grid():
    costs = {2: 1.0, 4: 2.0, 8: 3.0}
    assert interpolate_cost(costs, 3) == pytest.approx(1.5)
    assert interpolate_cost(costs, 1) == 1.0
    assert interpolate_cost(costs, 16) == pytest.approx(5.0)  # last slope carried on
    assert interpolate_cost({2: 1.0, 4: 0.5}, 8) == 0.5  # a noisy table never makes bigger trees cheaper


@pytest.fixture
def measured(monkeypatch):
    """measure_costs replaced by a counter, so the cache logic is tested without timing anything."""
    calls = []

    def fake_measure(goose_model, head="screened"):
        calls.append(goose_model.name)
        return {costs_module.AUTOREGRESSIVE: 0.008, costs_module.PREFILL_ROW: 0.0005, 2: 0.01, 4: 0.02}

    monkeypatch.setattr(costs_module, "measure_costs", fake_measure)
    return calls


def test_cost_table_is_measured_once_and_cached_under_its_key(tmp_path, measured, monkeypatch):
    path = tmp_path / "deep" / "costs.json"
    model = tiny_llama(0)
    assert cost_table(model, path) == {2: 0.01, 4: 0.02}, "tree sizes only: the tuner weighs these"
    assert costs_module.autoregressive_cost(model, path) == 0.008, "kept beside the sizes, read apart"
    assert costs_module.prefill_row_cost(model, path) == 0.0005
    assert cost_table(model, path) == {2: 0.01, 4: 0.02}
    assert measured == [model.name]
    (key,) = json.loads(path.read_text())
    assert key.startswith(f"v{costs_module.COST_FORMAT}|tiny-llama-0|cpu|torch.float32|threads=")
    assert key.endswith(f"|head=screened|linears=packed|revision={costs_module.HEAD_REVISION}")
    monkeypatch.setattr(costs_module.torch, "get_num_threads", lambda: 97)
    cost_table(model, path)  # another thread count is another machine state: measured again, kept beside
    assert len(measured) == 2 and len(json.loads(path.read_text())) == 2
    cost_table(model, path, head="full")  # the full head makes every node dearer: its own entry
    assert len(measured) == 3 and len(json.loads(path.read_text())) == 3
    assert os.listdir(path.parent) == ["costs.json"]  # written through a staging file, nothing left behind


def test_a_model_reads_its_cost_table_from_disk_once(tmp_path, measured, monkeypatch):
    """Every tuned or recorded run asks for the table: the file is read on the first ask only."""
    path = tmp_path / "costs.json"
    model = tiny_llama(0)
    assert cost_table(model, path) == {2: 0.01, 4: 0.02}
    reads = []
    real_cached = costs_module.kept_on_disk
    monkeypatch.setattr(costs_module, "kept_on_disk", lambda *args: reads.append(args) or real_cached(*args))
    table = cost_table(model, path)
    table[2] = 99.0  # a caller's copy: the kept table is not changed through it
    assert cost_table(model, path) == {2: 0.01, 4: 0.02}
    assert reads == []
    cost_table(tiny_llama(0), path)  # another model object reads the file (measured once, by the first)
    assert len(reads) == 1 and measured == [model.name]


def test_a_corrupt_cost_cache_is_measured_again_and_replaced_whole(tmp_path, measured):
    path = tmp_path / "costs.json"
    path.write_text("{not json")
    assert cost_table(tiny_llama(0), path) == {2: 0.01, 4: 0.02}
    assert measured and len(json.loads(path.read_text())) == 1


def test_a_table_kept_without_the_autoregressive_pass_reads_none_for_it(tmp_path, monkeypatch):
    monkeypatch.setattr(costs_module, "measure_costs", lambda goose_model, head="screened": {1: 0.01, 4: 0.02})
    assert costs_module.autoregressive_cost(tiny_llama(0), tmp_path / "costs.json") is None
    assert costs_module.prefill_row_cost(tiny_llama(0), tmp_path / "costs.json") is None


def test_the_autoregressive_pass_and_a_prefill_row_are_timed_with_the_table(monkeypatch):
    """The table's passes walk with the adjacency table's top-k; the autoregressive pass, a lone root, without; a
    prefill row's top-k is timed on a chain of text rows and divided by their number."""
    walks = []
    real_walk = costs_module.GreedyWalker.walk
    monkeypatch.setattr(costs_module.GreedyWalker, "walk",
                        lambda self, tree, hidden, top_k: walks.append((len(tree), top_k)) or real_walk(
                            self, tree, hidden, top_k))
    table = costs_module.measure_costs(tiny_llama(0), sizes=(1, 4), repeats=2)
    assert set(table) == {costs_module.AUTOREGRESSIVE, costs_module.PREFILL_ROW, 1, 4}
    assert all(s > 0 for s in table.values()) and table[costs_module.PREFILL_ROW] < table[1]
    top_k = costs_module.GooseConfig().top_k
    assert set(walks) == {(1, top_k), (4, top_k), (1, 0)} and len(walks) == 3 * 3  # a warm-up round, then 2


def test_a_disturbed_cost_is_capped_by_the_bigger_sizes():
    """Noise only adds time: a size measured dearer than a bigger one takes the bigger one's cost."""
    measured = {1: 0.05, 2: 0.09, 4: 0.07, 8: 0.10, 16: 0.30, 24: 0.32, 32: 0.29}
    assert costs_module.no_dearer_than_bigger(measured) == {1: 0.05, 2: 0.07, 4: 0.07, 8: 0.10, 16: 0.29,
                                                             24: 0.29, 32: 0.29}
    clean = {1: 0.05, 2: 0.06, 4: 0.08}
    assert costs_module.no_dearer_than_bigger(clean) == clean


def test_median_seconds_times_the_call_only():
    """The median of the repeats, each timing only the call: `after` (restoring state) runs outside the clock."""
    pauses = iter([0.03, 0.0, 0.01])
    after = []
    seconds = costs_module.median_seconds(lambda: time.sleep(next(pauses)), 3, torch.device("cpu"),
                                          after=lambda: after.append(time.sleep(0.05)))
    assert 0.01 <= seconds < 0.03 and len(after) == 3


def test_least_seconds_takes_turns_so_that_a_burst_of_load_spoils_one_round_not_one_size():
    """Every call once per round, the least time kept: a pause that hits a whole round (another process's burst)
    is outvoted by the other rounds, for every size alike; the warm-up round is not timed."""
    order, pauses = [], iter([0.2, 0.2] + [0.0, 0.0] + [0.05, 0.05] + [0.0, 0.0])  # warm-up, clean, burst, clean
    calls = {n: (lambda n=n: (order.append(n), time.sleep(next(pauses)))) for n in (1, 16)}
    least = costs_module.least_seconds(calls, 3, torch.device("cpu"))
    assert order == [1, 16] * 4, "every round takes each size in turn"
    assert set(least) == {1, 16} and all(seconds < 0.02 for seconds in least.values())
