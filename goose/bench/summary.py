"""The benchmark's summary: per-method metrics of the runs, as a terminal table and as summary.csv."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import asdict
from operator import attrgetter
from pathlib import Path
from typing import Any

from goose import metrics
from goose.bench.records import BenchRun
from goose.metrics import MethodMetrics

PER_PROMPT_FIELDS = ("acceptance", "speedups", "accepted_length_shares", "verdicts")  # not one CSV cell each


def suite_of(runs: Sequence[BenchRun]) -> metrics.Suite:
    """method -> prompt id -> run, in the order the runs were made."""
    return metrics.group_runs(runs, attrgetter("prompt_id"))


def summarize(runs: Sequence[BenchRun], parameter_bytes: int = 0, greedy: bool = True) -> list[MethodMetrics]:
    """Per method, in the order the methods first appear in `runs`; sampled runs (greedy False) are not
    checked for losslessness: they are draws."""
    return metrics.suite_metrics(suite_of(runs), parameter_bytes, cpu_clock=attrgetter("cpu_s"), check_lossless=greedy)


def category_speedups(runs: Sequence[BenchRun]) -> dict[str, dict[str, float | None]]:
    """method -> category -> pooled speed-up within that category (empty when the prompts have none)."""
    return metrics.category_speedups(suite_of(runs), {run.prompt_id: run.category for run in runs})


def format_cell(value: Any, digits: int = 2) -> str:
    """A table cell: "-" for unknown, yes/NO for flags, fixed digits for floats."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


SUMMARY_HEADER = ("method", "prompts", "tokens", "forwards", "wall s", "tau", "tok/s", "speedup", "median", "min",
                  "vs hf-gen", "cpu-speedup", "acc/step", "acceptance", "GB/s", "lossless")


def summary_rows(summaries: Sequence[MethodMetrics]) -> list[list[str]]:
    """The summary as table cells under SUMMARY_HEADER, for the terminal and the report alike."""
    return [[s.method, format_cell(s.prompts), format_cell(s.new_tokens), format_cell(s.forward_passes),
             format_cell(s.wall_s, 1), format_cell(s.tau), format_cell(s.tokens_per_s, 1),
             format_cell(s.speedup_pooled), format_cell(s.speedup_median), format_cell(s.speedup_min),
             format_cell(s.speedup_outside), format_cell(s.cpu_speedup), format_cell(s.mean_accepted_length),
             " ".join(f"{source} {rate:.3f}" for source, rate in s.acceptance.items()) or "-",
             format_cell(s.bandwidth_gb_s, 1), format_cell(s.lossless)] for s in summaries]


def text_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain-text table, columns padded to their widest cell, for the terminal."""
    rows = [list(header), *rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows)


def format_table(summaries: Sequence[MethodMetrics]) -> str:
    """A plain-text table of the summary, for the terminal."""
    return text_table(SUMMARY_HEADER, summary_rows(summaries))


def write_summary_csv(path: Path, summaries: Sequence[MethodMetrics]) -> None:
    """summary.csv: one row per method; acceptance gets one column per draft source."""
    sources = sorted({source for s in summaries for source in s.acceptance})
    rows = []
    for s in summaries:
        row = {k: v for k, v in asdict(s).items() if k not in PER_PROMPT_FIELDS}
        row.update({f"acceptance_{source}": s.acceptance.get(source) for source in sources})
        rows.append(row)
    with path.open("w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
