"""What if a step, or a whole run, had drafted other trees? Recorded runs replayed, no model needed.

Under greedy decoding the continuation is fixed by the prompt: whatever tree a step
drafts, the tokens committed are the recorded run's, and a tree accepts the longest
prefix of the continuation that is one of its paths (DraftTree.walk). So a run at other
settings is the same decoding loop (goose.decode) with a target that reads the recording
instead of running the model (`RecordedTarget`): every step builds the tree those settings
would draft there, walks it along the recorded continuation and advances by accepted + 1.

What a replayed step is built from, and how exact it is:
- the context match is a function of the token prefix: exact;
- the spine-acceptance EMA and the budget tuner follow the replay's own trees, the tuner over
  the cost table the run recorded: exact;
- SuffixDecoding's cache is a function of the token prefix and the store the run recorded: exact;
- the adjacency table is the replay's own, refreshed after every replayed step with a row per
  node of its own tree. A node's row is a function of its context (the sequence up to the
  anchor, then its path), so where a recorded pass verified a node in the same context its row
  is exact (`PassRows`); the accepted path's always is. Approximated: a node no recorded pass saw
  in its context (a rejected node of a tree other than the recorded ones) takes its token's
  latest recorded row at or before its own place in the text (`LatestRows`), or, where there
  is none, keeps its old row.
Replaying the recorded settings therefore rebuilds the recorded run itself, tree for tree: the
loop is the same, and so is everything it starts from (recorded in the trace).

Estimates: a replay's passes priced by the run's cost table (`PassPrices`, `estimated_totals`). Running the
model to check an estimate is measuring, and lives with it (goose.check).

One idea per module:
  rows      the recorded passes' rows, by the context each node was verified in;
  recorded  the recording as the loop's target (`RecordedTarget`), and whether a run can be replayed;
  settings  the settings a replay runs at, over the run's own;
  step      one step rebuilt (`what_if`);
  run       a whole run replayed (`replay`, `RunWhatIf`) and its estimated totals;
  sweeps    replays pooled over runs (`pooled`, `sweep`, `agreement`, `best_budget`).
"""

from goose.whatif.recorded import (
    NoReplayDataError,
    RecordedTarget,
    check_replayable,
    known_continuation,
    recorded_prior,
    recorded_store,
    recorded_texts,
    replay_generation,
    replay_refusal,
)
from goose.whatif.rows import LatestRows, PassRows, anchor_positions, context_key, node_paths, step_paths
from goose.whatif.run import PassPrices, ReplayStep, RunWhatIf, estimated_totals, paced_totals, relative_error, replay
from goose.whatif.settings import ALIASES, SOURCE_SETTINGS, own_budget, own_setting, resolve_settings
from goose.whatif.step import WhatIf, rebuilt_record, what_if
from goose.whatif.sweeps import Estimated, agreement, best_budget, pooled, sweep

__all__ = ["ALIASES", "Estimated", "LatestRows", "NoReplayDataError", "PassPrices", "PassRows", "RecordedTarget",
           "ReplayStep", "RunWhatIf", "SOURCE_SETTINGS", "WhatIf", "agreement", "anchor_positions", "best_budget",
           "check_replayable", "context_key", "estimated_totals", "known_continuation", "node_paths", "own_budget",
           "own_setting", "paced_totals", "pooled", "rebuilt_record", "recorded_prior", "recorded_store",
           "recorded_texts", "relative_error", "replay", "replay_generation", "replay_refusal", "resolve_settings",
           "step_paths", "sweep", "what_if"]
