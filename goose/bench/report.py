"""The benchmark's report.html: one self-contained page (plotly.js inline, no CDN) that opens offline.

Charts (goose.charts, the same as the app's Race tab): tokens/s, tau, speed-up
over autoregressive (pooled, and per prompt), accepted length per step,
acceptance per draft source; then speed-up per category and the bandwidth
achieved beside this machine's measured memory bandwidth. Tables: the summary
and losslessness per method; with --diagnose, where each tree method's tokens
went (taken, lost to the shape, lost to the sources).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from goose import charts
from goose.bench.diagnosis import DIAGNOSIS_DEFINITIONS, DIAGNOSIS_HEADER, DiagnosedRun, diagnosis_rows
from goose.bench.records import BenchRun
from goose.bench.summary import SUMMARY_HEADER, category_speedups, summary_rows
from goose.bench.what_if import CHECK_HEADER, check_cells
from goose.drafters import Balanced, SpineTree
from goose.metrics import MethodMetrics
from goose.trace import RunRecord
from goose.whatif import agreement, best_budget, sweep

if TYPE_CHECKING:
    from plotly.graph_objects import Figure


def figures(runs: Sequence[BenchRun], summaries: Sequence[MethodMetrics], meta: dict[str, Any]) -> list[Figure]:
    """Every chart of the report, in reading order."""
    extra = [charts.category_chart(category_speedups(runs)),
             charts.bandwidth_chart(summaries, meta.get("memory_bandwidth_gb_s", {}))]
    return [*charts.race_charts(summaries), *(chart for chart in extra if chart is not None)]


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain HTML table, every cell escaped."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def summary_table(summaries: Sequence[MethodMetrics]) -> str:
    """The per-method summary, the same cells as the terminal table."""
    return _table(SUMMARY_HEADER, summary_rows(summaries))


def lossless_table(summaries: Sequence[MethodMetrics]) -> str:
    """Per method: prompts whose tokens equal autoregressive's, and which ones differ."""
    rows = []
    for s in summaries:
        differing = [prompt for prompt, same in s.verdicts.items() if not same]
        checked = f"{len(s.verdicts) - len(differing)}/{len(s.verdicts)}" if s.verdicts else "not checked"
        rows.append([s.method, checked, ", ".join(differing) or "-"])
    return _table(["method", "identical to autoregressive", "prompts that differ"], rows)


def settings_line(meta: dict[str, Any]) -> str:
    """One sentence saying what was measured where, and how loaded the machine was."""
    settings = meta.get("settings", {})
    bandwidth = ", ".join(f"{k} {v:.1f} GB/s" for k, v in meta.get("memory_bandwidth_gb_s", {}).items())
    budget = settings.get("budget")
    budget_text = "each method's default" if budget is None else budget
    temperature = settings.get("temperature")
    decoding = f"sampled at temperature {temperature}" if temperature else "greedy"
    return (f"suite {settings.get('suite')}, model {meta.get('model')} "
            f"({meta.get('parameter_bytes', 0) / 1e6:.0f} MB of parameters) on {meta.get('device')}, "
            f"{meta.get('threads')} threads of {meta.get('cpu_count')} CPUs, {decoding}, "
            f"{settings.get('head', 'screened')} LM head ({meta.get('head_used', 'as recorded')} used), "
            f"body linears {meta.get('body_linears', 'stock')}, "
            f"max {settings.get('max_new_tokens')} new tokens, budget {budget_text}; "
            f"torch {meta.get('torch')}, transformers {meta.get('transformers')}; memory bandwidth {bandwidth}; "
            f"load average at start {meta.get('load_average_start')}, end {meta.get('load_average_end')}; "
            f"started {meta.get('started')}")


STYLE = ("body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}"
         "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
         "td:first-child,th:first-child{text-align:left}")
DEFINITIONS = ("tau = new tokens / target forward passes (prefill counted); speed-up = tokens/s over "
               "autoregressive tokens/s (same model, same LM head) on the same prompts in the same session "
               "(methods interleaved per prompt); vs hf-gen = the same over transformers' greedy generate; "
               "pooled = total tokens / total time, so long generations weigh as much as they cost. Every wall "
               "time runs from the call to the last token, set-up included.")


def what_if_section(traces: Sequence[RunRecord], summaries: Sequence[MethodMetrics], meta: dict[str, Any],
                    checks: Sequence[dict[str, Any]] = ()) -> str:
    """The curves goose.whatif draws from the recorded runs, and every estimate beside the real run at its setting."""
    settings = meta.get("settings", {})
    real_tau = {s.method: s.tau for s in summaries if s.tau is not None and s.method in (SpineTree.name, Balanced.name)}
    table = _table(["method", "budget", "replayed tau", "real tau (bench)", "difference"],
                   agreement(traces, real_tau, settings.get("budget")))
    check_table = _table(CHECK_HEADER, [check_cells(c) for c in checks]) if checks else ""
    curves = sweep(traces)
    best = {method: budget for method, points in curves["budget"].items()
            if (budget := best_budget(points)) is not None}
    figures_html = "".join(figure.to_html(full_html=False, include_plotlyjs=False)
                           for figure in charts.what_if_charts(curves, settings.get("suite", ""), best))
    return (f"<h2>What if (from {len(traces)} recorded runs of goose)</h2><p>One extra goose run per prompt, "
            "recorded with its sources, replayed under each setting with the replay's own step boundaries "
            "(docs/METHOD.md): tau, and a wall time estimated from this device's cost table. The first table "
            "sets the replay beside the bench's own runs; the second beside a real run at every setting (pooled "
            "over prompts; error = estimate / real - 1).</p>"
            f"{table}{check_table}{figures_html}")


def diagnosis_section(diagnosed: Sequence[DiagnosedRun]) -> str:
    """The pooled split per tree method (goose.bench.diagnosis)."""
    return (f"<h2>Where the tokens went (from {len(diagnosed)} recorded runs)</h2><p>One extra run per prompt and "
            "tree method, recorded with its sources and diagnosed (goose.diagnose); the timed runs were not "
            f"recorded. {html.escape(DIAGNOSIS_DEFINITIONS)}</p>{_table(DIAGNOSIS_HEADER, diagnosis_rows(diagnosed))}")


def render_report(runs: Sequence[BenchRun], summaries: Sequence[MethodMetrics], meta: dict[str, Any],
                  what_if_traces: Sequence[RunRecord] = (), what_if_checks: Sequence[dict[str, Any]] = (),
                  diagnosed: Sequence[DiagnosedRun] = ()) -> str:
    """The whole page; plotly.js is embedded once, inline, with the first chart."""
    figures_html = [figure.to_html(full_html=False, include_plotlyjs=(i == 0)) for i, figure in
                    enumerate(figures(runs, summaries, meta))]
    what_if = what_if_section(what_if_traces, summaries, meta, what_if_checks) if what_if_traces else ""
    diagnosis = diagnosis_section(diagnosed) if diagnosed else ""
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>Goose benchmark</title>"
            f"<style>{STYLE}</style></head><body><h1>Goose benchmark</h1><p>{html.escape(settings_line(meta))}</p>"
            f"<p>{html.escape(DEFINITIONS)}</p>"
            f"<h2>Summary</h2>{summary_table(summaries)}<h2>Lossless check</h2>{lossless_table(summaries)}"
            f"{diagnosis}<h2>Charts</h2>{''.join(figures_html)}{what_if}</body></html>")



def write_report(path: Path, runs: Sequence[BenchRun], summaries: Sequence[MethodMetrics],
                 meta: dict[str, Any], what_if_traces: Sequence[RunRecord] = (),
                 what_if_checks: Sequence[dict[str, Any]] = (), diagnosed: Sequence[DiagnosedRun] = ()) -> None:
    """Write report.html."""
    path.write_text(render_report(runs, summaries, meta, what_if_traces, what_if_checks, diagnosed), encoding="utf-8")
