"""The benchmark: suites, interleaving, summary, outputs, losslessness flag, runs.jsonl, command line.

The metrics themselves are pinned in tests/test_metrics.py; here, that the bench feeds them its runs."""

from __future__ import annotations

import csv
import functools
import json
import re
import statistics

import pytest
import torch
from tiny import char_tokenizer, tiny_llama

from goose import bench, charts
from goose.bench import BenchPrompt, BenchRun, BenchSettings, report
from goose.bench import runner as bench_runner
from goose.cli import build_parser
from goose.decode import METHODS
from goose.model import GooseModel
from goose.trace import RunTotals

# --- suites ---------------------------------------------------------------------------------------------------


def test_humaneval_suite_is_the_164_raw_completion_prompts():
    prompts = bench.load_suite("humaneval")
    assert len(prompts) == 164
    assert prompts[0].id == "HumanEval/0" and prompts[0].text.startswith("from typing import List")
    assert not any(p.chat for p in prompts)


def test_mtbench_suite_is_80_first_turns_with_categories():
    prompts = bench.load_suite("mtbench")
    assert len(prompts) == 80
    assert all(p.chat and p.category for p in prompts)
    assert len({p.category for p in prompts}) == 8
    first = json.loads(bench.MT_BENCH.read_text(encoding="utf-8").splitlines()[0])
    assert prompts[0].text == first["turns"][0] and prompts[0].id == str(first["question_id"])


def test_custom_jsonl_takes_the_first_turn_keeps_category_and_limit(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text('{"question_id": 7, "category": "math", "turns": ["one?", "two?"]}\n\n'
                    '{"turns": ["three?"]}\n{"id": "x", "prompt": "def f():"}\n', encoding="utf-8")
    prompts = bench.load_suite(str(path))
    assert [(p.id, p.text, p.category, p.chat) for p in prompts] == [
        ("7", "one?", "math", True), ("3", "three?", None, True), ("x", "def f():", None, False)]
    assert len(bench.load_suite(str(path), limit=2)) == 2


def test_jsonl_line_without_turns_or_prompt_is_refused(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"question": "no turns"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        bench.load_suite(str(path))


def test_unknown_suite_is_refused():
    with pytest.raises(ValueError, match="unknown suite 'nope'"):
        bench.load_suite("nope")


def test_chat_prompts_get_the_template_with_a_single_bos():
    tokenizer = char_tokenizer()
    tokenizer.chat_template = ("{{ bos_token }}{% for m in messages %}U: {{ m['content'] }}\n{% endfor %}"
                               "{% if add_generation_prompt %}A:{% endif %}")
    model = GooseModel(None, tokenizer, "chars")
    text = bench.format_prompt(tokenizer, BenchPrompt("1", "hi", chat=True))
    assert text == "U: hi\nA:"
    assert model.encode(text).count(tokenizer.bos_token_id) == 1
    assert bench.format_prompt(tokenizer, BenchPrompt("2", "def f():")) == "def f():"


def test_chat_prompts_stay_raw_without_a_template():
    assert bench.format_prompt(char_tokenizer(), BenchPrompt("1", "hi", chat=True)) == "hi"


# --- a whole (tiny) benchmark ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bench_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    small_bandwidth_probe = functools.partial(bench.measure_memory_bandwidth, nbytes=1 << 24)
    settings = BenchSettings(suite="mtbench", methods=("goose", "pld", "hf-generate", "hf-pld"), limit=2, budget=8,
                             max_new_tokens=12, threads=torch.get_num_threads())
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bench_runner, "measure_memory_bandwidth", small_bandwidth_probe)
        bench.run_bench(settings, out, tiny_llama(0), progress=False)
    return out


def test_methods_run_interleaved_per_prompt_with_autoregressive_added_first(bench_dir):
    runs = bench.load_runs(bench_dir / "runs.jsonl")
    order = [(r.prompt_id, r.method) for r in runs]
    methods = ["autoregressive", "goose", "pld", "hf-generate", "hf-pld"]
    assert order == [("81", m) for m in methods] + [("82", m) for m in methods]


def test_every_method_including_hf_pld_matches_autoregressive(bench_dir):
    runs = bench.load_runs(bench_dir / "runs.jsonl")
    assert all(r.matches_autoregressive for r in runs)
    hf = [r for r in runs if r.method == "hf-pld"]
    assert all(r.totals.forward_passes >= 2 and r.totals.tau >= 1.0 for r in hf)
    assert all(isinstance(r.totals, RunTotals) for r in runs)
    plain = [r for r in runs if r.method == "hf-generate"]
    assert len(plain) == 2 and all(r.totals.forward_passes == r.totals.new_tokens for r in plain)


def test_library_clock_agrees_with_a_stopwatch_around_each_call(bench_dir):
    """A wall time that left set-up (or anything else) out of the clock would fall short of the stopwatch."""
    runs = bench.load_runs(bench_dir / "runs.jsonl")
    gaps = [run.stopwatch_s - run.totals.wall_s for run in runs]
    assert min(gaps) >= 0.0, "the stopwatch encloses the call"
    assert statistics.median(gaps) < 0.005, f"library wall_s and the stopwatch differ by more than 5 ms: {gaps}"


def test_runs_jsonl_lines_hold_what_a_run_needs(bench_dir):
    line = json.loads((bench_dir / "runs.jsonl").read_text(encoding="utf-8").splitlines()[1])
    assert {"prompt_id", "category", "method", "tokens", "text", "totals", "accepted_lengths",
            "matches_autoregressive", "load_average", "cpu_s"} <= set(line)
    assert line["category"] == "writing" and line["budget"] == 8
    assert len(line["accepted_lengths"]) == line["totals"]["forward_passes"] - 1  # prefill is not a step


def test_summary_csv_has_one_row_per_method(bench_dir):
    with (bench_dir / "summary.csv").open(encoding="utf-8") as file:
        rows = list(csv.DictReader(file))
    assert [row["method"] for row in rows] == ["autoregressive", "goose", "pld", "hf-generate", "hf-pld"]
    assert rows[0]["speedup_pooled"] == "1.0" and all(row["lossless"] == "True" for row in rows)
    assert rows[3]["speedup_outside"] == "1.0" and float(rows[1]["speedup_outside"]) > 0
    assert {"tau", "tokens_per_s", "speedup_median", "speedup_min", "bandwidth_gb_s"} <= set(rows[0])


def test_report_is_self_contained_with_plotly_inline_once(bench_dir):
    page = (bench_dir / "report.html").read_text(encoding="utf-8")
    assert not re.search(r"<script[^>]*\bsrc=", page)
    assert page.count("plotly.js v") >= 1 and page.count("<div id=") >= 7
    for title in ("Tokens per second", "tokens per forward pass", "Speed-up over autoregressive (pooled)",
                  "Accepted length per step", "Acceptance rate by source", "per category", "Bandwidth achieved",
                  "Lossless check"):
        assert title in page


def test_meta_records_settings_and_measured_bandwidth(bench_dir):
    meta = json.loads((bench_dir / "meta.json").read_text(encoding="utf-8"))
    assert meta["settings"]["budget"] == 8 and meta["parameter_bytes"] > 0
    assert meta["body_linears"] == "packed"
    assert set(meta["memory_bandwidth_gb_s"]) == {"read", "copy"}
    assert all(v > 0 for v in meta["memory_bandwidth_gb_s"].values())


def test_results_can_be_rebuilt_from_the_folder(bench_dir):
    summaries = bench.rebuild_results(bench_dir)
    assert [s.method for s in summaries] == ["autoregressive", "goose", "pld", "hf-generate", "hf-pld"]


# --- summary on synthetic runs ---------------------------------------------------------------------------------


def fake_run(prompt_id: str, method: str, tokens: int, wall_s: float, forwards: int | None = None,
             category: str | None = None, drafted: dict | None = None, accepted: dict | None = None,
             token_ids: list[int] | None = None, lengths: list[int] | None = None) -> BenchRun:
    totals = RunTotals(new_tokens=tokens, forward_passes=forwards or tokens, wall_s=wall_s, drafted=drafted or {},
                       accepted=accepted or {})
    return BenchRun(prompt_id, category, method, 5, token_ids or list(range(tokens)), "", totals, lengths or [])


def synthetic_runs() -> list[BenchRun]:
    # autoregressive: 100 tokens in 10 s and 10 tokens in 1 s -> 10 tokens/s on both prompts.
    # x: 2x faster on the long prompt, 2x slower on the short one.
    return [fake_run("a", "autoregressive", 100, 10.0, category="c1"),
            fake_run("b", "autoregressive", 10, 1.0, category="c2"),
            fake_run("a", "x", 100, 5.0, forwards=40, category="c1", drafted={"spine": 30, "branch": 50},
                     accepted={"spine": 15, "branch": 5}, lengths=[3, 0, 1]),
            fake_run("b", "x", 10, 2.0, forwards=10, category="c2", drafted={"branch": 50}, accepted={"branch": 5},
                     lengths=[0])]


def test_summary_pools_by_time_takes_median_and_worst_by_prompt():
    summary = {s.method: s for s in bench.summarize(synthetic_runs(), parameter_bytes=10**9)}["x"]
    assert summary.tokens_per_s == pytest.approx(110 / 7)
    assert summary.speedup_pooled == pytest.approx((110 / 7) / (110 / 11))
    assert summary.speedup_median == pytest.approx((2.0 + 0.5) / 2)
    assert summary.speedup_min == pytest.approx(0.5)
    assert summary.tau == pytest.approx(110 / 50)
    assert summary.bandwidth_gb_s == pytest.approx(50 / 7)
    assert summary.acceptance == {"branch": 10 / 100, "spine": 15 / 30}
    assert summary.mean_accepted_length == pytest.approx(1.0)


def test_speedup_over_hf_generate_is_pooled_too():
    runs = [*synthetic_runs(), fake_run("a", "hf-generate", 100, 20.0), fake_run("b", "hf-generate", 10, 2.0)]
    summaries = {s.method: s for s in bench.summarize(runs)}
    assert summaries["x"].speedup_outside == pytest.approx((110 / 7) / (110 / 22))
    assert summaries["hf-generate"].speedup_outside == pytest.approx(1.0)
    assert bench.summarize(synthetic_runs())[1].speedup_outside is None


def test_category_speedups_compare_within_each_category():
    speedups = bench.category_speedups(synthetic_runs())
    assert speedups["x"] == pytest.approx({"c1": 2.0, "c2": 0.5})


def test_cpu_speedup_compares_tokens_per_cpu_second():
    runs = synthetic_runs()
    for run, cpu_s in zip(runs, (20.0, 2.0, 4.0, 2.0)):
        run.cpu_s = cpu_s
    summary = {s.method: s for s in bench.summarize(runs)}["x"]
    assert summary.cpu_speedup == pytest.approx((110 / 6) / (110 / 22))
    runs[0].cpu_s = None
    assert {s.method: s for s in bench.summarize(runs)}["x"].cpu_speedup is None


def test_unknown_forward_count_gives_no_tau():
    runs = synthetic_runs()
    runs[3].totals.forward_passes = None
    summary = {s.method: s for s in bench.summarize(runs)}["x"]
    assert summary.tau is None and summary.forward_passes is None and summary.bandwidth_gb_s is None


def test_lossless_flag_catches_a_run_that_differs():
    runs = synthetic_runs()
    runs[3].tokens = [0, 1, 2, 99]
    bench.mark_lossless(runs)
    assert [r.matches_autoregressive for r in runs] == [True, True, True, False]
    summaries = bench.summarize(runs)
    assert [s.lossless for s in summaries] == [True, False]
    assert bench.format_table(summaries).splitlines()[2].endswith("NO")
    assert "<td>b</td>" in bench.render_report(runs, summaries, {})


def test_report_draws_the_race_charts_then_category_and_bandwidth():
    runs = synthetic_runs()
    summaries = bench.summarize(runs, parameter_bytes=10**9)
    titles = [figure.layout.title.text for figure in report.figures(runs, summaries, {})]
    assert titles[:5] == [figure.layout.title.text for figure in charts.race_charts(summaries)]
    assert ["per category" in titles[5], "Bandwidth" in titles[6], len(titles)] == [True, True, 7]
    speedup = next(f for f in report.figures(runs, summaries, {}) if f.layout.title.text.startswith("Speed-up"))
    assert sorted(speedup.data[1].y) == pytest.approx([0.5, 2.0])  # the per-prompt dots of x


def test_sampled_runs_are_not_checked_for_losslessness():
    runs = synthetic_runs()
    runs[3].tokens = [0, 1, 2, 99]
    assert [s.lossless for s in bench.summarize(runs, greedy=False)] == [None, None]


def test_runs_jsonl_round_trips_and_old_lines_with_a_totals_dict_load(tmp_path):
    path = tmp_path / "runs.jsonl"
    runs = synthetic_runs()
    bench.append_runs(path, runs)
    assert bench.load_runs(path) == runs
    old = {"prompt_id": "a", "category": None, "method": "hf-pld", "prompt_tokens": 5, "tokens": [1, 2], "text": "",
           "totals": {"new_tokens": 2, "forward_passes": 2, "tau": 1.0, "tokens_per_s": 4.0, "wall_s": 0.5,
                      "prefill_s": None, "drafted": {}, "accepted": {}, "retired_field": 1},
           "accepted_lengths": [], "budget": None, "matches_autoregressive": True, "load_average": 0.5,
           "cpu_s": 0.4, "retired_key": "x"}
    path.write_text(json.dumps(old) + "\n\n", encoding="utf-8")
    [loaded] = bench.load_runs(path)
    assert loaded.totals == RunTotals(new_tokens=2, forward_passes=2, tau=1.0, tokens_per_s=4.0, wall_s=0.5,
                                      prefill_s=None)
    assert loaded.cpu_s == 0.4 and loaded.matches_autoregressive



def test_the_suffix_methods_run_in_the_bench_at_their_own_default_budget():
    """No --budget: each method's default (auto, and vLLM's 25 nodes for the suffix methods); "auto" tunes all."""
    from goose.bench.diagnosis import diagnosed_methods

    methods = ["autoregressive", "goose", "suffix", "suffix-path"]
    prompt = bench.BenchPrompt("p1", "one two three four, one two three four, one two")
    runs = bench.run_prompt(tiny_llama(0), prompt, methods, 16, None)
    assert [r.method for r in runs] == methods and all(r.matches_autoregressive for r in runs)
    assert [r.budget for r in runs] == ["auto", "auto", 25, 25]
    tuned = bench.run_prompt(tiny_llama(0), prompt, ["autoregressive", "suffix"], 16, "auto")
    assert tuned[1].budget == "auto" and tuned[1].matches_autoregressive
    assert diagnosed_methods(methods) == ["goose"], "goose.diagnose does not split the suffix trees' offers"


# --- command line ----------------------------------------------------------------------------------------------


def test_bench_arguments_parse():
    args = build_parser().parse_args(["bench", "--suite", "mtbench", "--methods", "goose, hf-pld,goose",
                                      "--budget", "16", "--limit", "3"])
    assert args.methods == ("goose", "hf-pld") and args.budget == 16 and args.limit == 3
    assert args.threads == 2 and args.max_new_tokens == 128 and args.out is None and args.head == "auto"
    assert build_parser().parse_args(["bench", "--suite", "mtbench", "--head", "full"]).head == "full"
    assert build_parser().parse_args(["bench", "--suite", "x.jsonl", "--budget", "auto"]).budget == "auto"
    assert build_parser().parse_args(["bench", "--suite", "x.jsonl"]).budget is None, "each method's default"
    assert build_parser().parse_args(["bench", "--suite", "humaneval"]).methods == bench.bench_methods()
    assert bench.bench_methods() == (*METHODS, "hf-generate", "hf-pld")


def test_a_goose_method_races_at_its_own_budget_beside_its_default():
    """"goose@8" is goose at a fixed budget of 8 in the same run, interleaved and checked like any method."""
    assert bench.parse_methods("goose,goose@8,goose@auto,pld@4") == ("goose", "goose@8", "goose@auto", "pld@4")
    assert bench.method_budget("goose@8", None) == ("goose", 8)
    assert bench.method_budget("goose", 16) == ("goose", 16)
    for bad, message in (("goose@0", "budget"), ("goose@lots", "budget"), ("hf-generate@8", "no tree budget"),
                         ("nothing@8", "unknown method")):
        with pytest.raises(ValueError, match=message):
            bench.parse_methods(bad)
    prompt = bench.BenchPrompt("p1", "one two three four, one two three four, one two")
    runs = bench.run_prompt(tiny_llama(0), prompt, ["autoregressive", "goose@8", "goose"], 16, None)
    assert [r.method for r in runs] == ["autoregressive", "goose@8", "goose"]
    assert [r.budget for r in runs] == ["auto", 8, "auto"]
    assert all(r.matches_autoregressive for r in runs)


def test_bench_settings_refuse_an_unknown_head():
    with pytest.raises(ValueError, match="unknown head 'half'"):
        BenchSettings(suite="mtbench", head="half")


@pytest.mark.parametrize("flag, value, message", [
    ("--methods", "goose,speculative", "unknown method(s) speculative; choose from autoregressive, pld"),
    ("--methods", ",", "no method given"),
    ("--budget", "0", "budget must be a whole number of tree nodes >= 1"),
    ("--budget", "many", "budget must be 'auto' or a whole number"),
    ("--head", "half", "invalid choice: 'half'"),
])
def test_bad_bench_arguments_exit_with_a_clear_message(capsys, flag, value, message):
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["bench", "--suite", "humaneval", flag, value])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
