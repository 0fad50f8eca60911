"""Where a run's budget tuner starts: what a tuner learnt on this model and machine, kept on disk (issue: first
again).

A tuner that starts from nothing spends a 128-token run learning what the last run already knew: it drafts
small trees until enough steps have scored the bigger ones (measured, 2-core AVX-512 EPYC: auto 81 tokens/s
on HumanEval where a fixed budget of 16 ran at 88). So, as the cost table is measured once per model, device,
thread count and head (goose.costs), a tuner is trained once per model, method and cost table: the loop runs
the method over a few calibration prompts, each run starting from what the runs before it learnt, and its
tuner's estimates (goose.budget.BudgetTuner.learnt) are kept on disk. A run starts from them
(`BudgetTuner.start_from`) and records them, so it stays a function of its inputs and its recorded tables:
a replay starts from the same place.

The calibration prompts are none of the benchmark's: code and prose a base model continues well.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any

from goose.assets import cache_dir, kept_on_disk
from goose.model import GooseModel

TUNING_FORMAT = 4
CALIBRATION_TOKENS = 128
CALIBRATION_PROMPTS = (
    'def merge_sorted(left, right):\n    """Merge two sorted lists into one sorted list."""\n',
    'class LRUCache:\n    """A least-recently-used cache of at most `capacity` items."""\n\n'
    '    def __init__(self, capacity):\n',
    "The water cycle describes how water moves between the oceans, the air and the land. It begins when",
    "How to plant tomatoes in a small garden\n\n1. Choose a sunny spot.",
)

Calibrate = Callable[[dict[str, Any] | None, str], dict[str, Any]]  # (start, prompt) -> what the tuner learnt


def learnt_start(goose_model: GooseModel, method: str, costs_key: str, costs: Mapping[int, float],
                 calibrate: Calibrate) -> dict[str, Any]:
    """What `method`'s tuner learnt over the calibration prompts with this model and the cost table `costs`,
    kept under `costs_key` (goose.costs.cost_key: model, device, threads, head): trained on first use
    (`calibrate(start, prompt)` runs the loop once and returns its tuner's `learnt()`), then read from disk, and
    kept with the model so that a run does not read the file again. Another table (re-measured, or a caller's)
    is another start: the tuner's picks follow the costs."""
    table = hashlib.sha256(json.dumps(sorted(costs.items())).encode()).hexdigest()[:16]
    key = (f"v{TUNING_FORMAT}|{method}|{costs_key}|costs={table}"
           f"|tokens={CALIBRATION_TOKENS}|prompts={len(CALIBRATION_PROMPTS)}")
    kept = goose_model.cache.tuner_starts
    if key not in kept:
        kept[key] = kept_on_disk(cache_dir() / "tuner-starts.json", key, lambda: train(calibrate))
    return copy.deepcopy(kept[key])  # a copy per run, as the cost table: a run's record is its own


def train(calibrate: Calibrate) -> dict[str, Any]:
    """A tuner trained over the calibration prompts in order, each run starting from what the ones before learnt."""
    learnt = None
    for prompt in CALIBRATION_PROMPTS:
        learnt = calibrate(learnt, prompt)
    return learnt
