"""The bench's --diagnose: where each tree method's tokens went (goose.diagnose), pooled per method.

Per prompt and tree method, one more run after the timed ones, recorded with its sources and diagnosed.
The timed runs are left as they are: nothing is recorded in them, so their clocks, CPU time included, hold
what they held without --diagnose. A run is a function of its inputs (tests/test_repeatable.py), so the
recorded run drafts the timed one's trees; each line of diagnose.jsonl says whether its tokens and accepted
lengths are the timed run's. Pooled as goose.diagnose pools: sums over every step of every prompt.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from goose.bench.methods import method_budget
from goose.bench.records import BenchRun
from goose.bench.summary import text_table
from goose.decode import METHODS, generate
from goose.diagnose import SPLIT, Diagnosis, diagnose
from goose.model import GooseModel

DIAGNOSE_FILE = "diagnose.jsonl"  # one diagnosed run per line, written as the bench goes
POOLED_FILE = "diagnosis.json"  # the split pooled per method


def diagnosed_methods(methods: Iterable[str]) -> list[str]:
    """The bench's methods that draft trees from the context match and the adjacency table (every speculative Goose
    method but SuffixDecoding's, goose.diagnose.check_diagnosable): the ones a diagnosis splits."""
    return [method for method in methods
            if (name := method_budget(method, None)[0]) in METHODS and METHODS[name].speculative
            and not METHODS[name].uses_suffix]


@dataclass
class DiagnosedRun:
    """One prompt x tree method: its diagnosis, and whether the recorded run was the timed one."""

    prompt_id: str
    method: str
    same_as_timed: bool
    diagnosis: Diagnosis

    def to_dict(self) -> dict[str, Any]:
        return {"prompt_id": self.prompt_id, "method": self.method, "same_as_timed": self.same_as_timed,
                "diagnosis": self.diagnosis.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DiagnosedRun:
        return cls(data["prompt_id"], data["method"], data["same_as_timed"], Diagnosis.from_dict(data["diagnosis"]))


def diagnose_prompt(goose_model: GooseModel, prompt_id: str, text: str, timed: Sequence[BenchRun],
                    max_new_tokens: int, budget: int | str | None, head: str) -> list[DiagnosedRun]:
    """Each tree method of the prompt's timed runs once more, untimed and recorded with its sources, diagnosed."""
    diagnosed = []
    for run in timed:
        if run.method not in diagnosed_methods([run.method]):
            continue
        method, own_budget = method_budget(run.method, budget)
        recorded = generate(goose_model, text, method, max_new_tokens, own_budget, head=head, record_sources=True)
        same = recorded.tokens == run.tokens and recorded.accepted_lengths == run.accepted_lengths
        diagnosed.append(DiagnosedRun(prompt_id, run.method, same, diagnose(recorded)))
    return diagnosed


def append_diagnoses(path: Path, runs: Iterable[DiagnosedRun]) -> None:
    with path.open("a", encoding="utf-8") as file:
        for run in runs:
            file.write(json.dumps(run.to_dict()) + "\n")


def load_diagnoses(path: Path) -> list[DiagnosedRun]:
    if not path.exists():
        return []
    return [DiagnosedRun.from_dict(json.loads(line)) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]


def pooled_by_method(runs: Sequence[DiagnosedRun]) -> dict[str, dict[str, Any]]:
    """Method -> its split pooled over prompts (to_dict of goose.diagnose, without the steps), with the prompts
    it covers, the share of the reachable tokens the trees left, and whether every recorded run was the timed one."""
    pooled = {}
    for method in dict.fromkeys(run.method for run in runs):
        chosen = [run for run in runs if run.method == method]
        diagnosis = Diagnosis.pooled([run.diagnosis for run in chosen])
        summary = {key: value for key, value in diagnosis.to_dict().items() if key != "steps"}
        reachable = diagnosis.taken + diagnosis.lost_to_shape
        summary.update(prompts=len(chosen), steps=len(diagnosis.steps),
                       left_of_reachable=diagnosis.lost_to_shape / reachable if reachable else 0.0,
                       same_as_timed=all(run.same_as_timed for run in chosen))
        pooled[method] = summary
    return pooled


def write_pooled(path: Path, runs: Sequence[DiagnosedRun]) -> None:
    path.write_text(json.dumps(pooled_by_method(runs), indent=1), encoding="utf-8")


DIAGNOSIS_HEADER = ("method", "prompts", "steps", "taken", "lost to shape", "lost to sources", "shape / reachable",
                    "by source: taken/shape/sources", "same as timed")
DIAGNOSIS_DEFINITIONS = (
    "Per step, of the budget - 1 tokens a tree of its budget could take (fewer where the known continuation ends): "
    "taken = what its tree accepted; lost to shape = what its own sources offered of the greedy continuation "
    "within the budget (the context match along it, the adjacency table's row of each token: every tier, the "
    "whole row) but the tree left out; lost to sources = the rest, past the first token no source offered. "
    "shape / reachable = the share of what the sources offered within the budget that the trees left. "
    "Sources: spine (the context match), bigram / unigram (the table's rows), prior (the prior's rows), none "
    "(no row). Pooled over every step of every prompt (docs/METHOD.md, 'Lost to the shape or to the sources').")


def diagnosis_rows(runs: Sequence[DiagnosedRun]) -> list[list[str]]:
    """The pooled split per method as cells under DIAGNOSIS_HEADER: counts with their shares of the positions."""
    rows = []
    for method, pooled in pooled_by_method(runs).items():
        parts = [f"{pooled[part]} ({100 * pooled['shares'][part]:.1f}%)" for part in SPLIT]
        sources = ", ".join(f"{source} " + "/".join(str(split[part]) for part in SPLIT)
                            for source, split in pooled["by_source"].items())
        rows.append([method, str(pooled["prompts"]), str(pooled["steps"]), *parts,
                     f"{100 * pooled['left_of_reachable']:.1f}%", sources or "-",
                     "yes" if pooled["same_as_timed"] else "NO"])
    return rows


def format_diagnosis(runs: Sequence[DiagnosedRun]) -> str:
    """The pooled split per method as a plain-text table ("" without diagnosed runs)."""
    return text_table(DIAGNOSIS_HEADER, diagnosis_rows(runs)) if runs else ""
