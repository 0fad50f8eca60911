"""A run's wall time is what the user waits for: from the call to the last token, set-up included."""

from __future__ import annotations

import time

import pytest
from tiny import tiny_llama

import goose
import goose.target
from goose.trace import RunRecord

SLOW_SETUP_S = 0.2


@pytest.fixture(scope="module")
def tiny():
    return tiny_llama(0)


@pytest.mark.parametrize("method", ["autoregressive", "goose"])
def test_wall_time_includes_set_up_and_matches_a_stopwatch(tiny, monkeypatch, method):
    head_for = goose.target.head_for

    def slow_head_for(*args):
        time.sleep(SLOW_SETUP_S)
        return head_for(*args)

    monkeypatch.setattr(goose.target, "head_for", slow_head_for)
    gaps = []
    for _ in range(3):  # the least gap of three: a busy machine may pause any one call, never all three
        start = time.perf_counter()
        run = goose.generate(tiny, "abcabcabc", method, 16, budget=8)
        gaps.append(abs(time.perf_counter() - start - run.totals.wall_s))
        totals = run.totals
        assert totals.setup_s >= SLOW_SETUP_S and totals.wall_s >= totals.setup_s + totals.prefill_s
        assert totals.tokens_per_s == pytest.approx(totals.new_tokens / totals.wall_s)
    assert min(gaps) < 0.005, f"the library's clock must agree with a stopwatch around the call: {gaps}"


def test_the_stream_clock_starts_when_stream_is_called(tiny):
    generation = goose.stream(tiny, "hello", "autoregressive", 3)
    time.sleep(SLOW_SETUP_S)
    for _ in generation:
        pass
    assert generation.run.totals.wall_s >= SLOW_SETUP_S


def test_head_option_reaches_every_method_and_the_record(tiny):
    screened = goose.generate(tiny, "abcabcabc", "goose", 16, budget=8, head="screened")
    full = goose.generate(tiny, "abcabcabc", "goose", 16, budget=8, head="full")
    assert (screened.head, full.head) == ("screened", "full")
    assert full.tokens == screened.tokens
    assert RunRecord.from_json(full.to_json()).head == "full"
    with pytest.raises(ValueError, match="unknown head 'fast'; choose one of auto, int8, screened, full"):
        goose.stream(tiny, "hello", head="fast")


def test_traces_written_before_the_clock_fields_still_load(tiny):
    data = goose.generate(tiny, "hello", "autoregressive", 2).to_dict()
    del data["head"], data["totals"]["setup_s"]
    run = RunRecord.from_dict(data)
    assert run.head == "screened" and run.totals.setup_s == 0.0


PAUSE_S = 0.01


def test_the_clock_leaves_out_what_the_caller_does_between_steps(tiny):
    """A caller that renders or streams each step (the app's Explore) does it off the run's clock, so the run
    reads what goose.generate, which does nothing between steps, reads."""
    start = time.perf_counter()
    generation = goose.stream(tiny, "abcabcabc", "goose", 16, budget=8)
    for _ in generation:
        time.sleep(PAUSE_S)
    elapsed = time.perf_counter() - start
    steps = len(generation.run.steps)
    assert steps > 2 and elapsed - generation.run.totals.wall_s >= steps * PAUSE_S


def test_node_texts_are_named_off_the_clock(tiny, monkeypatch):
    """Naming each step's nodes (text work for the trace) is not decoding: the clock leaves it out."""
    token_texts = goose.target.ModelTarget.token_texts
    named = []

    def slow_token_texts(self, tokens):
        named.append(len(tokens))
        time.sleep(PAUSE_S)
        return token_texts(self, tokens)

    monkeypatch.setattr(goose.target.ModelTarget, "token_texts", slow_token_texts)
    start = time.perf_counter()
    run = goose.generate(tiny, "abcabcabc", "goose", 16, budget=8)
    elapsed = time.perf_counter() - start
    assert len(named) == len(run.steps) > 2 and elapsed - run.totals.wall_s >= len(named) * PAUSE_S
    assert all(node.text == tiny.token_texts([node.token])[0] for step in run.steps for node in step.nodes)


def test_the_one_warm_up_runs_once_per_method_budget_head_and_kind_of_decoding(monkeypatch, tmp_path):
    """goose.warm_up is kept in the model's cache: a second call for the same request does nothing, another
    method, budget or sampling warms again; is_warm says which are warm."""
    monkeypatch.setenv("GOOSE_CACHE", str(tmp_path))
    model, ran = tiny_llama(2), []
    real_generate = goose.decode.generate
    monkeypatch.setattr(goose.decode, "generate", lambda m, prompt, method, tokens, budget, **k:
                        ran.append((method, budget, k["temperature"])) or real_generate(m, prompt, method, tokens,
                                                                                         budget, **k))
    assert not goose.is_warm(model, "goose")
    assert goose.warm_up(model, "goose") and not goose.warm_up(model, "goose")
    assert goose.is_warm(model, "goose") and not goose.is_warm(model, "goose", 16)
    assert goose.is_warm(model, "goose", "auto") and not goose.warm_up(model, "goose", "auto"), \
        "None is the method's default budget: for goose, the tuner's"
    assert goose.warm_up(model, "goose", 16) and goose.warm_up(model, "pld") and goose.warm_up(model, "goose",
                                                                                                temperature=0.7)
    assert ran == [("goose", None, 0.0), ("goose", 16, 0.0), ("pld", None, 0.0), ("goose", None, 0.7)]
