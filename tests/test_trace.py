"""Run and step records: totals, stops, JSON round trip, CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tiny import tiny_llama

import goose
from goose.trace import RunRecord

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tiny():
    return tiny_llama(0)


def test_run_totals_and_step_records(tiny):
    run = goose.generate(tiny, "the cat sat on the mat. the cat sat on the", method="goose", max_new_tokens=40,
                         budget=12)
    t = run.totals
    assert t.new_tokens == len(run.tokens) == 40 and run.stop_reason == "max_new_tokens"
    assert t.forward_passes == len(run.steps) + 1
    assert t.tau == pytest.approx(40 / t.forward_passes) and t.tokens_per_s > 0 and t.wall_s >= t.prefill_s
    assert sum(len(s.committed) for s in run.steps) == 39, "prefill commits the first token, steps the rest"
    assert sum(t.accepted.values()) == sum(s.accepted_length for s in run.steps)
    for step in run.steps:
        path = step.path
        assert all(step.nodes[b].parent == a for a, b in zip(path, path[1:]))
        assert all(step.nodes[n].status == "accepted" for n in step.accepted)
        assert step.nodes[path[-1]].target == step.bonus_token
        assert step.committed[:len(step.accepted)] == [step.nodes[n].token for n in step.accepted][
            :len(step.committed)]
        assert {n.source for n in step.nodes} <= {"root", "spine", "branch"}


def test_json_round_trip(tiny, tmp_path):
    run = goose.generate(tiny, "abcabcabc", method="goose", max_new_tokens=16, budget=6)
    path = tmp_path / "run.json"
    run.save(path)
    again = RunRecord.load(path)
    assert again == run
    assert RunRecord.from_json(run.to_json()).to_dict() == run.to_dict()


@pytest.mark.parametrize("text", ["[1, 2]", "{not json", json.dumps({"format": "other"}),
                                  json.dumps({"format": "goose-trace/1", "prompt": "x"})])
def test_not_a_trace(text):
    with pytest.raises(ValueError, match="not a Goose trace"):
        RunRecord.from_json(text)


def test_stop_string_and_eos():
    tiny = tiny_llama(0)
    full = goose.generate(tiny, "hello", method="goose", max_new_tokens=30, budget=6)
    stop = full.text[10:13]
    cut = goose.generate(tiny, "hello", method="goose", max_new_tokens=30, budget=6, stop=stop)
    assert cut.stop_reason == "stop_string" and cut.text == full.text[:full.text.find(stop)]
    eos_model = tiny_llama(0, eos=True)
    eos_model.model.generation_config.eos_token_id = full.tokens[5]
    ended = goose.generate(eos_model, "hello", method="goose", max_new_tokens=30, budget=6)
    assert ended.stop_reason == "eos" and ended.tokens == full.tokens[:full.tokens.index(full.tokens[5]) + 1]


def test_cli_generate_from_a_local_folder(tmp_path):
    tiny = tiny_llama(0)
    tiny.model.save_pretrained(tmp_path)
    tiny.tokenizer.save_pretrained(tmp_path)
    command = [sys.executable, "-m", "goose", "generate", "--model", str(tmp_path), "--device", "cpu",
               "--prompt", "hello", "--max-new-tokens", "12", "--budget", "5"]
    out = subprocess.run(command + ["--json"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    run = RunRecord.from_json(out.stdout)
    assert run.method == "goose" and run.totals.new_tokens == 12
    plain = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0 and "forward passes" in plain.stderr and "tau" in plain.stderr
    bad = subprocess.run(command[:-1] + ["0"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "budget must be" in bad.stderr


def test_step_times_split_the_verification_from_the_bookkeeping_after_it(tiny):
    """verify_s is the tree's pass and walk, observe_s the commit and learning after it; a trace written before
    the split (format 2: all of it in verify_s) loads with observe_s 0 and the same step time."""
    run = goose.generate(tiny, "abcabcabc", method="goose", max_new_tokens=8, budget=6)
    assert all(step.verify_s > 0 and step.observe_s > 0 for step in run.steps)
    assert all(step.seconds == step.draft_s + step.verify_s + step.observe_s for step in run.steps)
    data = run.to_dict()
    data["format"] = "goose-trace/2"
    for step in data["steps"]:
        step["verify_s"] += step.pop("observe_s")
    old = RunRecord.from_dict(data)
    assert [step.observe_s for step in old.steps] == [0.0] * len(run.steps)
    assert [step.seconds for step in old.steps] == pytest.approx([step.seconds for step in run.steps])
