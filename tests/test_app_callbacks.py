"""The app's callbacks with tiny models: they return the HTML, figures and tables, and refuse bad input."""

from __future__ import annotations

import html
import inspect
import json
import re
import threading
import time
from dataclasses import dataclass, fields

import gradio as gr
import plotly.graph_objects as go
import pytest
from tiny import tiny_gemma3, tiny_llama

import goose
from app import callbacks
from app.limits import RunGuard
from app.models import ModelRegistry, canonical_name
from app.outputs import KEEP, Controls, bound, gathered, inputs, outputs
from app.race_trace import load_race
from app.tree_view import strip_remote_resources, tree_iframe, tree_page
from goose import bench, metrics

LIST_PROMPT = "the cat sat on the mat. the cat sat on the mat. the cat sat on the"


def _refuse(name: str | None) -> goose.GooseModel:
    raise goose.ModelLoadError(f"cannot load model {name!r}")


@pytest.fixture(scope="module")
def registry() -> ModelRegistry:
    registry = ModelRegistry(loader=_refuse)
    registry.register("tiny-llama", tiny_llama(0))
    registry.register("tiny-gemma3", tiny_gemma3(0))
    return registry


@pytest.fixture(scope="module")
def run(registry: ModelRegistry) -> goose.RunRecord:
    """A goose run whose second step has root, spine and branch nodes and a long accepted path."""
    return goose.generate(registry.get("tiny-gemma3"), LIST_PROMPT, "goose", 40, 24)


def _last(iterator):
    return list(iterator)[-1]


def test_explore_streams_then_shows_text_tree_and_download(registry: ModelRegistry) -> None:
    *streamed, shown = callbacks.explore(registry, LIST_PROMPT, "tiny-gemma3", "goose", "24", 40)
    assert streamed and all(view.run is view.tree is view.download is KEEP for view in streamed), \
        "while it streams, only the text and the counters change"
    run = shown.run
    assert isinstance(run, goose.RunRecord) and run.totals.new_tokens == 40
    assert 'class="tok tok-spine"' in shown.text and "tok-bonus" in shown.text
    assert "τ" in shown.stats and f"{run.totals.tau:.2f}" in shown.stats
    assert shown.step.maximum == len(run.steps) - 1
    assert shown.tree.startswith("<iframe") and "srcdoc=" in shown.tree
    assert goose.RunRecord.load(shown.download.value["path"]).tokens == run.tokens


def test_explore_samples_with_a_seed_and_explains_acceptance(registry: ModelRegistry) -> None:
    first = _last(callbacks.explore(registry, LIST_PROMPT, "tiny-llama", "goose", "8", 24, 0.9, 0, 0.95, "5"))
    again = _last(callbacks.explore(registry, LIST_PROMPT, "tiny-llama", "goose", "8", 24, 0.9, 0, 0.95, "5"))
    run = first.run
    assert run.sampling["temperature"] == 0.9 and run.tokens == again.run.tokens
    assert first.tree.startswith("<iframe")
    assert any("accept probability" in tree_page(step) for step in run.steps)
    with pytest.raises(gr.Error, match="seed must be a whole number"):
        next(callbacks.explore(registry, LIST_PROMPT, "tiny-llama", "goose", "8", 24, 0.9, 0, 0.95, "abc"))


def test_token_spans_cover_every_generated_token(run: goose.RunRecord, registry: ModelRegistry) -> None:
    spans = callbacks.token_spans(run)
    assert len(spans) == len(run.tokens)
    assert {kind for _, kind, _ in spans} >= {"prefill", "spine", "bonus"}
    # each token is shown, special ones by name (the run's text leaves those out)
    assert [text for text, _, _ in spans] == registry.get("tiny-gemma3").token_texts(run.tokens)


def test_tree_page_is_offline_and_draws_sources_path_and_bonus(run: goose.RunRecord) -> None:
    step = next(s for s in run.steps if {"spine", "branch"} <= {n.source for n in s.nodes})
    page = tree_page(step)
    assert not re.search(r"<(script|link)[^>]*(src|href)\s*=\s*[\"']https?://", page, re.IGNORECASE)
    assert "vis.Network" in page or "new vis" in page
    nodes = json.loads(re.search(r"nodes = new vis\.DataSet\((\[.*?\])\);", page, re.DOTALL).group(1))
    assert {n["source"] for n in nodes} >= {"root", "spine", "branch", "bonus"}
    assert len(nodes) == len(step.nodes) + 1
    outlined = [n["id"] for n in nodes if n["borderWidth"] == 4 and n["source"] != "bonus"]
    assert outlined == step.path
    spine = next(n for n in nodes if n["source"] == "spine")
    assert "source: spine" in spine["title"] and "target model chose next" in spine["title"]
    edges = json.loads(re.search(r"edges = new vis\.DataSet\((\[.*?\])\);", page, re.DOTALL).group(1))
    assert sum(e["width"] == 6 for e in edges) == len(step.accepted) + 1  # the path plus the bonus edge


def test_pyvis_cdn_tags_are_stripped() -> None:
    page = ('<link href="https://cdn.example/b.css" rel="stylesheet" />'
            '<script src="https://cdn.example/b.js" integrity="x"></script><script>var a = 1;</script>')
    assert strip_remote_resources(page) == "<script>var a = 1;</script>"


def test_tree_iframe_escapes_the_page(run: goose.RunRecord) -> None:
    frame = tree_iframe(run.steps[0])
    srcdoc = re.search(r'srcdoc="([^"]*)"', frame).group(1)
    assert "<script" not in srcdoc and "<html>" in html.unescape(srcdoc)
    assert "Run a prompt" in tree_iframe(None)


def test_scrubbing_moves_between_steps_and_clamps(run: goose.RunRecord) -> None:
    moved = callbacks.move_step(run, 0, 1)
    assert moved.step == 1 and moved.tree == callbacks.show_step(run, 1) != callbacks.show_step(run, 0)
    assert moved.text is moved.run is KEEP, "scrubbing changes only the step and its tree"
    assert callbacks.move_step(run, 0, -1).step == 0
    assert callbacks.move_step(run, len(run.steps) - 1, 1).step == len(run.steps) - 1
    assert callbacks.move_step(None, 3, 1).step == 0


def test_outputs_reach_the_components_of_their_names(run: goose.RunRecord) -> None:
    with gr.Blocks():
        viewer = {field.name: gr.HTML() for field in fields(callbacks.RunView)}
    assert outputs(callbacks.RunView, viewer) == [viewer[name] for name in ("text", "stats", "run", "step", "tree",
                                                                            "download")], "the API's order"
    moved = bound(callbacks.move_step, viewer)(run, 0, delta=1)
    assert moved == {viewer["step"]: 1, viewer["tree"]: callbacks.show_step(run, 1)}, "KEEP fields stay out"
    streamed = bound(callbacks.explore, viewer)
    assert inspect.isgeneratorfunction(streamed), "Gradio streams what a generator yields"
    assert inspect.signature(streamed) == inspect.signature(callbacks.explore), "Gradio reads the parameters"
    with pytest.raises(KeyError, match="lanes"):
        outputs(callbacks.ReplayView, viewer)


@dataclass(frozen=True)
class Shape:
    """A group of controls read together, as the Lab's tree shape is."""

    method: str
    budget: int
    bigram: bool


def test_a_group_of_inputs_reaches_the_fields_of_their_names() -> None:
    """Gradio passes input values by position: a group of controls is read into its dataclass field by field, in
    the order `inputs` lists them, whatever order the page names them in; the wrapper lists the fields in the
    group's place, so that Gradio passes gr.Request and gr.Progress where the callback takes them."""
    from gradio.helpers import special_args

    with gr.Blocks():
        shape = {"bigram": gr.Checkbox(), "budget": gr.Number(), "method": gr.Textbox()}
        run, whole = gr.State(), gr.Checkbox()
    controls = Controls(Shape, shape)
    assert inputs(run, controls, whole) == [run, shape["method"], shape["budget"], shape["bigram"], whole]
    called = []

    def check(run, shape: Shape, whole_sweep: bool, request: gr.Request, progress: gr.Progress = callbacks.NO_PROGRESS):
        called.append((run, shape, whole_sweep, request))
        return "checked"

    taking = gathered(check, run, controls, whole)
    assert list(inspect.signature(taking).parameters) == ["run", "method", "budget", "bigram", "whole_sweep",
                                                          "request", "progress"], "the API's parameters"
    values, progress_at, _, _ = special_args(taking, ["a run", "goose", 8, False, True], request="the request")
    assert progress_at == 6 and taking(*values) == "checked"
    assert called == [("a run", Shape(method="goose", budget=8, bigram=False), True, "the request")]

    async def later(run, shape: Shape) -> str:
        return shape.method

    assert inspect.iscoroutinefunction(gathered(later, run, controls)), "Gradio awaits what a coroutine returns"
    with pytest.raises(ValueError, match="Shape is read from controls named"):
        Controls(Shape, {"method": shape["method"], "budget": shape["budget"]})


def test_race_returns_charts_table_and_lossless_badge(registry: ModelRegistry) -> None:
    raced = callbacks.race(registry, LIST_PROMPT, "tiny-llama", ["pld"], "16", 24, progress=lambda *a, **k: None)
    titles = {"speed": "Tokens per second", "tau": "τ", "speedup": "Speed-up", "lengths": "Accepted length",
              "sources": "Acceptance"}
    for name, title in titles.items():
        figure = getattr(raced, name)
        assert isinstance(figure, go.Figure) and figure.layout.title.text.startswith(title), name
    table = raced.table
    assert list(table["method"]) == ["autoregressive", "pld", "balanced", "goose"]
    assert list(table["same tokens as AR"]) == ["yes"] * 4
    assert "goose-badge-ok" in raced.badge and "lossless" in raced.badge
    assert raced.speed.data[0].x == ("autoregressive", "pld", "balanced", "goose")
    assert raced.lanes.startswith('<iframe class="goose-lanes"')
    assert list(load_race(raced.download.value["path"])) == list(table["method"])


def _trees(run: goose.RunRecord) -> list[tuple]:
    return [tuple((n.token, n.parent) for n in step.nodes) for step in run.steps]


def test_a_visitors_suffix_runs_draft_from_their_own_session_only(registry: ModelRegistry) -> None:
    """Each session has its own stores, one per model: Alice's second run drafts from her first; Bob's runs never see
    hers, his race lanes all read his store as the race found it, and another model's runs read another store."""
    alice, bob = callbacks.Stores(), callbacks.Stores()
    llama = registry.get("tiny-llama").name
    first = _last(callbacks.explore(registry, LIST_PROMPT, "tiny-llama", "suffix", "25", 24, stores=alice))
    assert first.stores is alice and alice[llama].outputs == [first.run.tokens], "handed back to the session"
    again = _last(callbacks.explore(registry, LIST_PROMPT, "tiny-llama", "suffix", "25", 24, stores=alice))
    assert again.run.store == {"name": callbacks.SESSION_STORE, "outputs": [first.run.tokens]}
    assert again.run.totals.tau > first.run.totals.tau and again.run.tokens == first.run.tokens
    bobs = _last(callbacks.explore(registry, LIST_PROMPT, "tiny-llama", "suffix", "25", 24, stores=bob))
    assert bobs.run.store["outputs"] == [] and _trees(bobs.run) == _trees(first.run)
    goose_run = _last(callbacks.explore(registry, LIST_PROMPT, "tiny-llama", "goose", "8", 24, stores=bob))
    assert goose_run.stores is KEEP and goose_run.run.store is None and len(bob[llama].outputs) == 1
    raced = callbacks.race(registry, LIST_PROMPT, "tiny-llama", ["suffix", "suffix-path"], "25", 24,
                           progress=lambda *a, **k: None, stores=bob)
    runs = load_race(raced.download.value["path"])
    assert runs["suffix"].store == runs["suffix-path"].store == {"name": callbacks.SESSION_STORE,
                                                                 "outputs": [bobs.run.tokens]}
    assert list(raced.table["same tokens as AR"]) == ["yes"] * 5 and raced.table["suffix acc."].iloc[-1] != "–"
    assert raced.stores is bob and bob[llama].outputs == [bobs.run.tokens, runs["suffix"].tokens], "one per race"
    gemma = _last(callbacks.explore(registry, LIST_PROMPT, "tiny-gemma3", "suffix", "25", 24, stores=bob))
    assert gemma.run.store["outputs"] == [] and len(bob) == 2, "another model drafts from its own store"
    assert list(alice) == [llama] and alice[llama].outputs == [first.run.tokens] * 2, "nothing of Bob's is Alice's"


def test_each_session_starts_with_its_own_empty_stores(registry: ModelRegistry) -> None:
    from gradio.state_holder import SessionState

    from app.ui import build_app

    demo = build_app(registry, "tiny-llama")
    state = next(block for block in demo.blocks.values()
                 if isinstance(block, gr.State) and isinstance(block.value, callbacks.Stores))
    first, second = SessionState(demo)[state._id], SessionState(demo)[state._id]
    assert first == second == {} and first is not second and isinstance(first, callbacks.Stores)


def test_full_head_checkbox_reaches_explore_and_every_racer(registry: ModelRegistry) -> None:
    run = _last(callbacks.explore(registry, LIST_PROMPT, "tiny-llama", "goose", "8", 12, 0.0, 0, 1.0, "", True)).run
    assert run.head == "full"
    raced = callbacks.race(registry, LIST_PROMPT, "tiny-llama", [], "16", 12, True, progress=lambda *a, **k: None)
    assert list(raced.table["same tokens as AR"]) == ["yes"] * 3 and "goose-badge-ok" in raced.badge
    assert all(run.head == "full" for run in load_race(raced.download.value["path"]).values())


def test_badge_flags_a_method_whose_output_differs(run: goose.RunRecord) -> None:
    other = goose.RunRecord.from_json(run.to_json())
    other.tokens = other.tokens[:-1]
    badge = callbacks.lossless_badge({"autoregressive": run, "goose": other})
    assert "goose-badge-bad" in badge and "goose" in badge


def test_acceptance_rate_is_accepted_over_drafted(run: goose.RunRecord) -> None:
    spine = run.totals.accepted["spine"] / run.totals.drafted["spine"]
    assert metrics.acceptance_rate(run.totals, "spine") == pytest.approx(spine)
    assert metrics.acceptance_rate(run.totals, "nowhere") is None


def test_race_table_and_bench_summary_agree_on_the_same_runs(registry: ModelRegistry) -> None:
    model = registry.get("tiny-llama")
    runs = {method: goose.generate(model, LIST_PROMPT, method, 16, 8) for method in goose.METHODS}
    runs["goose"].tokens = runs["goose"].tokens[:-1] + [0]  # a method that lost the thread must read "NO" in both
    table = callbacks.race_table(runs).set_index("method")
    summaries = bench.summarize([bench.BenchRun.from_record(run, "p") for run in runs.values()])
    assert list(table.index) == [s.method for s in summaries] == list(goose.METHODS)
    for s in summaries:
        row = table.loc[s.method]
        assert (row["new tokens"], row["forward passes"]) == (s.new_tokens, s.forward_passes)
        assert row["τ"] == round(s.tau, 2) and row["tokens/s"] == round(s.tokens_per_s, 1)
        assert row["speed-up"] == round(s.speedup_pooled, 2) and row["mean accepted"] == round(
            s.mean_accepted_length, 2)
        for source in ("spine", "branch", "suffix"):
            rate = s.acceptance.get(source)
            assert row[f"{source} acc."] == ("–" if rate is None else f"{rate:.1%}")
        assert row["same tokens as AR"] == ("yes" if s.lossless else "NO")
    assert [s.lossless for s in summaries].count(False) == 1
    badge = callbacks.lossless_badge(runs)
    assert "goose-badge-bad" in badge and "goose" in badge


@pytest.mark.parametrize(("budget", "expected"), [("auto", "auto"), ("", None), (None, None), ("16", 16),
                                                  (32.0, 32), ("512", 512)])
def test_budget_parsing(budget, expected) -> None:
    assert callbacks.parse_budget(budget) == expected


@pytest.mark.parametrize(("budget", "message"), [("0", ">= 1"), ("-3", ">= 1"), ("2.5", "whole number"),
                                                 ("many", "'auto' or a whole number"), ("513", "at most 512")])
def test_bad_budgets_are_refused_with_a_message(registry: ModelRegistry, budget, message) -> None:
    with pytest.raises(gr.Error, match=message):
        next(callbacks.explore(registry, LIST_PROMPT, "tiny-llama", "goose", budget, 8))


def test_empty_prompt_is_refused(registry: ModelRegistry) -> None:
    with pytest.raises(gr.Error, match="prompt is empty"):
        next(callbacks.explore(registry, "   ", "tiny-llama", "goose", "auto", 8))
    with pytest.raises(gr.Error, match="prompt is empty"):
        callbacks.race(registry, "", "tiny-llama", [], "auto", 8, progress=lambda *a, **k: None)


def test_unknown_model_is_refused_with_its_name(registry: ModelRegistry) -> None:
    with pytest.raises(gr.Error, match="cannot load model 'no/such-model'"):
        _last(callbacks.explore(registry, LIST_PROMPT, "no/such-model", "goose", "auto", 8))


def test_too_long_a_request_is_refused(registry: ModelRegistry) -> None:
    with pytest.raises(gr.Error, match="exceeds the model's context"):
        _last(callbacks.explore(registry, "x" * 1000, "tiny-llama", "goose", "auto", 512))
    with pytest.raises(gr.Error, match="between 1 and"):
        next(callbacks.explore(registry, LIST_PROMPT, "tiny-llama", "goose", "auto", 0))


def test_a_file_that_is_not_a_trace_is_refused(tmp_path) -> None:
    for content in (b"hello", b'{"format": "other"}', b"\xff\xfe\x00"):
        path = tmp_path / "bad.json"
        path.write_bytes(content)
        with pytest.raises(gr.Error, match="not a Goose trace"):
            callbacks.replay(str(path))
    with pytest.raises(gr.Error, match="Choose a trace"):
        callbacks.replay(None)


def test_a_downloaded_trace_replays_without_a_model(run: goose.RunRecord) -> None:
    shown = callbacks.replay(callbacks.save_trace(run))
    assert shown.run.tokens == run.tokens and "tok-spine" in shown.text and shown.tree.startswith("<iframe")


def test_shipped_example_traces_load_and_stay_small() -> None:
    names = callbacks.example_traces()
    assert names, "assets/traces should ship at least one example trace"
    for name in names:
        assert (callbacks.EXAMPLE_TRACES / name).stat().st_size < 1_000_000
        shown = callbacks.load_example_trace(name)
        assert shown.run.steps and "iframe" in shown.tree and "goose-lanes" in shown.lanes
    with pytest.raises(gr.Error):
        callbacks.load_example_trace("nope.json")


def test_registry_loads_each_model_once_across_threads() -> None:
    calls = []

    def loader(name):
        calls.append(name)
        return tiny_llama(0)

    registry = ModelRegistry(loader=loader)
    threads = [threading.Thread(target=registry.get, args=("",)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert calls == [None] and registry.get(goose.DEFAULT_MODEL) is registry.get("")
    assert canonical_name("  ") == canonical_name("gemma-3-270m") == goose.DEFAULT_MODEL


def test_the_app_builds(registry: ModelRegistry) -> None:
    from app.ui import build_app

    assert isinstance(build_app(registry, "tiny-llama"), gr.Blocks)


def test_a_model_is_warmed_once_before_its_first_run_with_every_method(monkeypatch, caplog) -> None:
    registry = ModelRegistry(loader=lambda name: tiny_llama(1), allowed=[goose.DEFAULT_MODEL, "other"])
    ran = []
    real_generate = goose.decode.generate  # the one warm-up (goose.warm_up) runs through it
    monkeypatch.setattr(goose.decode, "generate", lambda model, prompt, method, *a, **k: ran.append(method) or
                        real_generate(model, prompt, method, *a, **k))
    with caplog.at_level("INFO", logger="app.models"):
        registry.before_launch()
    assert ran == list(goose.METHODS) and registry.is_warm("")
    assert not registry.is_loaded("other"), "only the first offered model is loaded before the launch"
    before, after = [r.getMessage() for r in caplog.records]
    assert "warming up gemma-3-270m" in before and re.search(r"gemma-3-270m is warm after \d+\.\d s", after)
    callbacks.get_model(registry, "")
    assert len(ran) == len(goose.METHODS), "a warm model is not warmed again"
    callbacks.get_model(registry, "other")
    assert len(ran) == 2 * len(goose.METHODS), "a model loaded later is warmed before its first run"


def test_on_zero_gpu_the_main_process_loads_the_offered_models_and_runs_none(monkeypatch) -> None:
    registry = ModelRegistry(loader=lambda name: tiny_llama(1), allowed=["a", goose.DEFAULT_MODEL, "b", "c"],
                             max_models=2)
    monkeypatch.setattr(goose.decode, "generate", lambda *a, **k: pytest.fail("no run in ZeroGPU's main process"))
    registry.before_launch(zero_gpu=True)
    assert registry.loaded() == ["a", goose.DEFAULT_MODEL, "b"] and not registry.is_warm("a")


def test_make_traces_refuses_a_busy_machine_unless_forced(monkeypatch, capsys) -> None:
    from app import make_traces

    recorded = []
    monkeypatch.setattr(make_traces, "record", lambda: recorded.append(True))
    monkeypatch.setattr(make_traces.os, "getloadavg", lambda: (9.0, 9.0, 9.0))
    assert make_traces.main([]) == 1 and not recorded
    assert "load average over the last minute is 9.00" in capsys.readouterr().err
    assert make_traces.main(["--force"]) == 0 and recorded == [True]
    monkeypatch.setattr(make_traces.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    monkeypatch.setattr(make_traces, "cpu_share", lambda seconds=1.0: 0.4)
    assert make_traces.main([]) == 1 and "40%" in capsys.readouterr().err
    monkeypatch.setattr(make_traces, "cpu_share", lambda seconds=1.0: 0.97)
    assert make_traces.main([]) == 0 and recorded == [True, True]


RENDER_S = 0.01


def test_explore_renders_each_streamed_view_off_the_run_s_clock(registry: ModelRegistry, monkeypatch) -> None:
    """The page's work (the coloured text drawn for every view streamed while the run goes on) is not the run's:
    the run's clock leaves it out, as goose.generate's holds none."""
    text_html, rendered = callbacks.text_html, []

    def slow_text_html(run):
        rendered.append(len(run.steps))
        time.sleep(RENDER_S)
        return text_html(run)

    monkeypatch.setattr(callbacks, "text_html", slow_text_html)
    monkeypatch.setattr(callbacks, "STREAM_INTERVAL_S", 0.0)  # a view after every step
    start = time.perf_counter()
    *streamed, shown = callbacks.explore(registry, LIST_PROMPT, "tiny-gemma3", "goose", "8", 40)
    elapsed = time.perf_counter() - start
    during = len(rendered) - 1  # the last one draws the finished run
    assert during == len(shown.run.steps) > 2 and len(streamed) >= during
    assert elapsed - shown.run.totals.wall_s >= len(rendered) * RENDER_S


def test_explore_lets_the_page_draw_the_start_before_the_run_s_clock_and_first_update(registry: ModelRegistry,
                                                                                       monkeypatch) -> None:
    """The run waits PAGE_SETTLE_S for the page to draw its start, off its clock, and streams its first view one
    interval into the run, not on top of the prefill: the browser's drawing shares the cores the model runs on."""
    monkeypatch.setattr(callbacks, "PAGE_SETTLE_S", 0.2)
    monkeypatch.setattr(callbacks, "STREAM_INTERVAL_S", 60.0)  # longer than the run: no view before its end
    start = time.perf_counter()
    *streamed, shown = callbacks.explore(registry, LIST_PROMPT, "tiny-gemma3", "goose", "8", 24)
    elapsed = time.perf_counter() - start
    assert not [view for view in streamed if view.text is not KEEP], "a view of the run streamed before one interval"
    assert shown.run.totals.setup_s < 0.2 <= elapsed - shown.run.totals.wall_s


def test_race_keeps_progress_and_stop_checks_off_each_racer_s_clock(registry: ModelRegistry, monkeypatch) -> None:
    """Progress reports and the Stop check between two steps do not count in any racer's clock."""
    reason, checks = RunGuard.reason, []

    def slow_reason(self):
        checks.append(1)
        time.sleep(RENDER_S)
        return reason(self)

    def slow_progress(*args, **kwargs):
        time.sleep(RENDER_S)

    monkeypatch.setattr(RunGuard, "reason", slow_reason)
    start = time.perf_counter()
    view = callbacks.race(registry, LIST_PROMPT, "tiny-gemma3", [], "8", 24, progress=slow_progress)
    elapsed = time.perf_counter() - start
    runs = load_race(view.download.value["path"])
    steps = sum(len(run.steps) for run in runs.values())
    assert len(checks) >= steps > len(runs)
    assert elapsed - sum(run.totals.wall_s for run in runs.values()) >= (steps + len(runs)) * RENDER_S
