"""Bad input gets a clear error before any work, and leaves everything usable."""

from __future__ import annotations

import time

import pytest
from tiny import tiny_llama

import goose
from goose import validate
from goose.validate import InputError, parse_budget


@pytest.fixture(scope="module")
def tiny():
    model = tiny_llama(0)
    goose.generate(model, "hello", max_new_tokens=8)  # what a process pays once per model (head timing, costs)
    return model


@pytest.mark.parametrize("prompt", ["", "   \n"])
def test_empty_prompt(tiny, prompt):
    with pytest.raises(ValueError, match="prompt is empty"):
        goose.generate(tiny, prompt)


def test_prompt_plus_new_tokens_beyond_context(tiny):
    with pytest.raises(ValueError, match="exceeds the model's context of 1024 tokens"):
        goose.stream(tiny, "x" * 1000, max_new_tokens=100)


def test_token_ids_outside_the_vocabulary(tiny):
    """Token ids are checked against the model's vocabulary before any work (not an IndexError in the embedding)."""
    vocabulary = tiny.model.config.vocab_size
    with pytest.raises(InputError, match=rf"below the model's vocabulary size {vocabulary}: "
                                                        rf"id {vocabulary} at position 1 is not"):
        goose.generate(tiny, [1, vocabulary, 2], max_new_tokens=4)
    assert len(goose.generate(tiny, [1, vocabulary - 1, 2], max_new_tokens=4).tokens) == 4


@pytest.mark.parametrize(("typed", "expected"), [("auto", "auto"), (" Auto ", "auto"), ("", None), (None, None),
                                                 ("16", 16), (32.0, 32), ("64", 64)])
def test_a_typed_budget_is_auto_the_methods_default_or_a_node_count(typed, expected):
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


def next_call_s(model) -> float:
    """Seconds a short good call takes, at best of two (this machine's other loads come and go)."""
    times = []
    for _ in range(2):
        started = time.perf_counter()
        assert goose.generate(model, "hello", "autoregressive", max_new_tokens=4).totals.new_tokens == 4
        times.append(time.perf_counter() - started)
    return min(times)


# Each hostile input of issue 28 that reaches the library, with the start of the one line it must get.
HOSTILE = [
    ({"prompt": "def add(a, b):\x00\ud800 x"},
     "prompt must be valid Unicode text: character 15 (counting from 0) is the lone surrogate '\\ud800'"),
    ({"max_new_tokens": "lots"}, "max_new_tokens must be a whole number >= 1, got 'lots'"),
    ({"seed": "x"}, "seed must be a whole number between 0 and 18446744073709551615"),
    ({"seed": 2.5}, "seed must be a whole number"),
    ({"budget": 10**9}, "budget 1000000000 is too large: at most 1024 nodes per tree"),
    ({"temperature": float("inf")}, "temperature must be a number between 0 and 5 (0 = greedy), got inf"),
    ({"temperature": float("nan")}, "temperature must be a number between 0 and 5 (0 = greedy), got nan"),
    ({"temperature": "0.5"}, "temperature must be a number between 0 and 5 (0 = greedy), got '0.5'"),
    ({"top_p": float("nan")}, "top_p must be a number above 0 and at most 1, got nan"),
    ({"top_k": float("nan")}, "top_k must be a whole number >= 0 (0 = off), got nan"),
    ({"max_budget": 10**6}, "max_budget must be a whole number between 1 and 1024"),
    ({"stop": 5}, "stop must be a text or a list of texts, got 5"),
]


@pytest.mark.parametrize(("bad", "message"), HOSTILE, ids=[next(iter(bad)) for bad, _ in HOSTILE])
def test_a_bad_field_gets_one_line_naming_it_and_its_rule_at_once(tiny, bad, message):
    request = {"prompt": "hello", "max_new_tokens": 8, **bad}
    started = time.perf_counter()
    with pytest.raises(InputError) as refused:
        goose.generate(tiny, **request)
    assert time.perf_counter() - started < 1.0
    assert str(refused.value).startswith(message) and "\n" not in str(refused.value)
    assert next_call_s(tiny) < 2.0, "the next good call answers within 2 s"


def test_a_refused_value_is_quoted_short():
    with pytest.raises(InputError) as refused:
        validate.whole_number("max_new_tokens", "x" * 10**6, 1)
    assert len(str(refused.value)) < 150 and "1000002 characters" in str(refused.value)


@pytest.mark.parametrize(("typed", "expected"), [("12", 12), (" 7 ", 7), (12.0, 12), ("0.5", 0.5), ("lots", "lots"),
                                                 (None, None)])
def test_numbers_as_typed_become_numbers_and_the_rest_is_left_for_the_rule(typed, expected):
    assert validate.typed_number(typed) == expected
