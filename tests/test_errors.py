"""Bad input gets a clear error before any work, and leaves everything usable."""

from __future__ import annotations

import pytest
from tiny import tiny_llama

import goose
from goose.validate import parse_budget


@pytest.fixture(scope="module")
def tiny():
    return tiny_llama(0)


@pytest.mark.parametrize("prompt", ["", "   \n"])
def test_empty_prompt(tiny, prompt):
    with pytest.raises(ValueError, match="prompt is empty"):
        goose.generate(tiny, prompt)


def test_prompt_plus_new_tokens_beyond_context(tiny):
    with pytest.raises(ValueError, match="exceeds the model's context of 1024 tokens"):
        goose.stream(tiny, "x" * 1000, max_new_tokens=100)


@pytest.mark.parametrize(("typed", "expected"), [("auto", None), (" Auto ", None), ("", None), (None, None),
                                                 ("16", 16), (32.0, 32), ("64", 64)])
def test_a_typed_budget_is_auto_or_a_node_count(typed, expected):
    assert parse_budget(typed, maximum=64) == expected


@pytest.mark.parametrize(("typed", "message"), [("0", ">= 1"), ("2.5", ">= 1"), ("nan", ">= 1"),
                                                ("many", "'auto' or a whole number"), ("65", "at most 64 nodes")])
def test_a_typed_budget_that_is_not_one_is_refused(typed, message):
    with pytest.raises(ValueError, match=message):
        parse_budget(typed, maximum=64)


@pytest.mark.parametrize("budget", [0, -3, 2.5])
def test_budget_below_one(tiny, budget):
    with pytest.raises(ValueError, match="budget must be a whole number"):
        goose.stream(tiny, "hello", budget=budget)


def test_bad_method_max_tokens_and_options(tiny):
    with pytest.raises(ValueError, match="unknown method 'beam'"):
        goose.stream(tiny, "hello", method="beam")
    with pytest.raises(ValueError, match="max_new_tokens"):
        goose.stream(tiny, "hello", max_new_tokens=0)
    with pytest.raises(TypeError, match="unknown Goose option"):
        goose.stream(tiny, "hello", bugdet=3)
    with pytest.raises(ValueError, match="temperature"):
        goose.stream(tiny, "hello", temperature=-1)


def test_errors_change_nothing(tiny):
    before = goose.generate(tiny, "hello", method="goose", max_new_tokens=20, budget=8).tokens
    for bad in ({"budget": 0}, {"max_new_tokens": -1}):
        with pytest.raises(ValueError):
            goose.generate(tiny, "hello", **bad)
    assert goose.generate(tiny, "hello", method="goose", max_new_tokens=20, budget=8).tokens == before


def test_unknown_model_while_offline(monkeypatch, tmp_path):
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # read once, at import
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with pytest.raises(goose.ModelLoadError, match="cannot load model 'no-such-org/no-such-model'"):
        goose.load_model("no-such-org/no-such-model", device="cpu")


def test_flash_attention_is_refused(tiny, tmp_path):
    with pytest.raises(goose.UnsupportedModelError, match="flash attention drops custom masks"):
        goose.load_model(str(tmp_path), attn_implementation="flash_attention_2")
    model = tiny_llama(0)
    model.model.config._attn_implementation = "flash_attention_2"
    with pytest.raises(goose.UnsupportedModelError, match="ignores custom tree masks"):
        goose.generate(model, "hello")


def test_a_cancelled_stream_leaves_the_model_usable(tiny):
    expected = goose.generate(tiny, "hello world", method="goose", max_new_tokens=30, budget=8).tokens
    generation = goose.stream(tiny, "hello world", method="goose", max_new_tokens=30, budget=8)
    iterator = iter(generation)
    next(iterator)
    iterator.close()  # the user pressed stop
    assert 0 < len(generation.run.tokens) < 30
    assert goose.generate(tiny, "hello world", method="goose", max_new_tokens=30, budget=8).tokens == expected
