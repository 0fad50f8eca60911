"""The Lab tab: change a step's tree shape and see at once what it would have accepted (goose.whatif),
what the whole run would have done, and check that estimate against a real run of the model.

Works on any greedy run recorded with its sources (a fresh Explore run, or a
Replay trace): no model is needed for the estimates, the run is replayed by the
same decoding loop over its recording (goose.whatif), every tree rebuilt from
exactly the sources its step had and scored against the recorded continuation. The device
the run was recorded on shows as its cost curve (seconds per verification pass
vs tree size) beside the shipped curves of other devices (assets/costs). "Check
with a real run" runs the model at the chosen setting on the run's prompt and
draws the measurement beside the estimate. The callbacks are plain functions
from inputs to outputs; `lab_tab` lays the tab out and wires them.
"""

from __future__ import annotations

import html
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import gradio as gr
import plotly.graph_objects as go

from app.callbacks import DEFAULT_LIMITS, NO_PROGRESS, PAGE_SETTLE_S, STOPS, get_model
from app.limits import STOPPED, Limits, RunGuard
from app.models import ModelNotAllowedError, ModelRegistry
from app.outputs import KEEP, Controls, Keep, bound, gathered, inputs, outputs
from app.tree_view import tree_iframe, visible_text
from goose import charts, metrics
from goose.assets import ASSETS
from goose.budget import interpolate_cost
from goose.check import CheckCancelled, run_what_if
from goose.config import GooseConfig
from goose.drafters import METHODS, Balanced, SpineTree, available_methods
from goose.model import GooseModel
from goose.trace import RunRecord, StepRecord
from goose.validate import AUTO
from goose.whatif import (
    NoReplayDataError,
    RunWhatIf,
    WhatIf,
    best_budget,
    own_budget,
    rebuilt_record,
    recorded_texts,
    replay_refusal,
    sweep,
    what_if,
)

SWEEP_BUDGETS = (4, 8, 12, 16, 24, 32, 48, 64)
SWEEP_METHODS = (SpineTree.name, Balanced.name)
# A check alternates the baseline and the real run this many times and divides their mean times: a single
# 64-token run (about a second) read speed-ups from 3.7x to 4.8x over seven checks in one quiet process (goose.check).
CHECK_ROUNDS = 3
COSTS = ASSETS / "costs"  # cost curves of other devices, shipped as JSON (label, device, model, source, points)
THIS_DEVICE = "this run's device"
Measurements = dict[str, dict[int, tuple[float, float | None]]]  # method -> base budget -> measured (τ, speed-up)
TREE_HEIGHT = 520
ORDERS = {"best first": "best", "breadth-first (the paper)": "breadth"}  # label -> GooseConfig.branch_order
ORDER_LABELS = {value: label for label, value in ORDERS.items()}
NO_RUN = "Open a run here: generate one in **Explore**, or open a trace in **Replay**, then press *Open in Lab*."


def lab_methods() -> list[str]:
    """The registered methods that draft a tree (the baseline has none to rebuild) and can run here."""
    return [name for name in available_methods() if METHODS[name].speculative]


def _fail(message: str) -> str:
    return f'<div class="lab-message" style="padding:8px;color:#b91c1c">{html.escape(message)}</div>'


@dataclass(frozen=True)
class Shape:
    """The tree shape the Lab's controls set (read from them by name: app.outputs.Controls), as the controls give it
    (a slider's number may come as a float or text); the defaults are the controls' first setting."""

    method: str = SpineTree.name
    budget: Any = 0  # the base budget; 0 keeps each step's own node budget
    fixed_share: bool = False  # a fixed spine share `share`, else the EMA tiers
    share: Any = 0.5
    rho: Any = 0.5
    depth: Any = 6
    order: str = ORDER_LABELS["best"]  # a label of ORDERS (or the GooseConfig value itself)
    branching: Any = 3
    bigram: bool = True

    def settings(self) -> dict[str, Any]:
        """The what-if settings the shape stands for (goose.whatif)."""
        settings: dict[str, Any] = {
            "method": self.method, "spine_branch_share": float(self.rho), "max_branch_depth": int(self.depth),
            "branch_order": ORDERS.get(self.order, self.order), "branching": int(self.branching),
            "use_bigram": bool(self.bigram), "spine_share": float(self.share) if self.fixed_share else None}
        if int(self.budget or 0) > 0:
            settings["budget"] = int(self.budget)
        return settings


def own_shape(run: RunRecord) -> Shape:
    """The shape of the run's own settings, which rebuilds its real trees: its method (goose where the Lab offers
    no tree to rebuild for it), each step's own budget."""
    config = GooseConfig.from_dict(run.config)
    fixed = config.spine_share is not None
    return Shape(method=run.method if run.method in lab_methods() else SpineTree.name, budget=0, fixed_share=fixed,
                 share=config.spine_share if fixed else 0.5, rho=config.spine_branch_share,
                 depth=config.max_branch_depth, order=ORDER_LABELS[config.branch_order], branching=config.branching,
                 bigram=config.use_bigram)


def verdict_html(run: RunRecord, step: StepRecord, result: WhatIf) -> str:
    """'Would have accepted N (real: M)', the revealed continuation with the part this tree gets marked."""
    texts = recorded_texts(run)
    tokens = []
    for k, token in enumerate(result.revealed):
        style = "background:#10b98133;border-bottom:3px solid #10b981" if k < result.accepted else "color:#6b7280"
        tokens.append(f'<span style="{style};padding:0 2px;margin-right:1px">'
                      f'{html.escape(visible_text(texts.get(token, f"#{token}")))}</span>')
    notes = []
    if result.lower_bound:
        notes.append("a lower bound: the tree holds the rest of the run, it may have accepted more")
    note = f'<div style="color:#92400e">{html.escape("; ".join(notes))}</div>' if notes else ""
    return (f'<div class="lab-verdict" style="font:15px sans-serif;padding:6px">'
            f'<b>Would have accepted <span class="lab-would">{result.accepted}</span></b> '
            f'(real: <span class="lab-real">{step.accepted_length}</span>) with {len(result.tree)} nodes '
            f'(budget {result.budget}; real tree {len(step.nodes)} nodes).'
            f'<div style="font:13px monospace;margin-top:4px">revealed continuation: {"".join(tokens)}</div>'
            f'{note}</div>')


def run_chart(run: RunRecord, result: RunWhatIf) -> go.Figure:
    """Accepted length per step, real vs the chosen setting (each over its own steps)."""
    return charts.what_if_steps_chart(run.accepted_lengths, result.accepted, None, run.totals.tau, result.tau,
                                      result.method)


def replay_whole(run: RunRecord, settings: dict[str, Any]) -> RunWhatIf:
    """The whole run replayed at `settings` (the run's own settings replay the recorded run, step for step)."""
    return run_what_if(run, **settings)


def sweep_methods(run: RunRecord) -> tuple[str, ...]:
    """The methods the budget sweep replays `run` under: goose and balanced, from the adjacency table the run kept;
    a suffix run kept none, and is swept under its own two methods, which draft from the text (and the store it
    recorded) alone."""
    if METHODS[run.method].uses_suffix:
        return tuple(name for name, drafter in METHODS.items() if drafter.uses_suffix)
    return SWEEP_METHODS


def estimates(run: RunRecord) -> dict[str, Any] | None:
    """The budget sweep's estimated curves ({method: [(budget, τ, speed-up)]}); None when the run holds too
    little to replay it whole."""
    try:
        return sweep([run], methods=sweep_methods(run), budgets=SWEEP_BUDGETS, spine_shares=())["budget"]
    except NoReplayDataError:
        return None


def sweep_chart(curves: dict[str, Any] | None, measured: Measurements | None = None) -> go.Figure | None:
    """Estimated τ and speed-up vs base budget (lines, best budget starred) and the real runs checked
    so far (diamonds)."""
    if curves is None:
        return None
    best = {method: budget for method, points in curves.items() if (budget := best_budget(points)) is not None}
    real = {method: [(b, tau, speedup) for b, (tau, speedup) in sorted(by_budget.items())]
            for method, by_budget in (measured or {}).items()}
    return charts.budget_sweep_chart(curves, measured=real, best=best)


def reference_costs() -> dict[str, dict[int, float]]:
    """The cost curves shipped in assets/costs: label -> tree nodes -> seconds per verification pass."""
    curves = {}
    for path in sorted(COSTS.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        curves[data["label"]] = {int(n): float(s) for n, s in data["points"].items()}
    return curves


def cost_chart(run: RunRecord | None, curves: dict[str, Any] | None, normalised: bool = False,
               method: str = SpineTree.name) -> go.Figure | None:
    """The run's device as its cost curve beside the shipped ones, in ms or relative to one node, with the
    budget that maximises the estimated speed-up of `method` (goose when it was not swept) marked."""
    if run is None:
        return None
    costs = {THIS_DEVICE: run.costs} if run.costs else {}
    costs.update(reference_costs())
    if normalised:
        costs = {name: {n: s / interpolate_cost(table, 1) for n, s in table.items()} for name, table in costs.items()}
    points = (curves or {}).get(method) or (curves or {}).get(SpineTree.name) or []
    best = best_budget(points) if run.costs else None
    figure = charts.cost_curve_chart(costs, "cost / cost of 1 node" if normalised else "ms per verification pass",
                                     1.0 if normalised else 1e3, best, log_y=not normalised)
    if not run.costs:
        figure.update_layout(title="The device: this run's trace holds no cost table; other devices shown")
    return figure


def depth_chart(run: RunRecord | None) -> go.Figure | None:
    """The run's acceptance rate by draft source and depth."""
    return charts.acceptance_depth_chart(metrics.acceptance_by_source_and_depth(run.steps)) if run else None


def cannot_rebuild(run: RunRecord | None) -> str:
    """Why the Lab cannot rebuild this run's trees ('' when it can): the library's reason (goose.whatif.replay_refusal),
    with where to get a run that can."""
    if run is None or not run.steps:
        return NO_RUN
    refusal = replay_refusal(run)
    if refusal is None:
        return ""
    return (f"**Cannot rebuild:** {refusal}. Generate a run in Explore (the app records what a replay needs) "
            "and open it here.")


@dataclass
class Opened:
    """What taking a run into the Lab shows; the shape controls are set to the run's own settings (so the first
    rebuild is the real tree), and left as they are when the run cannot be rebuilt."""

    run: RunRecord | None  # the run in the Lab (a gr.State)
    status: str  # what the run is, or why it cannot be rebuilt
    step: gr.Slider  # the step picker, sized to the run
    sweep: go.Figure | None  # the budget sweep's estimates
    costs: go.Figure | None  # the run's device as its cost curve, beside the shipped ones
    by_depth: go.Figure | None  # the acceptance by source and depth
    curves: dict[str, Any] | None  # the estimates behind the sweep (a gr.State, for the cost curve and checks)
    measured: Measurements  # the checks' measurements: none yet (a gr.State)
    # the shape controls, by Shape's fields
    method: str | Keep = KEEP
    budget: int | Keep = KEEP  # 0: each step's own budget
    fixed_share: bool | Keep = KEEP
    share: float | Keep = KEEP
    rho: float | Keep = KEEP
    depth: int | Keep = KEEP
    order: str | Keep = KEEP
    branching: int | Keep = KEEP
    bigram: bool | Keep = KEEP


def open_run(run: RunRecord | None) -> Opened:
    """Take a run into the Lab."""
    why = cannot_rebuild(run)
    if why:
        return Opened(run=None, status=why, step=gr.Slider(0, 1, value=0, interactive=False), sweep=None,
                      costs=cost_chart(run, None), by_depth=depth_chart(run), curves=None, measured={})
    curves = estimates(run)
    status = (f"{run.method} on {run.model}: {len(run.steps)} steps, τ {run.totals.tau:.2f}. Pick a step and change "
              "the shape; budget 0 keeps the run's own.")
    if curves is None:
        status += (" This trace holds too little to replay the whole run under other settings (an older format): "
                   "single steps rebuild, the budget sweep and checks need a fresh run.")
    last = len(run.steps) - 1
    shape = own_shape(run)
    return Opened(run=run, status=status, step=gr.Slider(0, max(1, last), value=0, step=1, interactive=last > 0),
                  sweep=sweep_chart(curves), costs=cost_chart(run, curves, method=shape.method),
                  by_depth=depth_chart(run), curves=curves, measured={}, **asdict(shape))


@dataclass
class Rebuilt:
    """A step rebuilt at the chosen setting."""

    verdict: str  # what the rebuilt tree would have accepted, beside what the real one did
    real_tree: str
    rebuilt_tree: str
    run_chart: go.Figure | None  # accepted length per step, real and at the setting (None: cannot replay whole)


def rebuild(run: RunRecord | None, index: Any, shape: Shape) -> Rebuilt:
    """The chosen step's tree rebuilt at the setting, and the whole run replayed at it."""
    if run is None:
        return Rebuilt(verdict="", real_tree=tree_iframe(None), rebuilt_tree=tree_iframe(None), run_chart=None)
    step = run.steps[min(max(0, int(index or 0)), len(run.steps) - 1)]
    settings = shape.settings()
    try:
        result = what_if(run, step.index, **settings)
    except NoReplayDataError as error:
        return Rebuilt(verdict=_fail(str(error)), real_tree=tree_iframe(step, TREE_HEIGHT),
                       rebuilt_tree=tree_iframe(None), run_chart=None)
    except (ValueError, TypeError) as error:
        raise gr.Error(f"These settings cannot be rebuilt: {error}") from error
    chart = run_chart(run, replay_whole(run, settings))
    rebuilt = tree_iframe(rebuilt_record(run, step.index, result), TREE_HEIGHT).replace(
        'title="speculation tree', 'title="rebuilt tree', 1)
    return Rebuilt(verdict=verdict_html(run, step, result), real_tree=tree_iframe(step, TREE_HEIGHT),
                   rebuilt_tree=rebuilt, run_chart=chart)


# ---------------------------------------------------------------- checking the estimate with a real run

def model_for(registry: ModelRegistry, run: RunRecord) -> GooseModel:
    """The model the run was recorded with, from the app's registry (a registered model by its own name too);
    gr.Error saying so when this server does not offer it."""
    for name in registry.loaded():
        if registry.get(name).name == run.model:
            return get_model(registry, name)
    try:
        registry.check_allowed(run.model)
    except ModelNotAllowedError:
        offered = ", ".join(registry.choices) or "none"
        raise gr.Error(f"This run was recorded with the model {run.model!r}, which this server does not offer "
                       f"(it offers {offered}). A check runs the run's own model, so it cannot check this run "
                       "here; the estimates above need no model.", title="Model not offered") from None
    return get_model(registry, run.model)


def _percent(error: float | None) -> str:
    return "–" if error is None else f"{100 * error:+.1f}%"


def _times(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}x"


def check_line(label: str, result: RunWhatIf) -> str:
    """One checked setting: 'estimated τ X, measured Y (error Z%)', the same for the speed-up (estimated on the
    passes the check measured before its rounds, at the pace the baseline ran, the quiet cost table's estimate beside
    it: goose.check.prices_now, goose.whatif.paced_totals), and both runs it divides: the real run and the
    autoregressive baseline measured just before it."""
    real = result.measured
    base = real.baseline_totals
    tau = (f'estimated τ <b class="lab-est-tau">{result.tau:.2f}</b>, measured '
           f'<b class="lab-real-tau">{real.tau:.2f}</b> (error {_percent(result.tau_error)})')
    speed = (f'estimated speed-up <span class="lab-est-speedup">{_times(result.paced_speedup)}</span> on passes '
             'measured with it, at the pace of the autoregressive runs just before it '
             f'(<span class="lab-table-speedup">{_times(result.speedup)}</span> on the quiet cost table), measured '
             f'<span class="lab-real-speedup">{_times(real.speedup)}</span> (error {_percent(result.speedup_error)})')
    rounds = f"mean of {real.rounds} alternated rounds" if real.rounds > 1 else "one round"
    runs = (f'real run {real.wall_s:.2f} s, <span class="lab-real-tps">{real.tokens_per_s:.1f}</span> tokens/s; '
            f'autoregressive just before it {base.wall_s:.2f} s, <span class="lab-base-tps">'
            f'{metrics.tokens_per_s(base):.1f}</span> tokens/s (<span class="lab-rounds">{rounds}</span>)')
    note = "" if real.same_tokens else ' <span style="color:#b91c1c">(output differs from autoregressive)</span>'
    return f'<li class="lab-check-row"><b>{html.escape(label)}</b>: {tau}; {speed}; {runs}{note}</li>'


def check_html(lines: list[str], note: str = "") -> str:
    """The checks' verdict: one line per setting run for real, and a note (stopped, skipped budgets)."""
    tail = f'<div style="color:#92400e">{html.escape(note)}</div>' if note else ""
    return (f'<div class="lab-check" style="font:14px sans-serif;padding:6px"><ul style="margin:0">{"".join(lines)}'
            f"</ul>{tail}</div>")


@dataclass
class Checked:
    """Estimates checked against real runs."""

    checks: str  # one line per setting run for real, and a note (stopped, skipped budgets)
    sweep: go.Figure | None  # the budget sweep with the measurements drawn in
    measured: Measurements  # every measurement so far (a gr.State)


def check(registry: ModelRegistry, run: RunRecord | None, curves: dict[str, Any] | None,
          measured: Measurements | None, shape: Shape, whole_sweep: bool = False, session: str | None = None,
          progress: gr.Progress = NO_PROGRESS, *, limits: Limits = DEFAULT_LIMITS) -> Checked:
    """Run the model at `shape` (or, with `whole_sweep`, at every budget of the sweep for its method) on the run's
    prompt, each time just after autoregressive decoding (goose.check: the two alternate), and set each
    measurement beside its estimate.

    Stop or the server's time limit end the check within a step of the real run in flight; what was measured
    stays."""
    if run is None:
        raise gr.Error("Open a run in the Lab first.")
    if cannot_rebuild(run) or curves is None:
        raise gr.Error("This run cannot be replayed whole (see the status above), so there is no estimate to check.")
    if run.max_new_tokens > limits.max_new_tokens:
        raise gr.Error(f"This run made up to {run.max_new_tokens} new tokens; this server runs at most "
                       f"{limits.max_new_tokens} per run.")
    settings, method = shape.settings(), shape.method
    if whole_sweep:  # the sweep's own settings: the method at each budget, the shape as the run's
        todo = [(f"{method}, budget {b}", {"method": method, "budget": b}) for b in SWEEP_BUDGETS]
    else:
        own = own_budget(run)
        todo = [(f"{method}, budget {settings.get('budget', f'{own} (the run’s own)')}", settings)]
    skipped = [label for label, s in todo if s.get("budget", 0) > limits.max_budget]
    todo = [(label, s) for label, s in todo if s.get("budget", 0) <= limits.max_budget]
    progress(0.0, desc=f"loading {run.model}")
    model = model_for(registry, run)
    measured = {m: dict(by_budget) for m, by_budget in (measured or {}).items()}
    lines, notes = [], [f"skipped (over this server's budget limit): {', '.join(skipped)}"] if skipped else []
    guard = RunGuard(STOPS, session, limits.max_run_s)
    try:
        for i, (label, setting) in enumerate(todo):
            if guard.reason():  # Stop (or the time limit) ends the check between two real runs
                why = "you pressed Stop" if guard.reason() == STOPPED else "this server's time limit"
                notes.append(f"stopped ({why}): {len(todo) - i} of {len(todo)} settings not run")
                break
            def on_round(r: int, i: int = i, label: str = label) -> None:
                progress((i * CHECK_ROUNDS + r, len(todo) * CHECK_ROUNDS),
                         desc=f"round {r + 1} of {CHECK_ROUNDS}: autoregressive, then {label}", unit="rounds")
                time.sleep(PAGE_SETTLE_S)  # the page draws the update before the round's clocks start

            try:
                result = run_what_if(run, model=model, check=True, cancel=lambda: bool(guard.reason()),
                                     rounds=CHECK_ROUNDS, on_round=on_round, **setting)
            except CheckCancelled:
                why = "you pressed Stop" if guard.reason() == STOPPED else "this server's time limit"
                notes.append(f"stopped ({why}) during {label}: {len(todo) - i} of {len(todo)} settings not measured")
                break
            except (ValueError, TypeError) as error:
                raise gr.Error(f"These settings cannot be checked: {error}") from error
            lines.append(check_line(label, result))
            base = setting.get("budget") or own_budget(run)
            if base != AUTO:
                measured.setdefault(result.method, {})[int(base)] = (result.measured.tau, result.measured.speedup)
    finally:
        guard.release()
    return Checked(checks=check_html(lines, "; ".join(notes)), sweep=sweep_chart(curves, measured), measured=measured)


# ---------------------------------------------------------------- layout

def lab_tab(runs: dict[str, gr.State], check_fn: Callable | None = None, stop_fn: Callable | None = None,
            arm_fn: Callable | None = None, model_queue: dict[str, Any] | None = None) -> None:
    """Lay out the Lab; `runs` names the states it can open a run from (e.g. Explore's and Replay's).
    `check_fn` runs a check (lab.check bound to the app's registry, limits and the visitor's session; it takes run,
    curves, measured, shape and whole_sweep, then Gradio's request and progress), `stop_fn` and `arm_fn` press and
    clear the visitor's Stop switch, `model_queue` is the queue the model runs share; without `check_fn` the tab has
    no check buttons."""
    gr.Markdown("Change one step's tree shape and see what it **would have accepted**: under greedy decoding "
                "the step revealed the target's continuation, so any tree rebuilt from the same sources can be "
                "scored exactly, without the model.")
    lab_run = gr.State(None)
    lab_curves = gr.State(None)
    lab_measured = gr.State({})
    with gr.Row(equal_height=True):
        source = gr.Radio(list(runs), value=next(iter(runs)), label="Run from", elem_id="lab-source", scale=3)
        open_button = gr.Button("Open in Lab", variant="primary", elem_id="lab-open", scale=1)
    status = gr.Markdown(NO_RUN, elem_id="lab-status")
    step = gr.Slider(0, 1, value=0, step=1, label="step", interactive=False, elem_id="lab-step")
    first = Shape()
    with gr.Row():
        method = gr.Dropdown(lab_methods(), value=first.method, label="Method", elem_id="lab-method")
        budget = gr.Slider(0, 128, value=first.budget, step=1, label="Base budget (0 = the run's own)",
                           elem_id="lab-budget")
        bigram = gr.Checkbox(first.bigram, label="bigram tier", elem_id="lab-bigram")
    with gr.Row():
        fixed_share = gr.Checkbox(first.fixed_share, label="fixed spine share (else the EMA tiers)",
                                  elem_id="lab-fixed-share")
        share = gr.Slider(0.0, 1.0, value=first.share, step=0.05, label="spine share r", elem_id="lab-share")
        rho = gr.Slider(0.0, 1.0, value=first.rho, step=0.05, label="ρ (branch budget off the spine)",
                        elem_id="lab-rho")
        depth = gr.Slider(1, 10, value=first.depth, step=1, label="branch depth", elem_id="lab-depth")
        order = gr.Radio(list(ORDERS), value=first.order, label="branches grow", elem_id="lab-order")
        branching = gr.Slider(1, 8, value=first.branching, step=1, label="branching k (balanced)",
                              elem_id="lab-branching")
    verdict = gr.HTML(elem_id="lab-verdict")
    with gr.Row():
        with gr.Column():
            gr.Markdown("**Real tree**")
            real_tree = gr.HTML(tree_iframe(None), elem_id="lab-real-tree")
        with gr.Column():
            gr.Markdown("**Rebuilt tree** (outlined: what it would have accepted)")
            rebuilt_tree = gr.HTML(tree_iframe(None), elem_id="lab-tree")
    with gr.Row():
        by_depth = gr.Plot(label="acceptance by source and depth", elem_id="lab-depth-chart")
        chart = gr.Plot(label="accepted length per step", elem_id="lab-run-chart")
    gr.Markdown("### The whole run at other budgets, on the device it was recorded on\nEstimated from the run's "
                "own sources and the cost of a verification pass measured where it ran (the star: the budget with "
                "the most estimated tokens per second). *Check with a real run* runs the model at the chosen "
                "setting on the run's prompt (and plain autoregressive decoding just before it, every time) and "
                "draws what it measured beside the estimate, with the error of each. Far above the budgets the run "
                "itself drafted, the estimated τ is a lower bound: a big tree recycles the rows of its own rejected "
                "nodes, which a recording of small trees never computed. Check the whole sweep to see how far off "
                "it is for this run.")
    with gr.Row():
        with gr.Column(scale=3):
            sweep_plot = gr.Plot(label="budget sweep", elem_id="lab-sweep")
        with gr.Column(scale=2):
            cost_plot = gr.Plot(label="cost of a verification pass", elem_id="lab-costs")
            normalised = gr.Checkbox(False, label="relative to the cost of 1 node (compare the shapes)",
                                     elem_id="lab-costs-relative")
    if check_fn is not None:
        with gr.Row(equal_height=True):
            check_button = gr.Button("Check with a real run", variant="primary", elem_id="lab-check-run", scale=2)
            whole = gr.Checkbox(False, label=f"the whole budget sweep ({len(SWEEP_BUDGETS)} runs)",
                                elem_id="lab-check-sweep", scale=2)
            stop_button = gr.Button("Stop", variant="stop", elem_id="lab-stop", scale=1)
        checked = gr.HTML(elem_id="lab-check")

    shape = {"method": method, "budget": budget, "fixed_share": fixed_share, "share": share, "rho": rho,
             "depth": depth, "order": order, "branching": branching, "bigram": bigram}
    page = {"run": lab_run, "status": status, "step": step, **shape, "verdict": verdict, "real_tree": real_tree,
            "rebuilt_tree": rebuilt_tree, "by_depth": by_depth, "run_chart": chart, "sweep": sweep_plot,
            "costs": cost_plot, "curves": lab_curves, "measured": lab_measured}
    shaped = Controls(Shape, shape)
    rebuilt_from = (lab_run, step, shaped)  # rebuild's arguments

    def pick(name: str, *states: RunRecord | None) -> Opened:
        return open_run(dict(zip(runs, states)).get(name))

    show_rebuilt = bound(gathered(rebuild, *rebuilt_from), page)
    # One queue for every rebuild, in the order they were sent: an open sets every control, and each control's own
    # event would otherwise run beside the others, so a rebuild sent before the visitor's last move could end after
    # it and draw a setting no longer shown.
    in_turn = {"concurrency_id": "lab-rebuild", "concurrency_limit": 1, "show_progress": "hidden"}
    open_button.click(bound(pick, page), [source, *runs.values()], outputs(Opened, page)).then(
        show_rebuilt, inputs(*rebuilt_from), outputs(Rebuilt, page), **in_turn)
    for control in [step, *shape.values()]:  # always_last: while one rebuild runs, only the newest pending one follows
        control.change(show_rebuilt, inputs(*rebuilt_from), outputs(Rebuilt, page), trigger_mode="always_last",
                       **in_turn)
    normalised.change(cost_chart, [lab_run, lab_curves, normalised, method], cost_plot, show_progress="hidden")
    if check_fn is not None:
        page["checks"] = checked
        instant = {"concurrency_limit": None, "show_progress": "hidden", "api_visibility": "private"}
        checked_from = (lab_run, lab_curves, lab_measured, shaped, whole)  # check_fn's arguments
        check_button.click(arm_fn, None, None, **instant).then(  # private: its inputs are the page's own states
            bound(gathered(check_fn, *checked_from), page), inputs(*checked_from),
            outputs(Checked, page), api_visibility="private", **(model_queue or {}))
        stop_button.click(stop_fn, None, None, **instant)
