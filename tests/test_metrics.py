"""goose.metrics on hand-built runs whose every number is known, so each definition is pinned."""

from __future__ import annotations

import pytest

from goose import metrics
from goose.metrics import BASELINE
from goose.trace import RunRecord, RunTotals, StepRecord


def step(index: int, accepted: int) -> StepRecord:
    """A step that accepted `accepted` draft tokens (nodes 1..accepted) and a bonus token."""
    return StepRecord(index=index, nodes=[], accepted=list(range(1, accepted + 1)), bonus_token=0, bonus_text="",
                      committed=[0] * (accepted + 1), draft_s=0.0, verify_s=0.0, budget=8)


def record(method: str, tokens: list[int], wall_s: float, forwards: int | None, lengths: tuple[int, ...] = (),
           drafted: dict[str, int] | None = None, accepted: dict[str, int] | None = None) -> RunRecord:
    totals = RunTotals(new_tokens=len(tokens), forward_passes=forwards, wall_s=wall_s, drafted=drafted or {},
                       accepted=accepted or {})
    return RunRecord(prompt="p", method=method, model="m", config={}, sampling={}, max_new_tokens=64, tokens=tokens,
                     steps=[step(i, n) for i, n in enumerate(lengths)], totals=totals)


def suite() -> dict[str, dict[str, RunRecord]]:
    """Two prompts. Baseline: 20 tokens in 4 s and 10 in 1 s (5 and 10 tokens/s).
    fast: 20 in 2 s (2x) and 10 in 2 s (0.5x), differing on prompt b; spine 6/12, branch 2/20."""
    return {
        BASELINE: {"a": record(BASELINE, list(range(20)), 4.0, 20, (0,) * 19),
                   "b": record(BASELINE, list(range(10)), 1.0, 10, (0,) * 9)},
        "fast": {"a": record("fast", list(range(20)), 2.0, 8, (3, 0, 1, 4, 2, 2, 1),
                             drafted={"spine": 12, "branch": 10}, accepted={"spine": 6, "branch": 1}),
                 "b": record("fast", [*range(9), 99], 2.0, 5, (2, 1, 0, 2),
                             drafted={"branch": 10}, accepted={"branch": 1})},
    }


def test_tau_counts_the_prefill_pass_and_is_unknown_without_a_count():
    assert metrics.tau(RunTotals(new_tokens=30, forward_passes=12)) == pytest.approx(2.5)
    assert metrics.tau(RunTotals(new_tokens=30, forward_passes=None)) is None
    assert metrics.tau(RunTotals(new_tokens=0, forward_passes=0)) is None


def test_tokens_per_second_and_speedup_of_one_run():
    fast, base = RunTotals(new_tokens=20, wall_s=2.0), RunTotals(new_tokens=20, wall_s=4.0)
    assert metrics.tokens_per_s(fast) == pytest.approx(10.0)
    assert metrics.tokens_per_s(RunTotals(new_tokens=5, wall_s=0.0)) == 0.0
    assert metrics.speedup(fast, base) == pytest.approx(2.0)
    assert metrics.speedup(fast, RunTotals()) is None


def test_acceptance_rate_of_a_source_is_accepted_over_drafted():
    totals = RunTotals(drafted={"spine": 8, "branch": 0}, accepted={"spine": 2})
    assert metrics.acceptance_rate(totals, "spine") == pytest.approx(0.25)
    assert metrics.acceptance_rate(totals, "branch") is None
    assert metrics.acceptance_rate(totals, "nowhere") is None


def test_acceptance_by_source_pools_tokens_not_rates():
    runs = suite()["fast"].values()
    assert metrics.acceptance_by_source(runs) == {"branch": pytest.approx(2 / 20), "spine": pytest.approx(6 / 12)}


def test_accepted_lengths_come_from_the_steps_and_give_shares_and_mean():
    run = suite()["fast"]["a"]
    assert run.accepted_lengths == [3, 0, 1, 4, 2, 2, 1]
    assert metrics.accepted_length_shares(run.accepted_lengths) == pytest.approx(
        {0: 1 / 7, 1: 2 / 7, 2: 2 / 7, 3: 1 / 7, 4: 1 / 7})
    assert list(metrics.accepted_length_shares([2, 0, 2])) == [0, 2]
    assert metrics.mean_accepted_length(run.accepted_lengths) == pytest.approx(13 / 7)
    assert metrics.accepted_length_shares([]) == {} and metrics.mean_accepted_length([]) is None


def test_lossless_means_the_very_same_tokens():
    assert metrics.lossless([1, 2, 3], (1, 2, 3))
    assert not metrics.lossless([1, 2], [1, 2, 3])
    runs = suite()
    assert metrics.lossless_by_prompt(runs["fast"], runs[BASELINE]) == {"a": True, "b": False}


def test_pooled_speedup_is_total_tokens_over_total_time_against_the_baseline():
    runs = suite()
    # fast: 30 tokens / 4 s = 7.5 tokens/s; baseline: 30 / 5 s = 6 tokens/s
    assert metrics.pooled_speedup(runs["fast"], runs[BASELINE]) == pytest.approx(7.5 / 6.0)


def test_pooled_speedup_uses_only_the_prompts_both_ran():
    runs = suite()
    partial = {"a": runs["fast"]["a"]}  # an interrupted benchmark: prompt b not reached yet
    assert metrics.pooled_speedup(partial, runs[BASELINE]) == pytest.approx(2.0)
    assert metrics.pooled_speedup(partial, {}) is None


def test_per_prompt_speedups_and_cpu_clock():
    runs = suite()
    assert metrics.per_prompt_speedups(runs["fast"], runs[BASELINE]) == pytest.approx({"a": 2.0, "b": 0.5})
    cpu = {id(r): s for r, s in zip([*runs["fast"].values(), *runs[BASELINE].values()], (1.0, 2.0, 6.0, 3.0))}
    # fast: 30 tokens / 3 CPU s = 10; baseline: 30 / 9 CPU s
    assert metrics.pooled_speedup(runs["fast"], runs[BASELINE], lambda r: cpu[id(r)]) == pytest.approx(3.0)
    assert metrics.pooled_speedup(runs["fast"], runs[BASELINE], lambda r: None) is None


def test_bandwidth_is_parameter_bytes_times_forward_passes_per_second():
    assert metrics.bandwidth_gb_s(2 * 10**9, 10, 4.0) == pytest.approx(5.0)
    assert metrics.bandwidth_gb_s(0, 10, 4.0) is None and metrics.bandwidth_gb_s(10, None, 4.0) is None


def test_suite_metrics_per_method():
    base, fast = metrics.suite_metrics(suite(), parameter_bytes=10**9)
    assert (base.method, base.speedup_pooled, base.lossless, base.tau) == (BASELINE, 1.0, True, 1.0)
    assert fast.prompts == 2 and fast.new_tokens == 30 and fast.forward_passes == 13 and fast.wall_s == 4.0
    assert fast.tokens_per_s == pytest.approx(7.5) and fast.tau == pytest.approx(30 / 13)
    assert fast.speedup_pooled == pytest.approx(1.25)
    assert fast.speedup_median == pytest.approx(1.25) and fast.speedup_min == pytest.approx(0.5)
    assert fast.speedups == pytest.approx({"a": 2.0, "b": 0.5})
    assert fast.mean_accepted_length == pytest.approx(18 / 11)
    assert fast.accepted_length_shares[2] == pytest.approx(4 / 11)
    assert fast.lossless is False and fast.verdicts == {"a": True, "b": False}
    assert fast.bandwidth_gb_s == pytest.approx(13 / 4)
    assert fast.cpu_speedup is None


def test_without_a_baseline_nothing_is_compared():
    [fast] = metrics.suite_metrics({"fast": suite()["fast"]})
    assert fast.speedup_pooled is None and fast.speedup_median is None and fast.lossless is None
    assert fast.tau == pytest.approx(30 / 13)


def test_unchecked_losslessness_is_none_not_true():
    _, fast = metrics.suite_metrics(suite(), check_lossless=False)
    assert fast.lossless is None and fast.verdicts == {}


def test_a_race_is_a_suite_of_one_prompt():
    runs = suite()
    race = {BASELINE: runs[BASELINE]["a"], "fast": runs["fast"]["a"]}
    base, fast = metrics.race_metrics(race)
    assert fast.speedup_pooled == fast.speedup_median == fast.speedup_min == pytest.approx(2.0)
    assert fast.lossless is True and base.mean_accepted_length == 0.0


def test_category_speedups_pool_within_each_category():
    speedups = metrics.category_speedups(suite(), {"a": "code", "b": "chat"})
    assert speedups["fast"] == pytest.approx({"code": 2.0, "chat": 0.5})
    assert speedups[BASELINE] == pytest.approx({"code": 1.0, "chat": 1.0})
    assert metrics.category_speedups(suite(), {"a": None, "b": None}) == {}


def test_group_runs_keeps_first_appearance_order():
    runs = suite()
    flat = [runs[BASELINE]["a"], runs["fast"]["a"], runs[BASELINE]["b"], runs["fast"]["b"]]
    prompts = iter(["a", "a", "b", "b"])
    grouped = metrics.group_runs(flat, lambda run: next(prompts))
    assert list(grouped) == [BASELINE, "fast"] and list(grouped["fast"]) == ["a", "b"]
    assert grouped["fast"]["b"] is runs["fast"]["b"]


def tree_step(budget: int = 8) -> StepRecord:
    """root -> spine a (accepted) -> spine b (rejected) -> spine c (unvisited); two branches under the root
    (ranks 1 and 2, refused where the target took a), one under a (rank 1, accepted after b was refused) and one
    under a refused branch (unvisited)."""
    from goose.trace import NodeRecord

    def node(source: str, parent: int, depth: int, status: str) -> NodeRecord:
        return NodeRecord(token=0, text="", source=source, parent=parent, depth=depth, score=0.5, status=status)

    nodes = [node("root", -1, 0, "root"),
             node("spine", 0, 1, "accepted"),    # 1
             node("branch", 0, 1, "rejected"),   # 2: rank 1 under the root
             node("branch", 0, 1, "rejected"),   # 3: rank 2 under the root
             node("spine", 1, 2, "rejected"),    # 4
             node("branch", 1, 2, "accepted"),   # 5: rank 1 under a
             node("spine", 4, 3, "unvisited"),   # 6: its parent was refused: tells nothing
             node("branch", 2, 2, "unvisited")]  # 7: rank 1 under a refused branch
    return StepRecord(index=0, nodes=nodes, accepted=[1, 5], bonus_token=0, bonus_text="", committed=[0, 0, 0],
                      draft_s=0.0, verify_s=0.0, budget=budget)


def test_conditional_acceptance_counts_tried_nodes_by_spine_depth_and_branch_rank():
    counts = metrics.acceptance_by_depth_and_rank([tree_step(), tree_step()])
    # the root's branches come after its accepted spine child: the target's one choice there tells nothing of them
    assert counts == {"spine": {1: (2, 2), 2: (0, 2)}, "branch": {1: (2, 2)}}
    assert metrics.branch_ranks(tree_step()) == [0, 0, 1, 2, 0, 1, 0, 1]
    assert metrics.acceptance_by_depth_and_rank([]) == {"spine": {}, "branch": {}}
