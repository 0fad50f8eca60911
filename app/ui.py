"""The page, declared top-down as it appears: Explore, Race, Replay.

Only layout and wiring live here; every event calls a plain function from
`app.callbacks`. Per-user data (the run being browsed) lives in gr.State; the
only shared object is the model registry, which locks its loads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import partial

import gradio as gr

import goose
from app import callbacks
from app.models import ModelRegistry

INTRO = """# Goose — speculative decoding with spine trees
Each step drafts a **tree** of guesses from two free sources — the **spine** (tokens copied from an earlier
match in the context) and **branches** (successors the model predicted before, from the adjacency table) —
verifies the whole tree in one forward pass, keeps the longest accepted path and adds one **bonus** token
from the target model. Greedy output is identical to plain autoregressive decoding, only faster."""

BUDGET_CHOICES = ["auto", "8", "16", "32", "60", "100"]
MODEL_INFO = ("Empty or gemma-3-270m = the embedded Gemma 3 270M. Or a Hugging Face id / a local folder "
              "(a causal LM with eager or sdpa attention).")
FULL_HEAD_LABEL = "Textbook float32 LM head"
FULL_HEAD_INFO = ("Off: every method uses the screened head (the same exact argmax through a bf16 screen, "
                  "cheaper). On: every method, the baseline too, uses the full float32 head.")


def load_examples() -> list[dict[str, str]]:
    """The example prompts shipped in assets/examples.json."""
    return json.loads((callbacks.ASSETS / "examples.json").read_text(encoding="utf-8"))


@dataclass
class RunViewer:
    """The components that show one run: counters, coloured text, step scrubber, tree, download."""

    run: gr.State
    stats: gr.HTML
    text: gr.HTML
    step: gr.Slider
    tree: gr.HTML
    download: gr.DownloadButton

    @property
    def outputs(self) -> list[gr.components.Component]:
        """In the order callbacks.view_run returns them."""
        return [self.text, self.stats, self.run, self.step, self.tree, self.download]


def run_viewer(prefix: str) -> RunViewer:
    """Lay out a run viewer and wire its scrubber; `prefix` keeps element ids unique per tab."""
    run = gr.State(None)
    stats = gr.HTML(callbacks.stats_html(None), elem_id=f"{prefix}-stats")
    text = gr.HTML(callbacks.text_html(None), elem_id=f"{prefix}-text")
    gr.Markdown("### Tree of a step\nHover a node for its text, source, depth, score, status and the token the "
                "target model chose after it. Scroll to zoom, drag to pan.")
    with gr.Row(equal_height=True):
        previous = gr.Button("◀ previous", scale=0, min_width=110, elem_id=f"{prefix}-prev")
        step = gr.Slider(0, 1, value=0, step=1, label="step", interactive=False, scale=6,
                         elem_id=f"{prefix}-step")
        following = gr.Button("next ▶", scale=0, min_width=110, elem_id=f"{prefix}-next")
    tree = gr.HTML(callbacks.tree_iframe(None), elem_id=f"{prefix}-tree")
    download = gr.DownloadButton("Download this run as a JSON trace", interactive=False, size="sm",
                                 elem_id=f"{prefix}-download")
    step.release(callbacks.show_step, [run, step], tree, show_progress="hidden")
    previous.click(partial(callbacks.move_step, delta=-1), [run, step], [step, tree], show_progress="hidden")
    following.click(partial(callbacks.move_step, delta=1), [run, step], [step, tree], show_progress="hidden")
    return RunViewer(run, stats, text, step, tree, download)


def build_app(registry: ModelRegistry | None = None, default_model: str = goose.DEFAULT_MODEL) -> gr.Blocks:
    """The whole app. Pass a registry seeded with tiny models (and their name) for fast tests."""
    registry = registry or ModelRegistry()
    examples = load_examples()
    prompts = [[e["prompt"]] for e in examples]
    labels = [e["label"] for e in examples]

    with gr.Blocks(title="Goose — spine speculation trees") as demo:
        gr.Markdown(INTRO)
        with gr.Tabs():
            with gr.Tab("Explore", id="explore"):
                with gr.Row():
                    with gr.Column(scale=3):
                        prompt = gr.Textbox(label="Prompt", lines=8, elem_id="explore-prompt")
                        gr.Examples(prompts, [prompt], example_labels=labels, label="Examples",
                                    elem_id="explore-examples")
                    with gr.Column(scale=2):
                        model = gr.Textbox(default_model, label="Model", info=MODEL_INFO, elem_id="explore-model")
                        method = gr.Dropdown(list(goose.METHODS), value="goose", label="Method")
                        budget = gr.Dropdown(BUDGET_CHOICES, value="auto", allow_custom_value=True,
                                             label="Node budget per tree",
                                             info=f"auto = the library default; 1–{callbacks.MAX_BUDGET}")
                        max_new = gr.Slider(1, 512, value=64, step=1, label="Max new tokens")
                        full_head = gr.Checkbox(False, label=FULL_HEAD_LABEL, info=FULL_HEAD_INFO)
                        with gr.Accordion("Sampling (temperature 0 = greedy)", open=False):
                            temperature = gr.Slider(0.0, 2.0, value=0.0, step=0.05, label="Temperature")
                            top_k = gr.Slider(0, 200, value=0, step=1, label="Top-k (0 = off)")
                            top_p = gr.Slider(0.05, 1.0, value=1.0, step=0.05, label="Top-p")
                            seed = gr.Textbox("", label="Seed (blank = random)")
                        go_button = gr.Button("Run", variant="primary", elem_id="explore-run")
                explore = run_viewer("explore")
                go_button.click(partial(callbacks.explore, registry),
                                [prompt, model, method, budget, max_new, temperature, top_k, top_p, seed, full_head],
                                explore.outputs, concurrency_limit=1, concurrency_id="model")

            with gr.Tab("Race", id="race"):
                gr.Markdown("Same prompt, model and budget through **autoregressive**, **balanced** (isotropic "
                            "tree) and **goose** (spine tree); add more methods below. Greedy decoding. The "
                            "baseline of every speed-up is **autoregressive decoding** of the same model with the "
                            "same LM head, one token per forward pass; every wall time runs from the call to the "
                            "last token, set-up included.")
                with gr.Row():
                    with gr.Column(scale=3):
                        race_prompt = gr.Textbox(label="Prompt", lines=6, elem_id="race-prompt")
                        gr.Examples(prompts, [race_prompt], example_labels=labels, label="Examples",
                                    elem_id="race-examples")
                    with gr.Column(scale=2):
                        race_model = gr.Textbox(default_model, label="Model", info=MODEL_INFO,
                                                elem_id="race-model")
                        extras = gr.CheckboxGroup(list(callbacks.EXTRA_RACE_METHODS), label="Also race")
                        race_budget = gr.Dropdown(BUDGET_CHOICES, value="auto", allow_custom_value=True,
                                                  label="Node budget per tree")
                        race_max_new = gr.Slider(1, 512, value=64, step=1, label="Max new tokens")
                        race_full_head = gr.Checkbox(False, label=FULL_HEAD_LABEL, info=FULL_HEAD_INFO)
                        race_button = gr.Button("Race", variant="primary", elem_id="race-run")
                badge = gr.HTML(elem_id="race-badge")
                with gr.Row():
                    speed = gr.Plot(label="tokens/s", elem_id="race-tps")
                    tau = gr.Plot(label="τ", elem_id="race-tau")
                    speedup = gr.Plot(label="speed-up", elem_id="race-speedup")
                with gr.Row():
                    lengths = gr.Plot(label="accepted length", elem_id="race-lengths")
                    sources = gr.Plot(label="acceptance by source", elem_id="race-sources")
                table = gr.Dataframe(headers=callbacks.RACE_COLUMNS, label="Numbers", interactive=False,
                                     elem_id="race-table")
                race_button.click(partial(callbacks.race, registry),
                                  [race_prompt, race_model, extras, race_budget, race_max_new, race_full_head],
                                  [speed, tau, speedup, lengths, sources, table, badge],
                                  concurrency_limit=1, concurrency_id="model")

            with gr.Tab("Replay", id="replay"):
                gr.Markdown("Browse a saved trace without a model: upload one downloaded from Explore "
                            "(or written by `goose.generate(...).save(path)`), or open a shipped example.")
                with gr.Row():
                    upload = gr.File(label="Trace (.json)", file_types=[".json"], elem_id="replay-upload")
                    with gr.Column():
                        example = gr.Dropdown(callbacks.example_traces(), label="Example traces",
                                              value=next(iter(callbacks.example_traces()), None))
                        open_example = gr.Button("Open example", elem_id="replay-open")
                replay = run_viewer("replay")
                upload.upload(callbacks.load_trace, upload, replay.outputs)
                open_example.click(callbacks.load_example_trace, example, replay.outputs)
    return demo
