"""The training-free draft sources: context n-gram matches, recycled successors and SuffixDecoding's suffix trees."""

from goose.sources.adjacency import AdjacencyTable
from goose.sources.context import ContextMatch, ContextMatcher
from goose.sources.suffix import SuffixSource, SuffixStore

__all__ = ["AdjacencyTable", "ContextMatch", "ContextMatcher", "SuffixSource", "SuffixStore"]
