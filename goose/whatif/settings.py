"""The settings a replay runs at, read over the run's own (the one rule for "the run's own setting")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from goose import validate
from goose.config import GooseConfig
from goose.drafters import METHODS
from goose.trace import RunRecord

# Knobs that change the sources themselves (the matcher, the table, the EMA), not the shape built from them:
# a recording cannot answer for them.
SOURCE_SETTINGS = ("ngram_lengths", "max_chain", "long_match", "extend_above", "max_extended_chain", "top_k",
                   "ema_alpha", "ema_start")
ALIASES = {"rho": "spine_branch_share", "branch_depth": "max_branch_depth", "k": "branching"}


def own_budget(run: RunRecord) -> int | str:
    """The run's own base budget: "auto" where its tuner chose each step's, else its fixed node budget."""
    return GooseConfig.from_dict(run.config).budget


def own_setting(run: RunRecord, settings: Mapping[str, Any]) -> bool:
    """Whether `settings` are the run's own (as resolve_settings reads them): replaying them rebuilds the run."""
    return resolve_settings(run, settings) == resolve_settings(run, {})


def resolve_settings(run: RunRecord, settings: Mapping[str, Any]) -> tuple[str, GooseConfig]:
    """(method, config) of `settings` over the run's own: the run's own setting where `settings` is empty
    (the one rule for "the run's own setting"); a fixed budget where it names one. ValueError/TypeError when
    bad."""
    settings = {ALIASES.get(name, name): value for name, value in settings.items()}
    method = validate.choice("method", settings.pop("method", None) or run.method, list(METHODS))
    sources = sorted(set(settings) & set(SOURCE_SETTINGS))
    if sources:
        raise ValueError(f"{', '.join(sources)} change(s) the draft sources, not the tree shape: a recording cannot "
                         "answer for them (run again instead)")
    if settings.get("budget") is None:  # the run's own; else GooseConfig checks it, as it checks every knob
        settings.pop("budget", None)
    return method, GooseConfig.from_dict(run.config).with_overrides(**settings)
