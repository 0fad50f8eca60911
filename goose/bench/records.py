"""The benchmark's per-run record and its file, runs.jsonl (one run per line, appended as runs finish)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from goose.trace import RunRecord, RunTotals
from goose.whatif import own_budget


@dataclass
class BenchRun:
    """One prompt x method: what was generated and how fast (one line of runs.jsonl)."""

    prompt_id: str
    category: str | None
    method: str
    prompt_tokens: int
    tokens: list[int]
    text: str
    totals: RunTotals
    accepted_lengths: list[int] = field(default_factory=list)
    budget: int | str | None = None  # "auto" when the library picked it
    matches_autoregressive: bool | None = None  # None when not checked (sampling, or no autoregressive run)
    load_average: float | None = None  # the machine's 1-minute load when the run ended: other work skews timings
    cpu_s: float | None = None  # this process's CPU time for the run: less swayed by other work than wall time
    stopwatch_s: float | None = None  # the call timed from outside: checks that totals.wall_s leaves nothing out

    @classmethod
    def from_record(cls, run: RunRecord, prompt_id: str, category: str | None = None) -> BenchRun:
        """The bench's line for a library run (trees and step timings left out: runs.jsonl stays small)."""
        return cls(prompt_id, category, run.method, len(run.prompt_tokens), list(run.tokens), run.text, run.totals,
                   run.accepted_lengths, own_budget(run))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BenchRun:
        """A run from its runs.jsonl line; keys this version does not know are ignored."""
        known = {f.name for f in fields(cls)}
        totals_known = {f.name for f in fields(RunTotals)}
        data = {key: value for key, value in data.items() if key in known}
        data["totals"] = RunTotals(**{key: value for key, value in data["totals"].items() if key in totals_known})
        return cls(**data)


def append_runs(path: Path, runs: Iterable[BenchRun]) -> None:
    """Append runs to runs.jsonl as they finish, so an interrupted benchmark keeps what it measured."""
    with path.open("a", encoding="utf-8") as file:
        for run in runs:
            file.write(json.dumps(run.to_dict()) + "\n")


def load_runs(path: str | Path) -> list[BenchRun]:
    """Read runs.jsonl back."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [BenchRun.from_dict(json.loads(line)) for line in lines if line.strip()]
