"""Every speculative method must reproduce autoregressive greedy decoding token for token.

The reference is `transformers`' own `generate(do_sample=False)`: an independent
implementation with its own masks and (for Gemma 3) its own sliding-window cache.
"""

from __future__ import annotations

import functools

import pytest
import torch
from tiny import tiny_gemma3, tiny_llama

import goose
from goose import verify
from goose.heads.screens import HEADS

SPECULATIVE = [m for m in goose.METHODS if m != "autoregressive"]
BUDGETS = [1, 2, 3, 7, 16, 40, 100]
NEW_TOKENS = 48

PROMPTS = {
    "repetitive": "the cat sat on the mat. the cat sat on the mat. the cat sat on the",
    "list": "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20,",
    "code": "def f(x):\n    return x + 1\n\ndef g(x):\n    return f(x) + 1\n\ndef h(x):\n    return",
    "random": "q8#Lz!pW2@vN&x",
    "short": "a",
    "long": "".join(chr(33 + (i * 7919) % 90) for i in range(70)),  # much longer than the windows below
}

MODELS = {
    "llama-0": functools.partial(tiny_llama, 0),
    "llama-4": functools.partial(tiny_llama, 4),
    "gemma3-window8": functools.partial(tiny_gemma3, 0, 8),
    "gemma3-window5": functools.partial(tiny_gemma3, 2, 5),
}


@functools.cache
def model(name: str) -> goose.GooseModel:
    return MODELS[name]()


@functools.cache
def reference(name: str, prompt: str, new_tokens: int = NEW_TOKENS) -> list[int]:
    gm = model(name)
    ids = torch.tensor([gm.encode(prompt)])
    with torch.no_grad():
        out = gm.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                                do_sample=False, min_new_tokens=new_tokens)
    return out[0, ids.shape[1]:].tolist()


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("prompt", PROMPTS)
def test_autoregressive_equals_transformers_generate(name, prompt):
    run = goose.generate(model(name), PROMPTS[prompt], method="autoregressive", max_new_tokens=NEW_TOKENS)
    assert run.tokens == reference(name, PROMPTS[prompt])
    assert run.totals.tau == 1.0


def echo_prompt(name: str) -> str:
    """A prompt holding the model's own continuation of its start: context matches get accepted."""
    start = "xy"
    return start + model(name).decode(reference(name, start)) + " " + start


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("method", SPECULATIVE)
def test_speculative_methods_are_lossless(name, method):
    """Many prompts (repetitive and random) and budgets from 2 to 100, on Llama and sliding-window Gemma 3."""
    speculated = 0
    for prompt in [*PROMPTS.values(), echo_prompt(name)]:
        for budget in BUDGETS:
            run = goose.generate(model(name), prompt, method=method, max_new_tokens=NEW_TOKENS, budget=budget)
            assert run.tokens == reference(name, prompt), (prompt, budget)
            grown = goose.GooseConfig(budget=budget).grown_budget(1.0)
            assert all(len(step.nodes) <= step.budget <= grown for step in run.steps)
            speculated += sum(step.accepted_length for step in run.steps)
    assert speculated > 0, "no draft token was ever accepted: the test would not catch a broken walk"


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("method", ["goose", "recycling"])
def test_the_papers_breadth_first_branches_are_lossless(name, method):
    """branch_order="breadth" (the reference's step 4) builds other trees than the default best first: lossless too."""
    for prompt in [*PROMPTS.values(), echo_prompt(name)]:
        for budget in (4, 16):
            run = goose.generate(model(name), prompt, method=method, max_new_tokens=NEW_TOKENS, budget=budget,
                                 branch_order="breadth")
            assert run.tokens == reference(name, prompt), (prompt, budget)


@pytest.mark.parametrize("name", MODELS)
def test_the_default_auto_budget_and_shape_are_lossless(name):
    """budget="auto" (the default) tunes every method's budget and shape as it goes: lossless throughout."""
    for method in SPECULATIVE:
        for prompt in [*PROMPTS.values(), echo_prompt(name)]:
            run = goose.generate(model(name), prompt, method=method, max_new_tokens=NEW_TOKENS)
            assert run.tokens == reference(name, prompt), (method, prompt)
            assert all(len(step.nodes) <= step.budget for step in run.steps)


@pytest.mark.parametrize("head", [*HEADS, "int8+screened@8", "screened+int8@2"])
@pytest.mark.parametrize("name", ["llama-0", "gemma3-window5"])
def test_every_method_is_lossless_with_every_head(name, head):
    """head= switches every method, the baseline included: the int8 and bf16 screens, the textbook
    float32 head and routed pairs of them (one head for small calls, one for big: the prefill, the
    autoregressive step and both tree sizes cross the threshold) all give the transformers greedy output."""
    for method in goose.METHODS:
        for prompt in (PROMPTS["code"], echo_prompt(name)):
            for budget in (7, 40):
                run = goose.generate(model(name), prompt, method=method, max_new_tokens=NEW_TOKENS, budget=budget,
                                     head=head)
                assert run.tokens == reference(name, prompt), (method, prompt, budget)
                assert run.head == head


def test_sliding_window_is_needed_in_the_mask(monkeypatch):
    """Dropping the window from the mask changes the output: the lossless tests above do test it."""
    name, prompt = "gemma3-window5", PROMPTS["long"]
    monkeypatch.setattr(verify, "attention_layout", lambda config: {"sliding_attention": None,
                                                                      "full_attention": None})
    run = goose.generate(model(name), prompt, method="goose", max_new_tokens=NEW_TOKENS, budget=16)
    assert run.tokens != reference(name, prompt)


def test_accepted_drafts_cut_forward_passes():
    """On a repetitive prompt speculation must need fewer passes than tokens (tau > 1)."""
    run = goose.generate(model("llama-0"), PROMPTS["repetitive"], method="goose", max_new_tokens=NEW_TOKENS,
                         budget=16)
    assert run.totals.tau > 1.0
    assert run.totals.forward_passes == len(run.steps) + 1


@pytest.mark.slow
def test_real_gemma_lossless_on_varied_prompts(gemma):
    prompts = [
        "def quicksort(arr):\n    \"\"\"Sort a list of numbers.\"\"\"\n",
        "import numpy as np\n\ndef normalize(v):\n",
        "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, x):\n",
        "Question: What is the boiling point of water at sea level?\nAnswer:",
        "User: Can you recommend three books about the history of science?\nAssistant:",
        "Summarise the following passage in one sentence.\nPassage: The Amazon rainforest covers much of the "
        "Amazon basin of South America. It is home to millions of species of insects, plants, birds and other "
        "forms of life, and it plays a major role in regulating the world's climate.\nSummary:",
        "Shopping list:\n- apples\n- bread\n- milk\n- apples\n- bread\n-",
        "Monday, Tuesday, Wednesday, Thursday, Friday, Monday, Tuesday,",
        "Translate to French: The weather is nice today.\nFrench:",
        "Once upon a time, in a small village by the sea,",
        "SELECT name, age FROM users WHERE",
    ]
    for prompt in prompts:
        ids = torch.tensor([gemma.encode(prompt)])
        with torch.no_grad():
            expected = gemma.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=40,
                                            do_sample=False)[0, ids.shape[1]:].tolist()
        for method in goose.METHODS:
            run = goose.generate(gemma, prompt, method=method, max_new_tokens=40, budget=16)
            n = len(run.tokens)
            assert run.tokens == expected[:n], (prompt, method)
            assert n == len(expected) or run.stop_reason == "eos", (prompt, method)
