"""Benchmarks: every method on the same prompts, interleaved, in one session (`python -m goose bench`).

suites: the prompts; records: one run per prompt x method (runs.jsonl); machine: the bandwidth yardstick;
summary: goose.metrics per method (terminal table, summary.csv); diagnosis: where each tree method's tokens went
(--diagnose); report: report.html drawn with goose.charts; runner: runs the suite and writes all of the above.
methods: what a bench can race. Imports flow one way, records -> summary -> diagnosis -> report -> runner.
"""

from goose.bench.machine import measure_memory_bandwidth, parameter_bytes
from goose.bench.methods import HF_GENERATE, HF_PLD, bench_methods, method_budget, parse_methods, with_baseline
from goose.bench.records import BenchRun, append_runs, load_runs
from goose.bench.report import render_report, write_report
from goose.bench.runner import (
    BenchSettings,
    default_out_dir,
    mark_lossless,
    rebuild_results,
    run_bench,
    run_one,
    run_prompt,
)
from goose.bench.suites import MT_BENCH, SUITES, BenchPrompt, format_prompt, load_suite
from goose.bench.summary import category_speedups, format_table, summarize, write_summary_csv

__all__ = ["HF_GENERATE", "HF_PLD", "MT_BENCH", "SUITES", "BenchPrompt", "BenchRun", "BenchSettings", "append_runs",
           "bench_methods", "category_speedups", "default_out_dir", "format_prompt", "format_table", "load_runs",
           "load_suite", "mark_lossless", "measure_memory_bandwidth", "method_budget", "parameter_bytes",
           "parse_methods", "rebuild_results", "render_report", "run_bench", "run_one", "run_prompt", "summarize",
           "with_baseline", "write_report", "write_summary_csv"]
