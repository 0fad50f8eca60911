"""python -m goose.bench.ceiling: a bench run's speed-ups against what its drafts could reach with every pass at
the floor of its rows' products."""

from __future__ import annotations

import functools

import pytest
import torch
from tiny import tiny_llama

from goose.bench import BenchRun, BenchSettings
from goose.bench import runner as bench_runner
from goose.bench.ceiling import Decoding, ceiling_report, ceilings, decoding_totals, floor_costs, product_seconds
from goose.trace import RunTotals


def bench_run(method: str, tokens: int, passes: int | None, drafted: dict[str, int]) -> BenchRun:
    totals = RunTotals(new_tokens=tokens, forward_passes=passes, drafted=drafted)
    return BenchRun("1", None, method, 5, [0] * tokens, "", totals)


def test_decoding_leaves_out_every_runs_prefill_and_transformers_own_runs():
    runs = [bench_run("autoregressive", 12, 12, {}), bench_run("goose", 12, 4, {"spine": 9, "branch": 6}),
            bench_run("autoregressive", 8, 8, {}), bench_run("goose", 8, 3, {"spine": 4}),
            bench_run("hf-generate", 12, 12, {}), bench_run("hf-pld", 12, None, {})]
    totals = decoding_totals(runs)
    assert list(totals) == ["autoregressive", "goose"]
    assert (totals["autoregressive"].tokens, totals["autoregressive"].passes) == (18, 18)
    goose = totals["goose"]
    assert (goose.tokens, goose.passes, goose.drafted) == (18, 5, 19)
    assert goose.tau == pytest.approx(18 / 5) and goose.nodes == pytest.approx(1 + 19 / 5)


def test_a_method_reaching_the_tau_the_bar_needs_reaches_the_bar_at_its_ceiling():
    costs = {1: 1.0, 8: 2.0}  # the cost table: an 8-node pass twice a 1-node one
    floor = {1: 1.0, 8: 1.5}  # its products grow by half a pass
    totals = {"autoregressive": Decoding(40, 40, 0), "goose": Decoding(40, 10, 70)}  # τ 4 at 8 nodes
    table = {row["method"]: row for row in ceilings(totals, {"autoregressive": 1.0, "goose": 1.8}, costs, 1.0, floor,
                                                     autoregressive_s=1.0, bar=2.0)}
    assert table["autoregressive"]["ceiling"] == pytest.approx(1.0)
    goose = table["goose"]
    assert goose["table"] == pytest.approx(4 / 2.0) and goose["ceiling"] == pytest.approx(4 / 1.5)
    assert goose["of ceiling"] == pytest.approx(1.8 / (4 / 1.5))
    assert goose["tau needed"] == pytest.approx(3.0)
    at_the_bar = ceilings({"goose": Decoding(30, 10, 70)}, {}, costs, 1.0, floor, 1.0, bar=2.0)[0]
    assert at_the_bar["ceiling"] == pytest.approx(2.0) and at_the_bar["of ceiling"] is None


def test_the_floor_adds_what_the_products_grow_by_to_the_autoregressive_pass_within_its_neighbours():
    floor = floor_costs(0.05, {1: 0.03, 4: 0.029, 8: 0.06, 16: 0.05})
    assert floor == pytest.approx({1: 0.05, 4: 0.05, 8: 0.07, 16: 0.07})  # 8 rows cannot cost more than 16


def test_the_products_are_timed_at_every_size():
    seconds = product_seconds(tiny_llama(0), "full", [1, 4], rounds=1)
    assert set(seconds) == {1, 4} and all(value > 0 for value in seconds.values())


def test_the_report_of_a_tiny_bench_run_prices_every_method(tmp_path):
    settings = BenchSettings(suite="mtbench", methods=("goose", "pld", "hf-generate", "hf-pld"), limit=1, budget=8,
                             max_new_tokens=10, threads=torch.get_num_threads())
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bench_runner, "measure_memory_bandwidth",
                      functools.partial(bench_runner.measure_memory_bandwidth, nbytes=1 << 24))
        bench_runner.run_bench(settings, tmp_path, tiny_llama(0), progress=False)
    report = ceiling_report(tiny_llama(0), tmp_path, head="full", bar=2.0, rounds=1)
    lines = report.splitlines()
    assert lines[0].startswith("head full, autoregressive pass")
    assert any(line.startswith("| floor | ") for line in lines)
    methods = [line.split(" | ")[0][2:] for line in lines if line.startswith("| ") and " | " in line]
    assert {"autoregressive", "goose", "pld"} <= set(methods) and not {"hf-generate", "hf-pld"} & set(methods)
    autoregressive = next(line for line in lines if line.startswith("| autoregressive |")).split(" | ")
    assert autoregressive[5] == "1.00x" and autoregressive[-1] == "2.00 |"
