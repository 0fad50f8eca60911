"""The two draft sources: context matcher and adjacency table."""

from __future__ import annotations

import torch

from goose.sources import AdjacencyTable, ContextMatcher
from goose.sources.context import match_confidence


def test_matcher_copies_what_followed_the_earliest_longest_match():
    matcher = ContextMatcher(max_chain=4)
    matcher.extend([1, 2, 3, 4, 5, 6, 9, 2, 3, 4, 7, 8, 1, 2, 3, 4])
    # the 5-gram [8 1 2 3 4] never occurred, nor [1 2 3 4] with a follower except at 0 -> copies 5 6 9 2
    assert matcher.match().tokens == [5, 6, 9, 2]


def test_matcher_falls_back_to_shorter_ngrams_and_misses_cleanly():
    matcher = ContextMatcher(max_chain=3)
    matcher.extend([10, 11, 12, 13, 20, 11, 12, 13])  # only the 3-gram 11 12 13 recurs
    assert matcher.match().tokens == [20, 11, 12]
    fresh = ContextMatcher()
    fresh.extend([1, 2, 3, 4])
    assert fresh.match().tokens == [] and fresh.match().confidence == 0.0


def test_confidence_schedule():
    assert match_confidence(0, True, 8) == 0.0
    assert match_confidence(3, True, 8) == 1.0
    assert match_confidence(4, False, 8) == 0.3
    assert match_confidence(8, False, 8) == 0.7
    assert match_confidence(20, False, 8) == 0.9


def test_template_consensus_gives_full_confidence_and_extends_the_chain():
    matcher = ContextMatcher(max_chain=20, max_extended_chain=100)
    matcher.extend([7, 8, 9, 1] * 30)
    match = matcher.match()
    assert match.confidence == 1.0
    assert len(match.tokens) == 100 and match.tokens[:8] == [7, 8, 9, 1, 7, 8, 9, 1]


def test_adjacency_refresh_overwrites_and_keeps_last_occurrence():
    table = AdjacencyTable(top_k=3, min_score=0.0, use_bigram=False)
    logits = torch.tensor([[5.0, 4.0, 3.0], [1.0, 0.5, 0.1]])
    table.refresh([4, 4], [None, None], torch.tensor([[1, 2, 3], [9, 8, 7]]), logits)
    assert [t for t, _ in table.successors(4)] == [9, 8, 7]
    scores = [s for _, s in table.successors(4)]
    assert abs(sum(scores) - 1.0) < 1e-6 and scores == sorted(scores, reverse=True)
    table.refresh([4], [None], torch.tensor([[5, 6, 7]]), torch.tensor([[3.0, 2.0, 1.0]]))
    assert [t for t, _ in table.successors(4)] == [5, 6, 7]
    assert table.successors(5) == []


def test_bigram_tier_first_and_weak_successors_dropped():
    table = AdjacencyTable(top_k=3, min_score=0.05)
    table.refresh([4], [None], torch.tensor([[1, 2, 3]]), torch.tensor([[9.0, 8.0, 0.0]]))
    table.refresh([4], [6], torch.tensor([[11, 12, 13]]), torch.tensor([[1.0, 1.0, 1.0]]))
    assert [t for t, _ in table.successors(4, previous=6)] == [11, 12, 13]
    unigram = [t for t, _ in table.successors(4, previous=None)]
    assert unigram == [11, 12, 13], "the unigram row is overwritten by the latest pass as well"
    table.refresh([3], [None], torch.tensor([[1, 2, 3]]), torch.tensor([[9.0, 8.0, 0.0]]))
    assert [t for t, _ in table.successors(3)] == [1, 2], "scores below min_score are not drafted"


def test_refreshing_only_the_last_occurrences_builds_the_same_table():
    """The prefill asks the head only for the rows a refresh keeps: the table must come out identical."""
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 6, (200,), generator=generator).tolist()
    previous = [None, *tokens[:-1]]
    ids = torch.randint(0, 50, (200, 10), generator=generator)
    logits = torch.randn(200, 10, generator=generator)
    for use_bigram in (True, False):
        whole, part = AdjacencyTable(use_bigram=use_bigram), AdjacencyTable(use_bigram=use_bigram)
        whole.refresh(tokens, previous, ids, logits)
        rows = part.last_occurrences(tokens, previous)
        assert rows == sorted(rows) and rows[-1] == len(tokens) - 1 and len(rows) < (37 if use_bigram else 7)
        part.refresh([tokens[i] for i in rows], [previous[i] for i in rows], ids[rows], logits[rows])
        assert (part.unigram, part.bigram) == (whole.unigram, whole.bigram)
