"""The benchmark's report.html: one self-contained page (plotly.js inline, no CDN) that opens offline.

Charts: tau, tokens/s, speedup over autoregressive (pooled and per prompt),
accepted length per step, acceptance per draft source, speedup per category,
and the bandwidth achieved beside this machine's measured memory bandwidth;
tables: the summary and losslessness per method.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from goose.bench import (
    BASELINE,
    SUMMARY_HEADER,
    BenchRun,
    MethodSummary,
    category_speedups,
    per_prompt_speedups,
    summary_rows,
)

if TYPE_CHECKING:
    from plotly.graph_objects import Figure

CHART_HEIGHT = 380


def _bar(summaries: Sequence[MethodSummary], attribute: str, title: str, y_title: str) -> Figure:
    import plotly.graph_objects as go

    shown = [s for s in summaries if getattr(s, attribute) is not None]
    values = [getattr(s, attribute) for s in shown]
    figure = go.Figure(go.Bar(x=[s.method for s in shown], y=values, text=[f"{v:.2f}" for v in values]))
    figure.update_layout(title=title, yaxis_title=y_title, height=CHART_HEIGHT)
    return figure


def speedup_figure(summaries: Sequence[MethodSummary], runs: Sequence[BenchRun]) -> Figure:
    """Pooled speedup per method (bars) and its per-prompt distribution (boxes), 1.0 = autoregressive."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    figure = make_subplots(rows=1, cols=2, subplot_titles=("pooled (total tokens / total time)", "per prompt"))
    pooled = [s for s in summaries if s.speedup_pooled is not None]
    figure.add_trace(go.Bar(x=[s.method for s in pooled], y=[s.speedup_pooled for s in pooled],
                            text=[f"{s.speedup_pooled:.2f}x" for s in pooled], showlegend=False), row=1, col=1)
    for method, speedups in per_prompt_speedups(runs).items():
        figure.add_trace(go.Box(y=list(speedups.values()), name=method, boxpoints="all",
                                text=list(speedups), showlegend=False), row=1, col=2)
    figure.add_hline(y=1.0, line_dash="dot")
    figure.update_layout(title="Speedup over autoregressive decoding", height=CHART_HEIGHT)
    return figure


def accepted_length_figure(runs: Sequence[BenchRun]) -> Figure:
    """Share of steps that accepted 0, 1, 2, ... draft tokens, per speculative method."""
    import plotly.graph_objects as go

    figure = go.Figure()
    methods = dict.fromkeys(r.method for r in runs if r.method != BASELINE and r.accepted_lengths)
    for method in methods:
        lengths = [n for r in runs if r.method == method for n in r.accepted_lengths]
        figure.add_trace(go.Histogram(x=lengths, name=method, histnorm="probability", xbins={"size": 1}))
    figure.update_layout(title="Accepted draft tokens per step", xaxis_title="accepted tokens (bonus excluded)",
                         yaxis_title="share of steps", barmode="group", height=CHART_HEIGHT)
    return figure


def acceptance_figure(summaries: Sequence[MethodSummary]) -> Figure:
    """Accepted / drafted tokens per draft source and method."""
    import plotly.graph_objects as go

    figure = go.Figure()
    sources = sorted({source for s in summaries for source in s.acceptance})
    for source in sources:
        shown = [s for s in summaries if source in s.acceptance]
        figure.add_trace(go.Bar(x=[s.method for s in shown], y=[s.acceptance[source] for s in shown], name=source,
                                text=[f"{s.acceptance[source]:.3f}" for s in shown]))
    figure.update_layout(title="Acceptance rate per draft source (accepted / drafted)", barmode="group",
                         yaxis_title="acceptance", height=CHART_HEIGHT)
    return figure


def category_figure(runs: Sequence[BenchRun]) -> Figure | None:
    """Pooled speedup per category and method; None when the suite has no categories."""
    import plotly.graph_objects as go

    speedups = category_speedups(runs)
    if not speedups:
        return None
    figure = go.Figure()
    for method, by_category in speedups.items():
        if method != BASELINE:
            figure.add_trace(go.Bar(x=list(by_category), y=list(by_category.values()), name=method))
    figure.add_hline(y=1.0, line_dash="dot")
    figure.update_layout(title="Speedup over autoregressive per category (pooled)", barmode="group",
                         height=CHART_HEIGHT)
    return figure


def bandwidth_figure(summaries: Sequence[MethodSummary], meta: dict[str, Any]) -> Figure:
    """Bandwidth achieved (parameter bytes x forward passes per second) beside the measured memory bandwidth."""
    figure = _bar(summaries, "bandwidth_gb_s", "Bandwidth achieved: parameter bytes x forward passes / s", "GB/s")
    for name, value in meta.get("memory_bandwidth_gb_s", {}).items():
        figure.add_hline(y=value, line_dash="dash", annotation_text=f"measured {name}: {value:.1f} GB/s")
    return figure


def figures(runs: Sequence[BenchRun], summaries: Sequence[MethodSummary], meta: dict[str, Any]) -> list[Figure]:
    """Every chart of the report, in reading order."""
    charts = [_bar(summaries, "tau", "tau: tokens per target forward pass (prefill counted)", "tau"),
              _bar(summaries, "tokens_per_s", "Tokens per second (pooled, prefill included)", "tokens/s"),
              speedup_figure(summaries, runs), accepted_length_figure(runs), acceptance_figure(summaries),
              category_figure(runs), bandwidth_figure(summaries, meta)]
    return [chart for chart in charts if chart is not None]


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain HTML table, every cell escaped."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def summary_table(summaries: Sequence[MethodSummary]) -> str:
    """The per-method summary, the same cells as the terminal table."""
    return _table(SUMMARY_HEADER, summary_rows(summaries))


def lossless_table(runs: Sequence[BenchRun]) -> str:
    """Per method: prompts whose tokens equal autoregressive's, and which ones differ."""
    methods = dict.fromkeys(r.method for r in runs)
    rows = []
    for method in methods:
        checked = [r for r in runs if r.method == method and r.matches_autoregressive is not None]
        differing = [r.prompt_id for r in checked if not r.matches_autoregressive]
        rows.append([method, f"{len(checked) - len(differing)}/{len(checked)}", ", ".join(differing) or "-"])
    return _table(["method", "identical to autoregressive", "prompts that differ"], rows)


def settings_line(meta: dict[str, Any]) -> str:
    """One sentence saying what was measured where, and how loaded the machine was."""
    settings = meta.get("settings", {})
    bandwidth = ", ".join(f"{k} {v:.1f} GB/s" for k, v in meta.get("memory_bandwidth_gb_s", {}).items())
    budget = settings.get("budget")
    temperature = settings.get("temperature")
    decoding = f"temperature {temperature}" if temperature else "greedy"
    return (f"suite {settings.get('suite')}, model {meta.get('model')} "
            f"({meta.get('parameter_bytes', 0) / 1e6:.0f} MB of parameters) on {meta.get('device')}, "
            f"{meta.get('threads')} threads of {meta.get('cpu_count')} CPUs, {decoding}, "
            f"{settings.get('head', 'screened')} LM head, "
            f"max {settings.get('max_new_tokens')} new tokens, budget {'auto' if budget is None else budget}; "
            f"torch {meta.get('torch')}, transformers {meta.get('transformers')}; memory bandwidth {bandwidth}; "
            f"load average at start {meta.get('load_average_start')}, end {meta.get('load_average_end')}; "
            f"started {meta.get('started')}")


STYLE = ("body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}"
         "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
         "td:first-child,th:first-child{text-align:left}")


def render_report(runs: Sequence[BenchRun], summaries: Sequence[MethodSummary], meta: dict[str, Any]) -> str:
    """The whole page; plotly.js is embedded once, inline, with the first chart."""
    charts = [figure.to_html(full_html=False, include_plotlyjs=(i == 0)) for i, figure in
              enumerate(figures(runs, summaries, meta))]
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>Goose benchmark</title>"
            f"<style>{STYLE}</style></head><body><h1>Goose benchmark</h1><p>{html.escape(settings_line(meta))}</p>"
            "<p>tau = new tokens / target forward passes; speedup = tokens/s over autoregressive tokens/s (the "
            "same LM head) on the same prompts in the same session (methods interleaved per prompt); vs hf-gen = "
            "the same over transformers' greedy generate. Wall time runs from the call to the last token, "
            "set-up included.</p>"
            f"<h2>Summary</h2>{summary_table(summaries)}<h2>Lossless check</h2>{lossless_table(runs)}"
            f"<h2>Charts</h2>{''.join(charts)}</body></html>")


def write_report(path: Path, runs: Sequence[BenchRun], summaries: Sequence[MethodSummary],
                 meta: dict[str, Any]) -> None:
    """Write report.html."""
    path.write_text(render_report(runs, summaries, meta), encoding="utf-8")
