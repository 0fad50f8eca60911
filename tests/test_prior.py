"""The adjacency table's warm start (goose.sources.prior): rows averaged per token, read last, lossless runs that
draft from them, replays that read the same rows, the build command, and the embedded model's shipped prior."""

from __future__ import annotations

import pytest
import torch
from tiny import tiny_gemma3, tiny_llama

import goose
from goose.check import run_what_if
from goose.prior_build import build_prior
from goose.sources import AdjacencyTable
from goose.sources.prior import SHIPPED, Prior, average_rows, find_prior, prior_path
from goose.whatif import NoReplayDataError, what_if

PROMPTS = ["def add(a, b):\n    return a + b\n\ndef sub(a, b):\n", "one two three four one two", "The quick brown fox"]
OPENINGS = ["def f(x):\n", "The cat", "1, 2, 3,", "Dear Sir,", "import os\n"]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A user cache of this test's own: priors built here must not reach other tests or the user."""
    monkeypatch.setenv("GOOSE_CACHE", str(tmp_path))
    return tmp_path


@pytest.fixture(scope="module")
def models():
    return [tiny_gemma3(0), tiny_llama(1)]


def with_prior(goose_model) -> Prior:
    prior = build_prior(goose_model, OPENINGS, new_tokens=40)
    prior.save(prior_path(goose_model.name))
    return prior


def test_rows_are_the_successor_scores_averaged_over_occurrences():
    tokens = [5, 7, 5]
    ids = torch.tensor([[1, 2], [3, 4], [2, 9]])
    scores = torch.tensor([[0.6, 0.4], [0.9, 0.1], [0.8, 0.2]])
    rows = average_rows(tokens, ids, scores, top_k=2)
    # token 5: successor 2 scores (0.4 + 0.8) / 2, successor 1 scores 0.6 / 2 (absent from the second list)
    assert [t for t, _ in rows[5]] == [2, 1] and [s for _, s in rows[5]] == pytest.approx([0.6, 0.3])
    assert rows[7] == [(3, pytest.approx(0.9)), (4, pytest.approx(0.1))]


def test_the_table_reads_the_prior_last():
    table = AdjacencyTable(top_k=2, min_score=0.05, prior={1: [(8, 0.9), (9, 0.01)], 2: [(6, 1.0)]})
    assert table.successors(1) == [(8, 0.9)]  # the prior answers, with the table's min_score
    table.refresh([1], [None], torch.tensor([[4, 5]]), torch.tensor([[2.0, 1.0]]))
    assert [t for t, _ in table.successors(1)] == [4, 5]  # a row of the run's own always wins
    assert [t for t, _ in table.successors(2, previous=1)] == [6]  # no bigram or unigram row of its own
    assert table.successors(3) == [] and table.unigram_row(3) is None
    assert 2 not in table.unigram  # the prior is read, never copied into the run's rows


def test_prior_round_trips_and_the_users_own_build_comes_first(cache, models):
    prior = with_prior(models[0])
    assert prior.name.startswith("tiny-gemma3-0@") and len(prior.rows) > 10
    assert all(len(row) <= 10 and [s for _, s in row] == sorted((s for _, s in row), reverse=True)
               for row in prior.rows.values())
    found = find_prior(models[0].name)
    assert found.name == prior.name and found.rows.keys() == prior.rows.keys()
    assert find_prior("no-such-model") is None


@pytest.mark.parametrize("method", ["goose", "recycling", "balanced"])
def test_a_warm_start_drafts_from_the_prior_and_stays_lossless(cache, models, method):
    changed = 0
    for goose_model in models:
        prior = with_prior(goose_model)
        for prompt in PROMPTS:
            reference = goose.generate(goose_model, prompt, "autoregressive", 40).tokens
            for budget in (8, "auto"):
                warm = goose.generate(goose_model, prompt, method, 40, budget=budget)
                cold = goose.generate(goose_model, prompt, method, 40, budget=budget, warm_start=False)
                assert warm.tokens == reference == cold.tokens, (goose_model.name, prompt[:10], budget)
                assert warm.prior == prior.name and cold.prior is None
                changed += [len(s.nodes) for s in warm.steps] != [len(s.nodes) for s in cold.steps]
    assert changed, "the prior never changed a tree: it is not read"


def test_a_prefill_ranks_its_prompt_rows_among_the_prior_s_tokens_and_the_prompt_s(cache, models):
    """Over a prior, the rows a prefill stores name only tokens the prior holds or the prompt repeats (most of a
    vocabulary is never a successor); without one, the whole vocabulary. The output is the same either way."""
    goose_model = models[0]
    Prior("tiny-gemma3-0@test", {5: [(6, 0.9), (7, 0.1)]}).save(prior_path(goose_model.name))
    for prompt in PROMPTS:
        tokens = set(goose_model.encode(prompt))
        allowed = tokens | {5, 6, 7}
        warm = goose.generate(goose_model, prompt, "goose", 24, budget=8, record_sources=True)
        cold = goose.generate(goose_model, prompt, "goose", 24, budget=8, warm_start=False, record_sources=True)
        assert warm.tokens == cold.tokens == goose.generate(goose_model, prompt, "autoregressive", 24).tokens
        successors = [{t for t, _ in row} for _, _, row in warm.prefill_rows]
        assert successors and all(s <= allowed for s in successors), prompt[:12]
        assert any(not {t for t, _ in row} <= allowed for _, _, row in cold.prefill_rows), prompt[:12]


def test_sampling_with_a_warm_start_draws_what_plain_sampling_draws(cache, models):
    """With temperature alone every output token is one Gumbel-max draw, in order, whatever the tree: the same
    seed gives plain sampling's tokens (a stronger check than equal distributions)."""
    for goose_model in models:
        with_prior(goose_model)
        for seed, prompt in enumerate(PROMPTS):
            plain = goose.generate(goose_model, prompt, "autoregressive", 40, temperature=0.8, seed=seed)
            for method in ("goose", "recycling"):
                drawn = goose.generate(goose_model, prompt, method, 40, temperature=0.8, seed=seed)
                assert drawn.tokens == plain.tokens, (goose_model.name, method, seed)


def test_a_replay_reads_the_run_s_prior_and_says_when_it_is_gone(cache, models):
    for goose_model in models:
        with_prior(goose_model)
        for prompt in PROMPTS:
            run = goose.generate(goose_model, prompt, "goose", 36, budget=10, record_sources=True)
            replayed = run_what_if(run)
            assert replayed.accepted[:-1] == run.accepted_lengths[:-1]
            assert replayed.tau == pytest.approx(run.totals.tau)
            for i, step in enumerate(run.steps):  # the replay's table starts over the same prior
                rebuilt = what_if(run, i)
                assert rebuilt.exact and rebuilt.tree.tokens == [n.token for n in step.nodes]
            # without the prior: its first tree is the cold run's (later ones are estimates, from the run's rows)
            cold = goose.generate(goose_model, prompt, "goose", 36, budget=10, warm_start=False)
            first = run_what_if(run, warm_start=False).steps[0].step
            assert [n.token for n in first.nodes] == [n.token for n in cold.steps[0].nodes]
    prior_path(models[-1].name).unlink()
    with pytest.raises(NoReplayDataError, match="build-prior"):
        run_what_if(run)


def test_the_build_prior_command_writes_a_prior_runs_then_find(cache, tmp_path, capsys):
    from goose.cli import main

    tiny = tiny_llama(0)
    tiny.model.save_pretrained(tmp_path / "model")
    tiny.tokenizer.save_pretrained(tmp_path / "model")
    assert main(["build-prior", "--model", str(tmp_path / "model"), "--new-tokens", "6"]) == 0
    model = goose.load_model(str(tmp_path / "model"), device="cpu")
    prior = find_prior(model.name)
    assert prior is not None and f"prior {prior.name}: rows for {len(prior.rows)} tokens" in capsys.readouterr().out
    assert goose.generate(model, "The cat", "goose", 8).prior == prior.name


def test_the_embedded_model_s_prior_ships_with_the_package():
    prior = find_prior(goose.model.DEFAULT_MODEL)
    assert prior_path(goose.model.DEFAULT_MODEL, SHIPPED).exists()
    assert prior.name.startswith("gemma-3-270m@") and len(prior.rows) > 1500
    assert all(0 <= t < 262144 and 0 <= s <= 1 for row in prior.rows.values() for t, s in row)
