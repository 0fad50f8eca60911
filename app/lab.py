"""The Lab tab: change a step's tree shape and see at once what it would have accepted (goose.whatif).

Works on any run recorded with source snapshots (a fresh Explore run, or a
Replay trace): no model is needed, every tree is rebuilt from the snapshot and
scored against the continuation the step revealed. The callbacks are plain
functions from inputs to outputs; `lab_tab` lays the tab out and wires them.
"""

from __future__ import annotations

import html
from typing import Any

import gradio as gr
import plotly.graph_objects as go

from app.tree_view import tree_iframe, visible_text
from goose import charts
from goose.config import GooseConfig
from goose.drafters import METHODS
from goose.trace import NodeRecord, RunRecord, StepRecord
from goose.whatif import NoSnapshotError, RunWhatIf, WhatIf, run_what_if, sweep, what_if

SWEEP_BUDGETS = (4, 8, 12, 16, 24, 32, 48, 64)
TREE_HEIGHT = 520
NO_RUN = "Open a run here: generate one in **Explore**, or open a trace in **Replay**, then press *Open in Lab*."


def lab_methods() -> list[str]:
    """The registered methods that draft a tree (the baseline has none to rebuild)."""
    return [name for name, drafter in METHODS.items() if drafter.speculative]


def _fail(message: str) -> str:
    return f'<div class="lab-message" style="padding:8px;color:#b91c1c">{html.escape(message)}</div>'


def settings_from(method: str, budget: Any, fixed_share: bool, share: Any, rho: Any, depth: Any, branching: Any,
                  bigram: bool) -> dict[str, Any]:
    """The what-if settings the controls stand for; budget 0 keeps each step's own node budget."""
    settings: dict[str, Any] = {"method": method, "spine_branch_share": float(rho), "max_branch_depth": int(depth),
                                "branching": int(branching), "use_bigram": bool(bigram),
                                "spine_share": float(share) if fixed_share else None}
    if int(budget or 0) > 0:
        settings["budget"] = int(budget)
    return settings


def _texts(run: RunRecord, step: StepRecord) -> dict[int, str]:
    texts = dict(run.token_texts)
    texts.update((node.token, node.text) for node in step.nodes)
    texts[step.bonus_token] = step.bonus_text
    return texts


def rebuilt_step(run: RunRecord, step: StepRecord, result: WhatIf) -> StepRecord:
    """The rebuilt tree as a StepRecord, so tree_view draws it as the real one: accepted path, tried children
    rejected, and the next revealed token as the bonus ('?' when the tree holds all that was revealed)."""
    tree, path = result.tree, result.accepted_path
    texts = _texts(run, step)
    on_path = [0, *path]
    targets = {node: result.revealed[k] for k, node in enumerate(on_path) if k < len(result.revealed)}
    tried = {child for node in on_path for child in tree.child_list(node)}
    nodes = []
    for i in range(len(tree)):
        status = "root" if i == 0 else "accepted" if i in path else "rejected" if i in tried else "unvisited"
        nodes.append(NodeRecord(token=tree.tokens[i], text=texts.get(tree.tokens[i], f"#{tree.tokens[i]}"),
                                source=tree.sources[i], parent=tree.parents[i], depth=tree.depths[i],
                                score=tree.scores[i], target=targets.get(i), status=status))
    bonus = result.revealed[result.accepted] if not result.lower_bound else -1
    return StepRecord(index=step.index, nodes=nodes, accepted=path, bonus_token=bonus,
                      bonus_text=texts.get(bonus, "?"), committed=result.revealed[:result.accepted + 1],
                      draft_s=0.0, verify_s=0.0, budget=result.budget)


def verdict_html(run: RunRecord, step: StepRecord, result: WhatIf) -> str:
    """'Would have accepted N (real: M)', the revealed continuation with the part this tree gets marked."""
    texts = _texts(run, step)
    tokens = []
    for k, token in enumerate(result.revealed):
        style = "background:#10b98133;border-bottom:3px solid #10b981" if k < result.accepted else "color:#6b7280"
        tokens.append(f'<span style="{style};padding:0 2px;margin-right:1px">'
                      f'{html.escape(visible_text(texts.get(token, f"#{token}")))}</span>')
    notes = []
    if result.lower_bound:
        notes.append("a lower bound: the tree holds all the step revealed, it may have accepted more")
    if not result.complete:
        notes.append(f"approximate: the tree needed {result.missing_rows} adjacency row(s) the snapshot did not "
                     "record (answered as empty)")
    note = f'<div style="color:#92400e">{html.escape("; ".join(notes))}</div>' if notes else ""
    return (f'<div class="lab-verdict" style="font:15px sans-serif;padding:6px">'
            f'<b>Would have accepted <span class="lab-would">{result.accepted}</span></b> '
            f'(real: <span class="lab-real">{step.accepted_length}</span>) with {len(result.tree)} nodes '
            f'(budget {result.budget}; real tree {len(step.nodes)} nodes).'
            f'<div style="font:13px monospace;margin-top:4px">revealed continuation: {"".join(tokens)}</div>'
            f'{note}</div>')


def run_chart(run: RunRecord, result: RunWhatIf) -> go.Figure:
    """Accepted length per step, real vs the chosen setting (hollow markers: not exact)."""
    return charts.what_if_steps_chart(result.real, result.accepted, [r.exact for r in result.steps],
                                      run.totals.tau, result.tau)


def sweep_chart(run: RunRecord) -> go.Figure:
    """Counterfactual τ and estimated speed-up vs base budget, for goose and balanced, over the whole run."""
    curves = sweep([run], methods=("goose", "balanced"), budgets=SWEEP_BUDGETS, spine_shares=())
    return charts.budget_sweep_chart(curves["budget"])


def cannot_rebuild(run: RunRecord | None) -> str:
    """Why the Lab cannot rebuild this run's trees ('' when it can)."""
    if run is None or not run.steps:
        return NO_RUN
    if not run.has_snapshots:
        return ("**Cannot rebuild:** this run was recorded without source snapshots, so its trees cannot be "
                "rebuilt. Generate it again in Explore (the app records them), or record the trace with "
                "`goose.generate(..., record_sources=True)`.")
    if run.sampling.get("temperature", 0.0):
        return ("**Cannot rebuild:** this run sampled (temperature > 0); a sampled step reveals a draw, not the "
                "target's greedy continuation, so other trees cannot be scored against it.")
    return ""


def open_run(run: RunRecord | None) -> tuple:
    """Take a run into the Lab: state, status, step slider sized to it, the budget sweep, and the shape
    controls set to the run's own settings (so the first rebuild is the real tree)."""
    why = cannot_rebuild(run)
    if why:
        return None, why, gr.Slider(0, 1, value=0, interactive=False), None, *[gr.skip()] * 8
    config = GooseConfig.from_dict(run.config)
    status = (f"{run.method} on {run.model}: {len(run.steps)} steps, τ {run.totals.tau:.2f}. Pick a step and change "
              "the shape; budget 0 keeps each step's own.")
    last = len(run.steps) - 1
    fixed = config.spine_share is not None
    return (run, status, gr.Slider(0, max(1, last), value=0, step=1, interactive=last > 0), sweep_chart(run),
            run.method if run.method in lab_methods() else "goose", 0, fixed,
            config.spine_share if fixed else 0.5, config.spine_branch_share, config.max_branch_depth,
            config.branching, config.use_bigram)


def rebuild(run: RunRecord | None, index: Any, method: str, budget: Any, fixed_share: bool, share: Any, rho: Any,
            depth: Any, branching: Any, bigram: bool) -> tuple[str, str, str, go.Figure | None]:
    """The verdict, the real and the rebuilt tree of the chosen step, and the run chart for the setting."""
    if run is None:
        return "", tree_iframe(None), tree_iframe(None), None
    step = run.steps[min(max(0, int(index or 0)), len(run.steps) - 1)]
    settings = settings_from(method, budget, fixed_share, share, rho, depth, branching, bigram)
    try:
        result = what_if(run, step.index, **settings)
        whole = run_what_if(run, **settings)
    except NoSnapshotError as error:
        return _fail(str(error)), tree_iframe(step, TREE_HEIGHT), tree_iframe(None), None
    except (ValueError, TypeError) as error:
        raise gr.Error(f"These settings cannot be rebuilt: {error}") from error
    rebuilt = tree_iframe(rebuilt_step(run, step, result), TREE_HEIGHT).replace(
        'title="speculation tree', 'title="rebuilt tree', 1)
    return verdict_html(run, step, result), tree_iframe(step, TREE_HEIGHT), rebuilt, run_chart(run, whole)


def lab_tab(runs: dict[str, gr.State]) -> None:
    """Lay out the Lab; `runs` names the states it can open a run from (e.g. Explore's and Replay's)."""
    gr.Markdown("Change one step's tree shape and see what it **would have accepted**: under greedy decoding "
                "the step revealed the target's continuation, so any tree rebuilt from the same sources can be "
                "scored exactly, without the model.")
    lab_run = gr.State(None)
    with gr.Row(equal_height=True):
        source = gr.Radio(list(runs), value=next(iter(runs)), label="Run from", elem_id="lab-source", scale=3)
        open_button = gr.Button("Open in Lab", variant="primary", elem_id="lab-open", scale=1)
    status = gr.Markdown(NO_RUN, elem_id="lab-status")
    step = gr.Slider(0, 1, value=0, step=1, label="step", interactive=False, elem_id="lab-step")
    with gr.Row():
        method = gr.Dropdown(lab_methods(), value="goose", label="Method", elem_id="lab-method")
        budget = gr.Slider(0, 128, value=0, step=1, label="Base budget (0 = the step's own)", elem_id="lab-budget")
        bigram = gr.Checkbox(True, label="bigram tier", elem_id="lab-bigram")
    with gr.Row():
        fixed_share = gr.Checkbox(False, label="fixed spine share (else the EMA tiers)", elem_id="lab-fixed-share")
        share = gr.Slider(0.0, 1.0, value=0.5, step=0.05, label="spine share r", elem_id="lab-share")
        rho = gr.Slider(0.0, 1.0, value=0.5, step=0.05, label="ρ (branch budget off the spine)", elem_id="lab-rho")
        depth = gr.Slider(1, 10, value=6, step=1, label="branch depth", elem_id="lab-depth")
        branching = gr.Slider(1, 8, value=3, step=1, label="branching k (balanced)", elem_id="lab-branching")
    verdict = gr.HTML(elem_id="lab-verdict")
    with gr.Row():
        with gr.Column():
            gr.Markdown("**Real tree**")
            real_tree = gr.HTML(tree_iframe(None), elem_id="lab-real-tree")
        with gr.Column():
            gr.Markdown("**Rebuilt tree** (outlined: what it would have accepted)")
            rebuilt_tree = gr.HTML(tree_iframe(None), elem_id="lab-tree")
    with gr.Row():
        chart = gr.Plot(label="accepted length per step", elem_id="lab-run-chart")
        sweep_plot = gr.Plot(label="budget sweep", elem_id="lab-sweep")

    controls = [lab_run, step, method, budget, fixed_share, share, rho, depth, branching, bigram]
    outputs = [verdict, real_tree, rebuilt_tree, chart]

    def pick(name: str, *states: RunRecord | None) -> tuple:
        return open_run(dict(zip(runs, states)).get(name))

    shape = [method, budget, fixed_share, share, rho, depth, branching, bigram]
    open_button.click(pick, [source, *runs.values()], [lab_run, status, step, sweep_plot, *shape]).then(
        rebuild, controls, outputs, show_progress="hidden")
    for control in controls[1:]:  # always_last: while one rebuild runs, only the newest pending one follows
        control.change(rebuild, controls, outputs, trigger_mode="always_last", show_progress="hidden")
