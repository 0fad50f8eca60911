"""Plotly charts comparing the runs of a race (one RunRecord per method, same prompt and model).

Every chart takes the same {method: RunRecord} mapping, keeps the methods in
race order and colours each method the same way everywhere.
"""

from __future__ import annotations

from collections import Counter

import plotly.graph_objects as go

from goose.trace import RunRecord

METHOD_COLOURS = {"autoregressive": "#6b7280", "pld": "#a855f7", "recycling": "#06b6d4", "balanced": "#3b82f6",
                  "goose": "#f59e0b"}
SOURCE_COLOURS = {"spine": "#f59e0b", "branch": "#3b82f6"}


def _colours(runs: dict[str, RunRecord]) -> list[str]:
    return [METHOD_COLOURS.get(method, "#9ca3af") for method in runs]


def _bar(runs: dict[str, RunRecord], values: list[float], title: str, axis: str, fmt: str) -> go.Figure:
    figure = go.Figure(go.Bar(x=list(runs), y=values, marker_color=_colours(runs),
                              text=[format(v, fmt) for v in values], textposition="outside", cliponaxis=False))
    figure.update_yaxes(range=[0, max(values, default=0) * 1.2 or 1])  # room for the labels above the bars
    return _style(figure, title, axis)


def _style(figure: go.Figure, title: str, axis: str) -> go.Figure:
    figure.update_layout(title=title, yaxis_title=axis, height=320, margin={"l": 50, "r": 20, "t": 50, "b": 40},
                         template="plotly_white", showlegend=len(figure.data) > 1)
    return figure


def speedup(runs: dict[str, RunRecord], method: str) -> float | None:
    """tokens/s of `method` over autoregressive tokens/s (DESIGN §2's definition); None without an AR run."""
    base = runs.get("autoregressive")
    if base is None or base.totals.tokens_per_s <= 0:
        return None
    return runs[method].totals.tokens_per_s / base.totals.tokens_per_s


def tokens_per_second_chart(runs: dict[str, RunRecord]) -> go.Figure:
    """Wall-clock throughput: what the user feels."""
    return _bar(runs, [run.totals.tokens_per_s for run in runs.values()], "Tokens per second", "tokens/s", ".1f")


def tau_chart(runs: dict[str, RunRecord]) -> go.Figure:
    """τ = new tokens / target forward passes: what speculation saves, independent of the hardware."""
    return _bar(runs, [run.totals.tau for run in runs.values()], "τ (tokens per forward pass)", "τ", ".2f")


def speedup_chart(runs: dict[str, RunRecord]) -> go.Figure:
    """Speed-up over autoregressive decoding, with the break-even line at 1."""
    values = [speedup(runs, method) or 0.0 for method in runs]
    figure = _bar(runs, values, "Speed-up over autoregressive", "× autoregressive tokens/s", ".2f")
    figure.add_hline(y=1.0, line_dash="dash", line_color="#6b7280")
    return figure


def accepted_length_chart(runs: dict[str, RunRecord]) -> go.Figure:
    """Share of steps by number of draft tokens accepted (0 = only the bonus token was gained)."""
    figure = go.Figure()
    for method, run in runs.items():
        if method == "autoregressive" or not run.steps:
            continue
        counts = Counter(step.accepted_length for step in run.steps)
        lengths = sorted(counts)
        figure.add_trace(go.Bar(x=lengths, y=[counts[n] / len(run.steps) for n in lengths], name=method,
                                marker_color=METHOD_COLOURS.get(method, "#9ca3af")))
    figure.update_layout(barmode="group", xaxis_title="draft tokens accepted in a step")
    _style(figure, "Accepted length per step", "share of steps")
    figure.update_layout(showlegend=True)
    return figure


def acceptance_rate(run: RunRecord, source: str) -> float | None:
    """Accepted / drafted tokens of one source over a run; None when the source drafted nothing."""
    drafted = run.totals.drafted.get(source, 0)
    return run.totals.accepted.get(source, 0) / drafted if drafted else None


def acceptance_by_source_chart(runs: dict[str, RunRecord]) -> go.Figure:
    """Acceptance rate per draft source: the gap between them is what makes the spine tree pay."""
    figure = go.Figure()
    methods = [m for m in runs if m != "autoregressive"]
    for source, colour in SOURCE_COLOURS.items():
        rates = [acceptance_rate(runs[m], source) for m in methods]
        figure.add_trace(go.Bar(x=methods, y=[r or 0.0 for r in rates], name=source, marker_color=colour,
                                text=["–" if r is None else f"{r:.1%}" for r in rates], textposition="outside",
                                cliponaxis=False))
    figure.update_layout(barmode="group", yaxis_tickformat=".0%", yaxis_range=[0, 1.15])
    _style(figure, "Acceptance rate by source (accepted / drafted)", "accepted / drafted")
    figure.update_layout(showlegend=True)
    return figure


def race_charts(runs: dict[str, RunRecord]) -> tuple[go.Figure, ...]:
    """All race charts, in the order the Race tab shows them."""
    return (tokens_per_second_chart(runs), tau_chart(runs), speedup_chart(runs), accepted_length_chart(runs),
            acceptance_by_source_chart(runs))
