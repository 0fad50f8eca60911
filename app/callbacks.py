"""The app's logic as plain functions from inputs to outputs, testable without a browser.

Each Gradio event calls one function here; `ui.py` only lays the page out and
wires events to these. Bad input raises gr.Error with a message meant for the
person at the keyboard; nothing here keeps per-user state (runs, and the stores of
past outputs the suffix methods draft from, travel in gr.State).
"""

from __future__ import annotations

import html
import json
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr
import pandas as pd
import plotly.graph_objects as go

import goose
from app.limits import STOPPED, TIME_LIMIT, Limits, RunGuard, StopSwitches
from app.models import ModelNotAllowedError, ModelRegistry, canonical_name
from app.outputs import KEEP, Keep
from app.race_lanes import lanes_iframe
from app.race_trace import is_race, race_from_dict, save_race
from app.tokens import PREFILL, SHOWN_NAME_CHARS, SHOWN_PROMPT_CHARS, TOKEN_KINDS, token_spans
from app.tree_view import tree_iframe
from goose import charts, metrics, validate
from goose.assets import ASSETS
from goose.drafters import Balanced, SpineTree
from goose.trace import RunRecord, read_text
from goose.tree import BRANCH, SPINE, SUFFIX

DEFAULT_LIMITS = Limits()
MAX_BUDGET = DEFAULT_LIMITS.max_budget
MAX_NEW_TOKENS = DEFAULT_LIMITS.max_new_tokens
ON_THIS_SERVER = " on this server"  # follows a rule whose bound is the operator's (app.limits), not the library's
STOPS = StopSwitches()  # the Stop switch of every session of this server process
# always raced: the baseline, the control (isotropic tree) and the spine tree
RACE_METHODS = (metrics.BASELINE, Balanced.name, SpineTree.name)
SESSION_STORE = "this visitor's session"  # the name a visitor's suffix runs record for the outputs they drafted from
STORE_OUTPUTS = 32  # the most past outputs a session keeps per model for the suffix methods (the oldest dropped first)


class Stores(dict[str, goose.SuffixStore]):
    """A visitor's own stores of past outputs, one per model name: the suffix methods draft from the outputs of this
    session's earlier runs on the same model, never from another visitor's, nor from another model's token ids.
    An empty one is a gr.State's initial value, which Gradio copies for every session (a function there would be
    called per session too, but Gradio would also publish it as an API endpoint)."""


def extra_race_methods() -> list[str]:
    """Every other registered method that can run here, offered as an extra racer."""
    return [method for method in goose.available_methods() if method not in RACE_METHODS]


def model_store(stores: Stores | None, model: goose.GooseModel) -> goose.SuffixStore | None:
    """The session's store of past outputs on `model` (made on first use); None without stores."""
    if stores is None:
        return None
    return stores.setdefault(model.name, goose.SuffixStore(SESSION_STORE, max_outputs=STORE_OUTPUTS))


def unavailable_note() -> str:
    """The registered methods this server cannot run, each with its reason ("" when it runs them all)."""
    return "".join(f"*{reason}*\n\n" for reason in goose.unavailable_methods().values())


EXAMPLE_TRACES = ASSETS / "traces"
NO_PROGRESS = gr.Progress()  # Gradio fills a Progress default in with the page's progress bar
STREAM_INTERVAL_S = 0.5  # how often a streaming run refreshes the page: each refresh is the browser's work, on
# cores a machine shared with the server may be running the model on
# Seconds a run waits after the page learns it started (or of a check's new round) before its clock starts. The
# browser draws that news on the cores the model runs on: drawn during the prefill and first steps, it made an
# Explore run's prefill 30-50 ms dearer than the library's and its first three steps 30 ms (a 64-token run takes
# about 0.5 s), and a check's autoregressive prefill 40 ms dearer than goose's own, so that its speed-up error read
# -5 to -14% in Chromium (docs/BENCHMARKS.md). The visitor waits this much longer; the run's clock does not.
PAGE_SETTLE_S = 0.25
TRACES_DIR = Path(tempfile.gettempdir()) / "goose-traces"
TRACE_KEEP_S = 3600.0  # downloads older than this are deleted when a new one is written


# ---------------------------------------------------------------- input checks

@contextmanager
def refused() -> Iterator[None]:
    """A request field that breaks its rule (goose.validate) as the message in the page: the library's own line."""
    try:
        yield
    except validate.InputError as error:
        raise gr.Error(str(error), print_exception=False) from None  # the visitor's mistake, not the server's


def parse_budget(value: Any, limit: int = MAX_BUDGET) -> int | str | None:
    """The node budget from the budget box: "auto" (the tuner's pick every step), None for blank (the method's
    default), else 1..limit."""
    with refused():
        return validate.parse_budget(value, limit, where=ON_THIS_SERVER)


def parse_max_new_tokens(value: Any, limit: int = MAX_NEW_TOKENS) -> int:
    """Max new tokens as an int in 1..limit."""
    with refused():
        return validate.whole_number("max_new_tokens", value, 1, limit, typed=True, where=ON_THIS_SERVER)


def check_prompt(prompt: Any) -> str:
    """Text a tokenizer can encode, not blank."""
    with refused():
        return validate.prompt(prompt)


def parse_sampling(temperature: Any, top_k: Any, top_p: Any, seed: Any, limits: Limits) -> dict[str, Any]:
    """The sampling boxes as the library's options; temperature up to this server's limit."""
    with refused():
        return {"temperature": validate.number("temperature", temperature, 0.0, limits.max_temperature, typed=True,
                                               where=ON_THIS_SERVER),
                "top_k": validate.whole_number("top_k", top_k, 0, typed=True, where=" (0 = off)"),
                "top_p": validate.number("top_p", top_p, 0.0, 1.0, typed=True, above_low=True),
                "seed": validate.seed(seed, typed=True)}


def check_model_allowed(registry: ModelRegistry, name: str | None) -> None:
    """Refuse a model the operator does not offer at once, before anything is queued behind a download."""
    if name is not None:
        with refused():
            validate.text("model", name)
    try:
        registry.check_allowed(name)
    except ModelNotAllowedError as error:
        raise gr.Error(str(error), title="Model not offered") from error


def check_prompt_tokens(model: goose.GooseModel, prompt: str, limit: int) -> None:
    """Refuse a prompt longer than the server allows (GOOSE_MAX_PROMPT_TOKENS)."""
    count = len(model.encode(prompt))
    if count > limit:
        raise gr.Error(f"The prompt is {count} tokens long; this server takes at most {limit} prompt tokens.")


def get_model(registry: ModelRegistry, name: str | None) -> goose.GooseModel:
    """The named model from the shared cache, warmed in this process before its first run (see
    app.models.warm), with load failures turned into messages in the page."""
    check_model_allowed(registry, name)
    try:
        return registry.get_warm(name)
    except goose.ModelLoadError as error:
        raise gr.Error(str(error), title="Unknown model") from error
    except goose.UnsupportedModelError as error:
        raise gr.Error(f"Model {canonical_name(name)!r} cannot be used: {error}", title="Unsupported model") from error


def head_kind(full_head: Any) -> str:
    """The app's checkbox as the library's head option."""
    with refused():
        return "full" if validate.flag("full_head", full_head) else "auto"


def _start(model: goose.GooseModel, prompt: str, method: str, max_new_tokens: int,
           budget: int | str | None, **sampling: Any) -> goose.Generation:
    try:
        return goose.stream(model, prompt, method, max_new_tokens, budget, **sampling)
    except (ValueError, TypeError) as error:
        raise gr.Error(str(error)) from error


# ---------------------------------------------------------------- rendering a run

@dataclass
class RunView:
    """What a run viewer shows (ui.RunViewer lays out a component of each name); KEEP leaves one as it is."""

    text: str | Keep = KEEP  # the generated text, each token coloured by how it was obtained
    stats: str | Keep = KEEP  # the counters line
    run: RunRecord | None | Keep = KEEP  # the run being browsed (a gr.State)
    step: gr.Slider | int | Keep = KEEP  # the step scrubber, or just its position
    tree: str | Keep = KEEP  # the tree of the step on the scrubber
    download: gr.DownloadButton | Keep = KEEP  # the run's JSON trace


@dataclass
class ExploreView(RunView):
    """Explore's run viewer and the session's stores of past outputs, which a suffix run adds its output to."""

    stores: Stores | Keep = KEEP


@dataclass
class ReplayView(RunView):
    """A run viewer and the race lanes above it: one lane for a run trace, every method's for a race trace."""

    lanes: str | Keep = KEEP


def text_html(run: RunRecord | None) -> str:
    """The generated text with every token coloured by how it was obtained, and a key."""
    if run is None or not run.tokens:
        return '<div class="goose-text" style="color:#6b7280">The generated text appears here.</div>'
    parts = []
    spans = token_spans(run, shown=True)
    for text, kind, step in spans:
        colour, meaning = TOKEN_KINDS[kind]
        where = PREFILL if step is None else f"step {step}"
        parts.append(f'<span class="tok tok-{kind}" title="{html.escape(f"{where}: {meaning}", quote=True)}" '
                     f'style="background:{colour}33;border-bottom:3px solid {colour};border-radius:2px">'
                     f'{html.escape(text)}</span>')
    key = "".join(f'<span style="margin-right:14px"><span style="border-bottom:3px solid {colour};'
                  f'background:{colour}33;padding:0 4px">{html.escape(meaning)}</span></span>'
                  for colour, meaning in TOKEN_KINDS.values())
    if len(spans) < len(run.tokens):
        parts.append(f'<span class="goose-cut" style="color:#6b7280"> … {len(run.tokens) - len(spans):,} more '
                     "tokens not shown: download the trace for all of them</span>")
    prompt = html.escape(shown_prompt(run.prompt))
    return (f'<div class="goose-text" style="font:14px/1.7 monospace;white-space:pre-wrap;padding:6px">'
            f'<span style="color:#6b7280">{prompt}</span>{"".join(parts)}</div>'
            f'<div style="font:12px sans-serif;padding:4px 6px">{key}</div>')


def shown_prompt(prompt: str) -> str:
    """The prompt as a viewer draws it: whole, or its end (which the generated text continues) and its length."""
    if len(prompt) <= SHOWN_PROMPT_CHARS:
        return prompt
    return (f"[the prompt is {len(prompt):,} characters long: its last {SHOWN_PROMPT_CHARS:,} are shown]\n…"
            f"{prompt[-SHOWN_PROMPT_CHARS:]}")


def stats_html(run: RunRecord | None, status: str = "") -> str:
    """The live counters: steps, τ, tokens/s, and accepted/drafted per source."""
    if run is None:
        return f'<div class="goose-stats">{html.escape(status)}</div>'
    totals = run.totals
    by_source = ", ".join(f"{source} {totals.accepted.get(source, 0)}/{n}"
                          for source, n in sorted(totals.drafted.items())) or "none"
    cells = [("steps", str(len(run.steps))), ("new tokens", str(totals.new_tokens)), ("τ", f"{totals.tau:.2f}"),
             ("tokens/s", f"{totals.tokens_per_s:.1f}"), ("wall", f"{totals.wall_s:.2f} s"),
             ("accepted/drafted", by_source)]
    body = "".join(f'<span style="margin-right:18px"><b>{name}</b> <span class="stat-{i}">{html.escape(value)}'
                   f"</span></span>" for i, (name, value) in enumerate(cells))
    tail = f' <span style="color:#6b7280">{html.escape(status)}</span>' if status else ""
    return f'<div class="goose-stats" style="font:14px sans-serif;padding:4px">{body}{tail}</div>'


def step_slider(run: RunRecord | None, index: int = 0) -> gr.Slider:
    """The step scrubber sized to the run."""
    last = max(0, len(run.steps) - 1) if run else 0
    return gr.Slider(minimum=0, maximum=max(1, last), value=min(max(0, index), last), step=1,
                     interactive=bool(run and len(run.steps) > 1))


def show_step(run: RunRecord | None, index: Any) -> str:
    """The tree iframe of step `index` of the run (clamped to the run's steps)."""
    if run is None or not run.steps:
        return tree_iframe(None)
    index = min(max(0, int(index or 0)), len(run.steps) - 1)
    return tree_iframe(run.steps[index])


def move_step(run: RunRecord | None, index: Any, delta: int) -> RunView:
    """Previous/next: the new step index and its tree."""
    if run is None or not run.steps:
        return RunView(step=0, tree=tree_iframe(None))
    index = min(max(0, int(index or 0) + delta), len(run.steps) - 1)
    return RunView(step=index, tree=tree_iframe(run.steps[index]))


def fresh_trace_folder(root: Path = TRACES_DIR, keep_s: float = TRACE_KEEP_S) -> Path:
    """A new folder for one download, after deleting those older than `keep_s` (Gradio has copied them to
    its own cache by then), so a server that runs for weeks does not fill its disk with traces."""
    root.mkdir(parents=True, exist_ok=True)
    for old in root.iterdir():
        if time.time() - old.stat().st_mtime > keep_s:
            shutil.rmtree(old, ignore_errors=True)
    folder = root / uuid.uuid4().hex
    folder.mkdir()
    return folder


def save_trace(run: RunRecord) -> str:
    """Write the run as a JSON trace to a fresh temporary file and return its path (for the download button)."""
    path = fresh_trace_folder() / f"goose-{run.method}-trace.json"
    run.save(path)
    return str(path)


def view_run(run: RunRecord, status: str = "") -> RunView:
    """Every output of a run viewer: text, counters, state, scrubber, tree of step 0, download."""
    return RunView(text=text_html(run), stats=stats_html(run, status), run=run, step=step_slider(run),
                   tree=show_step(run, 0), download=gr.DownloadButton(value=save_trace(run), interactive=True))


# ---------------------------------------------------------------- Explore

def run_status(run: RunRecord, limits: Limits) -> str:
    """How a run ended, in words for the counters line."""
    if run.stop_reason == STOPPED:
        return f"stopped after {run.totals.new_tokens} tokens: browse or download the partial run"
    if run.stop_reason == TIME_LIMIT:
        return (f"stopped at this server's limit of {limits.max_run_s:g} s per run, after {run.totals.new_tokens} "
                "tokens: browse or download the partial run")
    return f"done ({run.stop_reason or 'finished'})"


def stop(session: str | None) -> None:
    """The Stop button: the session's running (or queued) run ends after its current step."""
    STOPS.press(session)


def arm(session: str | None) -> None:
    """Clear the session's Stop switch when a run is submitted, so an old press cannot stop it."""
    STOPS.arm(session)


def explore(registry: ModelRegistry, prompt: str, model_name: str, method: str, budget: Any,
            max_new_tokens: Any, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
            seed: Any = None, full_head: bool = False, session: str | None = None, *,
            limits: Limits = DEFAULT_LIMITS, stores: Stores | None = None) -> Iterator[RunView]:
    """Stream one run: coloured text and counters as steps arrive, then the trees and the trace download.

    Temperature 0 is greedy; above it drafts are accepted by the lossless sampling rule, and
    hovering a tried node shows the probability it was accepted with. The session's Stop button
    or the server's time limit end the run between two steps; what was generated stays.
    A suffix method drafts from the session's store for the model (`stores`) too, and gives it the run's output
    once the run ends (the last view hands the stores back to the session's state)."""
    prompt = check_prompt(prompt)
    with refused():
        validate.choice("method", method, list(goose.METHODS))
        if reason := goose.METHODS[method].unavailable():
            raise validate.InputError(reason)
    nodes = parse_budget(budget, limits.max_budget)
    limit = parse_max_new_tokens(max_new_tokens, limits.max_new_tokens)
    sampling = parse_sampling(temperature, top_k, top_p, seed, limits)
    head = head_kind(full_head)
    check_model_allowed(registry, model_name)
    if not registry.is_warm(model_name):
        name = canonical_name(model_name)
        if registry.is_loaded(model_name):
            status = f"Warming {name} up (once: head choice, cost table, a short run of each method)…"
        else:
            first = name == goose.DEFAULT_MODEL
            note = " (its very first load on a machine converts its GGUF file, once)" if first else ""
            status = f"Loading {name}…{note}"
        yield RunView(stats=stats_html(None, status))
    model = get_model(registry, model_name)
    check_prompt_tokens(model, prompt, limits.max_prompt_tokens)
    reads = model_store(stores, model) if goose.METHODS[method].uses_suffix else None
    time.sleep(PAGE_SETTLE_S)  # the page draws the run's start before its clock starts
    generation = _start(model, prompt, method, limit, nodes, record_sources=True,  # for the Lab tab
                        head=head, store=reads, **sampling)
    guard = RunGuard(STOPS, session, limits.max_run_s)
    last_yield = time.perf_counter()  # the first update after one interval, not on top of the prefill
    try:
        for _ in guard.steps(generation):
            now = time.perf_counter()
            if now - last_yield >= STREAM_INTERVAL_S:
                last_yield = now
                yield RunView(text=text_html(generation.run), stats=stats_html(generation.run, "generating…"))
    finally:
        guard.release()
    run = generation.run
    yield ExploreView(**vars(view_run(run, run_status(run, limits))), stores=KEEP if reads is None else stores)


# ---------------------------------------------------------------- Replay

def read_trace(path: str | None) -> tuple[dict[str, RunRecord], bool]:
    """The runs of an uploaded trace by method (a run trace's one, a race trace's every method's) and whether it
    is a race; a file that is neither is refused with the line that says what is wrong with it."""
    if not path:
        raise gr.Error("Choose a trace file (.json) first.")
    try:
        data = json.loads(read_text(path))
        if is_race(data):
            return race_from_dict(data), True
        run = RunRecord.from_dict(data)
        return {run.method: run}, False
    except json.JSONDecodeError:
        raise gr.Error("This file is not a Goose trace: it is not JSON (expected a .json run or race trace).") from None
    except ValueError as error:  # "not a Goose trace: <what is wrong>"
        raise gr.Error(f"This file is {error}") from None


def replay(path: str | None) -> ReplayView:
    """Open a run trace (its run, and one lane) or a race trace (its goose run, and every method's lane). The page
    gets what it draws (app.tokens.SHOWN_TOKENS tokens, the end of a long prompt), the state the whole run."""
    runs, race = read_trace(path)
    shown = runs.get(SpineTree.name) or next(reversed(runs.values()))
    model, method = shown.model[:SHOWN_NAME_CHARS], shown.method[:SHOWN_NAME_CHARS]
    status = (f"race of {', '.join(m[:SHOWN_NAME_CHARS] for m in runs)} on {model}: showing {method}" if race
              else f"trace of {method} on {model}")
    return ReplayView(**vars(view_run(shown, status)), lanes=lanes_iframe(runs))


def example_traces() -> list[str]:
    """Names of the traces shipped in assets/traces."""
    return sorted(path.name for path in EXAMPLE_TRACES.glob("*.json"))


def load_example_trace(name: str | None) -> ReplayView:
    """Open one of the shipped traces by file name."""
    if not name or name not in example_traces():
        raise gr.Error(f"No example trace called {name!r}.")
    return replay(str(EXAMPLE_TRACES / name))


# ---------------------------------------------------------------- Race

@dataclass
class RaceView:
    """What the Race tab shows once the methods have run."""

    speed: go.Figure  # tokens/s per method
    tau: go.Figure  # τ, tokens per verification pass
    speedup: go.Figure  # over autoregressive decoding
    lengths: go.Figure  # the accepted length per step
    sources: go.Figure  # acceptance by draft source
    table: pd.DataFrame  # the numbers (RACE_COLUMNS)
    badge: str  # lossless or not, and a note when the race was cut short
    lanes: str  # the runs replayed side by side at their measured pace
    download: gr.DownloadButton  # the race as a JSON race trace
    stores: Stores | Keep = KEEP  # the session's stores of past outputs, once a suffix lane added to one


RACE_COLUMNS = ["method", "new tokens", "forward passes", "τ", "tokens/s", "wall s", "speed-up",
                "mean accepted", "spine acc.", "branch acc.", "suffix acc.", "same tokens as AR"]


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def race_table(runs: dict[str, RunRecord]) -> pd.DataFrame:
    """One row of numbers per method, every one from goose.metrics (the bench's summary reads the same)."""
    rows = []
    for m in metrics.race_metrics(runs):
        rates = [m.acceptance.get(source) for source in (SPINE, BRANCH, SUFFIX)]
        rows.append([m.method, m.new_tokens, m.forward_passes, _rounded(m.tau, 2), round(m.tokens_per_s, 1),
                     round(m.wall_s, 2), _rounded(m.speedup_pooled, 2), _rounded(m.mean_accepted_length, 2),
                     *("–" if r is None else f"{r:.1%}" for r in rates),
                     "–" if m.lossless is None else ("yes" if m.lossless else "NO")])
    return pd.DataFrame(rows, columns=RACE_COLUMNS)


def lossless_badge(runs: dict[str, RunRecord]) -> str:
    """Green when every method produced exactly the autoregressive tokens (greedy decoding is lossless)."""
    checked = {m.method: m.lossless for m in metrics.race_metrics(runs)}
    differ = [method for method, same in checked.items() if same is False]
    if metrics.BASELINE not in runs:
        ok, message = False, "no autoregressive run to compare with"
    elif differ:
        ok, message = False, f"output differs from autoregressive: {', '.join(differ)}"
    else:
        ok, message = True, f"lossless: all {len(runs)} methods produced exactly the autoregressive tokens"
    colour, mark = ("#047857", "✓") if ok else ("#b91c1c", "✗")
    return (f'<div class="goose-badge goose-badge-{"ok" if ok else "bad"}" style="display:inline-block;'
            f'padding:6px 12px;border-radius:14px;color:white;background:{colour};font:600 14px sans-serif">'
            f"{mark} {html.escape(message)}</div>")


def save_race_trace(runs: dict[str, RunRecord]) -> str:
    """Write the race as a JSON race trace to a fresh temporary file and return its path."""
    path = fresh_trace_folder() / "goose-race-trace.json"
    save_race(runs, path)
    return str(path)


def race_status(runs: dict[str, RunRecord], methods: list[str], limits: Limits) -> str:
    """The badge: lossless over the complete runs, and a note on a stopped race."""
    complete = {m: run for m, run in runs.items() if run.stop_reason not in (STOPPED, TIME_LIMIT)}
    cut = [m for m in methods if m not in complete]
    if not cut:
        return lossless_badge(runs)
    why = "you pressed Stop" if any(r.stop_reason == STOPPED for r in runs.values()) else (
        f"this server's limit of {limits.max_run_s:g} s per race was reached")
    note = (f'<div class="goose-race-cut" style="font:14px sans-serif;padding:4px">Race cut short ({why}): '
            f'{html.escape(", ".join(cut))} did not finish; their partial runs are shown and not compared.</div>')
    return (lossless_badge(complete) if complete else "") + note


def race(registry: ModelRegistry, prompt: str, model_name: str, extra_methods: list[str] | None, budget: Any,
         max_new_tokens: Any, full_head: bool = False, session: str | None = None,
         progress: gr.Progress = NO_PROGRESS, *, limits: Limits = DEFAULT_LIMITS,
         stores: Stores | None = None) -> RaceView:
    """Run the same prompt through each method (same model, budget, head, greedy) and compare them.

    Stop or the server's time limit (for the whole race) end the current method between two steps
    and skip the rest; what ran is shown. The suffix lanes all read the session's store for the model (`stores`)
    as it was when the race started (none drafts from another lane's output); the first of them to finish gives it
    its output."""
    prompt = check_prompt(prompt)
    extra_methods = [] if extra_methods is None else extra_methods
    with refused():
        if not isinstance(extra_methods, list):
            raise validate.InputError(f"extra_methods must be a list of methods, got {validate.shown(extra_methods)}")
        for extra in extra_methods:
            validate.choice("extra method", extra, extra_race_methods())
    methods = [m for m in goose.METHODS if m in RACE_METHODS or m in extra_methods]
    nodes = parse_budget(budget, limits.max_budget)
    limit = parse_max_new_tokens(max_new_tokens, limits.max_new_tokens)
    head = head_kind(full_head)
    check_model_allowed(registry, model_name)
    progress(0.0, desc=f"loading {canonical_name(model_name)}")
    model = get_model(registry, model_name)
    check_prompt_tokens(model, prompt, limits.max_prompt_tokens)
    _start(model, prompt, metrics.BASELINE, limit, nodes, head=head)  # checks the input once, before any work
    progress(0.02, desc="warming up")
    goose.generate(model, prompt, metrics.BASELINE, 2, head=head)  # builds the head once, outside every racer
    runs: dict[str, RunRecord] = {}
    suffix_lanes = [method for method in methods if goose.METHODS[method].uses_suffix]
    store = model_store(stores, model) if suffix_lanes else None
    fixed = goose.SuffixStore.from_snapshot(store.snapshot()) if store is not None else None
    guard = RunGuard(STOPS, session, limits.max_run_s)
    try:
        for i, method in enumerate(methods):
            if runs and guard.reason():
                break
            progress((i, len(methods)), desc=f"racing {method}", unit="methods")
            reads = fixed if method in suffix_lanes else None
            generation = _start(model, prompt, method, limit, nodes, head=head, store=reads)
            for _ in guard.steps(generation):
                pass
            runs[method] = generation.run
    finally:
        guard.release()
    finished = [runs[method] for method in suffix_lanes
                if method in runs and runs[method].stop_reason not in (STOPPED, TIME_LIMIT)]
    if store is not None and finished and store.remember:
        store.add(finished[0].tokens)
    progress((len(methods), len(methods)), desc="drawing charts", unit="methods")
    raced = metrics.race_metrics(runs)
    return RaceView(speed=charts.tokens_per_second_chart(raced), tau=charts.tau_chart(raced),
                    speedup=charts.speedup_chart(raced), lengths=charts.accepted_length_chart(raced),
                    sources=charts.acceptance_chart(raced), table=race_table(runs),
                    badge=race_status(runs, methods, limits), lanes=lanes_iframe(runs),
                    download=gr.DownloadButton(value=save_race_trace(runs), interactive=True),
                    stores=stores if store is not None and finished else KEEP)
