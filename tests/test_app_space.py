"""The app as a shared public server: model policy, operator limits, Stop, race lanes and race traces."""

from __future__ import annotations

import functools
import gc
import json
import re
import socket
import sys
import time
import types
import urllib.request
import weakref
from collections.abc import Iterator
from pathlib import Path

import gradio as gr
import pytest
from tiny import slow_tiny_gemma3, tiny_llama

import goose
import goose.decode
from app import callbacks
from app.gpu import ZERO_GPU_ENV, on_gpu, on_zero_gpu
from app.limits import STOPPED, TIME_LIMIT, Limits
from app.models import ModelNotAllowedError, ModelRegistry
from app.race_lanes import lane_data, lanes_iframe, lanes_page
from app.race_trace import RACE_FORMAT, load_race, race_to_dict, save_race
from app.tokens import token_times
from app.tree_view import LABEL_PX, MIN_SCALE, tree_page

LIST_PROMPT = "the cat sat on the mat. the cat sat on the mat. the cat sat on the"
NO_PROGRESS = {"progress": lambda *a, **k: None}


def _no_download(name):
    raise AssertionError(f"the loader was called for {name!r}: a refused model must not be fetched")


@pytest.fixture(scope="module")
def registry() -> ModelRegistry:
    registry = ModelRegistry(loader=_no_download, allowed=["tiny-llama"])
    registry.register("tiny-llama", tiny_llama(0))
    registry.register("slow", slow_tiny_gemma3(0.01))
    return registry


@pytest.fixture(scope="module")
def race_runs(registry: ModelRegistry) -> dict[str, goose.RunRecord]:
    model = registry.get("tiny-llama")
    return {m: goose.generate(model, LIST_PROMPT, m, 24, 16) for m in ("autoregressive", "balanced", "goose")}


# ---------------------------------------------------------------- model policy

def test_unset_policy_offers_the_embedded_model_only() -> None:
    registry = ModelRegistry.from_env({}, loader=_no_download)
    assert registry.choices == [goose.DEFAULT_MODEL] and not registry.allows_any
    with pytest.raises(ModelNotAllowedError, match="GOOSE_MODELS"):
        registry.get("meta-llama/Llama-3.1-70B")
    assert ModelRegistry.from_env({"GOOSE_ALLOW_ANY_MODEL": "1"}).allows_any


def test_a_model_outside_the_list_is_refused_at_once_naming_goose_models(registry: ModelRegistry) -> None:
    with pytest.raises(gr.Error, match="GOOSE_MODELS") as refused:
        next(callbacks.explore(registry, LIST_PROMPT, "meta-llama/Llama-3.1-70B", "goose", "auto", 8))
    assert "tiny-llama" in refused.value.message
    with pytest.raises(gr.Error, match="not offered"):
        callbacks.race(registry, LIST_PROMPT, "/etc", [], "auto", 8, **NO_PROGRESS)


def test_models_from_the_environment_and_factories_are_offered() -> None:
    registry = ModelRegistry.from_env({"GOOSE_MODELS": "a/b, c/d", "GOOSE_MODEL_FACTORIES": "tiny=tiny:tiny_llama",
                                       "GOOSE_MAX_MODELS": "2"}, loader=_no_download)
    assert registry.choices == ["a/b", "c/d", "tiny"] and registry.max_models == 2
    assert registry.get("tiny").name == "tiny-llama-0"
    for bad in ({"GOOSE_MAX_MODELS": "0"}, {"GOOSE_MAX_MODELS": "many"}, {"GOOSE_MODEL_FACTORIES": "tiny"}):
        with pytest.raises(ValueError, match="GOOSE_M"):
            ModelRegistry.from_env(bad)


def test_the_registry_keeps_at_most_max_models_and_frees_the_rest() -> None:
    calls = []

    def loader(name):
        calls.append(name)
        return tiny_llama(len(calls))

    registry = ModelRegistry(loader=loader, allowed=["m1", "m2", "m3", goose.DEFAULT_MODEL], max_models=2)
    first = weakref.ref(registry.get("m1"))
    registry.get("m2")
    registry.get("m1")  # m1 used last: m2 is the one to go
    registry.get(goose.DEFAULT_MODEL)  # the embedded model does not count
    registry.get("m3")
    assert registry.loaded() == ["m1", goose.DEFAULT_MODEL, "m3"]
    registry.get("m2")
    assert registry.loaded() == [goose.DEFAULT_MODEL, "m3", "m2"]
    gc.collect()
    assert first() is None, "an evicted model must be freed, not kept alive somewhere"
    assert calls == ["m1", "m2", None, "m3", "m2"]


# ---------------------------------------------------------------- limits

def test_limits_come_from_the_environment_and_are_shown() -> None:
    limits = Limits.from_env({"GOOSE_MAX_PROMPT_TOKENS": "100", "GOOSE_MAX_NEW_TOKENS": "64",
                              "GOOSE_MAX_BUDGET": "32", "GOOSE_MAX_RUN_SECONDS": "2.5"})
    assert limits == Limits(100, 64, 32, 2.5)
    assert all(text in limits.describe() for text in ("100", "64", "32", "2.5 s"))
    assert Limits.from_env({}) == Limits()
    with pytest.raises(ValueError, match="GOOSE_MAX_NEW_TOKENS"):
        Limits.from_env({"GOOSE_MAX_NEW_TOKENS": "0"})
    with pytest.raises(ValueError, match="GOOSE_MAX_RUN_SECONDS"):
        Limits.from_env({"GOOSE_MAX_RUN_SECONDS": "soon"})


@pytest.mark.parametrize(("prompt", "budget", "new", "message"), [
    ("x" * 41, "auto", 8, "at most 40 prompt tokens"),
    (LIST_PROMPT[:30], "17", 8, "at most 16 nodes"),
    (LIST_PROMPT[:30], "auto", 9, "between 1 and 8"),
])
def test_a_visitor_cannot_exceed_the_limits(registry: ModelRegistry, prompt, budget, new, message) -> None:
    limits = Limits(max_prompt_tokens=40, max_new_tokens=8, max_budget=16)
    with pytest.raises(gr.Error, match=message):
        list(callbacks.explore(registry, prompt, "tiny-llama", "goose", budget, new, limits=limits))
    with pytest.raises(gr.Error, match=message):
        callbacks.race(registry, prompt, "tiny-llama", [], budget, new, limits=limits, **NO_PROGRESS)


def test_the_time_limit_stops_a_run_cleanly_and_keeps_what_it_made(registry: ModelRegistry) -> None:
    shown = list(callbacks.explore(registry, LIST_PROMPT, "slow", "goose", "8", 400, limits=Limits(max_run_s=0.3)))[-1]
    run = shown.run
    assert run.stop_reason == TIME_LIMIT and 0 < run.totals.new_tokens < 400
    assert "limit of 0.3 s" in shown.stats and shown.tree.startswith("<iframe")
    assert goose.RunRecord.load(shown.download.value["path"]).tokens == run.tokens
    full = goose.generate(registry.get("slow"), LIST_PROMPT, "goose", 400, 8)
    assert full.tokens[:len(run.tokens)] == run.tokens, "a stopped run is a prefix of the full one"


# ---------------------------------------------------------------- Stop

def test_stop_ends_the_run_within_one_step_and_the_next_run_works(registry: ModelRegistry) -> None:
    updates = callbacks.explore(registry, LIST_PROMPT, "slow", "goose", "8", 400, session="visitor")
    streamed = next(view for view in updates if 'class="stat-0"' in view.stats)  # steps have streamed to the page
    steps_shown = int(re.search(r'class="stat-0">(\d+)<', streamed.stats).group(1))
    callbacks.stop("visitor")
    shown = list(updates)[-1]
    run, slider = shown.run, shown.step
    assert run.stop_reason == STOPPED and "stopped after" in shown.stats
    assert 1 <= steps_shown <= len(run.steps) <= steps_shown + 1, "the run must end right after the step in flight"
    assert "tok-" in shown.text and shown.tree.startswith("<iframe")
    last = len(run.steps) - 1
    assert (slider.maximum, slider.value, slider.interactive) == (max(1, last), 0, last > 0)
    assert goose.RunRecord.load(shown.download.value["path"]).tokens == run.tokens
    again = list(callbacks.explore(registry, LIST_PROMPT, "slow", "goose", "8", 24, session="visitor"))[-1].run
    assert again.stop_reason == "max_new_tokens" and again.totals.new_tokens == 24


def test_stop_belongs_to_one_session(registry: ModelRegistry) -> None:
    callbacks.stop("someone-else")
    run = list(callbacks.explore(registry, LIST_PROMPT, "tiny-llama", "goose", "8", 24, session="me"))[-1].run
    assert run.stop_reason == "max_new_tokens"
    callbacks.arm("someone-else")


def test_a_stopped_race_shows_what_ran_and_compares_only_finished_runs(registry: ModelRegistry) -> None:
    callbacks.stop("racer")  # pressed while the race waits in the queue: it runs one step, then stops
    raced = callbacks.race(registry, LIST_PROMPT, "slow", [], "8", 200, session="racer", **NO_PROGRESS)
    assert list(raced.table["method"]) == ["autoregressive"]
    assert "Race cut short" in raced.badge and "balanced" in raced.badge and "goose-badge-bad" not in raced.badge
    runs = load_race(raced.download.value["path"])
    assert runs["autoregressive"].stop_reason == STOPPED and len(runs["autoregressive"].steps) == 1
    assert "goose-lanes" in raced.lanes


# ---------------------------------------------------------------- race lanes and traces

def test_token_times_grow_to_the_measured_wall_time(race_runs) -> None:
    for run in race_runs.values():
        times = token_times(run)
        assert len(times) == len(run.tokens) and times == sorted(times)
        assert times[0] == pytest.approx(run.totals.prefill_s) and times[-1] == pytest.approx(run.totals.wall_s)


def test_lanes_replay_every_method_offline(race_runs, registry: ModelRegistry) -> None:
    page = lanes_page(race_runs)
    assert not re.search(r"(src|href)\s*=\s*[\"']?https?://", page, re.IGNORECASE)
    data = json.loads(re.search(r'id="race-data">(.*?)</script>', page, re.DOTALL).group(1))
    assert [lane["method"] for lane in data] == list(race_runs)
    for lane, run in zip(data, race_runs.values(), strict=True):
        assert [text for text, _, _ in lane["tokens"]] == registry.get("tiny-llama").token_texts(run.tokens)
        assert lane["wall"] == pytest.approx(run.totals.wall_s, abs=1e-5)
    assert {kind for lane in lane_data(race_runs) for _, kind, _ in lane["tokens"]} >= {"prefill", "bonus"}
    assert "srcdoc=" in lanes_iframe(race_runs) and "Run a race" in lanes_iframe(None)


def test_a_race_trace_round_trips_and_other_files_are_refused(race_runs, tmp_path) -> None:
    path = tmp_path / "race.json"
    save_race(race_runs, path)
    assert json.loads(path.read_text())["format"] == RACE_FORMAT
    loaded = load_race(path)
    assert {m: r.tokens for m, r in loaded.items()} == {m: r.tokens for m, r in race_runs.items()}
    single = tmp_path / "run.json"
    race_runs["goose"].save(single)
    with pytest.raises(ValueError, match="single run's trace"):
        load_race(single)
    bad = tmp_path / "bad.json"
    for content in ('{"format": "goose-race/1", "runs": {}}', "[1, 2]", "not json"):
        bad.write_text(content)
        with pytest.raises(ValueError, match="not a Goose race trace"):
            load_race(bad)


def test_replay_opens_a_race_trace_with_its_lanes_and_a_run_trace_with_one(race_runs, tmp_path) -> None:
    path = tmp_path / "race.json"
    path.write_text(json.dumps(race_to_dict(race_runs)))
    shown = callbacks.replay(str(path))
    assert shown.run.method == "goose" and "race of autoregressive, balanced, goose" in shown.stats
    assert shown.lanes.count("data-method=") == 3
    single = tmp_path / "run.json"
    race_runs["balanced"].save(single)
    assert callbacks.replay(str(single)).lanes.count("data-method=") == 1
    broken = tmp_path / "broken.json"
    broken.write_text('{"format": "goose-race/1", "runs": {"goose": {"format": "goose-trace/1"}}}')
    with pytest.raises(gr.Error, match="not a Goose trace"):
        callbacks.replay(str(broken))


def test_old_trace_downloads_are_deleted_when_new_ones_are_written(tmp_path) -> None:
    old = callbacks.fresh_trace_folder(tmp_path, keep_s=3600)
    (old / "trace.json").write_text("{}")
    recent = callbacks.fresh_trace_folder(tmp_path, keep_s=3600)
    assert old.exists() and recent.exists()
    newest = callbacks.fresh_trace_folder(tmp_path, keep_s=0.0)
    assert not old.exists() and not recent.exists() and newest.exists()


# ---------------------------------------------------------------- readable trees and the page

def test_tree_page_fits_its_pane_down_to_a_legible_scale_and_scrolls(race_runs) -> None:
    page = tree_page(race_runs["goose"].steps[0])
    assert "network.setSize" in page and f"Math.max({MIN_SCALE}, fit)" in page and "scale: scale" in page
    assert MIN_SCALE * LABEL_PX >= 10, "labels of a shrunk tree stay legible"
    assert '"zoomView": false' in page and '"hover": true' in page


def test_the_page_names_its_api_and_shows_the_limits(registry: ModelRegistry) -> None:
    from app.ui import build_app

    demo = build_app(registry, "tiny-llama", Limits(max_new_tokens=77))
    names = {fn.api_name for fn in demo.fns.values()}
    assert {"explore", "race", "replay", "stop"} <= names
    public = set(demo.get_api_info()["named_endpoints"])
    assert {"/explore", "/stop", "/race", "/replay", "/replay_example"} <= public
    assert "/session_stores" not in public, "a session's stores start empty, not from an endpoint anyone may call"
    config = demo.get_config_file()
    assert any("77 new tokens" in str(c.get("props", {}).get("value", "")) for c in config["components"])
    dropdowns = [c for c in config["components"] if c.get("props", {}).get("elem_id") == "explore-model"]
    assert dropdowns[0]["type"] == "dropdown" and dropdowns[0]["props"]["choices"][0][0] == "tiny-llama"
    sliders = {c["props"]["elem_id"]: c["props"] for c in config["components"]
               if c.get("props", {}).get("elem_id") in ("explore-max-new", "race-max-new")}
    assert {name: (s["maximum"], s["value"]) for name, s in sliders.items()} == {
        "explore-max-new": (77, 64), "race-max-new": (77, 64)}, "the sliders stop at GOOSE_MAX_NEW_TOKENS"
    small = build_app(registry, "tiny-llama", Limits(max_new_tokens=20)).get_config_file()
    assert [c["props"]["maximum"] for c in small["components"]
            if c.get("props", {}).get("elem_id") == "explore-max-new"] == [20]


# ---------------------------------------------------------------- GPU Spaces

def _plain() -> str:
    return "ran here"


def test_on_gpu_is_a_no_op_off_zero_gpu(monkeypatch) -> None:
    monkeypatch.delenv(ZERO_GPU_ENV, raising=False)
    assert not on_zero_gpu() and on_gpu(duration=5)(_plain) is _plain
    monkeypatch.setenv(ZERO_GPU_ENV, "false")
    assert on_gpu(duration=5)(_plain) is _plain
    monkeypatch.setenv(ZERO_GPU_ENV, "true")
    monkeypatch.setitem(sys.modules, "spaces", None)  # ZeroGPU said, but the package is absent
    assert on_zero_gpu() and on_gpu(duration=5)(_plain) is _plain


def test_the_spaces_package_itself_leaves_functions_alone_off_zero_gpu(monkeypatch) -> None:
    spaces = pytest.importorskip("spaces")
    monkeypatch.setattr(spaces.zero.decorator.Config, "zero_gpu", False)
    assert spaces.GPU(duration=5)(_plain) is _plain


def test_on_zero_gpu_the_runs_are_wrapped_with_spaces_gpu_for_their_time_limit(monkeypatch, registry) -> None:
    from app.ui import GPU_MARGIN_S, build_app

    durations = []

    def gpu(duration=None):
        durations.append(duration)
        return lambda function: functools.update_wrapper(lambda *a, **k: ("on the GPU", function(*a, **k)),
                                                         function)

    monkeypatch.setenv(ZERO_GPU_ENV, "1")
    monkeypatch.setitem(sys.modules, "spaces", types.SimpleNamespace(GPU=gpu))
    assert on_gpu(duration=90)(_plain)() == ("on the GPU", "ran here") and durations == [90]
    durations.clear()
    demo = build_app(registry, "tiny-llama", Limits(max_run_s=12.5))
    assert durations == [12 + GPU_MARGIN_S] * 3, "Explore, Race and the Lab's real run, each for its time limit"
    assert {"explore", "race"} <= {fn.api_name for fn in demo.fns.values()}


# ---------------------------------------------------------------- the named API: bad input, traces and cancels

def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Passes:
    """Counts a model's forward passes (a step is one)."""

    def __init__(self, goose_model: goose.GooseModel) -> None:
        self.count = 0
        goose_model.model.get_decoder().register_forward_pre_hook(self._seen)

    def _seen(self, *_) -> None:
        self.count += 1


@pytest.fixture(scope="module")
def api(registry: ModelRegistry) -> Iterator[tuple[str, Passes]]:
    """The app on a free 127.0.0.1 port in this process, its models warm; the slow model's passes counted."""
    from app.ui import LAUNCH_OPTIONS, build_app

    flat = pytest.MonkeyPatch()  # see conftest.flat_costs: a tiny model's measured costs follow the machine's load
    flat.setattr(goose.decode, "cost_table", lambda model, head="screened": {1: 1.0, 4: 1.01, 16: 1.05})
    for name in ("tiny-llama", "slow"):
        registry.get_warm(name)
    demo = build_app(registry, "tiny-llama")
    port = _free_port()
    demo.queue().launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
                        **LAUNCH_OPTIONS)
    try:
        yield f"http://127.0.0.1:{port}/", Passes(registry.get("slow"))
    finally:
        demo.close()
        flat.undo()


def call_raw(url: str, name: str, body: str) -> tuple[float, str, str]:
    """POST raw JSON text (NaN, Infinity and lone surrogates as JSON writes them) to the named API and read the
    answer's event stream: (seconds, the last event, its data)."""
    started = time.monotonic()
    request = urllib.request.Request(f"{url}gradio_api/call/{name}", data=body.encode("ascii"),
                                     headers={"Content-Type": "application/json"})
    event_id = json.load(urllib.request.urlopen(request, timeout=30))["event_id"]
    stream = urllib.request.urlopen(f"{url}gradio_api/call/{name}/{event_id}", timeout=60).read().decode()
    events = re.findall(r"^event: (\S+)\ndata: (.*)$", stream, re.MULTILINE)
    return time.monotonic() - started, *events[-1]


EXPLORE = {"prompt": json.dumps(LIST_PROMPT), "model": '"tiny-llama"', "method": '"goose"', "budget": '"8"',
           "max_new": "8", "temperature": "0.0", "top_k": "0", "top_p": "1.0", "seed": '""', "full_head": "false"}
RACE = {"prompt": json.dumps(LIST_PROMPT), "model": '"tiny-llama"', "extras": "[]", "budget": '"8"', "max_new": "8",
        "full_head": "false"}
SURROGATE = '"def add(a, b):\\u0000\\ud800 x"'  # JSON's escape of a lone surrogate, as a client may send it
HOSTILE_CALLS = [  # (endpoint, fields as raw JSON text, the one line the client must read)
    ("explore", {"prompt": SURROGATE},
     "prompt must be valid Unicode text: character 15 (counting from 0) is the lone surrogate '\\ud800'"),
    ("race", {"prompt": SURROGATE},
     "prompt must be valid Unicode text: character 15 (counting from 0) is the lone surrogate '\\ud800'"),
    ("explore", {"max_new": '"lots"'}, "max_new_tokens must be a whole number between 1 and 1024 on this server, "
                                       "got 'lots'"),
    ("race", {"max_new": '"lots"'}, "max_new_tokens must be a whole number between 1 and 1024 on this server, "
                                    "got 'lots'"),
    ("explore", {"max_new": "NaN"}, "max_new_tokens must be a whole number between 1 and 1024 on this server, "
                                    "got nan"),
    ("race", {"max_new": "Infinity"}, "max_new_tokens must be a whole number between 1 and 1024 on this server, "
                                      "got inf"),
    ("explore", {"temperature": "NaN"}, "temperature must be a number between 0 and 2 on this server, got nan"),
    ("explore", {"temperature": "Infinity"}, "temperature must be a number between 0 and 2 on this server, got inf"),
    ("explore", {"top_p": "NaN"}, "top_p must be a number above 0 and at most 1, got nan"),
    ("explore", {"seed": '"x"'}, "seed must be a whole number between 0 and 18446744073709551615 (None or blank: "
                                 "a random one), got 'x'"),
    ("explore", {"budget": '"1000000000"'}, "budget 1000000000 is too large: at most 512 nodes per tree on this "
                                            "server"),
    ("race", {"budget": "1000000000"}, "budget 1000000000 is too large: at most 512 nodes per tree on this server"),
    ("explore", {"full_head": '"yes"'}, "full_head must be true or false, got 'yes'"),
    ("race", {"extras": '"pld"'}, "extra_methods must be a list of methods, got 'pld'"),
    ("explore", {"method": '["goose"]'}, "unknown method ['goose']; choose one of "),
]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "fields", "message"), HOSTILE_CALLS,
                         ids=[f"{name}-{next(iter(fields))}-{i}" for i, (name, fields, _) in enumerate(HOSTILE_CALLS)])
def test_a_bad_value_sent_as_raw_json_gets_our_one_line_and_the_next_call_answers(api, name, fields, message):
    url, _ = api
    values = {**(EXPLORE if name == "explore" else RACE), **fields}
    took, event, data = call_raw(url, name, f'{{"data": [{", ".join(values.values())}]}}')
    assert event == "error" and took < 1.0, (event, data, took)
    shown = json.loads(data)["error"]
    assert shown.startswith(message) and "\n" not in shown, shown
    took, event, data = call_raw(url, "explore", f'{{"data": [{", ".join(EXPLORE.values())}]}}')
    assert event == "complete" and took < 2.0, (event, took)


def _a_run_dict(registry: ModelRegistry) -> dict:
    return goose.generate(registry.get("tiny-llama"), LIST_PROMPT, "goose", 16, 8).to_dict()


@pytest.mark.slow
def test_replay_refuses_a_broken_trace_with_its_line_through_the_api(api, registry, tmp_path) -> None:
    from gradio_client import Client, handle_file
    from gradio_client.exceptions import AppError

    url, _ = api
    client = Client(url, verbose=False, download_files=False)
    broken = _a_run_dict(registry)
    step = next(i for i, step in enumerate(broken["steps"]) if len(step["nodes"]) > 2)
    last = len(broken["steps"][step]["nodes"]) - 1
    broken["steps"][step]["nodes"][last]["parent"] = 40  # past the node list
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    (tmp_path / "binary.json").write_bytes(b'{"format": "goose-trace/4", \xff\xfe}')
    for file, message in (("broken.json", f"This file is not a Goose trace: steps[{step}].nodes[{last}].parent must "
                                          f"be a node before it (0..{last - 1}), got 40"),
                          ("binary.json", "This file is not a Goose trace: it is not UTF-8 text (byte 28 is 0xff")):
        started = time.monotonic()
        with pytest.raises(AppError) as refused:
            client.predict(handle_file(str(tmp_path / file)), api_name="/replay")
        assert time.monotonic() - started < 1.5 and str(refused.value).startswith(message), str(refused.value)
    took, event, _ = call_raw(url, "explore", f'{{"data": [{", ".join(EXPLORE.values())}]}}')
    assert event == "complete" and took < 2.0


@pytest.mark.slow
@pytest.mark.parametrize("name", ["explore", "race"])
def test_a_cancelled_running_job_stops_within_a_step_and_the_next_call_answers(api, name, monkeypatch) -> None:
    from gradio_client import Client

    url, passes = api
    pressed_at: list[int] = []  # the slow model's passes when the cancel reached the run (its Stop switch)
    press = callbacks.STOPS.press
    monkeypatch.setattr(callbacks.STOPS, "press", lambda session: (pressed_at.append(passes.count), press(session)))
    client = Client(url, verbose=False, download_files=False)
    args = ((LIST_PROMPT, "slow", "goose", "8", 400, 0.0, 0, 1.0, "", False) if name == "explore" else
            (LIST_PROMPT, "slow", [], "8", 400, False))
    passes.count = 0
    job = client.submit(*args, api_name=f"/{name}")
    deadline = time.monotonic() + 60
    while passes.count < 10:  # running: it holds the model
        assert time.monotonic() < deadline and not job.done()
        time.sleep(0.01)
    started = time.monotonic()
    job.cancel()
    at_return = passes.count
    assert time.monotonic() - started < 1.0, "the cancel returns once the run has stopped"
    time.sleep(0.5)
    assert len(pressed_at) == 1 and at_return - pressed_at[0] <= 1, "the run ends after the step in flight"
    assert passes.count == at_return, "nothing of it runs on"
    took, event, _ = call_raw(url, "explore", f'{{"data": [{", ".join(EXPLORE.values())}]}}')
    assert event == "complete" and took < 2.0


def _a_big_trace(registry: ModelRegistry, path: Path, prompt_chars: int, steps: int) -> int:
    """A valid run trace of about `prompt_chars` + 120 bytes per step: the real run's first step, then `steps`
    more of one committed token each (the root's own). Returns its size."""
    data = _a_run_dict(registry)
    data["prompt"] = "p" * prompt_chars
    token, text = data["tokens"][-1], data["steps"][-1]["bonus_text"]
    data["steps"] += [{"index": len(data["steps"]) + i, "nodes": [{"token": token, "text": text, "source": "root",
                                                                  "parent": -1, "depth": 0, "score": 1.0}],
                       "accepted": [], "bonus_token": token, "bonus_text": text, "committed": [token],
                       "draft_s": 0.0, "verify_s": 0.001, "budget": 1} for i in range(steps)]
    data["tokens"] += [token] * steps
    path.write_text(json.dumps(data))
    return path.stat().st_size


def _sent(shown: callbacks.ReplayView) -> int:
    """Characters of what Replay sends the page (the run itself stays on the server, in the visitor's state)."""
    return sum(len(value) for value in (shown.text, shown.stats, shown.tree, shown.lanes))


def test_replay_sends_what_it_draws_not_the_whole_file(registry: ModelRegistry, tmp_path) -> None:
    path = tmp_path / "big.json"
    size = _a_big_trace(registry, path, 30_000_000, 120_000)
    assert size > 45_000_000
    shown = callbacks.replay(str(path))
    usual = _sent(callbacks.replay(callbacks.save_trace(goose.RunRecord.from_dict(_a_run_dict(registry)))))
    # every reply holds the tree page's own drawing code (about 750 kB); a 50 MB trace adds at most its drawn part
    assert _sent(shown) < usual + 600_000, f"{_sent(shown)} characters sent for a {size} byte trace ({usual} usually)"
    assert "the prompt is 30,000,000 characters long: its last 16,000 are shown" in shown.text
    assert "117,968 more tokens not shown" in shown.text  # 120,016 tokens, 2,048 shown
    assert len(shown.run.tokens) == 120_016, "the state keeps the whole run (the Lab opens it)"
