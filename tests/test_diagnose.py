"""goose.diagnose: what each step of a greedy run took, what its own sources offered of the revealed
continuation and what a tree of its budget could have taken; pooled, the tokens taken, lost to the shape and
lost to the sources. Offers are checked on hand-built sources and on runs whose continuation is known (a tiny
model that echoes), the invariants on every method's runs, and a trace without its sources gets a clear error."""

from __future__ import annotations

import json

import pytest
from tiny import echo_gemma3, tiny_gemma3

import goose
from goose.diagnose import Diagnosis, offers, step_diagnosis
from goose.drafters import DraftState
from goose.sources import AdjacencyTable, ContextMatch
from goose.sources.adjacency import BIGRAM, NO_ROW, PRIOR, UNIGRAM
from goose.trace import RunRecord
from goose.tree import SPINE, DraftTree
from goose.whatif import NoReplayDataError, anchor_positions, known_continuation, what_if

PROMPT = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n"
# the methods whose offers diagnose splits: every tree method but SuffixDecoding's (refused: tests/test_suffix.py)
SPECULATIVE = [name for name, drafter in goose.METHODS.items() if drafter.speculative and not drafter.uses_suffix]
ECHOED = "xxxxxxxyzzzxxxxx"  # the last 5-gram's first occurrence goes on "xxy": an echo of x matches it 2 deep
A, X, Y, Z, W, Q, V = range(100, 107)


def hand_built_state(chain: list[int], use_bigram: bool = True) -> DraftState:
    """Anchor A after Q, the match `chain`. Rows: A -> x, y (its own row); x after A -> z (bigram; v scores under
    min_score); x -> v (its own row); z -> w (the prior's only); no row for q, y, w."""
    table = AdjacencyTable(top_k=3, min_score=0.05, use_bigram=use_bigram, prior={Z: [(W, 0.6)]})
    table.unigram.update({A: [(X, 0.5), (Y, 0.3)], X: [(V, 0.5)]})
    table.bigram[(A, X)] = [(Z, 0.9), (V, 0.01)]
    return DraftState(A, Q, ContextMatch(chain, 0.5, 3), table, 0.5)


def test_each_token_is_offered_by_the_source_that_holds_it_given_the_path():
    state = hand_built_state([X, Q])
    assert offers(state, [X, Z, W, V], spine=True) == ([SPINE, BIGRAM, PRIOR], NO_ROW), "w has no row: 3 offered"
    assert offers(state, [X, Y], spine=True) == ([SPINE], SPINE), "the match had another token there"
    assert offers(state, [X, Z, Y], spine=True) == ([SPINE, BIGRAM], PRIOR), "off the match: z's row lacks y"
    assert offers(state, [Y, X], spine=True) == ([UNIGRAM], NO_ROW), "off the match at once: y has no row"
    assert offers(state, [X, Q, Z], spine=True) == ([SPINE, SPINE], NO_ROW), "the match ended, q has no row"
    assert offers(state, [X, Z, W], spine=True) == ([SPINE, BIGRAM, PRIOR], ""), "offered to the continuation's end"


def test_a_method_without_a_spine_is_offered_the_table_alone_and_low_scores_not_at_all():
    state = hand_built_state([X, Q])
    assert offers(state, [X, Q], spine=False) == ([UNIGRAM], BIGRAM), "the match is no source of a spineless tree"
    assert offers(state, [X, V], spine=False) == ([UNIGRAM], BIGRAM), "v scores under min_score after A, x"
    unigram_only = hand_built_state([], use_bigram=False)
    assert offers(unigram_only, [X, V], spine=False) == ([UNIGRAM, UNIGRAM], ""), "no bigram tier: x's own row"
    no_table = DraftState(A, Q, ContextMatch([X, Z], 0.5, 3), None, 0.5)
    assert offers(no_table, [X, Z, W], spine=True) == ([SPINE, SPINE], NO_ROW)


def test_a_step_splits_its_positions_into_taken_shape_and_sources():
    step = step_diagnosis(3, budget=8, accepted=2, offered_by=[SPINE] * 3 + [UNIGRAM] * 2, stopped_on=BIGRAM,
                          known=40)
    assert (step.offered, step.reachable, step.lost_to_shape, step.lost_to_sources) == (5, 5, 3, 2)
    assert step.positions == 7 and step.by_source() == {SPINE: {"taken": 2, "lost_to_shape": 1, "lost_to_sources": 0},
                                                       UNIGRAM: {"taken": 0, "lost_to_shape": 2, "lost_to_sources": 0},
                                                       BIGRAM: {"taken": 0, "lost_to_shape": 0, "lost_to_sources": 2}}
    capped = step_diagnosis(0, budget=4, accepted=1, offered_by=[SPINE] * 6, stopped_on="", known=6)
    assert (capped.reachable, capped.lost_to_shape, capped.lost_to_sources) == (3, 2, 0)
    end = step_diagnosis(9, budget=16, accepted=2, offered_by=[UNIGRAM] * 3, stopped_on="", known=3)
    assert (end.positions, end.lost_to_sources) == (3, 0), "nothing past the known continuation is counted lost"


def recorded_tree(step) -> DraftTree:
    tree = DraftTree.rooted_at(step.nodes[0].token)
    for node in step.nodes[1:]:
        tree.add(node.token, node.parent, node.source)
    return tree


def check_invariants(run: RunRecord, diagnosis: Diagnosis) -> None:
    """accepted <= reachable <= offered at every step; accepted == reachable wherever the real tree held the
    whole reachable path; each step's parts sum to its positions, and the pooled split to the steps'."""
    continuation = known_continuation(run)
    assert [s.step for s in diagnosis.steps] == list(range(len(run.steps)))
    for step, record, position in zip(diagnosis.steps, run.steps, anchor_positions(run)):
        revealed = continuation[position:]
        assert step.accepted == record.accepted_length and step.budget == record.budget
        assert step.accepted <= step.reachable <= step.offered
        assert step.reachable == min(step.offered, step.budget - 1)
        assert step.positions == min(step.budget - 1, len(revealed))
        if len(recorded_tree(record).walk(revealed[:step.reachable])) == step.reachable:
            assert step.accepted == step.reachable
    assert diagnosis.taken == sum(run.accepted_lengths)
    assert diagnosis.taken + diagnosis.lost_to_shape + diagnosis.lost_to_sources == sum(s.positions for s in
                                                                                          diagnosis.steps)
    pooled = {part: sum(split[part] for split in diagnosis.by_source.values()) for part in diagnosis.split()}
    assert pooled == diagnosis.split()
    if any(s.positions for s in diagnosis.steps):
        assert sum(diagnosis.shares().values()) == pytest.approx(1.0)


@pytest.fixture(scope="module")
def tiny():
    return tiny_gemma3(0)


@pytest.fixture(scope="module")
def echo():
    return echo_gemma3()


@pytest.mark.parametrize("method", SPECULATIVE)
def test_every_method_takes_at_most_what_its_budget_reaches_of_what_its_sources_offered(tiny, method, flat_costs):
    for budget in (None, 6):
        run = goose.generate(tiny, PROMPT, method, 40, budget, record_sources=True)
        diagnosis = goose.diagnose(run)
        check_invariants(run, diagnosis)
        assert diagnosis.taken > 0 or method == "pld"


def test_no_other_tree_of_the_budget_takes_more_than_reachable(tiny, flat_costs):
    """reachable bounds every tree the step's sources could build under its budget, whatever its shape."""
    run = goose.generate(tiny, PROMPT, "goose", 30, record_sources=True)
    diagnosis = goose.diagnose(run)
    for step in diagnosis.steps[:6]:
        for settings in ({"spine_share": 1.0}, {"rho": 0.0, "max_branch_depth": 8}, {"method": "balanced"},
                         {"method": "balanced", "branching": 6}, {"method": "pld"}):
            assert what_if(run, step.step, **settings).accepted <= step.reachable, (step, settings)
        assert what_if(run, step.step, budget=64).accepted <= step.offered


def test_an_echo_is_offered_as_deep_as_the_match_follows_it_by_a_chain_alone(echo):
    """The echoed anchor x follows "xxxxx" in the prompt twice before a y: every step's match is x, x, y, ...
    So pld is offered exactly 2 tokens, takes both, and loses every other position to its source (the match)."""
    run = goose.generate(echo, ECHOED, "pld", 40, budget=8, record_sources=True)
    assert set(run.text) == {"x"}, "the tiny model echoes"
    diagnosis = goose.diagnose(run)
    check_invariants(run, diagnosis)
    for step in diagnosis.steps[:-2]:  # the last steps' match is cut to what is left to generate
        assert (step.offered, step.offered_by, step.stopped_on) == (2, [SPINE, SPINE], SPINE)
        assert step.accepted == 2 and step.lost_to_shape == 0 and step.lost_to_sources == step.positions - 2
    assert diagnosis.lost_to_shape == 0, "the chain is all its source offers"
    assert set(diagnosis.by_source) <= {SPINE, NO_ROW}


def test_an_echo_is_offered_to_its_end_when_the_table_holds_x_after_x(echo):
    """goose also drafts from the table, whose rows say x after x: the whole known continuation is offered
    (the spine's 2, then the table's), so nothing is lost to the sources and what the tree left is the shape's."""
    run = goose.generate(echo, ECHOED, "goose", 40, budget=8, record_sources=True)
    diagnosis = goose.diagnose(run)
    check_invariants(run, diagnosis)
    continuation = known_continuation(run)
    for step, position in zip(diagnosis.steps, anchor_positions(run)):
        assert step.offered == len(continuation) - position and step.stopped_on == ""
        assert step.offered_by[:2] == [SPINE, SPINE] and set(step.offered_by[2:]) <= {BIGRAM, UNIGRAM}
    assert diagnosis.lost_to_sources == 0 and diagnosis.lost_to_shape > 0
    assert diagnosis.by_source[SPINE]["lost_to_shape"] == 0, "the spine is offered 2 deep and takes both"


def test_the_diagnosis_round_trips_through_json(tiny, flat_costs):
    run = goose.generate(tiny, PROMPT, "goose", 30, record_sources=True)
    diagnosis = goose.diagnose(RunRecord.from_json(run.to_json()))
    data = json.loads(json.dumps(diagnosis.to_dict()))
    assert data["taken"] == diagnosis.taken and data["shares"] == diagnosis.shares()
    again = Diagnosis.from_dict(data)
    assert again == diagnosis and again.by_source == diagnosis.by_source
    both = Diagnosis.pooled([diagnosis, again])
    assert both.split() == {part: 2 * count for part, count in diagnosis.split().items()}


def test_a_run_without_its_sources_or_sampled_or_not_replaying_is_refused(tiny):
    plain = goose.generate(tiny, PROMPT, "goose", 20)
    with pytest.raises(NoReplayDataError, match="record_sources=True"):
        goose.diagnose(plain)
    sampled = goose.generate(tiny, PROMPT, "goose", 20, temperature=0.8, seed=1, record_sources=True)
    with pytest.raises(ValueError, match="greedy"):
        goose.diagnose(sampled)
    run = goose.generate(tiny, PROMPT, "goose", 20, budget=8, record_sources=True)
    changed = RunRecord.from_json(run.to_json())
    step = next(s for s in changed.steps if len(s.nodes) > 1)
    step.nodes[-1].token = (step.nodes[-1].token + 1) % 50  # a tree this replay does not build
    with pytest.raises(ValueError, match=f"step {step.index}"):
        goose.diagnose(changed)


@pytest.mark.slow
def test_the_embedded_model_takes_at_most_what_its_budget_reaches_of_what_its_sources_offered(gemma):
    for method in ("goose", "balanced"):
        run = goose.generate(gemma, "def fibonacci(n):", method, 64, record_sources=True)
        diagnosis = goose.diagnose(run)
        check_invariants(run, diagnosis)
        assert diagnosis.taken > 0
        if method == "balanced":
            assert SPINE not in diagnosis.by_source, "balanced drafts from the table alone"


def test_the_bench_diagnoses_each_tree_method_untimed_and_pools_its_split(tmp_path, flat_costs, capsys):
    """--diagnose: one more run per prompt and tree method, recorded and diagnosed after the timed ones; it is the
    timed run (same tokens and steps), so the pooled taken is the timed runs' accepted tokens. The split goes to
    diagnose.jsonl, diagnosis.json, report.html and the terminal (bench-report rebuilds it)."""
    import functools

    import torch
    from tiny import tiny_llama

    from goose import bench
    from goose.cli import build_parser, main

    assert build_parser().parse_args(["bench", "--suite", "mtbench", "--diagnose"]).diagnose
    settings = bench.BenchSettings(suite="mtbench", methods=("goose", "balanced", "hf-generate"), limit=2,
                                   max_new_tokens=16, threads=torch.get_num_threads(), diagnose=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bench.runner, "measure_memory_bandwidth", functools.partial(bench.measure_memory_bandwidth,
                                                                                  nbytes=1 << 24))
        bench.run_bench(settings, tmp_path, tiny_llama(0), progress=False)
    lines = [json.loads(line) for line in (tmp_path / "diagnose.jsonl").read_text().splitlines()]
    assert [(line["prompt_id"], line["method"]) for line in lines] == [
        (prompt, method) for prompt in ("81", "82") for method in ("goose", "balanced")]
    assert all(line["same_as_timed"] for line in lines)
    timed = bench.load_runs(tmp_path / "runs.jsonl")
    pooled = json.loads((tmp_path / "diagnosis.json").read_text())
    assert set(pooled) == {"goose", "balanced"}
    for method, split in pooled.items():
        assert split["taken"] == sum(sum(run.accepted_lengths) for run in timed if run.method == method)
        assert split["prompts"] == 2 and split["same_as_timed"]
        assert sum(split["shares"].values()) == pytest.approx(1.0)
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "Where the tokens went" in page and "<td>balanced</td>" in page[page.index("Where the tokens went"):]
    assert main(["bench-report", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "Where the tokens went" in out and "lost to shape" in out and "\ngoose " in out
