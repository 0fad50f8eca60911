"""The output text decoded as it grows (goose.text) is the full decode at every step, and costs each step the
tokens it adds, whatever the output's length."""

from __future__ import annotations

import random

import pytest
from tiny import tiny_llama

import goose
from goose.text import OutputText

TEXTS = [
    "def add(a, b):\n    return a + b\n\n\nprint(add(1, 2))\n",
    "  two leading spaces,  double  spaces, trailing   \n\n\tand a tab",
    "Ünïcödé: café, naïve, Straße, 日本語のテキスト, emoji 🪿🦆 and a mathematical 𝔸 — done.",
    "Q: What is 2+2?\nA: 4.\n\nQ: Who wrote Hamlet ?\nA: Shakespeare .\n",
]
STOPS = ("\n\n", "Q:", "🦆", "é, n")


def chunks(tokens: list[int], seed: int) -> list[list[int]]:
    """The tokens cut as a run's steps commit them: 1 to 6 at a time."""
    rng, out, i = random.Random(seed), [], 0
    while i < len(tokens):
        size = rng.randint(1, 6)
        out.append(tokens[i:i + size])
        i += size
    return out


def full_cut(text: str, stops: tuple[str, ...]) -> tuple[str, bool]:
    """The rule on the whole text: cut before each stop string in turn."""
    stopped = False
    for stop in stops:
        cut = text.find(stop)
        if cut >= 0:
            text, stopped = text[:cut], True
    return text, stopped


@pytest.fixture(scope="module")
def tiny():
    return tiny_llama(0)


def decoders(gemma, tiny):
    """(name, encode, decode): the embedded model's tokenizer (byte fallback, SentencePiece spaces) and the tiny
    models' (one character a token; others unknown)."""
    return [("gemma", lambda text: gemma.encode(text)[1:], gemma.decode),
            ("tiny", lambda text: tiny.encode(text)[1:], tiny.decode)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_text_is_the_full_decode_at_every_step(gemma, tiny, seed):
    for name, encode, decode in decoders(gemma, tiny):
        for text in TEXTS:
            output, fed = OutputText(decode), []
            for chunk in chunks(encode(text), seed):
                fed += chunk
                output.extend(chunk)
                assert output.text == decode(fed), (name, text, fed)
            assert output.finish() == decode(fed) and not output.stopped


def test_byte_tokens_of_one_character_show_as_the_full_decode_shows_them(gemma):
    """A character split over byte tokens: while incomplete the text ends as the full decode does (U+FFFD), whole
    it is the character; random token ids too (special tokens, odd bytes) decode as the whole output does."""
    tokens = gemma.encode("🪿 x 𝔸")[1:]
    assert len(tokens) > 4, "the embedded tokenizer spells these characters in bytes"
    output = OutputText(gemma.decode)
    for i, token in enumerate(tokens):
        output.extend([token])
        assert output.text == gemma.decode(tokens[:i + 1])
    rng = random.Random(0)
    ids = [rng.randrange(gemma.tokenizer.vocab_size) for _ in range(400)] + list(range(200, 280))
    output, fed = OutputText(gemma.decode), []
    for chunk in chunks(ids, 3):
        fed += chunk
        output.extend(chunk)
        assert output.text == gemma.decode(fed)


@pytest.mark.parametrize("seed", [0, 1])
def test_stop_strings_cut_where_they_cut_the_whole_text(gemma, tiny, seed):
    for name, encode, decode in decoders(gemma, tiny):
        for text in TEXTS:
            output, fed = OutputText(decode, STOPS), []
            for chunk in chunks(encode(text), seed):
                fed += chunk
                stopped = output.extend(chunk)
                assert (output.text, stopped) == full_cut(decode(fed), STOPS), (name, text, fed)
                if stopped:
                    break
            assert output.finish() == full_cut(decode(fed), STOPS)[0]


def test_each_step_decodes_what_it_adds_and_the_step_before_not_the_whole_output(gemma):
    decoded = []

    def counting(tokens: list[int]) -> str:
        decoded.append(len(tokens))
        return gemma.decode(tokens)

    tokens = gemma.encode(TEXTS[0] * 60)[1:]
    output = OutputText(counting)
    steps = chunks(tokens, 0)
    for chunk in steps:
        output.extend(chunk)
    assert len(tokens) > 1000 and output.finish() == gemma.decode(tokens)
    per_step = decoded[:-1]  # the finish decodes the whole output once
    assert max(per_step) <= 2 * 6 + 6, "a window: the step's tokens and the previous step's, at most"
    assert sum(per_step) <= 4 * len(tokens), "linear in the output's length"


def test_a_run_s_text_is_its_tokens_decoded_and_cut_at_its_stop_string(tiny):
    free = goose.generate(tiny, "abcabcabc", "goose", 40, budget=8)
    assert free.text == tiny.decode(free.tokens)
    stop = free.text[17:19]
    stopped = goose.generate(tiny, "abcabcabc", "goose", 40, budget=8, stop=stop)
    assert stopped.stop_reason == "stop_string" and stopped.text == full_cut(tiny.decode(stopped.tokens), (stop,))[0]
    assert stopped.text == free.text[:free.text.find(stop)]
