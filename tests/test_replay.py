"""Whole-run replays (goose.whatif via goose.run_what_if): the recorded setting replays to the run itself,
context-only replays equal real runs, every replay's first step is the real first step, the check path runs the
model (the run's own setting: the same trees, tau error 0), and traces without replay data say what they lack."""

from __future__ import annotations

import copy
import json

import pytest
from tiny import tiny_gemma3, tiny_llama

import goose
from goose import metrics
from goose.budget import interpolate_cost
from goose.check import CheckCancelled, RealRun, run_what_if
from goose.trace import RunRecord
from goose.whatif import (
    LatestRows,
    NoReplayDataError,
    PassPrices,
    PassRows,
    anchor_positions,
    context_key,
    node_paths,
    paced_totals,
)

PROMPTS = ["def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n",
           "one two three four one two three four one two",
           "The quick brown fox jumps over the lazy dog. The quick brown"]
TREE_METHODS = ["goose", "balanced", "recycling"]


@pytest.fixture(scope="module")
def models():
    return [tiny_gemma3(0), tiny_llama(1)]


def recorded_trees(run: RunRecord) -> list[tuple]:
    return [(tuple(n.token for n in s.nodes), tuple(n.parent for n in s.nodes), tuple(n.source for n in s.nodes))
            for s in run.steps]


@pytest.mark.parametrize("method", [*TREE_METHODS, "pld", "suffix", "suffix-path"])
@pytest.mark.parametrize("budget", [None, 6, 24, "auto"])
def test_replaying_the_recorded_setting_rebuilds_the_run(models, method, budget):
    for goose_model in models:
        for prompt in PROMPTS:
            live = goose.generate(goose_model, prompt, method, 36, budget=budget, record_sources=True)
            for run in (live, RunRecord.from_json(live.to_json())):
                replayed = run_what_if(run)
                assert replayed.exact and replayed.tokens == len(run.tokens)
                assert replayed.positions == anchor_positions(run)
                # the last step's accepted drafts past the run's end are not known to a replay (nor committed)
                assert replayed.accepted[:-1] == run.accepted_lengths[:-1]
                assert replayed.budgets == [s.budget for s in run.steps]
                assert recorded_trees(replayed.replayed) == recorded_trees(run), (goose_model.name, prompt[:12])
                assert replayed.tau == pytest.approx(run.totals.tau) and replayed.passes == run.totals.forward_passes


@pytest.mark.parametrize("method", TREE_METHODS)
def test_naming_the_recorded_setting_replays_the_run_too(models, method):
    run = goose.generate(models[0], PROMPTS[0], method, 36, budget=10, record_sources=True)
    assert run_what_if(run, method=method, budget=10).accepted[:-1] == run.accepted_lengths[:-1]


@pytest.mark.parametrize("budget", [2, 5, 16, 64])
def test_context_only_replays_equal_real_runs(models, budget):
    """pld drafts from the context alone, a function of the token prefix: its replay is exact at any budget."""
    for goose_model in models:
        for prompt in PROMPTS:
            recorded = goose.generate(goose_model, prompt, "goose", 40, budget=12, record_sources=True)
            replayed = run_what_if(recorded, method="pld", budget=budget)
            real = goose.generate(goose_model, prompt, "pld", 40, budget=budget)
            assert replayed.exact and real.tokens == recorded.tokens
            assert replayed.accepted[:-1] == real.accepted_lengths[:-1]
            assert replayed.passes == real.totals.forward_passes


@pytest.mark.parametrize("settings", [{"budget": 3}, {"budget": 40, "spine_share": 1.0}, {"method": "balanced"},
                                      {"method": "recycling", "budget": 9},
                                      {"spine_branch_share": 0.0, "max_branch_depth": 2}])
def test_every_replay_starts_with_the_real_first_tree(models, settings):
    """At the first step the table holds the prefill's rows alone, whatever the setting: the replay's first tree
    is the one a real run at that setting verifies first, and its acceptance the real one."""
    for goose_model in models:
        recorded = goose.generate(goose_model, PROMPTS[0], "goose", 30, budget=12, record_sources=True)
        replayed = run_what_if(recorded, **settings)
        method = settings.get("method", "goose")
        budget = settings.get("budget", recorded.config["budget"])
        shape = {k: v for k, v in settings.items() if k not in ("method", "budget")}
        real = goose.generate(goose_model, PROMPTS[0], method, 30, budget=budget, **shape)
        assert recorded_trees(replayed.replayed)[:1] == recorded_trees(real)[:1]
        assert replayed.accepted[0] == real.accepted_lengths[0]
        assert not replayed.exact


def recorded_rows_by_place(run: RunRecord) -> dict[int, list[tuple[int, list]]]:
    """token -> (place, row) of every row the recording holds, in the order they were computed."""
    places: dict[int, list] = {}
    prompt = run.prompt_tokens
    for previous, token, row in run.prefill_rows:  # at the prompt's last (previous, token): positions <= 0
        last = max(i for i, t in enumerate(prompt) if t == token and (prompt[i - 1] if i else None) == previous)
        places.setdefault(token, []).append((last + 1 - len(prompt), row))
    for position, step in zip(anchor_positions(run), run.steps):
        depths = [node.depth for node in step.nodes]
        for node, row in zip(step.nodes, step.rows):
            places.setdefault(node.token, []).append((position + node.depth, row))
        for parent, token, row in step.shadow or []:
            depths.append(depths[parent] + 1)
            places.setdefault(token, []).append((position + depths[-1], row))
    return places


def test_a_node_no_pass_saw_reads_its_tokens_latest_row_at_its_place(models):
    """Off the recorded contexts a node takes its token's latest recorded row at or before its own place in the
    text (prefill, trees and shadow trees alike; at one place, the later computed); none before the first."""
    run = goose.generate(models[0], PROMPTS[1], "goose", 40, budget=4, record_sources=True, shadow_budget=16)
    latest = LatestRows(run)
    checked = 0
    for token, places in recorded_rows_by_place(run).items():
        for place in range(-len(run.prompt_tokens) - 1, len(run.tokens) + 3):
            earlier = [(p, order, row) for order, (p, row) in enumerate(places) if p <= place]
            expected = max(earlier, key=lambda entry: entry[:2])[2] if earlier else None
            assert latest.row(token, place) is expected
            checked += expected is not None
    assert checked > 100
    assert any(isinstance(s.shadow, list) and s.shadow for s in run.steps)


def test_check_runs_the_model_beside_the_estimate(models, monkeypatch):
    goose_model = models[0]
    recorded = goose.generate(goose_model, PROMPTS[0], "goose", 30, budget=12, record_sources=True)
    started = []

    def logged_stream(model, prompt, method, *args, **kwargs):
        started.append(method)
        return goose.stream(model, prompt, method, *args, **kwargs)

    monkeypatch.setattr(goose.check, "stream", logged_stream)
    checked = run_what_if(recorded, check=True, model=goose_model, budget=6)
    again = run_what_if(recorded, check=True, model=goose_model, budget=6)
    assert started == ["autoregressive", "goose"] * 2, "each check measures its baseline just before its run"
    assert again.measured.baseline is not checked.measured.baseline
    assert again.measured.baseline.tokens == checked.measured.baseline.tokens
    real = goose.generate(goose_model, PROMPTS[0], "goose", 30, budget=6)
    measured = checked.measured
    assert measured.run.tokens == real.tokens == recorded.tokens and measured.same_tokens
    assert measured.tau == pytest.approx(real.totals.tau) and measured.wall_s > 0 and measured.speedup > 0
    assert checked.tau_error == pytest.approx(checked.tau / measured.tau - 1)
    assert checked.speedup_error == pytest.approx(checked.paced_speedup / measured.speedup - 1)
    assert checked.table_speedup_error == pytest.approx(checked.speedup / measured.speedup - 1)
    assert measured.baseline.method == "autoregressive" and measured.baseline.tokens == recorded.tokens
    assert run_what_if(recorded, budget=6).measured is None
    with pytest.raises(ValueError, match="model="):
        run_what_if(recorded, check=True)


def test_estimates_price_each_pass_from_the_runs_cost_table(models):
    """The recorded prefill plus each replayed pass's cost read off the run's table (the table the run's tuner
    read: measured on real steps, goose.costs); no table, no speed estimate."""
    recorded = goose.generate(models[0], PROMPTS[0], "goose", 30, budget=12, record_sources=True)
    recorded.costs = {1: 1.0, 4: 1.0, 16: 4.0}
    recorded.autoregressive_s = recorded.prefill_row_s = None  # as traces recorded before they were measured
    recorded.totals.prefill_s = 2.0
    replayed = run_what_if(recorded, method="pld", budget=4)
    assert replayed.seconds == pytest.approx(2.0 + sum(interpolate_cost(recorded.costs, n) for n in replayed.nodes))
    assert replayed.baseline.wall_s == pytest.approx(2.0 + len(recorded.tokens) - 1)
    assert replayed.speedup == pytest.approx(replayed.baseline.wall_s / replayed.seconds)
    recorded.costs = {}
    assert run_what_if(recorded, budget=4).speedup is None


def test_passes_without_an_adjacency_table_are_priced_without_its_top_k(models):
    """The table's passes pay the adjacency table's top-k of their rows; autoregressive decoding, pld and suffix keep
    no table and skip it. Measured beside the table, the autoregressive pass prices the baseline, and the gap between
    it and the table's 1-node pass comes off every pass of a method without a table."""
    recorded = goose.generate(models[0], PROMPTS[0], "goose", 30, budget=12, record_sources=True)
    assert 0 < recorded.autoregressive_s, "measured with the cost table and recorded in the run"
    assert RunRecord.from_json(recorded.to_json()).autoregressive_s == recorded.autoregressive_s
    recorded.costs, recorded.autoregressive_s, recorded.prefill_row_s = {1: 1.0, 4: 1.0, 16: 4.0}, 0.8, None
    recorded.totals.prefill_s = 2.0
    pld = run_what_if(recorded, method="pld", budget=4)
    assert pld.seconds == pytest.approx(2.0 + sum(interpolate_cost(recorded.costs, n) - 0.2 for n in pld.nodes))
    assert pld.baseline.wall_s == pytest.approx(2.0 + 0.8 * (len(recorded.tokens) - 1))
    tree = run_what_if(recorded, budget=4)
    assert tree.seconds == pytest.approx(2.0 + sum(interpolate_cost(recorded.costs, n) for n in tree.nodes))
    assert tree.baseline.wall_s == pld.baseline.wall_s
    baseline = goose.generate(models[0], PROMPTS[0], "autoregressive", 30)
    steps = baseline.totals.forward_passes - 1
    baseline.totals.setup_s, baseline.totals.prefill_s = 0.5, 2.0
    baseline.totals.wall_s = 2.5 + 0.8 * 3.0 * steps  # each pass at three times the autoregressive pass's cost
    paced = paced_totals(tree.prices, tree.nodes, tree.tokens, [baseline])
    assert paced.wall_s == pytest.approx(2.5 + 3.0 * sum(interpolate_cost(recorded.costs, n) for n in tree.nodes))


def test_a_checked_estimate_prices_its_passes_at_the_pace_its_baselines_ran(models):
    """Beside a check, the table's costs are read at the pace of the autoregressive runs just measured: their own
    set-up and prefill, then each pass the table's cost times how much slower than the table's passes the
    baselines' passes ran, pooled over the rounds. A baseline at the table's own pace leaves the table's estimate
    (prefill aside)."""
    recorded = goose.generate(models[0], PROMPTS[0], "goose", 30, budget=12, record_sources=True)
    recorded.costs = {1: 1.0, 4: 1.0, 16: 4.0}
    recorded.autoregressive_s = recorded.prefill_row_s = None
    baseline = goose.generate(models[0], PROMPTS[0], "autoregressive", 30)
    steps = baseline.totals.forward_passes - 1
    baseline.totals.setup_s, baseline.totals.prefill_s = 0.5, 2.0
    baseline.totals.wall_s = 2.5 + 3.0 * steps  # each pass at three times the table's 1-node cost
    result = run_what_if(recorded, method="pld", budget=4)
    paced = paced_totals(result.prices, result.nodes, result.tokens, [baseline])
    assert paced.wall_s == pytest.approx(2.5 + 3.0 * sum(interpolate_cost(recorded.costs, n) for n in result.nodes))
    assert paced.forward_passes == 1 + len(result.nodes)
    real = goose.generate(models[0], PROMPTS[0], "pld", 30, budget=4)
    real.totals.wall_s = baseline.totals.wall_s / 2.0
    result.measured = RealRun([real], [baseline])
    assert result.measured.speedup == pytest.approx(2.0)
    assert result.paced_speedup == pytest.approx(baseline.totals.wall_s / paced.wall_s)
    assert result.speedup_error == pytest.approx(result.paced_speedup / 2.0 - 1)
    assert result.table_speedup_error == pytest.approx(result.speedup / 2.0 - 1)
    slower = copy.deepcopy(baseline)
    slower.totals.wall_s = 2.5 + 5.0 * steps  # a second round at five times: the rounds' pace is four
    pooled = paced_totals(result.prices, result.nodes, result.tokens, [baseline, slower])
    assert pooled.wall_s == pytest.approx(2.5 + 4.0 * sum(interpolate_cost(recorded.costs, n) for n in result.nodes))
    baseline.totals.wall_s = 2.5 + 1.0 * steps  # at the table's pace: the table's estimate, from the same prefill
    recorded.totals.prefill_s = 2.5
    assert run_what_if(recorded, method="pld", budget=4).seconds == pytest.approx(
        paced_totals(result.prices, result.nodes, result.tokens, [baseline]).wall_s)
    assert paced_totals(PassPrices({}), result.nodes, result.tokens, [baseline]) is None, "no table, no estimate"


def test_a_check_prices_its_estimate_with_the_passes_it_measured_before_its_rounds(models, monkeypatch):
    """The kept cost table's ratios drift with the machine's load: a check measures the passes its estimate prices
    (the grid's sizes around each replayed tree, the autoregressive pass and a prompt row's top-k) just before its
    first round, and paces those."""
    from goose.check import grid_brackets, prices_now

    assert grid_brackets([1, 5, 20, 21, 64]) == [1, 4, 6, 16, 24, 64]
    assert grid_brackets([3]) == [1, 3]
    recorded = goose.generate(models[0], PROMPTS[0], "goose", 30, budget=12, record_sources=True)
    probed = []

    def logged(goose_model, run, nodes, cancel=None):
        probed.append(list(nodes))
        return PassPrices({n: 2.0 * n for n in grid_brackets(nodes)}, 1.5, 0.0)

    monkeypatch.setattr(goose.check, "prices_now", logged)
    checked = run_what_if(recorded, check=True, model=models[0], rounds=2, budget=6)
    assert probed == [checked.nodes], "measured once, before the first round, for the replay's own trees"
    measured = checked.measured
    paced = paced_totals(measured.prices, checked.nodes, checked.tokens, measured.baselines,
                         prefill_rows=checked.prefill_rows)
    assert checked.paced_speedup == pytest.approx(metrics.speedup(paced, measured.baseline_totals))
    kept = paced_totals(checked.prices, checked.nodes, checked.tokens, measured.baselines,
                        prefill_rows=checked.prefill_rows)
    assert checked.paced_speedup != pytest.approx(metrics.speedup(kept, measured.baseline_totals)), \
        "the kept table no longer prices a measured check"
    monkeypatch.undo()
    fresh = prices_now(models[0], recorded, [5, 12])
    assert sorted(fresh.table) == [1, 4, 6, 12] and fresh.autoregressive_s > 0 and fresh.prefill_row_s >= 0


def test_a_tree_methods_prefill_is_priced_with_the_top_k_of_the_prompt_rows_its_table_keeps(models):
    """A method with an adjacency table takes, in its prefill, the head's top-k of the prompt rows the table keeps,
    which autoregressive decoding does not: the table prices each row (measured with it), and a paced estimate
    starts from the baselines' own set-up and prefill plus those rows. A method without a table pays none."""
    recorded = goose.generate(models[0], PROMPTS[0], "goose", 30, budget=12, record_sources=True)
    assert recorded.prefill_row_s > 0, "measured with the cost table and recorded in the run"
    recorded.costs, recorded.autoregressive_s, recorded.prefill_row_s = {1: 1.0, 4: 1.0, 16: 4.0}, None, 0.01
    recorded.totals.prefill_s = 2.0
    rows = len(recorded.prefill_rows)
    assert 0 < rows <= len(recorded.prompt_tokens)
    tree, pld = run_what_if(recorded), run_what_if(recorded, method="pld", budget=4)
    assert tree.prefill_rows == rows and pld.prefill_rows == 0
    assert tree.totals.prefill_s == pytest.approx(2.0), "the recorded prefill, rows and all"
    assert pld.totals.prefill_s == pytest.approx(2.0 - 0.01 * rows) == tree.baseline.prefill_s
    baseline = goose.generate(models[0], PROMPTS[0], "autoregressive", 30)
    baseline.totals.setup_s, baseline.totals.prefill_s = 0.1, 0.2
    baseline.totals.wall_s = 0.3 + 3.0 * (baseline.totals.forward_passes - 1)
    table_s = sum(interpolate_cost(recorded.costs, n) for n in tree.nodes)
    paced = paced_totals(tree.prices, tree.nodes, tree.tokens, [baseline], prefill_rows=tree.prefill_rows)
    assert paced.wall_s == pytest.approx(0.3 + 0.01 * rows + 3.0 * table_s)
    tree.measured = RealRun([recorded], [baseline])
    assert tree.paced_speedup == pytest.approx(baseline.totals.wall_s / paced.wall_s)


def test_a_check_alternates_its_rounds_and_divides_their_mean_times(models):
    recorded = goose.generate(models[0], PROMPTS[1], "goose", 20, budget=8, record_sources=True)
    started = []
    result = run_what_if(recorded, check=True, model=models[0], rounds=2, on_round=started.append)
    real = result.measured
    assert started == [0, 1] and real.rounds == 2 and len(real.baselines) == 2
    assert real.same_tokens and all(run.tokens == recorded.tokens for run in real.runs)
    assert real.wall_s == pytest.approx((real.runs[0].totals.wall_s + real.runs[1].totals.wall_s) / 2)
    assert real.speedup == pytest.approx(real.baseline_totals.wall_s / real.wall_s)
    with pytest.raises(ValueError, match="rounds must be"):
        run_what_if(recorded, check=True, model=models[0], rounds=0)


def test_runs_without_replay_data_say_what_they_lack(models):
    goose_model = models[0]
    plain = goose.generate(goose_model, PROMPTS[0], "goose", 20, budget=8)
    with pytest.raises(NoReplayDataError, match="record_sources=True"):
        run_what_if(plain)
    chain = goose.generate(goose_model, PROMPTS[0], "pld", 20, budget=8, record_sources=True)
    with pytest.raises(NoReplayDataError, match="kept no adjacency table"):
        run_what_if(chain, method="goose")
    assert run_what_if(chain, budget=4).exact
    sampled = goose.generate(goose_model, PROMPTS[0], "goose", 12, budget=8, temperature=0.8, seed=1,
                             record_sources=True)
    with pytest.raises(ValueError, match="greedy"):
        run_what_if(sampled)


def test_older_traces_load_and_replay_as_far_as_they_can(models, tmp_path):
    """A format-3 trace (rows, shapes and a snapshot per step) replays to itself, its snapshots ignored; a
    format-2 trace (no rows) loads, and a replay says what it lacks."""
    run = goose.generate(models[0], PROMPTS[0], "goose", 24, budget=8, record_sources=True)
    data = json.loads(run.to_json())
    data["format"] = "goose-trace/3"
    for step in data["steps"]:
        step["snapshot"] = {"format": 1, "anchor": 0}
    path = tmp_path / "v3.json"
    path.write_text(json.dumps(data))
    assert recorded_trees(run_what_if(RunRecord.load(path)).replayed) == recorded_trees(run)
    data["format"] = "goose-trace/2"
    del data["prefill_rows"]
    for step in data["steps"]:
        del step["rows"], step["shape"]
    path.write_text(json.dumps(data))
    old = RunRecord.load(path)
    assert not old.has_replay_data and old.tokens == run.tokens
    for replaying in (lambda: run_what_if(old), lambda: goose.what_if(old, 0)):
        with pytest.raises(NoReplayDataError, match="adjacency rows"):
            replaying()


@pytest.mark.parametrize("method", TREE_METHODS)
def test_checking_the_runs_own_setting_reruns_the_same_trees(models, method):
    """Recorded as Explore records (auto budget, the tuner on), checked at its own setting: the real run drafts
    the recorded trees again, so the estimate's tau error is exactly 0 and the tokens are the same."""
    goose_model = models[0]
    goose.generate(goose_model, PROMPTS[2], method, 30)  # another run first: it must leave nothing behind
    recorded = goose.generate(goose_model, PROMPTS[0], method, 36, record_sources=True)
    own = run_what_if(recorded, check=True, model=goose_model)
    assert own.tau_error == 0.0 and own.exact
    assert own.measured.run.tokens == recorded.tokens and own.measured.same_tokens
    assert recorded_trees(own.measured.run) == recorded_trees(recorded)


def test_the_check_keeps_the_runs_own_knobs_and_can_be_cancelled(models):
    goose_model = models[0]
    recorded = goose.generate(goose_model, PROMPTS[0], "goose", 24, budget=12, spine_share=0.3, max_branch_depth=2,
                              record_sources=True)
    own = run_what_if(recorded, check=True, model=goose_model)
    assert own.measured.run.config["spine_share"] == 0.3 and own.measured.run.config["max_branch_depth"] == 2
    assert own.measured.run.accepted_lengths[:-1] == recorded.accepted_lengths[:-1], "the same run, for real"
    asked = []
    with pytest.raises(CheckCancelled):
        run_what_if(recorded, check=True, model=goose_model, budget=4, cancel=lambda: asked.append(1) or True)
    assert len(asked) == 1, "cancelled after its first step"


def test_a_shadow_recording_leaves_the_run_as_it_was(models):
    """The shadow tree is verified outside the run: same tokens, trees and rows as a plain recording (fixed
    budget: no tuner), and its rows survive JSON."""
    for goose_model in models:
        plain = goose.generate(goose_model, PROMPTS[0], "goose", 30, budget=6, record_sources=True)
        rich = goose.generate(goose_model, PROMPTS[0], "goose", 30, budget=6, record_sources=True, shadow_budget=40)
        assert rich.tokens == plain.tokens and recorded_trees(rich) == recorded_trees(plain)
        assert [s.rows for s in rich.steps] == [s.rows for s in plain.steps]
        assert plain.steps[0].shadow is None and sum(len(s.shadow) for s in rich.steps) > len(rich.steps)
        loaded = RunRecord.from_json(rich.to_json())
        assert [s.shadow for s in loaded.steps] == [[tuple(x) for x in s.shadow] for s in rich.steps]
        assert recorded_trees(run_what_if(loaded).replayed) == recorded_trees(rich), "and replays to itself"
    with pytest.raises(ValueError, match="record_sources"):
        goose.generate(models[0], PROMPTS[0], "goose", 8, shadow_budget=16)


def test_rows_are_looked_up_by_the_context_they_were_computed_in(models):
    """A real run's node and a recorded node (real or shadow) in the same context, reached from different
    anchors, share one key and one row: the replay's rows for its own nodes are the model's where found."""
    goose_model = models[1]
    recorded = goose.generate(goose_model, PROMPTS[2], "goose", 36, budget=5, record_sources=True, shadow_budget=24)
    real = goose.generate(goose_model, PROMPTS[2], "goose", 36, budget=24, record_sources=True)
    known = PassRows(recorded)
    sequence, length = real.prompt_tokens + real.tokens, len(real.prompt_tokens)
    recorded_anchors = set(anchor_positions(recorded))
    found = across = 0
    for position, step in zip(anchor_positions(real), real.steps):
        paths = node_paths([n.parent for n in step.nodes], [n.token for n in step.nodes])
        for path, row in zip(paths, step.rows):
            recorded_row = known.get(context_key(sequence, length + position, path))
            if recorded_row is not None:
                found += 1
                across += position not in recorded_anchors  # reached from another anchor than the recorded one
                assert [t for t, _ in recorded_row] == [t for t, _ in row]
                assert [s for _, s in recorded_row] == pytest.approx([s for _, s in row], abs=1e-4)
    assert found > sum(len(s.nodes) for s in recorded.steps)  # more than the recorded trees alone could hold
    assert across > 0


@pytest.mark.parametrize("method", TREE_METHODS)
def test_a_run_that_stops_early_replays_to_itself(models, method):
    """A run cut by a stop string drafted its last trees with matches cut to its own max_new_tokens: its replay
    ends where the recording ends and drafts those trees too."""
    for goose_model in models:
        full = goose.generate(goose_model, PROMPTS[1], method, 60)
        middle = len(full.text) // 2
        stop = full.text[middle:middle + 2]
        run = goose.generate(goose_model, PROMPTS[1], method, 60, stop=stop, record_sources=True)
        assert stop and run.stop_reason == "stop_string" and len(run.tokens) < 60
        replayed = run_what_if(run).replayed
        assert recorded_trees(replayed) == recorded_trees(run) and replayed.tokens == run.tokens
        assert replayed.stop_reason == run.stop_reason
