"""A warm start for the adjacency table: each token's successors as the model predicts them on neutral text.

Not in the paper. A run's table holds rows only for tokens it has seen: the prompt's (the prefill) and
the tree nodes it verified. A token a run has not seen yet has no row, so when one becomes the anchor
(a short prompt, a sampled token) the tree holds nothing to verify, and the step is a plain
autoregressive step (measured, embedded model, short task descriptions, T = 0.7: a third of the steps).

The prior fills that gap with the model's own predictions: text the model itself continues from a list
of neutral openings (code, prose, lists, letters; nobody's prompt), one pass over it, and for each
token the top-K of its successors' scores averaged over its occurrences (the row that is right most
often when the context is unknown). The table consults it last: a row the run has stored always wins.
Training-free and built once per model (goose.prior_build; `python -m goose build-prior`); the
embedded model's ships with the package. The file names the prior (model, content hash), so a recorded
run says which one it drafted from and a replay reads the same rows.
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path

import torch

from goose.assets import cache_dir
from goose.sources.adjacency import Row

SHIPPED = Path(__file__).resolve().parent.parent / "priors"  # priors that ship with the package


@dataclass(frozen=True)
class Prior:
    """Successor rows for tokens a run has not seen yet. `name`: the model and a hash of the rows."""

    name: str
    rows: dict[int, Row]

    @cached_property
    def vocabulary(self) -> frozenset[int]:
        """Every token its rows hold, as a key or a successor: what the model predicts on neutral text (the
        embedded model's: 4,311 of 262,144 tokens)."""
        return frozenset(self.rows).union(t for row in self.rows.values() for t, _ in row)

    def harvest_vocabulary(self, prompt: Sequence[int]) -> torch.Tensor:
        """The tokens a prefill ranks its prompt rows' successors among (goose.target.ModelTarget.prefill), in
        order: this vocabulary and the prompt's own tokens (what the context may repeat)."""
        return torch.tensor(sorted(self.vocabulary.union(int(t) for t in prompt)))

    def to_json(self) -> dict:
        return {"name": self.name, "rows": [[token, [t for t, _ in row], [round(s, 6) for _, s in row]]
                                            for token, row in sorted(self.rows.items())]}

    @classmethod
    def from_json(cls, data: dict) -> Prior:
        return cls(data["name"], {token: list(zip(ids, scores)) for token, ids, scores in data["rows"]})

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(path, "wt", encoding="utf-8") as f:
            json.dump(self.to_json(), f, separators=(",", ":"))
        return path


def average_rows(tokens: Sequence[int], top_ids: torch.Tensor, top_scores: torch.Tensor, top_k: int) -> dict[int, Row]:
    """Per token, its successors' scores averaged over its occurrences (row i follows tokens[i]; a successor
    missing from an occurrence's top list scores 0 there), the top_k of them."""
    sums: dict[int, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    counts: dict[int, int] = defaultdict(int)
    for token, ids, scores in zip(tokens, top_ids.tolist(), top_scores.tolist()):
        counts[token] += 1
        for successor, score in zip(ids, scores):
            sums[token][successor] += score
    return {token: sorted(((t, s / counts[token]) for t, s in successors.items()), key=lambda p: -p[1])[:top_k]
            for token, successors in sums.items()}


def model_slug(model_name: str) -> str:
    """A file name for a model's prior."""
    return "".join(c if c.isalnum() or c in "-._" else "_" for c in model_name).strip("_") or "model"


def prior_path(model_name: str, folder: Path | None = None) -> Path:
    """Where the prior of `model_name` is kept: the package's folder for a shipped one, else the user cache."""
    if folder is None:
        folder = cache_dir() / "priors"
    return folder / f"{model_slug(model_name)}.json.gz"


@lru_cache(maxsize=8)
def _load(path: Path, modified: float) -> Prior:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return Prior.from_json(json.load(f))


def find_prior(model_name: str) -> Prior | None:
    """The prior built for `model_name` (the user's own build first, then a shipped one), or None."""
    for path in (prior_path(model_name), prior_path(model_name, SHIPPED)):
        if path.exists():
            return _load(path, path.stat().st_mtime)
    return None
