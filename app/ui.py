"""The page, declared top-down as it appears: Explore, Race, Replay, Lab, Why.

Only layout and wiring live here; every event calls a plain function from
`app.callbacks`. Per-user data (the run being browsed, the stores of past outputs the
suffix methods draft from) lives in gr.State; the shared objects are the model registry,
which locks its loads, and the Stop switches, keyed by session. Runs go through one
queue ("model", one at a time), so two visitors never run the model at once and each
sees their place in line, and on one thread (app.model_thread), where the model runs at
the library's speed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from functools import partial

import gradio as gr

import goose
from app import callbacks, lab, why
from app.cancel import stop_on_cancel
from app.gpu import on_gpu
from app.limits import Limits
from app.models import ModelRegistry
from app.outputs import Components, bound, outputs
from app.race_lanes import lanes_iframe
from goose.drafters import SpineTree

INTRO = """# Goose — speculative decoding with spine trees
Each step drafts a **tree** of guesses from two free sources — the **spine** (tokens copied from an earlier
match in the context) and **branches** (successors the model predicted before, from the adjacency table) —
verifies the whole tree in one forward pass, keeps the longest accepted path and adds one **bonus** token
from the target model. Greedy output is identical to plain autoregressive decoding, only faster."""

BUDGET_CHOICES = ["auto", "8", "16", "32", "60", "100"]
MODEL_INFO = ("Empty or gemma-3-270m = the embedded Gemma 3 270M. Or a Hugging Face id / a local folder "
              "(a causal LM with eager or sdpa attention).")
OFFERED_INFO = "The models this server offers (its operator lists them in GOOSE_MODELS)."
# Options of every launch of the app (app.py, the tests' servers). Gradio 6 keeps each call's outputs in the
# visitor's localStorage (its "run history") and rewrites the whole list as a call's updates arrive: an Explore run
# adds ~0.8 MB (its tree page inlines vis-network), so by one browser's fifth run Chromium spent 0.55-0.83 of a
# core during the run, on the cores the model runs on, and Explore showed 0.73-0.81x the library's tokens/s
# (with it off: 0.2 of a core and 0.90x; docs/BENCHMARKS.md). The page shows and downloads its own runs.
LAUNCH_OPTIONS = {"run_history": False}
RUN_STATE_TTL_S = 3600  # a visitor's browsed run is freed an hour after its last update
GPU_MARGIN_S = 30  # a GPU call's time beyond the run's limit: warming a fresh ZeroGPU worker, drawing the trees
METHOD_INFO = ("suffix and suffix-path (SuffixDecoding) draft from this run's prompt and output and from your "
               "earlier runs on the same model in this session, never from another visitor's.")
FULL_HEAD_LABEL = "Textbook float32 LM head"
FULL_HEAD_INFO = ("Off: every method uses the fastest exact head on this machine (the float32 argmax through an "
                  "int8 or a bf16 screen, or plain float32; or two of them, each on the calls it is faster for). "
                  "On: every method, the baseline too, uses the full float32 head.")


def load_examples() -> list[dict[str, str]]:
    """The example prompts shipped in assets/examples.json."""
    return json.loads((callbacks.ASSETS / "examples.json").read_text(encoding="utf-8"))


@dataclass
class RunViewer:
    """The components that show one run, named as the fields of callbacks.RunView."""

    run: gr.State
    stats: gr.HTML
    text: gr.HTML
    step: gr.Slider
    tree: gr.HTML
    download: gr.DownloadButton

    @property
    def components(self) -> Components:
        """Each component by its field name, as app.outputs binds a RunView to them."""
        return {field.name: getattr(self, field.name) for field in fields(self)}


def run_viewer(prefix: str) -> RunViewer:
    """Lay out a run viewer and wire its scrubber; `prefix` keeps element ids unique per tab."""
    run = gr.State(None, time_to_live=RUN_STATE_TTL_S)
    stats = gr.HTML(callbacks.stats_html(None), label="counters", elem_id=f"{prefix}-stats")
    text = gr.HTML(callbacks.text_html(None), label="generated text", elem_id=f"{prefix}-text")
    gr.Markdown("### Tree of a step\nHover a node for its text, source, depth, score, status and the token the "
                "target model chose after it. Long trees scroll sideways.")
    with gr.Row(equal_height=True):
        previous = gr.Button("◀ previous", scale=0, min_width=110, elem_id=f"{prefix}-prev")
        step = gr.Slider(0, 1, value=0, step=1, label="step", interactive=False, scale=6,
                         elem_id=f"{prefix}-step")
        following = gr.Button("next ▶", scale=0, min_width=110, elem_id=f"{prefix}-next")
    tree = gr.HTML(callbacks.tree_iframe(None), label="tree", elem_id=f"{prefix}-tree")
    download = gr.DownloadButton("Download this run as a JSON trace", interactive=False, size="sm",
                                 elem_id=f"{prefix}-download")
    viewer = RunViewer(run, stats, text, step, tree, download)
    quiet = {"show_progress": "hidden", "api_visibility": "private", "concurrency_limit": None}
    step.release(callbacks.show_step, [run, step], tree, **quiet)
    for button, delta in ((previous, -1), (following, 1)):
        button.click(bound(partial(callbacks.move_step, delta=delta), viewer.components), [run, step], [step, tree],
                     **quiet)
    return viewer


def model_box(registry: ModelRegistry, default_model: str | None, elem_id: str) -> gr.components.Component:
    """The free text box when any model is allowed, else a dropdown of the offered models.

    The dropdown takes typed names too, so a name outside GOOSE_MODELS gets its refusal in words."""
    if registry.allows_any:
        return gr.Textbox(default_model or goose.DEFAULT_MODEL, label="Model", info=MODEL_INFO, elem_id=elem_id)
    choices = registry.choices
    value = default_model if default_model in choices else choices[0]
    return gr.Dropdown(choices, value=value, allow_custom_value=True, label="Model", info=OFFERED_INFO,
                       elem_id=elem_id)


def session_of(request: gr.Request | None) -> str | None:
    """The key of the visitor's Stop switch: one per browser tab or gradio_client."""
    return request.session_hash if request is not None else None


def build_app(registry: ModelRegistry | None = None, default_model: str | None = None,
              limits: Limits | None = None) -> gr.Blocks:
    """The whole app. Pass a registry seeded with tiny models (and their name) for fast tests;
    `limits` defaults to the operator's environment variables (see app.limits)."""
    registry = registry or ModelRegistry.from_env()
    limits = limits or Limits.from_env()
    examples = load_examples()
    unavailable = callbacks.unavailable_note()  # the methods this server cannot run, and why
    prompts = [[e["prompt"]] for e in examples]
    labels = [e["label"] for e in examples]
    # Run and Race share one queue slot; Stop and the scrubbers never wait behind a run.
    model_queue = {"concurrency_limit": 1, "concurrency_id": "model"}
    # The named API's values reach the callbacks as sent, unconverted by Gradio's components, so that a bad one
    # ("lots" new tokens) meets the library's rule and its one-line message (goose.validate), not Gradio's.
    as_sent = {"preprocess": False}
    instant = {"concurrency_limit": None, "show_progress": "hidden"}

    # On a ZeroGPU Space each run holds a GPU for at most its time limit plus the margin (app/gpu.py).
    gpu = on_gpu(duration=int(limits.max_run_s) + GPU_MARGIN_S)
    # A cancelled run (gradio_client's job.cancel()) stops after its step in flight, as if Stop were pressed.
    cancellable = partial(stop_on_cancel, switches=callbacks.STOPS, session_of=session_of)

    @cancellable
    @gpu
    def run_explore(prompt: str, model: str, method: str, budget: str, max_new: float, temperature: float,
                    top_k: float, top_p: float, seed: str, full_head: bool, stores: callbacks.Stores,
                    request: gr.Request):
        yield from callbacks.explore(registry, prompt, model, method, budget, max_new, temperature, top_k, top_p,
                                     seed, full_head, session_of(request), limits=limits, stores=stores)

    @cancellable
    @gpu
    def run_race(prompt: str, model: str, extras: list[str], budget: str, max_new: float, full_head: bool,
                 stores: callbacks.Stores, request: gr.Request, progress: gr.Progress = callbacks.NO_PROGRESS):
        return callbacks.race(registry, prompt, model, extras, budget, max_new, full_head, session_of(request),
                              progress, limits=limits, stores=stores)

    @cancellable
    @gpu
    def run_lab_check(run: goose.RunRecord | None, curves: dict | None, measured: dict | None, shape: lab.Shape,
                      whole_sweep: bool, request: gr.Request, progress: gr.Progress = callbacks.NO_PROGRESS):
        return lab.check(registry, run, curves, measured, shape, whole_sweep, session_of(request), progress,
                         limits=limits)

    def stop(request: gr.Request) -> None:
        callbacks.stop(session_of(request))

    def arm(request: gr.Request) -> None:
        callbacks.arm(session_of(request))

    # Gradio's own cache of served files (trace downloads, uploads) is emptied of files older than an hour
    with gr.Blocks(title="Goose — spine speculation trees", delete_cache=(900, 3600)) as demo:
        gr.Markdown(INTRO)
        gr.Markdown(limits.describe(), elem_id="limits")
        # the visitor's own past outputs, per model, which the suffix methods draft from (each session starts with none)
        stores = gr.State(callbacks.Stores())
        with gr.Tabs():
            with gr.Tab("Explore", id="explore"):
                with gr.Row():
                    with gr.Column(scale=3):
                        prompt = gr.Textbox(label="Prompt", lines=8, elem_id="explore-prompt")
                        gr.Examples(prompts, [prompt], example_labels=labels, label="Examples",
                                    elem_id="explore-examples")
                    with gr.Column(scale=2):
                        model = model_box(registry, default_model, "explore-model")
                        method = gr.Dropdown(goose.available_methods(), value=SpineTree.name, label="Method",
                                             info=METHOD_INFO, elem_id="explore-method")
                        if unavailable:
                            gr.Markdown(unavailable, elem_id="explore-unavailable")
                        budget = gr.Dropdown(BUDGET_CHOICES, value="auto", allow_custom_value=True,
                                             label="Node budget per tree",
                                             info=f"auto = picked every step for this machine; 1–{limits.max_budget}")
                        max_new = gr.Slider(1, limits.max_new_tokens, value=min(64, limits.max_new_tokens), step=1,
                                            label="Max new tokens", elem_id="explore-max-new")
                        full_head = gr.Checkbox(False, label=FULL_HEAD_LABEL, info=FULL_HEAD_INFO,
                                                elem_id="explore-full-head")
                        with gr.Accordion("Sampling (temperature 0 = greedy)", open=False):
                            temperature = gr.Slider(0.0, limits.max_temperature, value=0.0, step=0.05,
                                                    label="Temperature")
                            top_k = gr.Slider(0, 200, value=0, step=1, label="Top-k (0 = off)")
                            top_p = gr.Slider(0.05, 1.0, value=1.0, step=0.05, label="Top-p")
                            seed = gr.Textbox("", label="Seed (blank = random)")
                        with gr.Row():
                            go_button = gr.Button("Run", variant="primary", elem_id="explore-run")
                            stop_button = gr.Button("Stop", variant="stop", elem_id="explore-stop")
                explore = run_viewer("explore")
                explored = {**explore.components, "stores": stores}
                go_button.click(arm, None, None, api_visibility="private", **instant).then(
                    bound(run_explore, explored),
                    [prompt, model, method, budget, max_new, temperature, top_k, top_p, seed, full_head, stores],
                    outputs(callbacks.ExploreView, explored), api_name="explore", show_progress="minimal",
                    **as_sent, **model_queue)
                stop_button.click(stop, None, None, api_name="stop", **instant)

            with gr.Tab("Race", id="race"):
                gr.Markdown("Same prompt, model and budget through **autoregressive**, **balanced** (isotropic "
                            "tree) and **goose** (spine tree); add more methods below. Greedy decoding. The "
                            "baseline of every speed-up is **autoregressive decoding** of the same model with the "
                            "same LM head, one token per forward pass; every wall time runs from the call to the "
                            "last token, set-up included. When they have run, the lanes replay them side by side "
                            "at their measured pace.")
                with gr.Row():
                    with gr.Column(scale=3):
                        race_prompt = gr.Textbox(label="Prompt", lines=6, elem_id="race-prompt")
                        gr.Examples(prompts, [race_prompt], example_labels=labels, label="Examples",
                                    elem_id="race-examples")
                    with gr.Column(scale=2):
                        race_model = model_box(registry, default_model, "race-model")
                        extras = gr.CheckboxGroup(callbacks.extra_race_methods(), label="Also race")
                        if unavailable:
                            gr.Markdown(unavailable, elem_id="race-unavailable")
                        race_budget = gr.Dropdown(BUDGET_CHOICES, value="auto", allow_custom_value=True,
                                                  label="Node budget per tree")
                        race_max_new = gr.Slider(1, limits.max_new_tokens, value=min(64, limits.max_new_tokens),
                                                 step=1, label="Max new tokens", elem_id="race-max-new")
                        race_full_head = gr.Checkbox(False, label=FULL_HEAD_LABEL, info=FULL_HEAD_INFO,
                                                     elem_id="race-full-head")
                        with gr.Row():
                            race_button = gr.Button("Race", variant="primary", elem_id="race-run")
                            race_stop = gr.Button("Stop", variant="stop", elem_id="race-stop")
                badge = gr.HTML(label="lossless badge", elem_id="race-badge")
                lanes = gr.HTML(lanes_iframe(None), label="race lanes", elem_id="race-lanes")
                race_download = gr.DownloadButton("Download this race as a JSON race trace", interactive=False,
                                                  size="sm", elem_id="race-download")
                with gr.Row():
                    speed = gr.Plot(label="tokens/s", elem_id="race-tps")
                    tau = gr.Plot(label="τ", elem_id="race-tau")
                    speedup = gr.Plot(label="speed-up", elem_id="race-speedup")
                with gr.Row():
                    lengths = gr.Plot(label="accepted length", elem_id="race-lengths")
                    sources = gr.Plot(label="acceptance by source", elem_id="race-sources")
                table = gr.Dataframe(headers=callbacks.RACE_COLUMNS, label="Numbers", interactive=False,
                                     elem_id="race-table")
                race_board = {"badge": badge, "lanes": lanes, "download": race_download, "speed": speed, "tau": tau,
                              "speedup": speedup, "lengths": lengths, "sources": sources, "table": table,
                              "stores": stores}
                race_button.click(arm, None, None, api_visibility="private", **instant).then(
                    bound(run_race, race_board),
                    [race_prompt, race_model, extras, race_budget, race_max_new, race_full_head, stores],
                    outputs(callbacks.RaceView, race_board), api_name="race", **as_sent, **model_queue)
                race_stop.click(stop, None, None, api_visibility="undocumented", **instant)

            with gr.Tab("Replay", id="replay"):
                gr.Markdown("Browse a saved trace without a model: upload a run trace downloaded from Explore "
                            "(or written by `goose.generate(...).save(path)`) or a race trace downloaded from Race, "
                            "or open a shipped example.")
                with gr.Row():
                    upload = gr.File(label="Trace (.json)", file_types=[".json"], elem_id="replay-upload")
                    with gr.Column():
                        example = gr.Dropdown(callbacks.example_traces(), label="Example traces",
                                              value=next(iter(callbacks.example_traces()), None))
                        open_example = gr.Button("Open example", elem_id="replay-open")
                replay_lanes = gr.HTML(lanes_iframe(None), label="race lanes", elem_id="replay-lanes")
                replay = run_viewer("replay")
                replayed = {**replay.components, "lanes": replay_lanes}
                upload.upload(bound(callbacks.replay, replayed), upload, outputs(callbacks.ReplayView, replayed),
                              api_name="replay", concurrency_limit=None)
                open_example.click(bound(callbacks.load_example_trace, replayed), example,
                                   outputs(callbacks.ReplayView, replayed), api_name="replay_example",
                                   concurrency_limit=None, **as_sent)

            with gr.Tab("Lab", id="lab"):
                lab.lab_tab({"Explore run": explore.run, "Replay trace": replay.run}, check_fn=run_lab_check,
                            stop_fn=stop, arm_fn=arm, model_queue=model_queue)

            with gr.Tab("Why", id="why"):
                why.why_tab({"Explore run": explore.run, "Replay trace": replay.run})
    return demo
