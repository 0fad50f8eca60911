"""The two training-free draft sources: context n-gram matches and recycled successors."""

from goose.sources.adjacency import AdjacencyTable
from goose.sources.context import ContextMatch, ContextMatcher

__all__ = ["AdjacencyTable", "ContextMatch", "ContextMatcher"]
