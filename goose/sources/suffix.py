"""Source 3, SuffixDecoding (arXiv 2411.04975): Snowflake's own suffix-tree cache, what vLLM ships as
method="suffix", behind the loop's two calls (extend with committed tokens, draft).

The cache is arctic-inference's `SuffixDecodingCache`, not a copy of it: a C++ suffix tree of the run's prompt and
output (its active request), matched against the last tokens of the context; what most often followed the match is
drafted, as one path or as a tree, each token with its estimated probability.

What it reads is an input of the run, never what ran before it in the process. By default it reads the run's own
prompt and output alone (vLLM's max_cached_requests=0: no global tree), so the same prompt drafts the same trees
in any process. Drafting from past outputs is opt-in: a `SuffixStore`, a named list of past outputs, is passed to
the run, which records the store's name and the outputs it held at the start (goose.trace), so that a replay
rebuilds the same trees. Those outputs fill the cache's global tree, as vLLM's cached responses do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from goose.validate import InputError, flag, text, token_ids, whole_number

if TYPE_CHECKING:
    from arctic_inference.suffix_decoding import SuffixDecodingDraft

    from goose.config import GooseConfig

INSTALL = "pip install --no-build-isolation -r requirements-suffix.txt"
RUN = "run"  # the run's own request id in its cache; a store's outputs are ("store", i)


def unavailable() -> str:
    """Why Snowflake's SuffixDecoding cannot run here, in a few words ('' when it can)."""
    try:
        import arctic_inference.suffix_decoding  # noqa: F401
    except ModuleNotFoundError as error:
        if error.name and error.name.startswith("arctic_inference"):
            return f"arctic-inference is not installed ({INSTALL})"
        return f"arctic-inference cannot be imported: {error}"
    except ImportError as error:  # installed, but its native part does not load (built for another Python)
        return f"arctic-inference cannot be imported: {error}"
    return ""


@dataclass
class SuffixStore:
    """Past outputs (token id lists) that suffix runs may draft from, under a name the runs record.

    name:        what a run records beside the outputs it read, so that a trace says where its drafts came from.
    outputs:     the past outputs, oldest first.
    remember:    add the output of every run that read the store once the run ends (a run stopped before its end
                 adds nothing); False keeps the store as given (a replay's).
    max_outputs: keep at most this many, the oldest dropped first (vLLM's max_cached_requests); None: no cap.
    """

    name: str
    outputs: list[list[int]] = field(default_factory=list)
    remember: bool = True
    max_outputs: int | None = None

    def __post_init__(self) -> None:
        text("store name", self.name)
        flag("remember", self.remember)
        if self.max_outputs is not None:
            whole_number("max_outputs", self.max_outputs, 1, where=" (or None: no cap)")
        if isinstance(self.outputs, str | bytes) or not isinstance(self.outputs, Sequence):
            raise InputError("a store's outputs must be a list of token id lists")
        outputs, self.outputs = self.outputs, []
        for output in outputs:
            self.add(output)

    def add(self, tokens: Sequence[int]) -> None:
        """Keep one more output (an empty one is not kept: it holds nothing to draft)."""
        if isinstance(tokens, str | bytes) or not isinstance(tokens, Sequence):
            raise InputError("a store's outputs must be a list of token id lists")
        if tokens:
            self.outputs.append(list(token_ids(tokens)))
        if self.max_outputs is not None:
            del self.outputs[:max(0, len(self.outputs) - self.max_outputs)]

    def snapshot(self) -> dict[str, Any]:
        """What a run records of the store: its name and a copy of the outputs it holds now."""
        return {"name": self.name, "outputs": [list(output) for output in self.outputs]}

    @classmethod
    def from_snapshot(cls, snapshot: dict[str, Any]) -> SuffixStore:
        """The store a recorded run read, as it was when the run started (fixed: a replay adds nothing to it)."""
        return cls(snapshot["name"], snapshot["outputs"], remember=False)


class SuffixSource:
    """One run's SuffixDecoding cache: its prompt and committed tokens as the active request (the local tree) and,
    given, a store's outputs as cached responses (the global tree, which then also holds the run's own output,
    as vLLM's does). A draft is memoised until the next committed token: the tuner asks for many budgets."""

    def __init__(self, config: GooseConfig, outputs: Sequence[Sequence[int]] = ()) -> None:
        from arctic_inference.suffix_decoding import SuffixDecodingCache

        self.config = config
        self.cache = SuffixDecodingCache(config.suffix_max_tree_depth, max_cached_requests=-1 if outputs else 0)
        for i, output in enumerate(outputs):
            key = ("store", i)
            self.cache.start_request(key, [])
            self.cache.add_active_response(key, list(output))
            self.cache.stop_request(key)
        self.tokens: list[int] = []
        self._drafts: dict[tuple[int, bool], SuffixDecodingDraft] = {}

    def extend(self, tokens: Sequence[int]) -> None:
        """Add committed tokens: the first call brings the prompt (the request starts), later ones the output."""
        tokens = [int(t) for t in tokens]
        if not self.tokens:
            self.cache.start_request(RUN, tokens)
        else:
            self.cache.add_active_response(RUN, tokens)
        self.tokens.extend(tokens)
        self._drafts.clear()

    def draft(self, max_tokens: int, tree: bool) -> SuffixDecodingDraft:
        """At most `max_tokens` tokens continuing the context (token_ids, parents indexing them with -1 for the
        root, probs), as a tree or as one path: arctic's `speculate` with the run's settings, on the last
        suffix_max_tree_depth tokens, as vLLM calls it."""
        key = (max_tokens, tree)
        if key not in self._drafts:
            self._drafts[key] = self._speculate(max_tokens, tree)
        return self._drafts[key]

    def _speculate(self, max_tokens: int, tree: bool) -> SuffixDecodingDraft:
        from arctic_inference.suffix_decoding import SuffixDecodingDraft

        if max_tokens <= 0:  # speculate reads max_spec_tokens=0 as "as many as the tree is deep"
            return SuffixDecodingDraft()
        config = self.config
        return self.cache.speculate(RUN, self.tokens[-config.suffix_max_tree_depth:], max_spec_tokens=max_tokens,
                                    max_spec_factor=config.suffix_max_spec_factor,
                                    max_spec_offset=config.suffix_max_spec_offset,
                                    min_token_prob=config.suffix_min_token_prob, use_tree_spec=tree)
