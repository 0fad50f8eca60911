"""A race trace: one JSON file holding every method's run of a race, so Replay can show the race again.

Format (version tag "goose-race/1"): {"format": "goose-race/1", "prompt": ..., "model": ...,
"runs": {method: <a goose-trace/1 run record>, ...}} with the methods in race order.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from goose.trace import TRACE_FORMAT, RunRecord, read_text
from goose.trace_check import TraceError
from goose.validate import shown

RACE_FORMAT = "goose-race/1"


def race_to_dict(runs: dict[str, RunRecord]) -> dict[str, Any]:
    """The race as a JSON-ready dict (prompt and model taken from its first run)."""
    first = next(iter(runs.values()), None)
    return {"format": RACE_FORMAT, "prompt": first.prompt if first else "", "model": first.model if first else "",
            "runs": {method: run.to_dict() for method, run in runs.items()}}


def save_race(runs: dict[str, RunRecord], path: str | Path) -> None:
    Path(path).write_text(json.dumps(race_to_dict(runs), indent=1), encoding="utf-8")


def is_race(data: Any) -> bool:
    return isinstance(data, dict) and data.get("format") == RACE_FORMAT


def race_from_dict(data: Any) -> dict[str, RunRecord]:
    """The runs of a race trace by method; ValueError naming the expected format for anything else."""
    if not is_race(data):
        found = data.get("format") if isinstance(data, dict) else None
        hint = " (this is a single run's trace: open it in Replay as a run)" if found == TRACE_FORMAT else ""
        raise ValueError(f"not a Goose race trace (expected a JSON object with format {RACE_FORMAT!r}){hint}")
    runs = data.get("runs")
    if not isinstance(runs, dict) or not runs:
        raise ValueError("not a Goose race trace: it holds no runs")
    loaded = {}
    for method, run in runs.items():
        try:
            loaded[method] = RunRecord.from_dict(run)
        except TraceError as error:  # say which run is not one
            raise TraceError(f"runs[{shown(method)}]: {error.what}") from None
    return loaded


def load_race(path: str | Path) -> dict[str, RunRecord]:
    try:
        data = json.loads(read_text(path))
    except json.JSONDecodeError as error:
        raise ValueError(f"not a Goose race trace: invalid JSON ({error})") from error
    return race_from_dict(data)
