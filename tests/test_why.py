"""The Why tab without a browser: the rate model's trees and curves at the sliders' setting, a run's fitted rates
filling the sliders, and the per-step split (goose.diagnose; a stand-in where the real one is not merged yet)."""

from __future__ import annotations

import html
import re
from types import SimpleNamespace

import pytest
from tiny import tiny_gemma3

import goose
from app import why
from app.callbacks import EXAMPLE_TRACES
from app.outputs import KEEP
from app.tree_view import model_tree_iframe
from goose import charts
from goose.optimal import GAP_AXIS, calibration, measured_rates, optimal_tree
from goose.trace import RunRecord

PROMPT = "one two three four, one two three four, one two three four, one two"


@pytest.fixture(scope="module")
def run() -> RunRecord:
    return goose.generate(tiny_gemma3(0), PROMPT, "goose", 32, budget=16, record_sources=True)


def fake_diagnosis(run: RunRecord) -> SimpleNamespace:
    """A stand-in for goose.diagnose's Diagnosis with made-up but consistent numbers: step i took its accepted
    tokens, lost i % 3 to the shape and 1 to the sources."""
    steps = [SimpleNamespace(step=i, budget=s.budget, accepted=s.accepted_length,
                             offered=s.accepted_length + i % 3 + 1, reachable=s.accepted_length + i % 3,
                             lost_to_shape=i % 3, lost_to_sources=1) for i, s in enumerate(run.steps)]
    taken, shape, sources = (sum(getattr(s, part) for s in steps) for part in ("accepted", "lost_to_shape",
                                                                              "lost_to_sources"))
    return SimpleNamespace(steps=steps, taken=taken, lost_to_shape=shape, lost_to_sources=sources,
                           by_source={"spine": {"taken": taken - 1, "lost_to_shape": shape, "lost_to_sources": 0},
                                      "branch": {"taken": 1, "lost_to_shape": 0, "lost_to_sources": sources}})


def expected_shown(frame: str) -> float:
    """The expected accepted length a model tree's iframe states."""
    return float(re.search(r'why-expected">([\d.]+)<', html.unescape(frame)).group(1))


def test_the_tab_opens_drawn_at_the_paper_median_gap():
    model = why.draw(why.Rates())
    spine, branch = why.Rates().model()
    tree = optimal_tree(32, spine, branch)
    assert expected_shown(model.optimal_tree) == round(tree.expected_accepted, 2)
    assert expected_shown(model.balanced_tree) == round(tree.balanced.expected_accepted, 2)
    assert expected_shown(model.chain_tree) == round(tree.chain.expected_accepted, 2)
    assert f"optimal <b>{tree.expected_accepted:.2f}</b>" in model.verdict and "why-lead" in model.verdict
    assert list(model.budget_chart.data[0].x) == list(range(1, why.MAX_BUDGET + 1))
    assert [shape.x0 for shape in model.budget_chart.layout.shapes] == [32]  # the sliders' budget
    assert list(model.gap_chart.data[0].x) == list(why.GAPS)
    assert [shape.x0 for shape in model.gap_chart.layout.shapes] == [pytest.approx(6.0)]  # the sliders' gap
    assert len(model.gap_chart.data) == 4  # the three trees and the optimal one's lead


def test_the_sliders_set_the_trees_and_a_source_at_zero_has_no_gap():
    deep = why.draw(why.Rates(spine_rate=0.9, branch_rate=0.05, budget=16))
    chain_only = why.draw(why.Rates(spine_rate=0.9, branch_rate=0.0, budget=16))
    assert chain_only.gap_chart is None
    assert expected_shown(chain_only.optimal_tree) == expected_shown(chain_only.chain_tree) > 0
    assert expected_shown(chain_only.balanced_tree) == 0.0
    assert expected_shown(deep.optimal_tree) >= expected_shown(deep.chain_tree)


def test_the_model_trees_are_drawn_offline_in_every_trees_style():
    tree = optimal_tree(16, *why.Rates().model())
    frame = model_tree_iframe(tree, "optimal tree")
    page = html.unescape(frame)
    assert frame.startswith('<iframe class="goose-tree" title="optimal tree"')
    assert not re.search(r"<(script|link)[^>]*(src|href)\s*=\s*[\"']https?://", page, re.IGNORECASE)
    assert page.count('"shape": "box"') == len(tree)  # one box per node, as every tree's
    assert f'"label": "{tree.reach[1]:.0%}"' in page  # labelled with its chance to be reached


def test_without_a_run_the_tab_says_what_to_do():
    shown = why.measure(None)
    assert shown.status == why.NO_RUN and shown.run is None and shown.measured is None
    assert shown.calibration == why.NO_CALIBRATION and shown.calibration_chart is None
    assert shown.spine_rate is KEEP and shown.branch_ratio is KEEP  # the sliders stay


@pytest.fixture(scope="module")
def recorded() -> RunRecord:
    """A run of the embedded model shipped as a trace, whose spine and branches were both accepted."""
    return RunRecord.load(EXAMPLE_TRACES / "code-completion.json")


def test_a_runs_measured_rates_fill_the_sliders_and_mark_the_curves(recorded):
    run = recorded
    fit = measured_rates(run.steps)
    shown = why.measure(run)
    assert fit.spine[0] > fit.branch[0] > 0, "the recorded run accepted both sources, the spine more often"
    assert (shown.spine_rate, shown.spine_ratio) == fit.spine
    assert (shown.branch_rate, shown.branch_ratio) == fit.branch
    assert shown.spine_length == fit.spine_depth == max(fit.counts["spine"])  # the fit says nothing deeper
    assert shown.measured == fit and shown.run is run
    assert f"{len(run.steps)} steps" in shown.status and f"τ per step {fit.mean_accepted + 1:.2f}" in shown.status
    assert shown.split_status == why.SPLIT_HINT and shown.diagnosis.taken == sum(run.accepted_lengths)
    assert [bar.y for bar in shown.steps.data][0] == tuple(run.accepted_lengths)
    rates = why.Rates(spine_rate=shown.spine_rate, spine_ratio=shown.spine_ratio, spine_length=shown.spine_length,
                      branch_rate=shown.branch_rate, branch_ratio=shown.branch_ratio, budget=16)
    model = why.draw(rates, shown.measured)
    budget_mark, gap_mark = model.budget_chart.data[-1], model.gap_chart.data[-1]
    assert (list(budget_mark.x), list(budget_mark.y)) == ([fit.mean_budget], [fit.mean_accepted])
    assert (list(gap_mark.x), list(gap_mark.y)) == ([fit.gap], [fit.mean_accepted])
    assert "this run" in budget_mark.name


def test_the_split_shows_pooled_and_per_step_and_a_step_opens(run, monkeypatch):
    diagnosis = fake_diagnosis(run)
    monkeypatch.setattr(why, "diagnose", lambda run: diagnosis)
    shown = why.measure(run)
    assert shown.diagnosis is diagnosis
    rows = {bar.name: list(bar.x) for bar in shown.pooled.data}
    assert list(shown.pooled.data[0].y) == [why.WHOLE_RUN, "spine", "branch"]
    assert rows["taken"] == [diagnosis.taken, diagnosis.taken - 1, 1]
    assert rows["lost to the sources"] == [diagnosis.lost_to_sources, 0, diagnosis.lost_to_sources]
    bars = {bar.name: list(bar.y) for bar in shown.steps.data}
    assert bars["lost to the shape"] == [i % 3 for i in range(len(run.steps))]
    assert list(shown.steps.data[0].customdata) == list(range(len(run.steps)))  # what a click reads
    last = len(run.steps) - 1
    step = why.show_step(run, diagnosis, last)
    assert f"Step <b>{last}</b>" in step.step_split and f"lost to the shape <b>{last % 3}</b>" in step.step_split
    assert f'title="speculation tree of step {last}"' in step.step_tree
    assert why.show_step(run, diagnosis, 10_000).step_tree == step.step_tree  # clamped


def test_a_run_that_cannot_be_diagnosed_says_why(run, monkeypatch):
    def refuse(run):
        raise ValueError("this run sampled")

    monkeypatch.setattr(why, "diagnose", refuse)
    shown = why.measure(run)
    assert "this run sampled" in shown.split_status and shown.pooled is None
    assert shown.spine_rate is not KEEP, "the rates are measured all the same"


def test_a_suffix_run_says_why_it_has_no_split():
    suffix = goose.generate(tiny_gemma3(0), PROMPT, "suffix", 16, record_sources=True)
    measured = why.measure(suffix)
    assert measured.diagnosis is None and measured.split_status.startswith("**No split:** diagnose splits")
    assert "\n" not in measured.split_status


def test_the_split_charts_stack_the_three_parts():
    steps = [SimpleNamespace(step=i, accepted=i, lost_to_shape=1, lost_to_sources=2) for i in range(4)]
    figure = charts.step_split_chart(steps, selected=2)
    assert figure.layout.barmode == "stack"
    assert [bar.name for bar in figure.data] == ["taken", "lost to the shape", "lost to the sources"]
    assert [list(bar.y) for bar in figure.data] == [[0, 1, 2, 3], [1] * 4, [2] * 4]
    assert list(figure.data[0].marker.line.width) == [0, 0, 3, 0]  # the selected step outlined
    pooled = charts.pooled_split_chart({"whole run": (2, 1, 1), "spine": (0, 0, 0)})
    assert [list(bar.text) for bar in pooled.data] == [["50%", ""], ["25%", ""], ["25%", ""]]


def test_the_gap_chart_is_on_the_gap_axis():
    assert why.draw(why.Rates()).gap_chart.layout.xaxis.title.text == charts.AXIS_TITLES[GAP_AXIS]


def test_the_real_diagnosis_of_a_greedy_run_shows_per_step(run):
    shown = why.measure(run)
    assert shown.diagnosis is not None and shown.steps is not None
    taken = list(shown.steps.data[0].y)
    assert taken == [step.accepted_length for step in run.steps]
    assert "Step <b>0</b>" in shown.step_split


def test_a_run_is_checked_against_the_model_before_its_trees_are_drawn(recorded):
    fit = calibration(recorded)
    shown = why.measure(recorded)
    words = shown.calibration
    predicted, measured = fit.pooled
    assert f"expects <b class='why-predicted'>{predicted:.1f}</b>" in words
    assert f"took <b class='why-measured'>{measured}</b>" in words and f"{fit.error:+.0%}" in words
    assert f"<b class='why-children-mass'>{fit.children_mass:.2f}</b>" in words and fit.children_mass <= 1.0
    assert ("the model explains this run" in words) == fit.fits
    depth = fit.worst_depth()
    assert f"misses most at depth <b class='why-worst-depth'>{depth}</b>" in words
    assert f"at steps {fit.worst_steps()[0]} (" in words
    chart = shown.calibration_chart
    assert [list(trace.y) for trace in chart.data[:2]] == [fit.measured, fit.predicted]  # per step
    assert [list(trace.y) for trace in chart.data[2:]] == [[m for _, m in fit.by_depth.values()],
                                                           [p for p, _ in fit.by_depth.values()]]  # per depth
    assert list(chart.data[2].x) == list(fit.by_depth)


def test_a_run_the_model_cannot_be_checked_against_says_why(run):
    sampled = RunRecord.from_json(run.to_json())
    sampled.sampling = {"temperature": 0.8}
    shown = why.measure(sampled)
    assert "No check of the model" in shown.calibration and "greedy run" in shown.calibration
    assert shown.calibration_chart is None and shown.spine_rate is not KEEP, "the sliders are fitted all the same"
