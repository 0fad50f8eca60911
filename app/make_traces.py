"""Regenerate the example traces in assets/traces with the embedded model: `python -m app.make_traces`.

Shipped traces carry their measured clocks (the race lanes replay them at that pace), so they are
recorded only on a quiet machine: the command refuses while other work shares the CPU (the load
average over the last minute, then a short probe of how much of every core this process gets);
`--force` records anyway.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

import goose
from app.callbacks import ASSETS, EXAMPLE_TRACES, RACE_METHODS
from app.race_trace import save_race
from goose.drafters import SpineTree

TRACES = {"code-completion": "Code completion", "repetitive-list": "Repetitive list"}
RACE_TRACE, RACE_PROMPT = "race-code-completion.json", "Code completion"
MAX_LOAD_PER_CORE = 0.25  # an idle machine sits near 0; another busy process adds about 1
MIN_CPU_SHARE = 0.85  # of every torch thread's core, during the probe


def cpu_share(seconds: float = 1.0) -> float:
    """The share of its cores this process gets for float32 matmuls on every torch thread: CPU time over
    wall time times threads, about 1 when nothing else runs and lower when other processes take turns."""
    matrix = torch.randn(384, 384)
    threads = torch.get_num_threads()
    wall, cpu = time.perf_counter(), time.process_time()
    while time.perf_counter() - wall < seconds:
        matrix @ matrix
    return (time.process_time() - cpu) / ((time.perf_counter() - wall) * threads)


def busy_reason(max_load_per_core: float = MAX_LOAD_PER_CORE, min_share: float = MIN_CPU_SHARE) -> str:
    """Why this machine is too busy to record clocks worth shipping, or "" when it is quiet."""
    cores = os.cpu_count() or 1
    load = os.getloadavg()[0]
    if load > max_load_per_core * cores:
        return (f"the load average over the last minute is {load:.2f} on {cores} cores "
                f"(at most {max_load_per_core * cores:.2f} for a quiet machine)")
    share = cpu_share()
    if share < min_share:
        return f"a 1 s matmul probe got {share:.0%} of its {torch.get_num_threads()} cores (at least {min_share:.0%})"
    return ""


def record() -> None:
    """Run goose (max 48 new tokens, budget 16) on two shipped example prompts and save their traces, with
    their sources so the Lab can rebuild and replay them; then race the Race tab's methods on the code prompt."""
    model = goose.load_model()
    prompts = {e["label"]: e["prompt"] for e in json.loads((ASSETS / "examples.json").read_text(encoding="utf-8"))}
    EXAMPLE_TRACES.mkdir(parents=True, exist_ok=True)
    # untimed first: the head choice and the cost table are measured once per model, not in a shipped clock
    goose.generate(model, prompts["Code completion"], method=SpineTree.name, max_new_tokens=4, budget=16,
                   record_sources=True)
    for name, label in TRACES.items():
        run = goose.generate(model, prompts[label], method=SpineTree.name, max_new_tokens=48, budget=16,
                             record_sources=True)
        path = EXAMPLE_TRACES / f"{name}.json"
        run.save(path)
        print(f"{path}: {len(run.steps)} steps, tau {run.totals.tau:.2f}, {run.totals.tokens_per_s:.1f} tokens/s, "
              f"wall {run.totals.wall_s:.1f} s, {path.stat().st_size / 1e3:.0f} kB")
    # The race Replay shows first: the Race tab's own methods and settings (auto budget, the auto head), one after
    # another on the code prompt, each clocked from its call as the Race clocks it.
    runs = {method: goose.generate(model, prompts[RACE_PROMPT], method=method, max_new_tokens=48)
            for method in RACE_METHODS}
    path = EXAMPLE_TRACES / RACE_TRACE
    save_race(runs, path)
    print(f"{path}: " + ", ".join(f"{method} {run.totals.tokens_per_s:.1f} tokens/s (tau {run.totals.tau:.2f})"
                                  for method, run in runs.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.make_traces", description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="record even when the machine is busy")
    args = parser.parse_args(argv)
    reason = busy_reason()
    if reason and not args.force:
        print(f"Not recording: {reason}. Shipped traces keep their clocks; run this on a quiet machine, "
              "or pass --force.", file=sys.stderr)
        return 1
    if reason:
        print(f"Recording anyway (--force) although {reason}.", file=sys.stderr)
    record()
    return 0


if __name__ == "__main__":
    sys.exit(main())
