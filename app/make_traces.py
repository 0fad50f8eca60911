"""Regenerate the example traces in assets/traces with the embedded model: `python -m app.make_traces`."""

from __future__ import annotations

import json

import goose
from app.callbacks import ASSETS, EXAMPLE_TRACES

TRACES = {"code-completion": "Code completion", "repetitive-list": "Repetitive list"}


def main() -> None:
    """Run goose (max 48 new tokens, budget 16) on two shipped example prompts and save their traces,
    with source snapshots so the Lab can rebuild their trees."""
    model = goose.load_model()
    prompts = {e["label"]: e["prompt"] for e in json.loads((ASSETS / "examples.json").read_text(encoding="utf-8"))}
    EXAMPLE_TRACES.mkdir(parents=True, exist_ok=True)
    # untimed first: the head choice and the cost table are measured once per model, not in a shipped clock
    goose.generate(model, prompts["Code completion"], method="goose", max_new_tokens=4, budget=16,
                   record_sources=True)
    for name, label in TRACES.items():
        run = goose.generate(model, prompts[label], method="goose", max_new_tokens=48, budget=16,
                              record_sources=True)
        path = EXAMPLE_TRACES / f"{name}.json"
        run.save(path)
        print(f"{path}: {len(run.steps)} steps, tau {run.totals.tau:.2f}, {run.totals.tokens_per_s:.1f} tokens/s, "
              f"wall {run.totals.wall_s:.1f} s, {path.stat().st_size / 1e3:.0f} kB")


if __name__ == "__main__":
    main()
