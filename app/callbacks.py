"""The app's logic as plain functions from inputs to outputs, testable without a browser.

Each Gradio event calls one function here; `ui.py` only lays the page out and
wires events to these. Bad input raises gr.Error with a message meant for the
person at the keyboard; nothing here keeps per-user state (runs travel in
gr.State).
"""

from __future__ import annotations

import html
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gradio as gr
import pandas as pd

import goose
from app import charts
from app.models import ModelRegistry, canonical_name
from app.tree_view import BONUS_COLOUR, SOURCE_COLOURS, tree_iframe
from goose.trace import RunRecord

MAX_BUDGET = 512
MAX_NEW_TOKENS = 1024
RACE_METHODS = ("autoregressive", "balanced", "goose")
EXTRA_RACE_METHODS = ("pld", "recycling")
ASSETS = Path(__file__).resolve().parent.parent / "assets"
EXAMPLE_TRACES = ASSETS / "traces"
NO_PROGRESS = gr.Progress()  # Gradio fills a Progress default in with the page's progress bar
STREAM_INTERVAL_S = 0.15  # how often a streaming run refreshes the page

TOKEN_KINDS = {
    "spine": (SOURCE_COLOURS["spine"], "accepted from the spine (context match)"),
    "branch": (SOURCE_COLOURS["branch"], "accepted from a branch (adjacency table)"),
    "bonus": (BONUS_COLOUR, "bonus token (chosen by the target model)"),
    "prefill": ("#9ca3af", "first token, from the prefill pass"),
}


# ---------------------------------------------------------------- input checks

def parse_budget(value: Any) -> int | None:
    """The node budget from the budget box: None for "auto"/blank (the library's default), else 1..MAX_BUDGET."""
    text = str(value if value is not None else "").strip().lower()
    if text in ("", "auto"):
        return None
    try:
        number = float(text)
    except ValueError:
        raise gr.Error(f"Budget must be 'auto' or a whole number of tree nodes, got {value!r}.") from None
    if number != int(number) or number < 1:
        raise gr.Error(f"Budget must be a whole number of tree nodes >= 1 (the root counts), got {value!r}.")
    if number > MAX_BUDGET:
        raise gr.Error(f"Budget {int(number)} is too large: at most {MAX_BUDGET} nodes per tree "
                       "(bigger trees cost more than they save on any hardware this app runs on).")
    return int(number)


def parse_max_new_tokens(value: Any) -> int:
    """Max new tokens as an int in 1..MAX_NEW_TOKENS."""
    try:
        number = int(float(value))
    except (TypeError, ValueError):
        raise gr.Error(f"Max new tokens must be a whole number, got {value!r}.") from None
    if not 1 <= number <= MAX_NEW_TOKENS:
        raise gr.Error(f"Max new tokens must lie between 1 and {MAX_NEW_TOKENS}, got {number}.")
    return number


def check_prompt(prompt: Any) -> str:
    if not isinstance(prompt, str) or not prompt.strip():
        raise gr.Error("The prompt is empty: type some text to continue, or pick an example.")
    return prompt


def get_model(registry: ModelRegistry, name: str | None) -> goose.GooseModel:
    """The named model from the shared cache, with load failures turned into messages in the page."""
    try:
        return registry.get(name)
    except goose.ModelLoadError as error:
        raise gr.Error(str(error), title="Unknown model") from error
    except goose.UnsupportedModelError as error:
        raise gr.Error(f"Model {canonical_name(name)!r} cannot be used: {error}", title="Unsupported model") from error


def parse_seed(value: Any) -> int | None:
    """The seed box: blank for a fresh random seed, else a whole number."""
    if value in (None, ""):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise gr.Error(f"The seed must be a whole number or blank, got {value!r}.") from None


def head_kind(full_head: bool) -> str:
    """The app's checkbox as the library's head option."""
    return "full" if full_head else "screened"


def _start(model: goose.GooseModel, prompt: str, method: str, max_new_tokens: int,
           budget: int | None, **sampling: Any) -> goose.Generation:
    try:
        return goose.stream(model, prompt, method, max_new_tokens, budget, **sampling)
    except (ValueError, TypeError) as error:
        raise gr.Error(str(error)) from error


# ---------------------------------------------------------------- rendering a run

def token_spans(run: RunRecord) -> list[tuple[str, str, int | None]]:
    """(text, kind, step) for each generated token; kind is spine, branch, bonus or prefill."""
    if not run.tokens:
        return []
    first = run.steps[0].nodes[0].text if run.steps else run.text
    spans: list[tuple[str, str, int | None]] = [(first, "prefill", None)]
    for step in run.steps:
        drafted = [(step.nodes[i].text, step.nodes[i].source) for i in step.accepted]
        made = drafted + [(step.bonus_text, "bonus")]
        spans.extend((text, kind, step.index) for text, kind in made[:len(step.committed)])
    return spans


def text_html(run: RunRecord | None) -> str:
    """The generated text with every token coloured by how it was obtained, and a key."""
    if run is None or not run.tokens:
        return '<div class="goose-text" style="color:#6b7280">The generated text appears here.</div>'
    parts = []
    for text, kind, step in token_spans(run):
        colour, meaning = TOKEN_KINDS[kind]
        where = "prefill" if step is None else f"step {step}"
        parts.append(f'<span class="tok tok-{kind}" title="{html.escape(f"{where}: {meaning}", quote=True)}" '
                     f'style="background:{colour}33;border-bottom:3px solid {colour};border-radius:2px">'
                     f'{html.escape(text)}</span>')
    key = "".join(f'<span style="margin-right:14px"><span style="border-bottom:3px solid {colour};'
                  f'background:{colour}33;padding:0 4px">{html.escape(meaning)}</span></span>'
                  for colour, meaning in TOKEN_KINDS.values())
    prompt = html.escape(run.prompt)
    return (f'<div class="goose-text" style="font:14px/1.7 monospace;white-space:pre-wrap;padding:6px">'
            f'<span style="color:#6b7280">{prompt}</span>{"".join(parts)}</div>'
            f'<div style="font:12px sans-serif;padding:4px 6px">{key}</div>')


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


def move_step(run: RunRecord | None, index: Any, delta: int) -> tuple[int, str]:
    """Previous/next: the new step index and its tree."""
    if run is None or not run.steps:
        return 0, tree_iframe(None)
    index = min(max(0, int(index or 0) + delta), len(run.steps) - 1)
    return index, tree_iframe(run.steps[index])


def save_trace(run: RunRecord) -> str:
    """Write the run as a JSON trace to a fresh temporary file and return its path (for the download button)."""
    folder = Path(tempfile.gettempdir()) / "goose-traces" / uuid.uuid4().hex
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"goose-{run.method}-trace.json"
    run.save(path)
    return str(path)


def view_run(run: RunRecord, status: str = "") -> tuple[str, str, RunRecord, gr.Slider, str, gr.DownloadButton]:
    """Every output of a run viewer: text, counters, state, scrubber, tree of step 0, download."""
    return (text_html(run), stats_html(run, status), run, step_slider(run), show_step(run, 0),
            gr.DownloadButton(value=save_trace(run), interactive=True))


# ---------------------------------------------------------------- Explore

def explore(registry: ModelRegistry, prompt: str, model_name: str, method: str, budget: Any,
            max_new_tokens: Any, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
            seed: Any = None, full_head: bool = False) -> Iterator[tuple]:
    """Stream one run: coloured text and counters as steps arrive, then the trees and the trace download.

    Temperature 0 is greedy; above it drafts are accepted by the lossless sampling rule, and
    hovering a tried node shows the probability it was accepted with."""
    prompt = check_prompt(prompt)
    if method not in goose.METHODS:
        raise gr.Error(f"Unknown method {method!r}; choose one of {', '.join(goose.METHODS)}.")
    nodes = parse_budget(budget)
    limit = parse_max_new_tokens(max_new_tokens)
    if not registry.is_loaded(model_name):
        name = canonical_name(model_name)
        note = " (its very first load converts a GGUF: about 45 s)" if name == goose.DEFAULT_MODEL else ""
        yield gr.skip(), stats_html(None, f"Loading {name}…{note}"), gr.skip(), gr.skip(), gr.skip(), gr.skip()
    model = get_model(registry, model_name)
    generation = _start(model, prompt, method, limit, nodes, temperature=float(temperature or 0.0),
                        top_k=int(top_k or 0), top_p=float(top_p or 1.0), seed=parse_seed(seed),
                        head=head_kind(full_head))
    last_yield = 0.0
    for _ in generation:
        now = time.perf_counter()
        if now - last_yield >= STREAM_INTERVAL_S:
            last_yield = now
            yield (text_html(generation.run), stats_html(generation.run, "generating…"), gr.skip(), gr.skip(),
                   gr.skip(), gr.skip())
    run = generation.run
    yield view_run(run, f"done ({run.stop_reason or 'finished'})")


# ---------------------------------------------------------------- Replay

def load_trace(path: str | None) -> tuple:
    """Open an uploaded trace file; a file that is not a Goose trace is refused with a message."""
    if not path:
        raise gr.Error("Choose a trace file (.json) first.")
    try:
        run = RunRecord.load(path)
    except UnicodeDecodeError:
        raise gr.Error("This file is not a Goose trace: it is not text (expected a .json trace).") from None
    except ValueError as error:
        raise gr.Error(f"This file is not a Goose trace: {error}") from error
    return view_run(run, f"trace of {run.method} on {run.model}")


def example_traces() -> list[str]:
    """Names of the traces shipped in assets/traces."""
    return sorted(path.name for path in EXAMPLE_TRACES.glob("*.json"))


def load_example_trace(name: str | None) -> tuple:
    """Open one of the shipped traces by file name."""
    if not name or name not in example_traces():
        raise gr.Error(f"No example trace called {name!r}.")
    return load_trace(str(EXAMPLE_TRACES / name))


# ---------------------------------------------------------------- Race

RACE_COLUMNS = ["method", "new tokens", "forward passes", "τ", "tokens/s", "wall s", "speed-up",
                "mean accepted", "spine acc.", "branch acc.", "same tokens as AR"]


def race_table(runs: dict[str, RunRecord]) -> pd.DataFrame:
    """One row of numbers per method."""
    base = runs.get("autoregressive")
    rows = []
    for method, run in runs.items():
        totals = run.totals
        up = charts.speedup(runs, method)
        mean = sum(s.accepted_length for s in run.steps) / len(run.steps) if run.steps else 0.0
        rates = [charts.acceptance_rate(run, source) for source in ("spine", "branch")]
        rows.append([method, totals.new_tokens, totals.forward_passes, round(totals.tau, 2),
                     round(totals.tokens_per_s, 1), round(totals.wall_s, 2), None if up is None else round(up, 2),
                     round(mean, 2), *("–" if r is None else f"{r:.1%}" for r in rates),
                     "–" if base is None else ("yes" if run.tokens == base.tokens else "NO")])
    return pd.DataFrame(rows, columns=RACE_COLUMNS)


def lossless_badge(runs: dict[str, RunRecord]) -> str:
    """Green when every method produced exactly the autoregressive tokens (greedy decoding is lossless)."""
    base = runs.get("autoregressive")
    differ = [m for m, run in runs.items() if base is not None and run.tokens != base.tokens]
    if base is None:
        ok, message = False, "no autoregressive run to compare with"
    elif differ:
        ok, message = False, f"output differs from autoregressive: {', '.join(differ)}"
    else:
        ok, message = True, f"lossless: all {len(runs)} methods produced exactly the autoregressive tokens"
    colour, mark = ("#047857", "✓") if ok else ("#b91c1c", "✗")
    return (f'<div class="goose-badge goose-badge-{"ok" if ok else "bad"}" style="display:inline-block;'
            f'padding:6px 12px;border-radius:14px;color:white;background:{colour};font:600 14px sans-serif">'
            f"{mark} {html.escape(message)}</div>")


def race(registry: ModelRegistry, prompt: str, model_name: str, extra_methods: list[str] | None, budget: Any,
         max_new_tokens: Any, full_head: bool = False, progress: gr.Progress = NO_PROGRESS) -> tuple:
    """Run the same prompt through each method (same model, budget, head, greedy) and compare them."""
    prompt = check_prompt(prompt)
    unknown = [m for m in extra_methods or [] if m not in EXTRA_RACE_METHODS]
    if unknown:
        raise gr.Error(f"Unknown method(s) {', '.join(unknown)}; extras are {', '.join(EXTRA_RACE_METHODS)}.")
    methods = [m for m in goose.METHODS if m in RACE_METHODS or m in (extra_methods or [])]
    nodes = parse_budget(budget)
    limit = parse_max_new_tokens(max_new_tokens)
    progress(0.0, desc=f"loading {canonical_name(model_name)}")
    model = get_model(registry, model_name)
    head = head_kind(full_head)
    _start(model, prompt, "autoregressive", limit, nodes, head=head)  # checks the input once, before any work
    progress(0.02, desc="warming up")
    goose.generate(model, prompt, "autoregressive", 2, head=head)  # builds the head once, outside every racer
    runs: dict[str, RunRecord] = {}
    for i, method in enumerate(methods):
        progress((i, len(methods)), desc=f"racing {method}", unit="methods")
        generation = _start(model, prompt, method, limit, nodes, head=head)
        for _ in generation:
            pass
        runs[method] = generation.run
    progress((len(methods), len(methods)), desc="drawing charts", unit="methods")
    return (*charts.race_charts(runs), race_table(runs), lossless_badge(runs))

