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


def _broken(run: RunRecord, change) -> str:
    data = run.to_dict()
    change(data)
    return json.dumps(data)


def _set(path: str, value):
    """A change that sets data[...][...] = value, the keys as a dotted path (numbers index lists)."""
    def change(data):
        *keys, last = [int(k) if k.isdigit() else k for k in path.split(".")]
        for key in keys:
            data = data[key]
        data[last] = value
    return change


@pytest.fixture(scope="module")
def recorded(tiny) -> RunRecord:
    run = goose.generate(tiny, "the cat sat on the mat. the cat sat on the mat. the", "goose", 24, 8,
                         record_sources=True)
    assert any(len(step.nodes) > 2 and step.accepted for step in run.steps)
    return run


def _deep_step(run: RunRecord) -> int:
    return next(i for i, step in enumerate(run.steps) if len(step.nodes) > 2 and step.accepted)


@pytest.mark.parametrize("case", ["parent past the nodes", "parent after its child", "root with a parent",
                                  "accepted outside the tree", "accepted not a path", "tokens not the steps'",
                                  "committed not the path's", "token as text", "NaN score", "row index out of range",
                                  "totals not an object", "steps not a list"])
def test_a_malformed_trace_is_refused_with_one_line_saying_what_and_where(recorded, case):
    s = _deep_step(recorded)
    step = recorded.steps[s]
    last = len(step.nodes) - 1
    changes = {
        "parent past the nodes": (_set(f"steps.{s}.nodes.{last}.parent", 999), f"steps[{s}].nodes[{last}].parent "
                                  f"must be a node before it (0..{last - 1}), got 999"),
        "parent after its child": (_set(f"steps.{s}.nodes.1.parent", 1), f"steps[{s}].nodes[1].parent must be a node "
                                   "before it (0..0), got 1"),
        "root with a parent": (_set(f"steps.{s}.nodes.0.parent", 0), f"steps[{s}].nodes[0] is the root"),
        "accepted outside the tree": (_set(f"steps.{s}.accepted", [last + 5]), f"steps[{s}].accepted must hold node "
                                      f"indices inside the tree (1..{last}), got {last + 5}"),
        "accepted not a path": (_set(f"steps.{s}.accepted", [step.accepted[0]] * 2), f"steps[{s}].accepted must be "
                                "a path down from the root"),
        "tokens not the steps'": (_set("tokens", recorded.tokens[:-1] + [recorded.tokens[-1] + 1]),
                                  "tokens must be the prefill's token and then each step's committed tokens"),
        "committed not the path's": (_set(f"steps.{s}.committed", [step.committed[0] + 1]),
                                     f"steps[{s}].committed must be the accepted tokens then the bonus"),
        "token as text": (_set(f"steps.{s}.nodes.1.token", "7"), f"steps[{s}].nodes[1].token must be a token id"),
        "NaN score": (_set(f"steps.{s}.nodes.1.score", float("nan")), f"steps[{s}].nodes[1].score must be a finite "
                      "number, got nan"),
        "row index out of range": (_set(f"steps.{s}.rows.0", 10**6), f"steps[{s}].rows[0] must index the trace's"),
        "totals not an object": (_set("totals", [1]), "totals must be a JSON object, got [1]"),
        "steps not a list": (_set("steps", {}), "steps must be a list, got {}"),
    }
    change, message = changes[case]
    with pytest.raises(ValueError) as refused:
        RunRecord.from_json(_broken(recorded, change))
    assert str(refused.value).startswith(f"not a Goose trace: {message}"), str(refused.value)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(("store", "message"), [
    ([[1, 2]], "store must be a JSON object, got [[1, 2]]"),
    ({"outputs": []}, "store.name is missing"),
    ({"name": "s", "outputs": [[1, -2]]}, "store.outputs[0][1] must be a token id (a whole number >= 0), got -2"),
    ({"name": "s", "outputs": [7]}, "store.outputs[0] must be a list of token ids, got 7"),
])
def test_a_suffix_runs_store_is_checked_and_round_trips(tiny, store, message):
    run = goose.generate(tiny, "abcabcabc", "suffix", 8, store=goose.SuffixStore("s", [[5, 6, 7]]))
    assert RunRecord.from_json(run.to_json()).store == {"name": "s", "outputs": [[5, 6, 7]]}
    with pytest.raises(ValueError) as refused:
        RunRecord.from_json(_broken(run, _set("store", store)))
    assert str(refused.value) == f"not a Goose trace: {message}"


def test_a_file_that_is_not_utf8_is_not_a_trace(tmp_path):
    path = tmp_path / "picture.json"
    path.write_bytes(b"\x89PNG\r\n\x1a\n")
    with pytest.raises(ValueError, match=r"^not a Goose trace: it is not UTF-8 text \(byte 0 is 0x89"):
        RunRecord.load(path)


def test_every_shipped_and_recorded_trace_passes_the_check(recorded):
    for path in sorted((ROOT / "assets" / "traces").glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        for run in data["runs"].values() if "runs" in data else [data]:
            RunRecord.from_dict(run)
    assert RunRecord.from_json(recorded.to_json()) == recorded
