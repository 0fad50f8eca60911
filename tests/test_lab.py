"""The Lab tab's callbacks without a browser: opening runs, rebuilding trees, the verdict, the charts (the budget
sweep, the device's cost curve, acceptance by depth) and checking an estimate with a real run."""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, fields, replace
from types import SimpleNamespace

import gradio as gr
import pytest
from tiny import slow_tiny_gemma3, tiny_gemma3

import goose
from app import lab
from app.callbacks import EXAMPLE_TRACES, STOPS
from app.models import ModelRegistry
from app.outputs import KEEP
from app.race_trace import is_race
from goose import metrics
from goose.trace import TRACE_FORMAT, NodeRecord, RunRecord, StepRecord

PROMPT = "one two three four, one two three four, one two three four, one two"


@pytest.fixture(scope="module")
def model() -> goose.GooseModel:
    return tiny_gemma3(0)


@pytest.fixture(scope="module")
def run(model) -> RunRecord:
    return goose.generate(model, PROMPT, "goose", 32, budget=16, record_sources=True, spine_share=0.3, branching=2)


def shape_of(run: RunRecord | None) -> dict:
    """The shape controls as opening the run sets them."""
    opened = lab.open_run(run)
    return {field.name: getattr(opened, field.name) for field in fields(lab.Shape)}


def rebuild(run: RunRecord, index: int = 0, **changes):
    """The Lab's rebuild with the controls as opening the run sets them, then `changes`."""
    return lab.rebuild(run, index, replace(lab.own_shape(run), **changes))


def would(verdict: str) -> tuple[int, int]:
    found = re.search(r'lab-would">(\d+)</span>.*lab-real">(\d+)<', verdict)
    return int(found.group(1)), int(found.group(2))


def without_replay_data(run: RunRecord, fmt: str = TRACE_FORMAT) -> RunRecord:
    """The run as a trace recorded without its sources (or an old format, which had none)."""
    data = json.loads(run.to_json())
    data["format"], data["prefill_rows"] = fmt, None
    for step in data["steps"]:
        step["rows"] = step["shape"] = None
    return RunRecord.from_dict(data)


def test_open_says_why_a_run_cannot_be_rebuilt(run):
    nothing = lab.open_run(None)
    assert nothing.run is None and "Explore" in nothing.status and nothing.sweep is None
    assert all(value is KEEP for value in shape_of(None).values()), "the controls stay as they are"
    bare = lab.open_run(without_replay_data(run))
    assert bare.run is None and "Cannot rebuild" in bare.status and "record_sources=True" in bare.status


def test_own_settings_reproduce_the_real_step(run):
    opened = lab.open_run(run)
    assert opened.run is run and f"{len(run.steps)} steps" in opened.status and opened.sweep.data
    assert opened.measured == {} and set(opened.curves) == set(lab.SWEEP_METHODS)
    assert opened.costs.data and opened.by_depth.data
    own = lab.Shape(method="goose", budget=0, fixed_share=True, share=0.3, rho=0.5, depth=6, order="best first",
                    branching=2, bigram=True)
    assert lab.own_shape(run) == own and shape_of(run) == asdict(own), "the controls start at the run's own shape"
    for index in range(len(run.steps)):
        rebuilt = rebuild(run, index)
        assert would(rebuilt.verdict)[0] == would(rebuilt.verdict)[1] == run.steps[index].accepted_length
        assert 'title="rebuilt tree of step' in rebuilt.rebuilt_tree and "speculation tree of step" in rebuilt.real_tree
    chart = rebuilt.run_chart
    assert list(chart.data[0].y) == [s.accepted_length for s in run.steps]
    own = goose.run_what_if(run)  # the recorded run replayed step for step (the last one cut where it stopped)
    assert list(chart.data[1].y) == own.accepted and len(own.accepted) == len(run.steps)
    assert own.tau == pytest.approx(run.totals.tau) and f"τ {run.totals.tau:.2f}" in chart.data[1].name


def test_a_suffix_run_with_a_store_rebuilds_its_steps_in_the_lab(model, registry):
    """A suffix run's trees come back from its recorded store: at its own settings every step is the real one, a
    smaller budget cuts them; the budget sweep is of the suffix methods (goose's and balanced's trees need the
    adjacency table it kept none of)."""
    past = goose.generate(model, PROMPT, "autoregressive", 32).tokens
    run = goose.generate(model, PROMPT, "suffix", 32, store=goose.SuffixStore("lab", [past]), record_sources=True)
    opened = lab.open_run(run)
    assert opened.run is run and opened.method == "suffix" and set(opened.curves) == {"suffix", "suffix-path"}
    for index, step in enumerate(run.steps):
        own = rebuild(run, index)
        assert would(own.verdict) == (step.accepted_length, step.accepted_length)
    index = max(range(len(run.steps)), key=lambda i: len(run.steps[i].nodes))
    assert would(rebuild(run, index, budget=3).verdict)[0] <= 2 < run.steps[index].accepted_length
    checked = lab.check(registry, run, opened.curves, {}, lab.own_shape(run), False, "lab-suffix")
    assert re.search(r'lab-real-tau">[\d.]+</b> \(error \+0\.0%\)', checked.checks), \
        "the real run at its own setting reads the recorded store: the estimate is exact"


def test_budget_and_spine_share_change_the_rebuilt_tree(run):
    spine = [sum(node.source == "spine" for node in step.nodes) for step in run.steps]
    index = max(range(len(run.steps)), key=spine.__getitem__)
    trees = {rebuild(run, index, budget=b).rebuilt_tree for b in (2, 12, 48)}
    assert len(trees) == 3
    assert spine[index], "the prompt repeats itself: some step has a context match"
    shares = {rebuild(run, index, budget=4, fixed_share=True, share=s).rebuilt_tree for s in (0.0, 1.0)}
    assert len(shares) == 2, "a small tree has no spine at share 0, only spine at share 1"


def test_the_branch_order_control_rebuilds_the_papers_tree(run):
    """"breadth-first (the paper)" gives the root its whole share first: some step's tree changes (and the
    control draws it), every tree within the same budget (12, grown with the match's confidence)."""
    differ = []
    for index in range(len(run.steps)):
        best = goose.what_if(run, index, budget=12)
        breadth = goose.what_if(run, index, budget=12, branch_order="breadth")
        assert len(breadth.tree) <= breadth.budget == best.budget
        if (best.tree.tokens, best.tree.parents) != (breadth.tree.tokens, breadth.tree.parents):
            differ.append(index)
    assert differ, "the two orders never built different trees: the control would show nothing"
    drawn = rebuild(run, differ[0], budget=12, order="breadth-first (the paper)").rebuilt_tree
    assert drawn != rebuild(run, differ[0], budget=12).rebuilt_tree


def test_rebuilt_step_marks_the_accepted_path_and_tried_children(run):
    from goose.whatif import rebuilt_record

    result = goose.what_if(run, 0, budget=32)
    record = rebuilt_record(run, 0, result)  # what the Lab draws
    assert [record.nodes[n].status for n in record.accepted] == ["accepted"] * result.accepted
    assert record.nodes[0].status == "root" and len(record.nodes) == len(result.tree)
    tried = {c for n in record.path for c in result.tree.child_list(n)} - set(record.accepted)
    assert all(record.nodes[c].status == "rejected" for c in tried)
    assert all(node.text and not node.text.startswith("#") for node in record.nodes), "texts come with the trace"


def shipped_runs() -> list:
    return [path for path in sorted(EXAMPLE_TRACES.glob("*.json")) if not is_race(json.loads(path.read_text()))]


@pytest.mark.parametrize("path", shipped_runs(), ids=lambda path: path.name)
def test_a_shipped_trace_opens_in_the_lab_with_its_device(path):
    run = RunRecord.load(path)
    assert json.loads(path.read_text())["format"] == TRACE_FORMAT, "make_traces records shipped traces anew"
    opened = lab.open_run(run)
    assert opened.run is run and "Cannot rebuild" not in opened.status, "shipped traces carry their sources"
    device = opened.costs.data[0]
    assert device.name == lab.THIS_DEVICE and list(device.x) == sorted(run.costs)
    assert opened.by_depth.data, "acceptance by source and depth is drawn"
    assert opened.sweep is not None and opened.curves and "older format" not in opened.status, \
        "it replays whole: sweep and best budget"


def test_an_old_format_trace_cannot_be_rebuilt(run):
    old = without_replay_data(run, "goose-trace/2")
    opened = lab.open_run(old)
    assert opened.run is None and "Cannot rebuild" in opened.status and opened.sweep is None
    assert opened.costs.data, "the device's cost curve shows all the same"


# ---------------------------------------------------------------- the device

def test_cost_chart_draws_the_runs_device_beside_the_shipped_ones(run):
    curves = lab.estimates(run)
    figure = lab.cost_chart(run, curves)
    names = [trace.name for trace in figure.data]
    assert names[0] == lab.THIS_DEVICE and set(lab.reference_costs()) <= set(names)
    assert {"H200, 1B Llama", "2-core AVX2 CPU, Gemma 3 270M (body)"} <= set(names)
    device = figure.data[0]
    assert list(device.x) == sorted(run.costs)
    assert list(device.y) == pytest.approx([run.costs[n] * 1e3 for n in sorted(run.costs)])
    relative = lab.cost_chart(run, curves, normalised=True)
    assert all(trace.y[0] == pytest.approx(1.0) for trace in relative.data[:3] if trace.x[0] == 1)
    assert "1 node" in relative.layout.yaxis.title.text


def test_the_best_budget_is_the_argmax_of_the_estimated_speedup(run):
    curves = lab.estimates(run)
    for points in curves.values():
        speedups = {budget: speedup for budget, _, speedup in points}
        assert lab.best_budget(points) == max(speedups, key=speedups.get)
    best = lab.best_budget(curves["goose"])
    starred = [t for t in lab.sweep_chart(curves).data if t.name == f"goose best budget {best}"]
    assert len(starred) == 1 and list(starred[0].x) == [best]
    marked = [t for t in lab.cost_chart(run, curves, method="goose").data if t.name.startswith("best estimated")]
    assert len(marked) == 1 and set(marked[0].x) == {best}, "the cost curve marks the same budget"
    assert lab.best_budget([(4, 2.0, None), (8, 3.0, None)]) is None, "no costs, no best budget"


def test_acceptance_by_source_and_depth_counts_drafted_and_accepted_nodes():
    def node(source: str, depth: int, status: str) -> NodeRecord:
        return NodeRecord(token=0, text="x", source=source, parent=0, depth=depth, score=1.0, status=status)

    steps = [StepRecord(index=i, nodes=nodes, accepted=[], bonus_token=0, bonus_text="", committed=[0],
                        draft_s=0.0, verify_s=0.0, budget=len(nodes))
             for i, nodes in enumerate([
                 [node("root", 0, "root"), node("spine", 1, "accepted"), node("spine", 2, "accepted"),
                  node("branch", 1, "rejected"), node("branch", 2, "unvisited")],
                 [node("root", 0, "root"), node("spine", 1, "accepted"), node("spine", 2, "rejected"),
                  node("branch", 1, "accepted")]])]
    by = metrics.acceptance_by_source_and_depth(steps)
    assert by == {"branch": {1: (1, 2), 2: (0, 1)}, "spine": {1: (2, 2), 2: (1, 2)}}
    chart = lab.charts.acceptance_depth_chart(by)
    assert [t.name for t in chart.data] == ["spine", "branch"]
    assert list(chart.data[0].y) == [1.0, 0.5] and list(chart.data[1].y) == [0.5, 0.0]


# ---------------------------------------------------------------- checking with a real run

def fake_result(tau: float, speedup: float, real_tau: float, real_speedup: float, method: str = "goose"):
    """A RunWhatIf with a real run beside it, as run_what_if(..., check=True) returns one."""
    baseline_totals = SimpleNamespace(new_tokens=32, wall_s=1.25)
    real = SimpleNamespace(tau=real_tau, speedup=real_speedup, wall_s=1.0, tokens_per_s=32.0, same_tokens=True,
                           run=None, baseline_totals=baseline_totals, rounds=lab.CHECK_ROUNDS)
    return SimpleNamespace(method=method, tau=tau, speedup=speedup / 1.2, paced_speedup=speedup, measured=real,
                           tau_error=tau / real_tau - 1, speedup_error=speedup / real_speedup - 1)


@pytest.fixture
def registry(model) -> ModelRegistry:
    registry = ModelRegistry(allowed=["tiny-gemma3"])
    registry.register("tiny-gemma3", model)
    return registry


def checked(registry, run, monkeypatch, results, whole_sweep=False, press_after=None, **changes):
    """lab.check with run_what_if answering `results` in turn (and Stop pressed after call `press_after`)."""
    calls = []

    def fake(run_, *, model, check, rounds, on_round, **settings):
        assert check and model.name == run.model and rounds == lab.CHECK_ROUNDS
        on_round(0)
        calls.append(settings)
        if len(calls) == press_after:
            STOPS.press("lab-test")
        return results[len(calls) - 1]

    monkeypatch.setattr(lab, "run_what_if", fake)
    shape = replace(lab.own_shape(run), **changes)
    return lab.check(registry, run, lab.estimates(run), {}, shape, whole_sweep, "lab-test"), calls


def test_check_sets_the_measurement_beside_the_estimate(registry, run, monkeypatch):
    result, calls = checked(registry, run, monkeypatch, [fake_result(2.4, 1.5, 2.0, 1.2)], budget=12)
    assert calls[0]["budget"] == 12 and calls[0]["method"] == "goose"
    text = re.sub("<[^>]+>", "", result.checks)
    assert "estimated τ 2.40, measured 2.00 (error +20.0%)" in text
    assert ("estimated speed-up 1.50x on passes measured with it, at the pace of the autoregressive runs just before "
            "it (1.25x on the quiet cost table), measured 1.20x (error +25.0%)") in text, \
        "the paced estimate is checked, the table's beside it"
    assert ("real run 1.00 s, 32.0 tokens/s; autoregressive just before it 1.25 s, 25.6 tokens/s (mean of 3 "
            "alternated rounds)") in text, "both runs the speed-up divides are shown, and over how many rounds"
    assert result.measured == {"goose": {12: (2.0, 1.2)}}
    diamonds = [t for t in result.sweep.data if t.name == "goose measured"]
    assert [list(t.x) for t in diamonds] == [[12], [12]] and [list(t.y) for t in diamonds] == [[2.0], [1.2]]


def test_check_of_the_whole_sweep_stops_when_stop_is_pressed(registry, run, monkeypatch):
    results = [fake_result(2.0, 1.0, 2.0, 1.0)] * len(lab.SWEEP_BUDGETS)
    result, calls = checked(registry, run, monkeypatch, results, whole_sweep=True, press_after=2)
    assert [c["budget"] for c in calls] == list(lab.SWEEP_BUDGETS[:2]), "no real run starts after Stop"
    left = f"{len(lab.SWEEP_BUDGETS) - 2} of {len(lab.SWEEP_BUDGETS)}"
    assert "you pressed Stop" in result.checks and left in result.checks
    assert list(result.measured["goose"]) == list(lab.SWEEP_BUDGETS[:2]), "the runs that ended are measurements"
    assert not STOPS.pressed("lab-test"), "the switch is cleared when the check ends"


def test_check_says_when_the_runs_model_is_not_offered(run, monkeypatch):
    other = ModelRegistry(allowed=["tiny-llama"])
    with pytest.raises(gr.Error, match="not offer"):
        checked(other, run, monkeypatch, [])


def test_check_runs_the_model_for_real(registry, model):
    short = goose.generate(model, PROMPT, "goose", 12, budget=8, record_sources=True)
    curves = lab.estimates(short)
    result = lab.check(registry, short, curves, {}, replace(lab.own_shape(short), budget=8), False)
    real_tau, real_speedup = result.measured["goose"][8]
    assert real_tau == pytest.approx(short.totals.tau), "the same setting on the same prompt: the same passes"
    text = re.sub("<[^>]+>", "", result.checks)
    assert f"measured {real_tau:.2f}" in text and f"measured {real_speedup:.2f}x" in text
    real_tps, base_tps = (float(re.search(rf'class="lab-{name}">([0-9.]+)<', result.checks)[1])
                          for name in ("real-tps", "base-tps"))
    assert real_speedup == pytest.approx(real_tps / base_tps, rel=0.02), "the speed-up divides the two runs shown"
    assert any(t.name == "goose measured" for t in result.sweep.data)


def test_a_cancelled_check_stops_within_a_step_of_its_real_run():
    """The Lab's "check with a real run", wired as app/ui.py wires it: cancelling its event (what Gradio does
    on gradio_client's job.cancel()) stops the real run in flight after its step, and ends the event."""
    import asyncio

    from app.cancel import stop_on_cancel
    from app.ui import session_of

    slow = slow_tiny_gemma3(0.02)
    passes = [0]
    slow.model.get_decoder().register_forward_pre_hook(lambda *_: passes.__setitem__(0, passes[0] + 1))
    registry = ModelRegistry(allowed=[slow.name])
    registry.register(slow.name, slow)
    registry.get_warm(slow.name)  # once per model and process, before any visitor's run (not a step of one)
    recorded = goose.generate(slow, PROMPT, "goose", 24, budget=8, record_sources=True)
    shape = replace(lab.own_shape(recorded), budget=8)

    def check(request):
        return lab.check(registry, recorded, lab.estimates(recorded), {}, shape, True, session_of(request))

    cancellable = stop_on_cancel(check, STOPS, session_of)

    async def cancel_while_running() -> tuple[int, int]:
        passes[0] = 0
        task = asyncio.create_task(cancellable(SimpleNamespace(session_hash="lab-cancel")))
        while passes[0] < 10:
            await asyncio.sleep(0.01)
        at_cancel = passes[0]
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return at_cancel, passes[0]

    at_cancel, at_end = asyncio.run(cancel_while_running())
    time.sleep(0.3)
    assert at_end - at_cancel <= 2, "the run in flight ends after its step (one verification pass)"
    assert passes[0] == at_end, "nothing runs on after the event ended"
    assert not STOPS.pressed("lab-cancel"), "the switch is cleared for the session's next run"
