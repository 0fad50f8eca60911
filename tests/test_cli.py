"""`python -m goose generate`: the run's speed and what the process paid once, as separate figures."""

from __future__ import annotations

import json
import re
import time

import pytest
from tiny import tiny_llama

import goose
from goose import cli
from goose.decode import WARM_UP_TOKENS


@pytest.fixture
def runs(monkeypatch, tmp_path) -> list[int]:
    """The tiny model stands in for the embedded one; returns each generation's max_new_tokens, in order."""
    monkeypatch.setenv("GOOSE_CACHE", str(tmp_path))  # its measured costs stay out of the user's cache
    monkeypatch.setattr(goose, "load_model", lambda *args, **kwargs: tiny_llama(0))
    requested: list[int] = []
    real_warm_up = cli.warm_up
    monkeypatch.setattr(cli, "warm_up", lambda *args: requested.append(args[-1]) or real_warm_up(*args))

    class Spy(cli.Generation):
        def __init__(self, goose_model, request, *args, **kwargs) -> None:
            requested.append(request.max_new_tokens)
            super().__init__(goose_model, request, *args, **kwargs)

    monkeypatch.setattr(cli, "Generation", Spy)
    return requested


def test_generate_warms_up_untimed_then_prints_the_run_and_the_one_off_costs_apart(runs, capsys):
    assert cli.main(["generate", "--prompt", "The cat", "--max-new-tokens", "12"]) == 0
    assert runs == [WARM_UP_TOKENS, 12], "the bench's warm-up, then the timed run"
    out, err = capsys.readouterr()
    run_line, once_line = err.strip().splitlines()[-2:]
    assert re.search(r"12 tokens in \d+ forward passes .* [\d.]+ tokens/s, [\d.]+ s; stop: max_new_tokens", run_line)
    assert re.fullmatch(r"\[once per process, outside the run's clock\] model load [\d.]+ s, "
                        rf"warm-up [\d.]+ s \(an untimed {WARM_UP_TOKENS}-token run, as the bench's\)", once_line)
    assert out.strip(), "the text goes to stdout, the figures to stderr"


def test_generate_without_warm_up_times_the_first_run_and_says_so(runs, capsys):
    assert cli.main(["generate", "--prompt", "The cat", "--max-new-tokens", "12", "--no-warm-up"]) == 0
    assert runs == [12]
    assert capsys.readouterr().err.strip().endswith("no warm-up: the run's clock includes the first run's set-up")


def test_generate_json_keeps_stdout_to_the_timed_run(runs, capsys):
    assert cli.main(["generate", "--prompt", "The cat", "--max-new-tokens", "5", "--json"]) == 0
    assert runs == [5, 5], "a warm-up never longer than the run"
    record = json.loads(capsys.readouterr().out)
    assert record["totals"]["new_tokens"] == 5


def test_generate_refuses_bad_input_before_loading_the_model(runs, monkeypatch, capsys):
    monkeypatch.setattr(goose, "load_model", lambda *args, **kwargs: pytest.fail("loaded for a refused request"))
    assert cli.main(["generate", "--prompt", "", "--max-new-tokens", "12"]) == 2
    assert capsys.readouterr().err.startswith("error: ")


@pytest.mark.parametrize(("argv", "message"), [
    (["--prompt", "x\udcff"], "prompt must be valid Unicode text: character 1 (counting from 0) is the lone surrogate "
                              "'\\udcff'"),  # an argument that is not UTF-8, as Python hands it over
    (["--max-new-tokens", "lots"], "max_new_tokens must be a whole number >= 1, got 'lots'"),
    (["--seed", "x"], "seed must be a whole number between 0 and 18446744073709551615 (None or blank: a random one), "
                      "got 'x'"),
    (["--budget", "1000000000"], "budget 1000000000 is too large: at most 1024 nodes per tree"),
    (["--temperature", "inf"], "temperature must be a number between 0 and 5 (0 = greedy), got inf"),
    (["--temperature", "nan"], "temperature must be a number between 0 and 5 (0 = greedy), got nan"),
    (["--top-p", "nan"], "top_p must be a number above 0 and at most 1, got nan"),
    (["--method", "beam"], "unknown method 'beam'; choose one of "),
], ids=["surrogate", "max-new-tokens", "seed", "budget", "inf", "nan", "top-p", "method"])
def test_a_bad_value_gets_one_line_naming_the_field_and_its_rule(runs, monkeypatch, capsys, argv, message):
    monkeypatch.setattr(goose, "load_model", lambda *args, **kwargs: pytest.fail("loaded for a refused request"))
    started = time.perf_counter()
    assert cli.main(["generate", "--prompt", "The cat", *argv]) == 2
    assert time.perf_counter() - started < 1.0
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message}") and err.count("\n") == 1, err
