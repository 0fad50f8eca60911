"""Plotly charts, shared by the benchmark's report.html and the app (Race and Lab tabs).

The metric charts take `MethodMetrics` (goose.metrics), keep the methods in the
order given and colour each method and each draft source the same way
everywhere. A race is a suite of one prompt, so the same charts serve both.
The what-if charts draw goose.whatif's counterfactual curves, the expected-length and calibration charts
goose.optimal's, the split charts goose.diagnose's (taken / lost to the shape / lost to the sources).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from goose.metrics import BASELINE, MethodMetrics, ratio
from goose.optimal import BUDGET_AXIS, GAP_AXIS, Calibration, Curves, margin
from goose.tree import BRANCH, ROOT, SPINE, SUFFIX

METHOD_COLOURS = {"autoregressive": "#6b7280", "pld": "#a855f7", "recycling": "#06b6d4", "balanced": "#3b82f6",
                  "goose": "#f59e0b", "hf-pld": "#ec4899", "suffix": "#e11d48", "suffix-path": "#fb7185"}
OTHER_COLOUR = "#9ca3af"  # methods and sources without a colour of their own
SOURCE_COLOURS = {ROOT: "#4b5563", SPINE: "#f59e0b", BRANCH: "#3b82f6", SUFFIX: "#e11d48"}
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

MEASURED_MARKER = {"symbol": "diamond", "size": 11, "line": {"width": 2, "color": "#111827"}}
BEST_MARKER = {"symbol": "star", "size": 16, "line": {"width": 1, "color": "#111827"}}

Points = Sequence[tuple[int, float, float | None]]  # (budget, τ, speed-up or None), as goose.whatif.sweep gives


def budget_sweep_chart(by_budget: Mapping[str, Points], title: str = "", measured: Mapping[str, Points] | None = None,
                       best: Mapping[str, int] | None = None) -> go.Figure:
    """Counterfactual τ and estimated speed-up vs base budget, one line per method ((budget, τ, speed-up) points,
    as goose.whatif.sweep returns them; the speed-up side is left out for a method without cost estimates).
    `measured`: real runs at some of those settings, drawn as diamonds beside the estimate's line;
    `best`: per method the budget of the highest estimated speed-up, starred."""
    figure = make_subplots(rows=1, cols=2, subplot_titles=("τ vs budget", "speed-up vs budget"))
    for method, points in by_budget.items():
        colour = method_colour(method)
        budgets = [b for b, _, _ in points]
        figure.add_trace(go.Scatter(x=budgets, y=[t for _, t, _ in points], name=f"{method} estimated",
                                    legendgroup=method, mode="lines+markers", line={"color": colour}), row=1, col=1)
        speedups = {b: s for b, _, s in points}
        if all(s is not None for s in speedups.values()):
            figure.add_trace(go.Scatter(x=budgets, y=list(speedups.values()), name=method, showlegend=False,
                                        legendgroup=method, mode="lines+markers",
                                        line={"color": colour, "dash": "dot"}), row=1, col=2)
            chosen = (best or {}).get(method)
            if chosen in speedups:
                figure.add_trace(go.Scatter(x=[chosen], y=[speedups[chosen]], mode="markers",
                                            name=f"{method} best budget {chosen}", legendgroup=method,
                                            marker={**BEST_MARKER, "color": colour}), row=1, col=2)
    for method, points in (measured or {}).items():
        marker = {**MEASURED_MARKER, "color": method_colour(method)}
        figure.add_trace(go.Scatter(x=[b for b, _, _ in points], y=[t for _, t, _ in points], mode="markers",
                                    name=f"{method} measured", legendgroup=method, marker=marker), row=1, col=1)
        real = [(b, s) for b, _, s in points if s is not None]
        figure.add_trace(go.Scatter(x=[b for b, _ in real], y=[s for _, s in real], mode="markers", showlegend=False,
                                    name=f"{method} measured", legendgroup=method, marker=marker), row=1, col=2)
    figure.update_xaxes(title_text="base budget (nodes)")
    return _style(figure, title or "What if: another budget (lines: estimated, diamonds: measured)", "", legend=True)


def cost_curve_chart(curves: Mapping[str, Mapping[int, float]], axis: str = "ms per verification pass",
                     scale: float = 1e3, best: int | None = None, log_y: bool = True) -> go.Figure:
    """Seconds of one verification pass vs tree size, one line per device (tree nodes -> seconds, times `scale`),
    the first one bold: the device the run was recorded on. `best` draws a line at the budget of the highest
    estimated speed-up on that device. Devices differ by orders of magnitude, hence a log scale by default."""
    figure = go.Figure()
    for i, (name, costs) in enumerate(curves.items()):
        sizes = sorted(costs)
        line = {"width": 3, "color": "#111827"} if i == 0 else {"width": 1.5, "dash": "dash"}
        figure.add_trace(go.Scatter(x=sizes, y=[costs[n] * scale for n in sizes], name=name, mode="lines+markers",
                                    line=line))
    values = [v * scale for costs in curves.values() for v in costs.values()]
    if best is not None and values:
        figure.add_trace(go.Scatter(x=[best, best], y=[min(values), max(values)], mode="lines+text",
                                    name=f"best estimated budget: {best}", text=["", f"best: {best}"],
                                    textposition="top left", line={"dash": "dot", "color": "#111827"}))
    largest = max((n for costs in curves.values() for n in costs), default=1)
    ticks = [2 ** k for k in range(largest.bit_length() + 1) if 2 ** k <= 2 * largest]
    figure = _style(figure, "The device: cost of one verification pass", axis, legend=True)
    figure.update_layout(xaxis_title="tree nodes verified in one pass", xaxis_type="log", xaxis_tickvals=ticks,
                         legend={"orientation": "h", "y": -0.25, "font": {"size": 11}}, height=HEIGHT + 80,
                         margin={"l": 65, "r": 20, "t": 50, "b": 40},
                         yaxis_type="log" if log_y else "linear")
    if log_y and values:  # 1-2-5 ticks written out: plotly's minor log labels read "2" for 20
        steps = [m * 10 ** e for e in range(-3, 7) for m in (1, 2, 5)]
        figure.update_yaxes(tickvals=[t for t in steps if min(values) / 2 <= t <= max(values) * 2])
    return figure


def acceptance_depth_chart(by_source: Mapping[str, Mapping[int, tuple[int, int]]]) -> go.Figure:
    """Acceptance rate (accepted / drafted) per tree depth, one line per draft source
    (goose.metrics.acceptance_by_source_and_depth); hover for the counts."""
    figure = go.Figure()
    sources = [s for s in SOURCE_COLOURS if s in by_source] + sorted(set(by_source) - set(SOURCE_COLOURS))
    for source in sources:
        depths = by_source[source]
        figure.add_trace(go.Scatter(x=list(depths), y=[a / d for a, d in depths.values()], name=source,
                                    mode="lines+markers", line={"color": SOURCE_COLOURS.get(source, OTHER_COLOUR)},
                                    text=[f"{a}/{d} accepted" for a, d in depths.values()],
                                    hovertemplate="depth %{x}: %{y:.0%} (%{text})"))
    figure.update_layout(xaxis_title="depth in the tree (1 = a child of the root)", yaxis_tickformat=".0%",
                         yaxis_range=[0, 1.05], xaxis_dtick=1)
    return _style(figure, "Acceptance by source and depth (accepted / drafted)", "accepted / drafted", legend=True)


def spine_share_chart(by_share: Sequence[tuple[float, float]], title: str = "") -> go.Figure:
    """Counterfactual τ of goose vs a fixed spine share r (each step keeping its own budget)."""
    figure = go.Figure(go.Scatter(x=[s for s, _ in by_share], y=[t for _, t in by_share], name="goose",
                                  mode="lines+markers", line={"color": method_colour("goose")}))
    figure.update_layout(xaxis_title="spine share r")
    return _style(figure, title or "What if: another spine share", "τ")


def what_if_steps_chart(real: Sequence[int], accepted: Sequence[int], exact: Sequence[bool] | None, real_tau: float,
                        tau: float, method: str = "goose") -> go.Figure:
    """Accepted length per step, real (bars) vs a counterfactual setting (line, over its own steps; hollow
    markers: lower bounds, when `exact` says which)."""
    exact = [True] * len(accepted) if exact is None else exact
    figure = go.Figure(go.Bar(x=list(range(len(real))), y=list(real), name=f"real (τ {real_tau:.2f})",
                              marker_color=OTHER_COLOUR))
    figure.add_trace(go.Scatter(x=list(range(len(accepted))), y=list(accepted), mode="lines+markers",
                                name=f"this setting (τ {tau:.2f})",
                                marker={"symbol": ["circle" if e else "circle-open" for e in exact], "size": 8},
                                line={"color": method_colour(method)}))
    figure.update_layout(xaxis_title="step")
    return _style(figure, "Accepted length per step", "accepted tokens", legend=True)


def what_if_charts(curves: Mapping[str, Any], title: str, best: Mapping[str, int] | None = None) -> list[go.Figure]:
    """The bench report's what-if charts from goose.whatif.sweep's curves; `best`: per method the best budget
    (goose.whatif.best_budget), starred."""
    return [budget_sweep_chart(curves["budget"], f"{title}: counterfactual τ and estimated speed-up vs budget",
                               best=best),
            spine_share_chart(curves["spine_share"], f"{title}: counterfactual τ vs spine share r (goose)")]


MODEL_TREES = {"optimal": ("optimal tree", "goose"), "balanced": ("best balanced tree", "balanced"),
               "chain": ("spine chain alone", "pld")}  # goose.optimal's trees: label, and whose colour
AXIS_TITLES = {BUDGET_AXIS: "node budget (root included)",
               GAP_AXIS: "quality gap (spine rate / branch rate at depth 1)"}


def expected_length_chart(curves: Curves, title: str = "", measured: tuple[float, float] | None = None,
                          at: float | None = None) -> go.Figure:
    """Expected accepted tokens per step of the optimal tree, the best balanced tree and the chain under the
    rate model (goose.optimal's budget_curves or gap_curves). Along the gap, a dotted line on the right axis
    says how far the optimal tree stands above the better source alone (goose.optimal.margin).
    `measured`: a run's (x, mean draft tokens accepted per step), a diamond on the same footing as the curves
    (the bonus not counted; its τ per step, one more, in the legend); `at`: a vertical line at the x the
    other charts are drawn for."""
    figure = make_subplots(specs=[[{"secondary_y": curves.axis == GAP_AXIS}]])
    for name, (label, method) in MODEL_TREES.items():
        figure.add_trace(go.Scatter(x=list(curves.x), y=list(getattr(curves, name)), name=label, mode="lines+markers",
                                    line={"color": method_colour(method)},
                                    hovertemplate=f"{curves.axis} %{{x}}: %{{y:.2f}} tokens"))
    if curves.axis == GAP_AXIS:
        figure.add_trace(go.Scatter(x=list(curves.x), y=margin(curves), name="optimal over the better source alone",
                                    mode="lines", line={"color": "#111827", "dash": "dot"},
                                    hovertemplate="gap %{x}: %{y:+.0%}"), secondary_y=True)
        figure.update_yaxes(title_text="optimal over the better source alone", tickformat="+.0%", rangemode="tozero",
                            showgrid=False, secondary_y=True)
    if measured is not None:
        x, accepted = measured
        figure.add_trace(go.Scatter(x=[x], y=[accepted], mode="markers", marker={**MEASURED_MARKER, "color": "#10b981"},
                                    name=f"this run: {accepted:.2f} accepted per step (τ per step {accepted + 1:.2f})",
                                    hovertemplate="this run: %{y:.2f} accepted per step at %{x:.3g}"))
    if at is not None:
        figure.add_vline(x=at, line_dash="dot", line_color=OTHER_COLOUR)
    figure.update_layout(xaxis_title=AXIS_TITLES[curves.axis], xaxis_ticksuffix="x" if curves.axis == GAP_AXIS else "",
                         legend={"orientation": "h", "y": -0.3, "font": {"size": 11}})
    figure = _style(figure, title or f"Expected accepted tokens per step vs {curves.axis}", "expected accepted tokens",
                    legend=True)
    figure.update_layout(height=HEIGHT + 60)
    return figure


PREDICTED_COLOUR, TAKEN_COLOUR = "#111827", "#10b981"  # the rate model's prediction; what a run took


def calibration_chart(calibration: Calibration) -> go.Figure:
    """The rate model fitted to a run beside the run (goose.optimal.calibration): per step, the tokens it took (bars)
    and the expected accepted length of its own tree under the model (dots); per depth, the tokens taken there and
    the model's expectation, summed over the steps."""
    figure = make_subplots(rows=1, cols=2, column_widths=[0.68, 0.32], horizontal_spacing=0.08,
                           subplot_titles=("per step", "per depth, over the steps"))
    steps = list(range(len(calibration.measured)))
    depths = list(calibration.by_depth)
    for col, x, taken, predicted, what in (
            (1, steps, calibration.measured, calibration.predicted, "step"),
            (2, depths, [m for _, m in calibration.by_depth.values()], [p for p, _ in calibration.by_depth.values()],
             "depth")):
        figure.add_trace(go.Bar(x=x, y=taken, name="taken", marker_color=TAKEN_COLOUR, showlegend=col == 1,
                                hovertemplate=f"{what} %{{x}}: took %{{y}}<extra></extra>"), row=1, col=col)
        figure.add_trace(go.Scatter(x=x, y=predicted, name="the model's expectation", mode="markers",
                                    marker={"color": PREDICTED_COLOUR, "size": 7, "symbol": "line-ew-open",
                                            "line": {"width": 3, "color": PREDICTED_COLOUR}}, showlegend=col == 1,
                                    hovertemplate=f"{what} %{{x}}: expected %{{y:.2f}}<extra></extra>"),
                         row=1, col=col)
        figure.update_xaxes(title_text=what, row=1, col=col)
    figure.update_layout(bargap=0.1, legend={"orientation": "h", "y": -0.3})
    return _style(figure, "The fitted model against the run: tokens accepted", "tokens", legend=True)


SPLIT_PARTS = {"taken": ("taken", "#10b981"), "lost_to_shape": ("lost to the shape", "#f97316"),
               "lost_to_sources": ("lost to the sources", "#9ca3af")}  # goose.diagnose's three, label and colour


class StepSplit(Protocol):
    """One step's split as goose.diagnose gives it."""

    step: int
    accepted: int
    lost_to_shape: int
    lost_to_sources: int


def step_split_chart(steps: Sequence[StepSplit], selected: int | None = None) -> go.Figure:
    """Per step, stacked: the tokens its tree took, those its sources offered and its shape left out, those no
    source offered (goose.diagnose). Each bar carries its step in customdata, for a click to pick it up;
    `selected` outlines one step."""
    x = [s.step for s in steps]
    values = {"taken": [s.accepted for s in steps], "lost_to_shape": [s.lost_to_shape for s in steps],
              "lost_to_sources": [s.lost_to_sources for s in steps]}
    outline = [3 if s.step == selected else 0 for s in steps]
    figure = go.Figure()
    for part, (label, colour) in SPLIT_PARTS.items():
        figure.add_trace(go.Bar(x=x, y=values[part], name=label, customdata=x,
                                marker={"color": colour, "line": {"width": outline, "color": "#111827"}},
                                hovertemplate=f"step %{{x}}: %{{y}} {label}<extra></extra>"))
    figure.update_layout(barmode="stack", xaxis_title="step (click a bar to open it)", bargap=0.1)
    return _style(figure, "Each step: taken, lost to the shape, lost to the sources", "tokens", legend=True)


def pooled_split_chart(rows: Mapping[str, tuple[int, int, int]]) -> go.Figure:
    """The split pooled over a run, one stacked bar per row (name -> (taken, lost to the shape, lost to the
    sources): the whole run, then each source), each part labelled with its share of the row."""
    names = list(rows)
    figure = go.Figure()
    for k, (label, colour) in enumerate(SPLIT_PARTS.values()):
        tokens = [rows[name][k] for name in names]
        shares = [ratio(rows[name][k], sum(rows[name])) for name in names]
        figure.add_trace(go.Bar(y=names, x=tokens, name=label, orientation="h", marker_color=colour,
                                text=["" if s is None else f"{s:.0%}" for s in shares], textposition="inside",
                                hovertemplate=f"%{{y}}: %{{x}} tokens {label}<extra></extra>"))
    figure.update_layout(barmode="stack", xaxis_title="tokens", yaxis_autorange="reversed",
                         legend={"orientation": "h", "y": -0.35, "traceorder": "normal"})
    figure = _style(figure, "Pooled over the run", "", legend=True)
    figure.update_layout(height=max(HEIGHT - 60, 160 + 45 * len(names)))
    return figure
