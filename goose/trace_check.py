"""What a trace file must hold before it is loaded: every field of the right type, every tree a tree, every
accepted path inside its tree, and the run's tokens those its steps committed.

A file that breaks any of it is refused with one line, "not a Goose trace: <what is wrong, and where>", instead
of loading and failing later wherever a viewer trusts it (an IndexError three modules away). Works on the JSON
as read, before any record is built; imports nothing of the model, the heads or the loop.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from goose.validate import shown


class TraceError(ValueError):
    """A file that is not a Goose trace; the message says what is wrong and where."""

    def __init__(self, what: str) -> None:
        super().__init__(f"not a Goose trace: {what}")
        self.what = what


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (_is_int(value) or isinstance(value, float)) and math.isfinite(value)


KINDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "int": (_is_int, "a whole number"),
    "token": (lambda v: _is_int(v) and v >= 0, "a token id (a whole number >= 0)"),
    "number": (_is_number, "a finite number"),
    "text": (lambda v: isinstance(v, str), "text"),
    "object": (lambda v: isinstance(v, dict), "a JSON object"),
    "list": (lambda v: isinstance(v, list), "a list"),
}

RUN_FIELDS = {"prompt": "text", "method": "text", "model": "text", "config": "object", "sampling": "object",
              "max_new_tokens": "int", "steps": "list", "totals": "object"}
OPTIONAL_RUN_FIELDS = {"text": "text", "stop_reason": "text", "head": "text", "token_texts": "object",
                       "costs": "object", "autoregressive_s": "number", "prefill_row_s": "number",
                       "rows": "list", "tuner_start": "object", "store": "object"}
STEP_FIELDS = {"index": "int", "nodes": "list", "accepted": "list", "bonus_token": "token", "bonus_text": "text",
               "committed": "list", "draft_s": "number", "verify_s": "number", "budget": "int"}
NODE_FIELDS = {"token": "token", "text": "text", "source": "text", "parent": "int", "depth": "int",
               "score": "number"}
OPTIONAL_NODE_FIELDS = {"target": "token", "status": "text", "accept_prob": "number", "reason": "text"}
TOTALS_FIELDS = {"new_tokens": "int", "forward_passes": "int", "tau": "number", "tokens_per_s": "number",
                 "wall_s": "number", "prefill_s": "number", "setup_s": "number", "drafted": "object",
                 "accepted": "object"}  # each may be left out (older formats); None where the format allows it


def _field(data: dict, name: str, kind: str, where: str, required: bool = True) -> Any:
    if name not in data:
        if required:
            raise TraceError(f"{where}{name} is missing")
        return None
    value = data[name]
    test, described = KINDS[kind]
    if not test(value):
        raise TraceError(f"{where}{name} must be {described}, got {shown(value)}")
    return value


def _fields(data: Any, required: dict[str, str], optional: dict[str, str], where: str) -> None:
    if not isinstance(data, dict):
        raise TraceError(f"{where.rstrip('.') or 'the file'} must be a JSON object, got {shown(data)}")
    for name, kind in required.items():
        _field(data, name, kind, where)
    for name, kind in optional.items():
        if data.get(name) is not None:
            _field(data, name, kind, where, required=False)


def _tokens(values: list, where: str) -> list[int]:
    for i, value in enumerate(values):
        if not KINDS["token"][0](value):
            raise TraceError(f"{where}[{i}] must be a token id (a whole number >= 0), got {shown(value)}")
    return values


def _pool_index(value: Any, pool: Sequence, where: str) -> None:
    if not _is_int(value) or not 0 <= value < len(pool):
        raise TraceError(f"{where} must index the trace's {len(pool)} pooled rows, got {shown(value)}")


def check_rows(rows: list) -> None:
    """The pooled adjacency rows: each [token ids, scores] of one length."""
    for i, row in enumerate(rows):
        if (not isinstance(row, list) or len(row) != 2 or not all(isinstance(part, list) for part in row)
                or len(row[0]) != len(row[1])):
            raise TraceError(f"rows[{i}] must be [token ids, scores] of one length, got {shown(row)}")
        _tokens(row[0], f"rows[{i}][0]")
        if not all(_is_number(score) for score in row[1]):
            raise TraceError(f"rows[{i}][1] must hold finite numbers, got {shown(row[1])}")


def check_step(step: Any, i: int, root: int, pool: list) -> list[int]:
    """One step: its tree (each parent before its child, depths one more than the parent's), its accepted path
    (a chain down from the root), its committed tokens (the path's tokens, then the bonus, cut where the run
    stopped) and its rows. The root is the token committed just before it. Returns the committed tokens."""
    where = f"steps[{i}]."
    _fields(step, STEP_FIELDS, {"observe_s": "number", "shape": "object"}, where)
    nodes = step["nodes"]
    if not nodes:
        raise TraceError(f"{where}nodes is empty (a tree has its root)")
    for n, node in enumerate(nodes):
        _fields(node, NODE_FIELDS, OPTIONAL_NODE_FIELDS, f"{where}nodes[{n}].")
        parent = node["parent"]
        if n == 0 and parent != -1:
            raise TraceError(f"{where}nodes[0] is the root: its parent must be -1, got {shown(parent)}")
        if n and not 0 <= parent < n:
            raise TraceError(f"{where}nodes[{n}].parent must be a node before it (0..{n - 1}), got {shown(parent)}")
        if n and node["depth"] != nodes[parent]["depth"] + 1:
            raise TraceError(f"{where}nodes[{n}].depth must be its parent's plus one, got {shown(node['depth'])}")
    if nodes[0]["token"] != root:
        raise TraceError(f"{where}nodes[0].token must be the token committed before the step ({root}), "
                         f"got {shown(nodes[0]['token'])}")
    path = [0]
    for n in step["accepted"]:
        if not _is_int(n) or not 0 < n < len(nodes):
            raise TraceError(f"{where}accepted must hold node indices inside the tree (1..{len(nodes) - 1}), "
                             f"got {shown(n)}")
        if nodes[n]["parent"] != path[-1]:
            raise TraceError(f"{where}accepted must be a path down from the root: node {n}'s parent is not "
                             f"node {path[-1]}")
        path.append(n)
    committed = _tokens(step["committed"], f"{where}committed")
    made = [nodes[n]["token"] for n in path[1:]] + [step["bonus_token"]]
    if not committed or committed != made[:len(committed)]:
        raise TraceError(f"{where}committed must be the accepted tokens then the bonus (cut where the run "
                         f"stopped), got {shown(committed)}")
    for name in ("rows", "shadow"):
        if step.get(name) is not None and not isinstance(step[name], list):
            raise TraceError(f"{where}{name} must be a list, got {shown(step[name])}")
    for r, index in enumerate(step.get("rows") or []):
        _pool_index(index, pool, f"{where}rows[{r}]")
    for r, entry in enumerate(step.get("shadow") or []):
        if not isinstance(entry, list) or len(entry) != 3 or not _is_int(entry[0]) or not _is_int(entry[1]):
            raise TraceError(f"{where}shadow[{r}] must be [parent, token, row], got {shown(entry)}")
        _pool_index(entry[2], pool, f"{where}shadow[{r}][2]")
    return committed


def check_store(store: dict) -> None:
    """The store of past outputs a suffix run read: its name and its outputs, each a list of token ids."""
    _field(store, "name", "text", "store.")
    outputs = _field(store, "outputs", "list", "store.")
    for i, output in enumerate(outputs):
        if not isinstance(output, list):
            raise TraceError(f"store.outputs[{i}] must be a list of token ids, got {shown(output)}")
        _tokens(output, f"store.outputs[{i}]")


def check_run(data: Any) -> None:
    """A whole run record as JSON: TraceError naming the first thing that is not as the format says."""
    _fields(data, RUN_FIELDS, OPTIONAL_RUN_FIELDS, "")
    _fields(data["totals"], {}, TOTALS_FIELDS, "totals.")
    pool = data.get("rows") or []
    check_rows(pool)
    tokens = _tokens(data.get("tokens", []), "tokens") if isinstance(data.get("tokens", []), list) else None
    if tokens is None:
        raise TraceError(f"tokens must be a list, got {shown(data['tokens'])}")
    if not isinstance(data.get("prompt_tokens", []), list):
        raise TraceError(f"prompt_tokens must be a list, got {shown(data['prompt_tokens'])}")
    _tokens(data.get("prompt_tokens", []), "prompt_tokens")
    if data["steps"] and not tokens:
        raise TraceError("tokens is empty, but the run has steps (the prefill commits the first token)")
    made = tokens[:1]
    for i, step in enumerate(data["steps"]):
        made += check_step(step, i, made[-1], pool)
    if data["steps"] and made != tokens:
        raise TraceError(f"tokens must be the prefill's token and then each step's committed tokens "
                         f"({len(made)} of them), got {len(tokens)} that differ")
    for name, kind in (("token_texts", "text"), ("costs", "number")):
        for key, value in (data.get(name) or {}).items():
            if not key.lstrip("-").isdigit() or not KINDS[kind][0](value):
                raise TraceError(f"{name} must map token ids (or tree sizes) to {KINDS[kind][1]}, "
                                 f"got {shown(key)}: {shown(value)}")
    if data.get("store") is not None:
        check_store(data["store"])
    prefill = data.get("prefill_rows")
    if prefill is not None:
        if not isinstance(prefill, list):
            raise TraceError(f"prefill_rows must be a list, got {shown(prefill)}")
        for r, entry in enumerate(prefill):
            if not isinstance(entry, list) or len(entry) != 3 or not _is_int(entry[1]):
                raise TraceError(f"prefill_rows[{r}] must be [previous, token, row], got {shown(entry)}")
            _pool_index(entry[2], pool, f"prefill_rows[{r}][2]")
