"""What-if trees: a replay of the run rebuilds each step's sources, so the recorded tree rebuilds exactly and
counterfactual counts match a real verification whenever marked exact; recording is an observer that changes
nothing but the trace; bad settings and traces without replay data get clear errors."""

from __future__ import annotations

import json

import pytest
from tiny import tiny_gemma3

import goose
from goose import run_what_if
from goose.heads.factory import make_head
from goose.trace import RunRecord
from goose.verify import Verifier
from goose.walk import GreedyWalker
from goose.whatif import NoReplayDataError, sweep, what_if

PROMPT = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n"
SETTINGS = [{}, {"budget": 6}, {"budget": 40, "spine_share": 0.3}, {"method": "balanced", "budget": 24},
            {"rho": 0.0, "max_branch_depth": 3}, {"use_bigram": False, "budget": 16},
            {"method": "pld", "budget": 32}, {"method": "goose", "spine_share": 1.0, "branching": 2}]


@pytest.fixture(scope="module")
def tiny():
    return tiny_gemma3(0)


@pytest.fixture(scope="module")
def tiny_run(tiny) -> RunRecord:
    return goose.generate(tiny, PROMPT, "goose", 40, budget=24, record_sources=True)


def node_tree(step) -> tuple[list, list, list, list]:
    return ([n.token for n in step.nodes], [n.parent for n in step.nodes], [n.source for n in step.nodes],
            [n.score for n in step.nodes])


def real_accepted(goose_model, run: RunRecord, trees: dict[int, list[goose.DraftTree]]) -> dict[int, list[int]]:
    """Verify each step's trees for real with the target model, from the KV cache that step verified against."""
    verifier = Verifier(goose_model.model)
    walker = GreedyWalker(make_head(goose_model.model, "screened"))
    context = list(run.prompt_tokens)
    before, accepted = 1, {}  # tokens committed before each step: the prefill's one, then each step's
    for step in run.steps:
        prefix = context + run.tokens[:before - 1]  # the anchor is the tree root, not in the cache
        verifier.truncate(min(verifier.prefix_length, len(prefix)))
        verifier.forward_chain(prefix[verifier.prefix_length:])
        verifier.truncate(len(prefix))
        accepted[step.index] = []
        for tree in trees.get(step.index, []):
            verification, _ = walker.walk(tree, verifier.forward_tree(tree), 0)
            verifier.truncate(len(prefix))
            accepted[step.index].append(len(verification.accepted))
        before += len(step.committed)
    return accepted


def check_exact_counts(goose_model, runs: list[RunRecord], settings: list[dict]) -> int:
    """Every exact counterfactual equals the real verification of the same tree; returns how many were exact."""
    exact = 0
    for run in runs:
        results = {i: [what_if(run, i, **s) for s in settings] for i in range(len(run.steps))}
        real = real_accepted(goose_model, run, {i: [r.tree for r in rs] for i, rs in results.items()})
        for i, rs in results.items():
            for setting, result, count in zip(settings, rs, real[i]):
                if result.exact:
                    exact += 1
                    assert result.accepted == count, (run.prompt[:30], i, setting)
                else:
                    assert result.accepted <= count, "a lower bound never exceeds the real count"
    return exact


@pytest.mark.parametrize("method", list(goose.METHODS))
def test_a_replay_rebuilds_every_recorded_tree(tiny, method):
    if not goose.METHODS[method].speculative:
        return
    run = goose.generate(tiny, PROMPT, method, 30, budget=20, record_sources=True)
    loaded = RunRecord.from_json(run.to_json())
    assert loaded.has_replay_data and loaded.steps
    for record in (run, loaded):
        for step in record.steps:
            result = what_if(record, step.index)
            tree = result.tree
            assert (tree.tokens, tree.parents, tree.sources, tree.scores) == node_tree(step), (method, step.index)
            assert result.accepted == step.accepted_length and result.exact
            assert result.accepted_path == step.accepted


def test_recording_changes_nothing_but_the_trace(tiny, tiny_run):
    plain = goose.generate(tiny, PROMPT, "goose", 40, budget=24)
    assert plain.tokens == tiny_run.tokens
    assert [node_tree(s) for s in plain.steps] == [node_tree(s) for s in tiny_run.steps]
    assert all(s.rows is None and s.shape is None for s in plain.steps) and plain.prefill_rows is None
    assert not plain.costs, "a fixed budget reads no cost table; a recording keeps one for its estimates"
    assert tiny_run.costs and all(c > 0 for c in tiny_run.costs.values())
    assert all(len(s.rows) == len(s.nodes) and s.shape == {} for s in tiny_run.steps) and tiny_run.prefill_rows


def test_counterfactual_equals_real_verification_when_exact_tiny(tiny, tiny_run):
    assert check_exact_counts(tiny, [tiny_run], SETTINGS) > len(tiny_run.steps)


def test_settings_change_the_tree(tiny_run):
    step = max(range(len(tiny_run.steps)), key=lambda i: len(tiny_run.steps[i].nodes))
    sizes = {len(what_if(tiny_run, step, budget=b).tree) for b in (2, 8, 32)}
    assert len(sizes) == 3
    chain = what_if(tiny_run, step, method="pld", budget=64).tree
    assert set(chain.sources[1:]) <= {"spine"}
    balanced = what_if(tiny_run, step, method="balanced", branching=2, budget=32).tree
    assert all(len(balanced.children[n]) <= 2 for n in range(len(balanced)))


def test_a_run_without_a_table_cannot_rebuild_trees_drafted_from_one(tiny):
    run = goose.generate(tiny, PROMPT, "pld", 20, budget=16, record_sources=True)  # pld keeps no adjacency table
    for rebuilding in (lambda: what_if(run, 0, method="goose", budget=16), lambda: run_what_if(run, method="goose")):
        with pytest.raises(NoReplayDataError, match="kept no adjacency table"):
            rebuilding()
    assert what_if(run, 0, budget=4).exact


@pytest.mark.parametrize("settings, error", [
    ({"method": "beam"}, "unknown method"),
    ({"budget": 0}, "budget"),
    ({"budget": 2.5}, "budget"),
    ({"spine_share": 1.5}, "spine_share"),
    ({"rho": -0.1}, "spine_branch_share"),
    ({"top_k": 4}, "draft sources"),
    ({"ngram_lengths": (2,)}, "draft sources"),
    ({"budget": "auto"}, "one step's what-if rebuilds at a node budget"),
])
def test_bad_settings_give_a_clear_error(tiny_run, settings, error):
    with pytest.raises(ValueError, match=error):
        what_if(tiny_run, 0, **settings)


def test_bad_step_and_unknown_setting(tiny_run, tiny):
    with pytest.raises(ValueError, match="step_index"):
        what_if(tiny_run, len(tiny_run.steps))
    with pytest.raises(TypeError, match="unknown Goose option"):
        what_if(tiny_run, 0, bugdet=3)
    sampled = goose.generate(tiny, PROMPT, "goose", 8, budget=8, temperature=0.8, seed=1, record_sources=True)
    with pytest.raises(ValueError, match="greedy"):
        what_if(sampled, 0)


def test_old_trace_without_replay_data_opens_but_cannot_rebuild(tiny_run, tmp_path):
    data = json.loads(tiny_run.to_json())
    data["format"] = "goose-trace/1"
    for key in ("token_texts", "costs", "prefill_rows"):  # what formats 2 and 3 added
        del data[key]
    for step in data["steps"]:
        del step["rows"], step["shape"], step["observe_s"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    old = RunRecord.load(path)
    assert old.tokens == tiny_run.tokens and not old.has_replay_data
    with pytest.raises(NoReplayDataError, match="record_sources=True"):
        what_if(old, 0)
    with pytest.raises(NoReplayDataError):
        run_what_if(old)


def test_whole_run_counterfactual(tiny_run):
    own = run_what_if(tiny_run)
    assert own.accepted[:-1] == own.real[:-1] and own.tau == pytest.approx(tiny_run.totals.tau)
    assert own.exact and own.speedup > 0
    small = run_what_if(tiny_run, budget=2)
    assert all(a <= budget - 1 for a, budget in zip(small.accepted, small.budgets)), "a tree accepts < its nodes"
    assert small.budgets != own.budgets and small.tau <= own.tau
    curves = sweep([tiny_run], budgets=(2, 16), spine_shares=(0.0, 1.0))
    assert set(curves["budget"]) == {"goose", "balanced"} and len(curves["spine_share"]) == 2
    assert all(tau >= 1.0 for _, tau, _ in curves["budget"]["goose"])


@pytest.mark.slow
def test_counterfactual_equals_real_verification_when_exact_gemma(gemma):
    prompts = ["List the days of the week, one per line:\nMonday\nTuesday\n",
               "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n\n# test\nprint(fib("]
    runs = [goose.generate(gemma, p, "goose", 24, budget=16, record_sources=True) for p in prompts]
    settings = [{}, {"budget": 6}, {"budget": 48, "spine_share": 0.3}, {"method": "balanced", "budget": 24},
                {"rho": 0.0, "max_branch_depth": 3}]
    assert check_exact_counts(gemma, runs, settings) >= len(settings) * len(prompts)


def test_bench_what_if_adds_the_curves_and_agrees_with_the_real_run(tmp_path):
    import functools

    import torch
    from tiny import tiny_llama

    from goose import bench
    from goose.bench import BenchSettings
    from goose.cli import build_parser

    assert build_parser().parse_args(["bench", "--suite", "mtbench", "--what-if"]).what_if
    settings = BenchSettings(suite="mtbench", methods=("goose", "balanced"), limit=2, budget=8, max_new_tokens=12,
                             threads=torch.get_num_threads(), what_if=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bench.runner, "measure_memory_bandwidth", functools.partial(bench.measure_memory_bandwidth,
                                                                                  nbytes=1 << 24))
        bench.run_bench(settings, tmp_path, tiny_llama(0), progress=False)
    traces = sorted((tmp_path / "what-if").glob("*.json"))
    assert len(traces) == 2 and all(RunRecord.load(p).has_replay_data for p in traces)
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    for title in ("What if", "estimated speed-up vs budget", "vs spine share r"):
        assert title in page
    section = page[page.index("<h2>What if"):]
    goose_row = section[section.index("<td>goose</td>"):].split("</tr>")[0]
    assert "+0.0 %" in goose_row, "goose at its own budget: the replay is the run"
    assert "speed-up measured" in section and section.count("<td>goose budget 16</td>") == 1
    checks = [json.loads(line) for line in (tmp_path / "what-if-check.jsonl").read_text().splitlines()]
    assert len(checks) == 2 * 9 and all(row["same_tokens"] for row in checks)
    assert all(row["real_s"] > 0 and row["estimated_s"] > 0 for row in checks)
    pld_like = [row for row in checks if row["setting"] == "goose budget 16 spine_share 1.0"]
    assert len(pld_like) == 2


def test_the_what_if_check_command_records_replays_and_runs_every_setting(tmp_path, capsys):
    from tiny import tiny_llama

    from goose.bench.what_if import WHAT_IF_SETTINGS
    from goose.cli import main

    tiny = tiny_llama(0)
    tiny.model.save_pretrained(tmp_path / "model")
    tiny.tokenizer.save_pretrained(tmp_path / "model")
    argv = ["what-if-check", "--suite", "mtbench", "--limit", "2", "--max-new-tokens", "10",
            "--model", str(tmp_path / "model"), "--threads", "1", "--out", str(tmp_path / "check")]
    assert main(argv) == 0
    rows = [json.loads(line) for line in (tmp_path / "check" / "what-if-check.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * len(WHAT_IF_SETTINGS) and all(row["same_tokens"] for row in rows)
    table = capsys.readouterr().out.splitlines()[-len(WHAT_IF_SETTINGS):]  # one row per setting, pooled
    assert all(line.startswith("| ") and " | 2 | " in line for line in table)
    assert main(argv) == 0  # a rerun resumes: nothing is checked twice
    assert len((tmp_path / "check" / "what-if-check.jsonl").read_text().splitlines()) == 2 * len(WHAT_IF_SETTINGS)


def test_a_rebuilt_step_at_the_runs_own_setting_is_the_recorded_step_as_the_walk_judged_it(tiny_run):
    """rebuilt_record judges the rebuilt tree by the walk's own rule: at the run's own setting every node keeps its
    token, parent, source and status, visited nodes their target, and the step its bonus and committed tokens."""
    from goose.whatif import rebuilt_record

    for index, step in enumerate(tiny_run.steps):
        rebuilt = rebuilt_record(tiny_run, index, what_if(tiny_run, index))
        assert node_tree(rebuilt)[:3] == node_tree(step)[:3]
        assert [n.status for n in rebuilt.nodes] == [n.status for n in step.nodes], index
        assert [n.text for n in rebuilt.nodes] == [n.text for n in step.nodes]
        visited = [0, *step.accepted]
        assert [rebuilt.nodes[i].target for i in visited] == [step.nodes[i].target for i in visited]
        if step is not tiny_run.steps[-1]:  # the last one commits what max_new_tokens leaves room for
            assert (rebuilt.bonus_token, rebuilt.committed) == (step.bonus_token, step.committed)
    other = rebuilt_record(tiny_run, 0, what_if(tiny_run, 0, budget=6))
    assert len(other.nodes) <= 6 and other.budget == 6


def test_a_run_stored_with_the_old_auto_budget_pair_replays_as_auto(tiny):
    """A trace from before the budget had one encoding ({"budget": 60, "auto_budget": true}) replays its own
    trees, at its own (auto) budget."""
    from goose.whatif import own_budget, own_setting, replay

    run = goose.generate(tiny, PROMPT, "goose", 24, record_sources=True)
    assert run.config["budget"] == "auto" and "auto_budget" not in run.config
    data = json.loads(run.to_json())
    data["config"].update(budget=60, auto_budget=True)
    old = RunRecord.from_dict(data)
    assert own_budget(old) == "auto" and own_setting(old, {"budget": "auto"}) and not own_setting(old, {"budget": 60})
    replayed = replay(old)
    assert replayed.budgets == [step.budget for step in run.steps]
    assert [node_tree(s.step) for s in replayed.steps] == [node_tree(s) for s in run.steps]


def test_replay_refusal_is_the_error_a_replay_raises(tiny, tiny_run, tmp_path):
    """One rule for whether a run replays: replay_refusal returns the error check_replayable raises (what the Lab
    shows), None for a replayable run."""
    from goose.whatif import check_replayable, own_budget, replay_refusal

    assert replay_refusal(tiny_run) is None and own_budget(tiny_run) == 24
    sampled = goose.generate(tiny, PROMPT, "goose", 8, temperature=0.8, seed=1, record_sources=True)
    unrecorded = goose.generate(tiny, PROMPT, "goose", 8)
    pld = goose.generate(tiny, PROMPT, "pld", 8, record_sources=True)
    assert own_budget(unrecorded) == "auto"
    for run, method, kind, words in ((sampled, "goose", ValueError, "greedy"),
                                     (unrecorded, "goose", NoReplayDataError, "record_sources=True"),
                                     (pld, "balanced", NoReplayDataError, "kept no adjacency table")):
        refusal = replay_refusal(run, method)
        assert isinstance(refusal, kind) and words in str(refusal)
        with pytest.raises(kind, match=words) as raised:
            check_replayable(run, method)
        assert str(raised.value) == str(refusal)
