"""Goose inside `transformers`' generate: both custom_generate forms keep generate's conventions and its
greedy output token for token (goose/hf_generate.py, custom_generate/generate.py)."""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from tiny import tiny_gemma3, tiny_llama
from transformers import GenerationConfig, StoppingCriteria, StoppingCriteriaList, TextIteratorStreamer
from transformers.generation import GenerateDecoderOnlyOutput, MaxLengthCriteria, StopStringCriteria
from transformers.generation.streamers import BaseStreamer

import goose
from goose.hf_generate import goose_generate, goose_model_for

REPO = str(Path(__file__).resolve().parent.parent)
NEW_TOKENS = 24
PROMPTS = {
    "repetitive": "the cat sat on the mat. the cat sat on the mat. the cat sat on the",
    "code": "def f(x):\n    return x + 1\n\ndef g(x):\n    return f(x) + 1\n\ndef h(x):\n    return",
}
MODELS = {"llama": functools.partial(tiny_llama, 0), "gemma3": functools.partial(tiny_gemma3, 0)}


@functools.cache
def model(name: str) -> goose.GooseModel:
    """A tiny model whose GooseModel (and tokenizer) generate uses; built in memory, so it has no path."""
    return goose_model_for(MODELS[name]())


def prompt_ids(gm: goose.GooseModel, prompt: str = PROMPTS["repetitive"]) -> torch.Tensor:
    return torch.tensor([gm.encode(prompt)])


@functools.cache
def reference(name: str, prompt: str) -> torch.Tensor:
    """transformers' own greedy output."""
    gm = model(name)
    return gm.model.generate(prompt_ids(gm, PROMPTS[prompt]), max_new_tokens=NEW_TOKENS, do_sample=False)


class Collector(BaseStreamer):
    """Every put() and the end(), as they come."""

    def __init__(self) -> None:
        self.calls: list = []

    def put(self, value: torch.Tensor) -> None:
        self.calls.append(value.tolist())

    def end(self) -> None:
        self.calls.append("end")


class StopAtToken(StoppingCriteria):
    """Stops at the first `token`; counts its calls (generate calls criteria once per new token)."""

    def __init__(self, token: int) -> None:
        self.token, self.calls = token, 0

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        self.calls += 1
        return input_ids[:, -1] == self.token


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("method", goose.METHODS)
def test_callable_equals_greedy_generate(name, prompt, method):
    gm = model(name)
    ids = prompt_ids(gm, PROMPTS[prompt])
    out = gm.model.generate(ids, attention_mask=torch.ones_like(ids), custom_generate=goose_generate,
                            max_new_tokens=NEW_TOKENS, method=method, budget=16)
    assert torch.equal(out, reference(name, prompt))
    if prompt == "repetitive":  # and the same tokens as goose's own entry (on token ids: no special tokens added)
        run = goose.generate(gm, ids[0].tolist(), method=method, max_new_tokens=NEW_TOKENS, budget=16)
        assert out[0, ids.shape[1]:].tolist() == run.tokens


@pytest.mark.parametrize("name", MODELS)
def test_path_form_equals_greedy_generate(name):
    gm = model(name)
    out = gm.model.generate(prompt_ids(gm), custom_generate=REPO, trust_remote_code=True,
                            max_new_tokens=NEW_TOKENS, do_sample=False, tokenizer=gm.tokenizer)
    assert torch.equal(out, reference(name, "repetitive"))


def test_goose_options_and_knobs_carry_over():
    gm = model("llama")
    ids = prompt_ids(gm)
    out = gm.model.generate(ids, custom_generate=goose_generate, max_new_tokens=NEW_TOKENS, method="goose",
                            budget=24, head="full", max_branch_depth=2, spine_share=0.5,
                            goose_config=goose.GooseConfig(top_k=4))
    assert torch.equal(out, reference("llama", "repetitive"))
    with pytest.raises(ValueError, match="method"):
        gm.model.generate(ids, custom_generate=goose_generate, max_new_tokens=4, method="beam")


@pytest.mark.parametrize("form", ["callable", "repository"])
def test_suffix_decoding_and_its_store_carry_over(form):
    """method="suffix" with a store of past outputs and a suffix knob: generate's greedy output, and the store
    remembers it."""
    gm = model("llama")
    ids = prompt_ids(gm)
    custom = {"custom_generate": goose_generate} if form == "callable" else {
        "custom_generate": REPO, "trust_remote_code": True, "tokenizer": gm.tokenizer}
    store = goose.SuffixStore("calls", [reference("llama", "repetitive")[0, ids.shape[1]:].tolist()])
    out = gm.model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False, method="suffix", store=store,
                            suffix_min_token_prob=0.2, **custom)
    assert torch.equal(out, reference("llama", "repetitive"))
    assert store.outputs == [out[0, ids.shape[1]:].tolist()] * 2


def test_generation_config_defaults_apply():
    """No max_new_tokens: the generation config's max_length, as generate does."""
    gm = model("llama")
    ids = prompt_ids(gm, "abc")
    gm.model.generation_config.max_length = ids.shape[1] + 9
    try:
        out = gm.model.generate(ids, custom_generate=goose_generate, do_sample=False)
        assert torch.equal(out, gm.model.generate(ids, do_sample=False))
        assert out.shape[1] == ids.shape[1] + 9
    finally:
        gm.model.generation_config.max_length = None


@pytest.mark.parametrize("form", ["callable", "path"])
def test_streamer_gets_the_prompt_then_every_token_once(form):
    gm = model("gemma3")
    ids = prompt_ids(gm)
    expected, got = Collector(), Collector()
    gm.model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False, streamer=expected)
    custom = {"custom_generate": goose_generate} if form == "callable" else {
        "custom_generate": REPO, "trust_remote_code": True}
    out = gm.model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False, streamer=got, method="pld", budget=16,
                            **custom)
    assert got.calls == expected.calls  # prompt, then one token per put, in order, then end
    assert got.calls[0] == ids.tolist() and got.calls[-1] == "end"
    assert [t for call in got.calls[1:-1] for t in call] == out[0, ids.shape[1]:].tolist()


def test_text_iterator_streamer_yields_the_generated_text():
    gm = model("llama")
    ids = prompt_ids(gm)

    def streamed(**custom) -> str:
        streamer = TextIteratorStreamer(gm.tokenizer, skip_prompt=True, timeout=60)
        worker = threading.Thread(target=gm.model.generate, args=(ids,), kwargs=dict(
            max_new_tokens=NEW_TOKENS, do_sample=False, streamer=streamer, **custom))
        worker.start()
        text = "".join(streamer)
        worker.join()
        return text

    assert streamed(custom_generate=goose_generate, method="goose", budget=16) == streamed()


def test_the_repository_form_hands_the_streamer_over_as_an_argument(monkeypatch):
    """custom_generate/generate.py receives generate's own arguments: the streamer reaches Goose's loop from
    there, never from the stack."""
    import goose.hf_generate

    def no_stack(name):
        raise AssertionError(f"{name} read from the stack")

    monkeypatch.setattr(goose.hf_generate, "_kept_back", no_stack)
    gm = model("gemma3")
    ids = prompt_ids(gm)
    expected, got = Collector(), Collector()
    gm.model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False, streamer=expected)
    gm.model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False, streamer=got, custom_generate=REPO,
                      trust_remote_code=True, method="goose", budget=16)
    assert got.calls == expected.calls


@pytest.mark.timeout(120)
def test_a_streamer_goose_cannot_reach_is_an_error_not_a_hang(monkeypatch):
    """transformers keeps `streamer` from a callable; where Goose cannot find the generate call holding it (as
    under a transformers whose generate it does not know), the call fails saying so, rather than run on and
    leave a TextIteratorStreamer's reader waiting for an end() that never comes."""
    import goose.hf_generate

    monkeypatch.setattr(goose.hf_generate, "_GENERATE", (lambda: None).__code__)
    gm = model("llama")
    ids = prompt_ids(gm)
    streamer = TextIteratorStreamer(gm.tokenizer, skip_prompt=True, timeout=60)
    with pytest.raises(RuntimeError, match="cannot reach `generate`'s `streamer`"):
        gm.model.generate(ids, max_new_tokens=4, streamer=streamer, custom_generate=goose_generate)
    out = goose_generate(gm.model, ids, generation_config=GenerationConfig(max_length=ids.shape[1] + 4),
                         streamer=None, assistant_model=None)
    assert torch.equal(out, reference("llama", "repetitive")[:, :ids.shape[1] + 4])  # given, they need no stack


def test_streamer_ends_when_the_call_is_refused():
    gm = model("llama")
    streamer = Collector()
    with pytest.raises(ValueError, match="repetition_penalty"):
        gm.model.generate(prompt_ids(gm), custom_generate=goose_generate, max_new_tokens=4, streamer=streamer,
                          repetition_penalty=1.3)
    assert streamer.calls[-1] == "end"


@pytest.mark.parametrize("form", ["callable", "path"])
def test_stopping_criteria_stop_where_generate_stops(form):
    """A criterion that fires inside a step's accepted tokens cuts the output there, called once per token."""
    gm = model("llama")
    ids = prompt_ids(gm)
    full = reference("llama", "repetitive")[0, ids.shape[1]:].tolist()
    token = full[11]
    custom = {"custom_generate": goose_generate} if form == "callable" else {
        "custom_generate": REPO, "trust_remote_code": True}
    expected_criterion, criterion = StopAtToken(token), StopAtToken(token)
    expected = gm.model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False,
                                 stopping_criteria=StoppingCriteriaList([expected_criterion]))
    out = gm.model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False, method="pld", budget=16,
                            stopping_criteria=StoppingCriteriaList([criterion]), **custom)
    assert torch.equal(out, expected)
    assert out[0, -1] == token and out.shape[1] - ids.shape[1] == full.index(token) + 1 < NEW_TOKENS
    assert criterion.calls == expected_criterion.calls
    limit = StoppingCriteriaList([MaxLengthCriteria(max_length=ids.shape[1] + 7)])
    out = gm.model.generate(ids, max_new_tokens=NEW_TOKENS, stopping_criteria=limit, method="goose", **custom)
    assert torch.equal(out, reference("llama", "repetitive")[:, :ids.shape[1] + 7])
    stop = gm.tokenizer.decode(full[8:10])  # stop strings: generate wants the tokenizer (a callable never sees it)
    strings = {"stop_strings": [stop], "tokenizer": gm.tokenizer} if form == "path" else {
        "stopping_criteria": StoppingCriteriaList([StopStringCriteria(gm.tokenizer, [stop])])}
    expected = gm.model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False, stop_strings=[stop],
                                 tokenizer=gm.tokenizer)
    out = gm.model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False, method="pld", budget=16, **strings,
                            **custom)
    assert torch.equal(out, expected) and out.shape[1] < ids.shape[1] + NEW_TOKENS


def test_eos_token_id_stops_where_generate_stops():
    gm = model("gemma3")
    ids = prompt_ids(gm)
    eos = reference("gemma3", "repetitive")[0, ids.shape[1] + 9].item()
    expected = gm.model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=eos)
    out = gm.model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=eos,
                            custom_generate=goose_generate, method="goose", budget=16)
    assert torch.equal(out, expected) and out[0, -1] == eos and out.shape[1] < ids.shape[1] + NEW_TOKENS


def test_return_dict_in_generate():
    gm = model("llama")
    out = gm.model.generate(prompt_ids(gm), custom_generate=goose_generate, max_new_tokens=NEW_TOKENS,
                            return_dict_in_generate=True, method="pld", budget=16)
    assert isinstance(out, GenerateDecoderOnlyOutput)
    assert torch.equal(out.sequences, reference("llama", "repetitive"))


def test_sampling_returns_max_new_tokens_and_follows_the_seed():
    gm = model("gemma3")
    ids = prompt_ids(gm)
    options = {"custom_generate": goose_generate, "max_new_tokens": NEW_TOKENS, "do_sample": True,
               "temperature": 0.8, "top_k": 20, "top_p": 0.95, "method": "goose", "budget": 16}
    first = gm.model.generate(ids, seed=3, **options)
    assert first.shape == (1, ids.shape[1] + NEW_TOKENS)
    assert torch.equal(first, gm.model.generate(ids, seed=3, **options))
    torch.manual_seed(0)  # no seed: drawn from torch's generator, as generate's own sampling is
    second = gm.model.generate(ids, **options)
    torch.manual_seed(0)
    assert torch.equal(second, gm.model.generate(ids, **options))


UNSUPPORTED = {
    "num_beams": {"num_beams": 2},
    "num_return_sequences": {"num_return_sequences": 2, "do_sample": True},
    "repetition_penalty": {"repetition_penalty": 1.2},
    "no_repeat_ngram_size": {"no_repeat_ngram_size": 2},
    "min_new_tokens": {"min_new_tokens": 5, "eos_token_id": 2},
    "output_scores": {"output_scores": True, "return_dict_in_generate": True},
    "output_logits": {"output_logits": True, "return_dict_in_generate": True},
    "prompt_lookup_num_tokens": {"prompt_lookup_num_tokens": 3},
    "assistant_model": "assistant_model",
    "attention_mask": "attention_mask",
    "batch size > 1": "batch",
}


@pytest.mark.parametrize("form", ["callable", "path"])
@pytest.mark.parametrize("option", UNSUPPORTED)
def test_unsupported_options_raise_naming_them(option, form):
    gm = model("llama")
    ids = prompt_ids(gm, "abcdef")
    kwargs = UNSUPPORTED[option]
    if kwargs == "assistant_model":
        kwargs = {"assistant_model": gm.model}
    elif kwargs == "attention_mask":
        kwargs = {"attention_mask": torch.tensor([[0, 1, 1, 1, 1, 1, 1]])}
    elif kwargs == "batch":
        ids, kwargs = ids.repeat(2, 1), {}
    custom = {"custom_generate": goose_generate} if form == "callable" else {
        "custom_generate": REPO, "trust_remote_code": True}
    with pytest.raises(ValueError, match=re.escape(f"`{option}`")):
        gm.model.generate(ids, max_new_tokens=4, **custom, **kwargs)


def test_a_model_without_a_tokenizer_is_refused_clearly():
    bare = tiny_llama(1).model  # built in memory: no path to load a tokenizer from, none given
    with pytest.raises(ValueError, match="goose_model_for"):
        bare.generate(torch.tensor([[5, 6, 7]]), custom_generate=goose_generate, max_new_tokens=4)


@pytest.mark.slow
def test_embedded_model_both_forms_equal_greedy_generate(gemma):
    goose_model_for(gemma)  # generate shares the fixture's GooseModel (its heads and costs)
    for prompt in ["def fibonacci(n):", "Monday, Tuesday, Wednesday,"]:
        ids = prompt_ids(gemma, prompt)
        expected = gemma.model.generate(ids, max_new_tokens=32, do_sample=False)
        callable_form = gemma.model.generate(ids, max_new_tokens=32, do_sample=False, custom_generate=goose_generate,
                                             method="goose", budget=16)
        path_form = gemma.model.generate(ids, max_new_tokens=32, do_sample=False, custom_generate=REPO,
                                         trust_remote_code=True, method="goose", budget=16)
        assert torch.equal(callable_form, expected), prompt
        assert torch.equal(path_form, expected), prompt


def test_path_form_without_goose_says_what_to_install(tmp_path):
    """transformers runs a copy of custom_generate/generate.py from its modules cache: without an importable
    `goose` it must say what to install, not fail on a bare import."""
    script = ("import torch, transformers\n"
              "config = transformers.LlamaConfig(vocab_size=16, hidden_size=16, intermediate_size=32, "
              "num_hidden_layers=1, num_attention_heads=2)\n"
              "model = transformers.LlamaForCausalLM(config)\n"
              f"model.generate(torch.tensor([[1, 2]]), custom_generate={REPO!r}, trust_remote_code=True)\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"HF_MODULES_CACHE": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode != 0
    assert "needs the `goose` package" in done.stderr and "pip install" in done.stderr


@pytest.mark.parametrize(("bad", "message"), [
    ({"seed": "x"}, "seed must be a whole number between 0 and 18446744073709551615"),  # refused though greedy
    ({"seed": "x", "do_sample": True}, "seed must be a whole number between 0 and 18446744073709551615"),
    ({"budget": 10**9}, "budget 1000000000 is too large: at most 1024 nodes per tree"),
    ({"temperature": float("inf"), "do_sample": True},
     "temperature must be a number between 0 and 5 (0 = greedy), got inf"),
    ({"temperature": 9.0, "do_sample": True}, "temperature must be a number between 0 and 5 (0 = greedy), got 9.0"),
    ({"top_p": float("nan"), "do_sample": True}, "top_p must be a number above 0 and at most 1, got nan"),
    ({"max_branch_depth": float("nan")}, "max_branch_depth"),
], ids=["seed-greedy", "seed", "budget", "inf", "hot", "top-p-nan", "knob-nan"])
def test_a_bad_goose_option_gets_the_librarys_one_line_and_the_next_call_answers(bad, message):
    """Goose's own options get goose.validate's line; generate's (NaN temperature, top_k < 0, a max_new_tokens
    that is not a number) are transformers' to check, with its own ValueError, before Goose is called."""
    gm = model("llama")
    ids = prompt_ids(gm)
    expected = reference("llama", "repetitive")
    good = {"custom_generate": goose_generate, "max_new_tokens": NEW_TOKENS, "budget": 16, "head": "full"}
    gm.model.generate(ids, **good)  # what the process pays once (the head built)
    started = time.perf_counter()
    with pytest.raises(ValueError) as refused:
        gm.model.generate(ids, custom_generate=goose_generate, max_new_tokens=4, **bad)
    assert time.perf_counter() - started < 1.0
    assert str(refused.value).startswith(message) and "\n" not in str(refused.value)
    started = time.perf_counter()
    out = gm.model.generate(ids, **good)
    assert time.perf_counter() - started < 2.0 and torch.equal(out, expected)
