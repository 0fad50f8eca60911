"""Which methods a bench races: the library's registered methods (a Goose method at its own budget too,
"goose@16"), and transformers' own decoding as outside references."""

from __future__ import annotations

from collections.abc import Sequence

from goose import metrics
from goose.drafters import available_methods, unavailable_methods
from goose.metrics import BASELINE
from goose.validate import parse_budget

HF_GENERATE = metrics.OUTSIDE_BASELINE  # transformers' own greedy generate: what users would otherwise run
HF_PLD = "hf-pld"  # transformers' own prompt lookup decoding, an outside reference
HF_PLD_TOKENS = 10  # prompt_lookup_num_tokens, transformers' documented default
HF_METHODS = {HF_GENERATE: {}, HF_PLD: {"prompt_lookup_num_tokens": HF_PLD_TOKENS}}  # extra generate() arguments


def bench_methods() -> tuple[str, ...]:
    """Every method the bench can run here: the library's registered methods that can run here, then
    transformers' own decoding."""
    return (*available_methods(), *HF_METHODS)


BUDGET_MARK = "@"  # "goose@16": a method at a fixed budget, raced beside its default in the same run


def method_budget(method: str, default: int | str | None) -> tuple[str, int | str | None]:
    """(the library method, its budget) of a bench method: "goose@16" is goose at 16 nodes, "goose@auto" at the
    tuner's choice, a plain name at the bench's --budget (None: the method's default)."""
    name, mark, budget = method.partition(BUDGET_MARK)
    return (name, parse_budget(budget)) if mark else (method, default)


def parse_methods(text: str) -> tuple[str, ...]:
    """A comma-separated method list, checked against the known methods (order kept, repeats dropped). A Goose
    method may carry its own budget, "goose@16", so that fixed budgets race the default in one run."""
    known = bench_methods()
    methods = tuple(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))
    missing = unavailable_methods()
    for method in methods:
        if method.partition(BUDGET_MARK)[0] in missing:
            raise ValueError(missing[method.partition(BUDGET_MARK)[0]])
    unknown = [name for name in methods if name.partition(BUDGET_MARK)[0] not in known]
    if unknown:
        raise ValueError(f"unknown method(s) {', '.join(unknown)}; choose from {', '.join(known)}")
    for method in methods:
        name, mark, budget = method.partition(BUDGET_MARK)
        if mark and name in HF_METHODS:
            raise ValueError(f"{method}: transformers' own methods take no tree budget")
        if mark:
            parse_budget(budget)
    if not methods:
        raise ValueError(f"no method given; choose from {', '.join(known)}")
    return methods


def with_baseline(methods: Sequence[str]) -> tuple[str, ...]:
    """The methods with autoregressive decoding added first when missing: speed-up and losslessness need it."""
    return tuple(methods) if BASELINE in methods else (BASELINE, *methods)
