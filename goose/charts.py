"""Plotly charts, shared by the benchmark's report.html and the app (Race and Lab tabs).

The metric charts take `MethodMetrics` (goose.metrics), keep the methods in the
order given and colour each method and each draft source the same way
everywhere. A race is a suite of one prompt, so the same charts serve both.
The what-if charts draw goose.whatif's counterfactual curves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from goose.metrics import BASELINE, MethodMetrics
from goose.tree import BRANCH, ROOT, SPINE

METHOD_COLOURS = {"autoregressive": "#6b7280", "pld": "#a855f7", "recycling": "#06b6d4", "balanced": "#3b82f6",
                  "goose": "#f59e0b", "hf-pld": "#ec4899"}
OTHER_COLOUR = "#9ca3af"  # methods and sources without a colour of their own
SOURCE_COLOURS = {ROOT: "#4b5563", SPINE: "#f59e0b", BRANCH: "#3b82f6"}
HEIGHT = 340


def method_colour(method: str) -> str:
    """The colour of a method in every chart (grey for a method without one)."""
    return METHOD_COLOURS.get(method, OTHER_COLOUR)


def _style(figure: go.Figure, title: str, axis: str, legend: bool = False) -> go.Figure:
    figure.update_layout(title=title, yaxis_title=axis, height=HEIGHT, margin={"l": 50, "r": 20, "t": 50, "b": 40},
                         template="plotly_white", showlegend=legend)
    return figure


def _bar(metrics: Sequence[MethodMetrics], values: Sequence[float | None], title: str, axis: str,
         fmt: str) -> go.Figure:
    """One bar per method; an unknown value is drawn as an empty bar labelled "–"."""
    figure = go.Figure(go.Bar(x=[m.method for m in metrics], y=[v or 0.0 for v in values],
                              marker_color=[method_colour(m.method) for m in metrics],
                              text=["–" if v is None else format(v, fmt) for v in values], textposition="outside",
                              cliponaxis=False, showlegend=False))
    figure.update_yaxes(range=[0, max((v or 0.0 for v in values), default=0) * 1.2 or 1])  # room for the labels
    return _style(figure, title, axis)


def tokens_per_second_chart(metrics: Sequence[MethodMetrics]) -> go.Figure:
    """Wall-clock throughput (pooled, prefill included): what the user feels."""
    return _bar(metrics, [m.tokens_per_s for m in metrics], "Tokens per second", "tokens/s", ".1f")


def tau_chart(metrics: Sequence[MethodMetrics]) -> go.Figure:
    """τ = new tokens / target forward passes: what speculation saves, independent of the hardware."""
    return _bar(metrics, [m.tau for m in metrics], "τ (tokens per forward pass, prefill counted)", "τ", ".2f")


def speedup_chart(metrics: Sequence[MethodMetrics]) -> go.Figure:
    """Pooled speed-up over autoregressive (bars), the break-even line at 1, and the per-prompt speed-ups
    (dots, hover for the prompt) when a method ran more than one prompt."""
    figure = _bar(metrics, [m.speedup_pooled for m in metrics], "Speed-up over autoregressive (pooled)",
                  "× autoregressive tokens/s", ".2f")
    for m in metrics:
        if m.method != BASELINE and len(m.speedups) > 1:
            figure.add_trace(go.Box(x=[m.method] * len(m.speedups), y=list(m.speedups.values()),
                                    text=list(m.speedups), name=f"{m.method} per prompt", boxpoints="all",
                                    jitter=0.5, pointpos=0, marker={"color": "#111827", "size": 5},
                                    line_color="rgba(0,0,0,0)", fillcolor="rgba(0,0,0,0)", showlegend=False))
            figure.update_yaxes(range=None, autorange=True)
    figure.add_hline(y=1.0, line_dash="dash", line_color=METHOD_COLOURS[BASELINE])
    return figure


def accepted_length_chart(metrics: Sequence[MethodMetrics]) -> go.Figure:
    """Share of steps by number of draft tokens accepted (0 = only the bonus token was gained)."""
    figure = go.Figure()
    for m in metrics:
        if m.method != BASELINE and m.accepted_length_shares:
            shares = m.accepted_length_shares
            figure.add_trace(go.Bar(x=list(shares), y=list(shares.values()), name=m.method,
                                    marker_color=method_colour(m.method)))
    figure.update_layout(barmode="group", xaxis_title="draft tokens accepted in a step (bonus excluded)")
    return _style(figure, "Accepted length per step", "share of steps", legend=True)


def acceptance_chart(metrics: Sequence[MethodMetrics]) -> go.Figure:
    """Acceptance rate (accepted / drafted) per draft source, for the methods that drafted: the gap between
    the sources is what makes the spine tree pay."""
    figure = go.Figure()
    methods = [m for m in metrics if m.method != BASELINE and m.acceptance]
    drafted = {source for m in methods for source in m.acceptance}
    sources = [s for s in SOURCE_COLOURS if s in drafted] + sorted(drafted - set(SOURCE_COLOURS))
    for source in sources:
        rates = [m.acceptance.get(source) for m in methods]
        figure.add_trace(go.Bar(x=[m.method for m in methods], y=[r or 0.0 for r in rates], name=source,
                                marker_color=SOURCE_COLOURS.get(source, OTHER_COLOUR),
                                text=["–" if r is None else f"{r:.1%}" for r in rates], textposition="outside",
                                cliponaxis=False))
    figure.update_layout(barmode="group", yaxis_tickformat=".0%", yaxis_range=[0, 1.15])
    return _style(figure, "Acceptance rate by source (accepted / drafted)", "accepted / drafted", legend=True)


def category_chart(speedups: Mapping[str, Mapping[str, float | None]]) -> go.Figure | None:
    """Pooled speed-up per category and method (goose.metrics.category_speedups); None without categories."""
    if not speedups:
        return None
    figure = go.Figure()
    for method, by_category in speedups.items():
        if method != BASELINE:
            figure.add_trace(go.Bar(x=list(by_category), y=[v or 0.0 for v in by_category.values()], name=method,
                                    marker_color=method_colour(method)))
    figure.add_hline(y=1.0, line_dash="dash", line_color=METHOD_COLOURS[BASELINE])
    figure.update_layout(barmode="group")
    return _style(figure, "Speed-up over autoregressive per category (pooled)", "× autoregressive tokens/s",
                  legend=True)


def bandwidth_chart(metrics: Sequence[MethodMetrics], measured: Mapping[str, float]) -> go.Figure:
    """Bandwidth achieved (parameter bytes x forward passes / s) beside this machine's measured bandwidth."""
    figure = _bar(metrics, [m.bandwidth_gb_s for m in metrics],
                  "Bandwidth achieved: parameter bytes x forward passes / s", "GB/s", ".1f")
    for name, value in measured.items():
        figure.add_hline(y=value, line_dash="dash", annotation_text=f"measured {name}: {value:.1f} GB/s")
    figure.update_yaxes(range=None, autorange=True)
    return figure


def race_charts(metrics: Sequence[MethodMetrics]) -> tuple[go.Figure, ...]:
    """The five charts of a comparison, in the order the Race tab and the report show them."""
    return (tokens_per_second_chart(metrics), tau_chart(metrics), speedup_chart(metrics),
            accepted_length_chart(metrics), acceptance_chart(metrics))


# --- what-if (goose.whatif) -------------------------------------------------------------------------------------

def budget_sweep_chart(by_budget: Mapping[str, Sequence[tuple[int, float, float | None]]],
                       title: str = "") -> go.Figure:
    """Counterfactual τ and estimated speed-up vs base budget, one line per method ((budget, τ, speed-up) points,
    as goose.whatif.sweep returns them; the speed-up side is left out for a method without cost estimates)."""
    figure = make_subplots(rows=1, cols=2, subplot_titles=("τ vs budget", "estimated speed-up vs budget"))
    for method, points in by_budget.items():
        colour = method_colour(method)
        budgets = [b for b, _, _ in points]
        figure.add_trace(go.Scatter(x=budgets, y=[t for _, t, _ in points], name=method, mode="lines+markers",
                                    line={"color": colour}), row=1, col=1)
        if all(s is not None for _, _, s in points):
            figure.add_trace(go.Scatter(x=budgets, y=[s for _, _, s in points], name=method, showlegend=False,
                                        mode="lines+markers", line={"color": colour, "dash": "dot"}), row=1, col=2)
    figure.update_xaxes(title_text="base budget (nodes)")
    return _style(figure, title or "What if: another budget", "", legend=True)


def spine_share_chart(by_share: Sequence[tuple[float, float]], title: str = "") -> go.Figure:
    """Counterfactual τ of goose vs a fixed spine share r (each step keeping its own budget)."""
    figure = go.Figure(go.Scatter(x=[s for s, _ in by_share], y=[t for _, t in by_share], name="goose",
                                  mode="lines+markers", line={"color": method_colour("goose")}))
    figure.update_layout(xaxis_title="spine share r")
    return _style(figure, title or "What if: another spine share", "τ")


def what_if_steps_chart(real: Sequence[int], accepted: Sequence[int], exact: Sequence[bool], real_tau: float,
                        tau: float, method: str = "goose") -> go.Figure:
    """Accepted length per step, real (bars) vs a counterfactual setting (line; hollow markers: lower bounds)."""
    steps = list(range(len(real)))
    figure = go.Figure(go.Bar(x=steps, y=list(real), name=f"real (τ {real_tau:.2f})", marker_color=OTHER_COLOUR))
    figure.add_trace(go.Scatter(x=steps, y=list(accepted), mode="lines+markers", name=f"this setting (τ {tau:.2f})",
                                marker={"symbol": ["circle" if e else "circle-open" for e in exact], "size": 8},
                                line={"color": method_colour(method)}))
    figure.update_layout(xaxis_title="step")
    return _style(figure, "Accepted length per step", "accepted tokens", legend=True)


def what_if_charts(curves: Mapping[str, Any], title: str) -> list[go.Figure]:
    """The bench report's what-if charts from goose.whatif.sweep's curves."""
    return [budget_sweep_chart(curves["budget"], f"{title}: counterfactual τ and estimated speed-up vs budget"),
            spine_share_chart(curves["spine_share"], f"{title}: counterfactual τ vs spine share r (goose)")]
