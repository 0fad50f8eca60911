"""The Why tab: why the best tree is a spine, how well the rate model explains a run, and where each step of a run
lost its tokens.

The first half draws goose.optimal's rate model. Taken from a run, the model is first checked against it
(goose.optimal.calibration: each step's predicted accepted length beside what it took, pooled, per step and per
depth, and where it misses most, in words); then, for two sources' acceptance rates (set on the sliders, or
fitted to the run's steps by goose.optimal.measured_rates) the optimal tree beside the best balanced tree and
the chain, and their expected accepted length against the budget and against the quality gap, with the
run's own accepted length marked. The second half splits each step of a greedy run into what its tree took,
what its sources offered and its shape left out, and what no source offered (goose.diagnose), pooled and
per step; a click on a step's bar opens it. Every number comes from the library; this module lays the tab
out and wires it.

Gradio's gr.Plot has one event, `change`: no click. The click reaches the step slider through plotly's
own `plotly_click` in the browser (STEP_CLICK_JS), which sets the slider as typing a number would; the
slider works by itself too.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

import gradio as gr
import plotly.graph_objects as go

import goose
from app.outputs import KEEP, Controls, Keep, bound, gathered, inputs, outputs
from app.tree_view import model_tree_iframe, tree_iframe
from goose import charts
from goose.config import GooseConfig
from goose.diagnose import Diagnosis
from goose.optimal import (
    CALIBRATION_TOLERANCE,
    GRID_STEP,
    RATIO_RANGE,
    Calibration,
    MeasuredRates,
    OptimalTree,
    budget_curves,
    calibration,
    gap_curves,
    geometric_rates,
    measured_rates,
    optimal_tree,
)
from goose.trace import RunRecord
from goose.tree import BRANCH, SPINE

MAX_BUDGET = 128  # the budget slider's and the budget curve's reach
DEEPEST = MAX_BUDGET - 1  # the deepest spine node a tree of MAX_BUDGET nodes holds
BRANCH_RANKS = GooseConfig().top_k  # a token's successors in the adjacency table
GAPS = (1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 18.0, 24.0)
TREE_HEIGHT = 460
PARTS = ("taken", "lost_to_shape", "lost_to_sources")  # goose.diagnose's split, in charts.SPLIT_PARTS's order
WHOLE_RUN = "whole run"
NO_RUN = "Generate a run in **Explore** (or open a trace in **Replay**), then press *Use this run's measured rates*."
NO_CALIBRATION = "Take a run in (*Use this run's measured rates*) to check the model against what it accepted."
SHOWN_RATES = 5  # the fitted rates named in words: the first depths and ranks
SPLIT_HINT = ("Each step's tokens: taken by its tree, offered by its sources but left out by its shape, or offered by "
              "no source. Click a bar (or move the slider) to open its step.")

# Installed on the step chart each time it is drawn: a click on a bar sets the step slider's number box and
# fires its input event, as typing would (the slider's change event then shows that step).
STEP_CLICK_JS = """() => {
  let tries = 0;
  const hook = () => {
    const chart = document.querySelector('#why-steps .js-plotly-plot');
    if (chart && typeof chart.on === 'function') {
      if (!chart.dataset.stepClick) {
        chart.dataset.stepClick = 'yes';
        chart.on('plotly_click', event => {
          const box = document.querySelector('#why-step input[type=number]');
          if (!box || !event.points.length) return;
          box.value = String(event.points[0].customdata);
          box.dispatchEvent(new Event('input', {bubbles: true}));
        });
      }
    } else if (tries++ < 50) {
      setTimeout(hook, 100);
    }
  };
  hook();
}"""


def diagnose(run: RunRecord) -> Diagnosis:
    """The run's split (goose.diagnose): one name for the tab's tests to stand in for."""
    return goose.diagnose(run)


def pooled_rows(diagnosis: Diagnosis) -> dict[str, tuple[int, int, int]]:
    """The pooled split for charts.pooled_split_chart: the whole run, then each source."""
    whole = tuple(getattr(diagnosis, part) for part in PARTS)
    return {WHOLE_RUN: whole, **{source: tuple(split[part] for part in PARTS)
                                 for source, split in diagnosis.by_source.items()}}


# ---------------------------------------------------------------- the rate model

@dataclass(frozen=True)
class Rates:
    """The sliders: each source's geometric rates (its first rate and the factor per depth or rank, the spine as
    deep as its match goes) and the node budget, as the sliders give them (a number may come as a float or text).
    The defaults are the sliders' first setting: the example of docs/METHOD.md, "Why a spine" (a 6x gap, the
    paper's median)."""

    spine_rate: Any = 0.72
    spine_ratio: Any = 1.0
    spine_length: Any = 64
    branch_rate: Any = 0.12
    branch_ratio: Any = 0.5
    budget: Any = 32

    def model(self) -> tuple[list[float], list[float]]:
        """The model's rates: the spine's by depth, as deep as its match goes; the branches' by rank."""
        return (geometric_rates(float(self.spine_rate), float(self.spine_ratio),
                                min(max(1, int(self.spine_length)), DEEPEST)),
                geometric_rates(float(self.branch_rate), float(self.branch_ratio), BRANCH_RANKS))


def verdict_html(tree: OptimalTree) -> str:
    """The three trees' expected accepted lengths, and the optimal tree's lead over the better source alone."""
    alone = max(tree.balanced.expected_accepted, tree.chain.expected_accepted)
    lead = (f"; <b class='why-lead'>{tree.expected_accepted / alone - 1:+.0%}</b> over the better source alone"
            if alone > 0 else "")
    return (f'<div class="why-verdict" style="font:15px sans-serif;padding:6px">Expected draft tokens accepted per '
            f'step (τ per step is one more, the bonus): optimal <b>{tree.expected_accepted:.2f}</b>, best balanced '
            f'<b>{tree.balanced.expected_accepted:.2f}</b> (k = {tree.balanced_k}), chain '
            f'<b>{tree.chain.expected_accepted:.2f}</b>{lead}.</div>')


@dataclass
class Model:
    """The model's trees and curves at the sliders' setting."""

    verdict: str
    optimal_tree: str
    balanced_tree: str
    chain_tree: str
    budget_chart: go.Figure
    gap_chart: go.Figure | None  # None when a source's first rate is 0: no gap to speak of


def draw(rates: Rates, measured: MeasuredRates | None = None) -> Model:
    """The optimal, best balanced and chain trees at the sliders' rates and budget, and the two curves, with
    the measured run (if any) marked on both."""
    spine, branch = rates.model()
    budget = min(max(1, int(rates.budget or 1)), MAX_BUDGET)
    tree = optimal_tree(budget, spine, branch)
    accepted = measured.mean_accepted if measured is not None else None
    by_budget = charts.expected_length_chart(
        budget_curves(range(1, MAX_BUDGET + 1), spine, branch), "Expected accepted tokens per step vs node budget",
        measured=(measured.mean_budget, accepted) if accepted is not None else None, at=budget)
    by_gap = None
    if spine[0] > 0.0 and branch[0] > 0.0:
        gap = spine[0] / branch[0]
        point = (measured.gap, accepted) if accepted is not None and measured.gap else None
        by_gap = charts.expected_length_chart(
            gap_curves(GAPS, budget, spine, branch),
            f"Expected accepted tokens vs the gap, budget {budget} (dotted: the sliders' {gap:.3g}x)",
            measured=point, at=gap)
        by_gap.update_xaxes(type="log", tickvals=list(GAPS))
    return Model(verdict=verdict_html(tree),
                 optimal_tree=model_tree_iframe(tree, "optimal tree", TREE_HEIGHT),
                 balanced_tree=model_tree_iframe(tree.balanced, f"best balanced tree (k = {tree.balanced_k})",
                                                 TREE_HEIGHT),
                 chain_tree=model_tree_iframe(tree.chain, "spine chain alone", TREE_HEIGHT),
                 budget_chart=by_budget, gap_chart=by_gap)


# ---------------------------------------------------------------- a run

def _fitted(measured: MeasuredRates) -> str:
    """What the fit rests on, in words."""
    def tried(source: str) -> str:
        counts = measured.counts[source]
        nodes = sum(t for _, t in counts.values())
        where = f"down to depth {max(counts)} (the match length)" if source == "spine" else f"at {len(counts)} ranks"
        return f"{nodes} nodes tried {where}"

    parts = [f"spine: {tried('spine')}" if measured.spine
             else "no spine node was tried (the sliders keep it)",
             f"branches: {tried('branch')}" if measured.branch else "no branch node was tried (the sliders keep it)"]
    gap = f" Measured gap {measured.gap:.3g}x." if measured.gap else ""
    accepted = (f" The run accepted {measured.mean_accepted:.2f} draft tokens per step (τ per step "
                f"{measured.mean_accepted + 1:.2f}) at a mean budget of {measured.mean_budget:.1f}: the diamonds."
                if measured.mean_accepted is not None else "")
    return "; ".join(parts) + "." + gap + accepted


def _rates(rates: list[float]) -> str:
    more = ", …" if len(rates) > SHOWN_RATES else ""
    return ", ".join(f"{rate:.2f}" for rate in rates[:SHOWN_RATES]) + more if rates else "none tried"


def _miss(predicted: float, measured: int) -> str:
    return f"expected {predicted:.1f}, took {measured}"


def calibration_html(fit: Calibration) -> str:
    """The rate model fitted to the run against the run, in words: pooled, by source, and where it misses most."""
    predicted, measured = fit.pooled
    error = "" if fit.error is None else f" (<b class='why-calibration-error'>{fit.error:+.0%}</b>)"
    verdict = (f"within {CALIBRATION_TOLERANCE:.0%}, so the model explains this run" if fit.fits else
               f"<b style='color:#b91c1c'>off by more than {CALIBRATION_TOLERANCE:.0%}</b>: the model does not "
               "explain this run, and its trees below are a reading of the rates, not a forecast")
    sources = "; ".join(f"{name} {_miss(*fit.by_source[source])}" for source, name in ((SPINE, "spine"),
                                                                                     (BRANCH, "branches")))
    lines = [f"Fitted to this run's {len(fit.measured)} steps, the model expects <b class='why-predicted'>"
             f"{predicted:.1f}</b> accepted draft tokens where the run took <b class='why-measured'>{measured}</b>"
             f"{error}: {verdict}.",
             f"Its rates, by maximum likelihood: spine by depth {_rates(fit.model.spine)}; branches by rank "
             f"{_rates(fit.model.branch)} (each once the spine child and the ranks before it failed). A node's "
             f"children's chances add up to <b class='why-children-mass'>{fit.children_mass:.2f}</b> at most "
             "(never past 1: the walk takes one child).",
             f"By source: {sources}."]
    if (depth := fit.worst_depth()) is not None:
        steps = ", ".join(f"{i} ({_miss(fit.predicted[i], fit.measured[i])})" for i in fit.worst_steps())
        lines.append(f"It misses most at depth <b class='why-worst-depth'>{depth}</b> "
                     f"({_miss(*fit.by_depth[depth])} over the steps) and at steps {steps}.")
    return ('<div class="why-calibration" style="font:14px sans-serif;padding:4px">'
            + "".join(f"<div>{line}</div>" for line in lines) + "</div>")


def split_line(step: Any) -> str:
    """One step's split in words (a StepDiagnosis of goose.diagnose)."""
    return (f'<div class="why-step-split" style="font:14px sans-serif;padding:4px">Step <b>{step.step}</b> '
            f"(budget {step.budget}): its tree took <b class='why-taken'>{step.accepted}</b>; its sources offered "
            f"{step.offered}, of which a tree of its budget could reach {step.reachable}: lost to the shape "
            f"<b>{step.lost_to_shape}</b>, lost to the sources <b>{step.lost_to_sources}</b>.</div>")


@dataclass
class StepShown:
    """One step of the run: its split in words and its real tree."""

    step_split: str
    step_tree: str


def show_step(run: RunRecord | None, diagnosis: Any, index: Any) -> StepShown:
    """The split and the real tree of step `index` (clamped to the run)."""
    if run is None or not run.steps:
        return StepShown(step_split="", step_tree=tree_iframe(None))
    index = min(max(0, int(index or 0)), len(run.steps) - 1)
    line = split_line(diagnosis.steps[index]) if diagnosis is not None else ""
    return StepShown(step_split=line, step_tree=tree_iframe(run.steps[index]))


@dataclass
class Measured(StepShown):
    """A run taken into the tab: the model checked against it, the sliders set to its fitted rates, and its split."""

    run: RunRecord | None
    measured: MeasuredRates | None  # a gr.State: the run's point on the curves
    diagnosis: Any  # a gr.State: goose.diagnose's Diagnosis, None without one
    status: str
    calibration: str  # the model against the run, in words (or why it cannot be checked)
    calibration_chart: go.Figure | None
    split_status: str
    pooled: go.Figure | None
    steps: go.Figure | None
    step: gr.Slider
    # the rate sliders, by Rates' fields (the budget stays as it is)
    spine_rate: float | Keep = KEEP
    spine_ratio: float | Keep = KEEP
    spine_length: int | Keep = KEEP
    branch_rate: float | Keep = KEEP
    branch_ratio: float | Keep = KEEP


def measure(run: RunRecord | None) -> Measured:
    """Check the rate model fitted to the run against it (goose.optimal.calibration), fit the sliders' geometric
    rates to its steps and split its steps (goose.diagnose)."""
    if run is None or not run.steps:
        return Measured(step_split="", step_tree=tree_iframe(None), run=None, measured=None, diagnosis=None,
                        status=NO_RUN, calibration=NO_CALIBRATION, calibration_chart=None, split_status="",
                        pooled=None, steps=None, step=gr.Slider(0, 1, value=0, interactive=False))
    fit = measured_rates(run.steps)
    spine = ({"spine_rate": fit.spine[0], "spine_ratio": fit.spine[1], "spine_length": fit.spine_depth}
             if fit.spine else {})
    branch = dict(zip(("branch_rate", "branch_ratio"), fit.branch)) if fit.branch else {}
    status = (f"**{run.method}** on {run.model}, {len(run.steps)} steps. The sliders: a geometric fit (a rate and a "
              f"factor per depth or rank) to its trees: {_fitted(fit)}")
    try:
        checked = calibration(run)
        calibrated = {"calibration": calibration_html(checked), "calibration_chart": charts.calibration_chart(checked)}
    except ValueError as error:  # a sampled run, or one that tried no draft node, says why
        calibrated = {"calibration": f"<div class='why-calibration'><b>No check of the model:</b> "
                                     f"{html.escape(str(error))}</div>", "calibration_chart": None}
    try:
        diagnosis = diagnose(run)
    except ValueError as error:  # a run that cannot be diagnosed (no replay data, sampled) says why
        diagnosis, why_not = None, f"**No split:** {error}"
    last = len(run.steps) - 1
    split = {"split_status": why_not, "pooled": None, "steps": None} if diagnosis is None else {
        "split_status": SPLIT_HINT, "pooled": charts.pooled_split_chart(pooled_rows(diagnosis)),
        "steps": charts.step_split_chart(diagnosis.steps)}
    return Measured(**vars(show_step(run, diagnosis, 0)), run=run, measured=fit, diagnosis=diagnosis, status=status,
                    step=gr.Slider(0, max(1, last), value=0, step=1, interactive=last > 0), **calibrated, **split,
                    **spine, **branch)


# ---------------------------------------------------------------- layout

def why_tab(runs: dict[str, gr.State]) -> None:
    """Lay out the Why tab; `runs` names the states it can take a run from (e.g. Explore's and Replay's)."""
    gr.Markdown("Why is the best tree a **spine**? Under the rate model the target takes one token at each node: "
                "the spine child with its rate (by depth), failing that each of the table's successors in rank "
                "order with its own, so a node's children's chances never add up past 1; a node is accepted when "
                "its whole path is. For any rates the tree that accepts the most tokens per step is found exactly "
                "(docs/METHOD.md, \"Why a spine\"). Set the rates, or fit them to a run: the model is then first "
                "checked against what the run accepted.")
    run = gr.State(None)
    measured = gr.State(None)
    diagnosis = gr.State(None)
    start = Rates()  # the sliders' first setting
    with gr.Row():
        with gr.Column(scale=3):
            with gr.Row():
                spine_rate = gr.Slider(0.0, 1.0, value=start.spine_rate, step=GRID_STEP,
                                       label="spine: accepted at depth 1", elem_id="why-spine-rate")
                spine_ratio = gr.Slider(*RATIO_RANGE, value=start.spine_ratio, step=GRID_STEP,
                                        label="spine: × per depth", elem_id="why-spine-ratio")
                spine_length = gr.Slider(1, DEEPEST, value=start.spine_length, step=1,
                                         label="spine: match length (depths)", elem_id="why-spine-length")
            with gr.Row():
                branch_rate = gr.Slider(0.0, 1.0, value=start.branch_rate, step=GRID_STEP,
                                        label="branch: accepted at rank 1", elem_id="why-branch-rate")
                branch_ratio = gr.Slider(*RATIO_RANGE, value=start.branch_ratio, step=GRID_STEP,
                                         label="branch: × per rank", elem_id="why-branch-ratio")
            budget = gr.Slider(1, MAX_BUDGET, value=start.budget, step=1, label="node budget (root included)",
                               elem_id="why-budget")
        with gr.Column(scale=2):
            source = gr.Radio(list(runs), value=next(iter(runs)), label="Run from", elem_id="why-source")
            use_run = gr.Button("Use this run's measured rates", variant="primary", elem_id="why-measure")
            status = gr.Markdown(NO_RUN, elem_id="why-status")
    gr.Markdown("### The model against the run")
    calibration_words = gr.HTML(NO_CALIBRATION, elem_id="why-calibration")
    calibration_plot = gr.Plot(label="the fitted model against the run", elem_id="why-calibration-chart")
    first = draw(start)  # the page opens drawn at the sliders' first setting
    verdict = gr.HTML(first.verdict, elem_id="why-verdict")
    with gr.Row():
        optimal = gr.HTML(first.optimal_tree, elem_id="why-optimal")
        balanced = gr.HTML(first.balanced_tree, elem_id="why-balanced")
        chain = gr.HTML(first.chain_tree, elem_id="why-chain")
    with gr.Row():
        by_budget = gr.Plot(first.budget_chart, label="expected accepted length vs budget", elem_id="why-budget-chart")
        by_gap = gr.Plot(first.gap_chart, label="expected accepted length vs quality gap", elem_id="why-gap-chart")
    gr.Markdown("### The run, step by step: taken, lost to the shape, lost to the sources\nUnder greedy decoding "
                "each step revealed the target's continuation, and its snapshot holds its sources: so each "
                "token a step missed was either offered by a source and left out by the tree's shape (the "
                "tuner's business), or offered by none (nothing any tree could do).")
    split_status = gr.Markdown(elem_id="why-split-status")
    with gr.Row():
        pooled = gr.Plot(label="pooled split", elem_id="why-pooled")
        steps = gr.Plot(label="split per step", elem_id="why-steps")
    step = gr.Slider(0, 1, value=0, step=1, label="step", interactive=False, elem_id="why-step")
    step_split = gr.HTML(elem_id="why-step-split")
    step_tree = gr.HTML(tree_iframe(None), elem_id="why-step-tree")

    rates = {"spine_rate": spine_rate, "spine_ratio": spine_ratio, "spine_length": spine_length,
             "branch_rate": branch_rate, "branch_ratio": branch_ratio, "budget": budget}
    page = {**rates, "measured": measured, "run": run, "diagnosis": diagnosis, "status": status,
            "calibration": calibration_words, "calibration_chart": calibration_plot,
            "verdict": verdict, "optimal_tree": optimal, "balanced_tree": balanced, "chain_tree": chain,
            "budget_chart": by_budget, "gap_chart": by_gap, "split_status": split_status, "pooled": pooled,
            "steps": steps, "step": step, "step_split": step_split, "step_tree": step_tree}
    drawn_from = (Controls(Rates, rates), measured)  # draw's arguments
    quiet = {"show_progress": "hidden", "api_visibility": "private", "concurrency_limit": None}

    def pick(name: str, *states: RunRecord | None) -> Measured:
        return measure(dict(zip(runs, states)).get(name))

    show_model = bound(gathered(draw, *drawn_from), page)
    use_run.click(bound(pick, page), [source, *runs.values()], outputs(Measured, page), **quiet).then(
        show_model, inputs(*drawn_from), outputs(Model, page), **quiet)
    for control in rates.values():  # always_last: while one drawing runs, only the newest pending one follows
        control.change(show_model, inputs(*drawn_from), outputs(Model, page), trigger_mode="always_last", **quiet)
    step.change(bound(show_step, page), [run, diagnosis, step], outputs(StepShown, page), trigger_mode="always_last",
                **quiet)
    steps.change(None, None, None, js=STEP_CLICK_JS, **quiet)
