"""Every knob of a Goose run, with the paper's defaults (docs/METHOD.md).

One frozen dataclass, named as the paper names things, so that a run's
configuration is a value that can be printed, compared and stored in a trace.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from goose.validate import AUTO, MAX_BUDGET, InputError, choice, flag, number, shown, whole_number

PAPER_BUDGET = 60  # the budget the paper's growth rule (60 -> 100) is stated for


@dataclass(frozen=True)
class GooseConfig:
    """Hyperparameters of the draft sources and the tree builders.

    budget:            node budget B of one tree, root included (paper: 60), or "auto" (validate.AUTO): pick B
                       (and the tree's shape) every step from this device's measured verification cost and
                       the acceptance seen so far (goose.budget).
    max_budget:        the budget a fully confident step may grow to (paper: 100);
                       growth is proportional, so a budget of B grows to
                       B * max_budget / 60 at confidence 1.
    ngram_lengths:     context n-gram lengths queried, longest first.
    max_chain:         tokens copied from one context match.
    long_match:        a match this long counts as strong evidence.
    extend_above:      confidence above which the chain is extended by re-matching.
    max_extended_chain: the cap on an extended chain at confidence 1.
    top_k:             successors kept per token in the adjacency table (K).
    min_score:         successors scoring below this are never drafted.
    use_bigram:        consult the (previous token, token) tier first.
    warm_start:        start the adjacency table over the model's prior rows, where one was built
                       (goose.sources.prior; the embedded model's ships): a token the run has not seen
                       yet is drafted from what the model predicts after it on neutral text.
    warm_tuner:        with an auto budget, start the budget tuner from what it learnt over calibration prompts
                       on this model and machine (goose.tuning), kept on disk and recorded in the run,
                       rather than from nothing.
    ema_alpha:         smoothing of the spine-acceptance EMA.
    ema_start:         its starting value.
    spine_tiers:       spine ratio for EMA < 0.2, < 0.4, else.
    spine_share:       a fixed base spine ratio r instead of the EMA tier (None: the paper's tiers);
                       confidence still grows it to r + confidence * (1 - r).
    spine_branch_share: rho, the share of the branch budget hung off the spine.
    max_branch_depth:  depth at which branch growth stops.
    branch_order:      how branches grow: "best" (the likeliest paths under the table's scores first) or
                       "breadth" (the paper's step 4: breadth-first, a node of score s getting about
                       remaining * s children, the spine's share split harmonically over its nodes).
    branches:          hang adjacency branches off the root and the spine (False: the spine alone takes
                       the whole budget, the context chain of pld; with no match, the root alone).
    branching:         k of the balanced (isotropic) control tree.
    suffix_max_tree_depth:  SuffixDecoding (methods suffix, suffix-path; goose.sources.suffix), vLLM's defaults
                       throughout: the depth of its suffix trees, which bounds the context matched plus the
                       tokens drafted (vLLM's suffix_decoding_max_tree_depth, 24).
    suffix_max_spec_factor: draft at most factor * match length + offset tokens: a longer match earns a longer
                       draft (vLLM's suffix_decoding_max_spec_factor, 1.0) ...
    suffix_max_spec_offset: ... plus this offset (arctic-inference's max_spec_offset; vLLM leaves it at 0.0).
    suffix_min_token_prob: draft only tokens whose estimated probability (from the suffix tree's counts) is at
                       least this (vLLM's suffix_decoding_min_token_prob, 0.1).
    """

    budget: int | str = PAPER_BUDGET
    max_budget: int = 100
    ngram_lengths: tuple[int, ...] = (5, 4, 3)
    max_chain: int = 20
    long_match: int = 8
    extend_above: float = 0.6
    max_extended_chain: int = 100
    top_k: int = 10
    min_score: float = 0.01
    use_bigram: bool = True
    warm_start: bool = True
    warm_tuner: bool = True
    ema_alpha: float = 0.3
    ema_start: float = 0.5
    spine_tiers: tuple[float, float, float] = (0.15, 0.30, 0.50)
    spine_share: float | None = None
    spine_branch_share: float = 0.5
    max_branch_depth: int = 6
    branch_order: str = "best"
    branches: bool = True
    branching: int = 3
    suffix_max_tree_depth: int = 24
    suffix_max_spec_factor: float = 1.0
    suffix_max_spec_offset: float = 0.0
    suffix_min_token_prob: float = 0.1

    def __post_init__(self) -> None:
        """Every knob against its rule (goose.validate): a bad one is refused with one line naming it."""
        if self.budget != AUTO:
            whole_number("budget", self.budget, 1, MAX_BUDGET, where=f" tree nodes, or {AUTO!r}")
        whole_number("max_budget", self.max_budget, 1, MAX_BUDGET, where=" tree nodes")
        for name in ("max_chain", "long_match", "top_k", "max_branch_depth", "branching"):
            whole_number(name, getattr(self, name), 1)
        whole_number("max_extended_chain", self.max_extended_chain, self.max_chain, where=" (at least max_chain)")
        if not isinstance(self.ngram_lengths, tuple) or not self.ngram_lengths:
            raise InputError(f"ngram_lengths must hold positive lengths, got {shown(self.ngram_lengths)}")
        for length in self.ngram_lengths:
            whole_number("ngram_lengths", length, 1)
        for name in ("extend_above", "ema_alpha", "ema_start", "spine_branch_share"):
            number(name, getattr(self, name), 0.0, 1.0)
        number("min_score", self.min_score, 0.0, 1.0)
        if self.min_score == 1.0:
            raise InputError("min_score must be a probability below 1, got 1.0")
        if not isinstance(self.spine_tiers, tuple) or len(self.spine_tiers) != 3:
            raise InputError(f"spine_tiers must be three shares, got {shown(self.spine_tiers)}")
        for tier in self.spine_tiers:
            number("spine_tiers", tier, 0.0, 1.0)
        if self.spine_share is not None:
            number("spine_share", self.spine_share, 0.0, 1.0, where=" (or None for the paper's tiers)")
        for name in ("use_bigram", "warm_start", "warm_tuner", "branches"):
            flag(name, getattr(self, name))
        choice("branch_order", self.branch_order, ("best", "breadth"))
        # vLLM's rules for its suffix_decoding_* options; the factor and offset also stay within a tree's size
        whole_number("suffix_max_tree_depth", self.suffix_max_tree_depth, 1, MAX_BUDGET)
        number("suffix_max_spec_factor", self.suffix_max_spec_factor, 0.0, MAX_BUDGET)
        number("suffix_max_spec_offset", self.suffix_max_spec_offset, -MAX_BUDGET, MAX_BUDGET)
        number("suffix_min_token_prob", self.suffix_min_token_prob, 0.0, 1.0)

    @property
    def tuned(self) -> bool:
        """Whether the tuner picks each step's budget (budget "auto") rather than the config fixing it."""
        return self.budget == AUTO

    def grown_budget(self, confidence: float, budget: int | None = None) -> int:
        """The budget of one step: B (or `budget`, which a tuned config must be given: the tuner's pick), grown
        towards B * max_budget / 60 with confidence."""
        base = budget or self.budget
        if base == AUTO:
            raise ValueError(f"budget {AUTO!r} has no fixed size: the tuner picks each step's (pass its pick)")
        growth = max(0.0, self.max_budget / PAPER_BUDGET - 1.0)
        return max(1, int(round(base * (1.0 + growth * confidence))))

    def spine_ratio(self, spine_acceptance: float) -> float:
        """The spine's share of the budget from the recent spine acceptance (docs/METHOD.md, step 1), unless fixed."""
        if self.spine_share is not None:
            return self.spine_share
        low, mid, high = self.spine_tiers
        if spine_acceptance < 0.2:
            return low
        if spine_acceptance < 0.4:
            return mid
        return high

    def with_overrides(self, **overrides: Any) -> GooseConfig:
        """A copy with the given knobs changed; unknown names are an error, not ignored."""
        known = {f.name for f in fields(self)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise TypeError(f"unknown Goose option(s): {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return replace(self, **overrides)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: tuples become lists, as they come back from a trace."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GooseConfig:
        """The config a trace stored. One stored before `branch_order` existed grew its branches breadth-first;
        one stored before the budget had one encoding held an auto budget as `auto_budget: true` beside an
        unused `budget`."""
        data = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
        data.setdefault("branch_order", "breadth")
        if data.pop("auto_budget", False):
            data["budget"] = AUTO
        return cls().with_overrides(**data)

