"""Each method's clock in the app holds what `goose.generate`'s holds, and no more (issue 34, "Clocks").

Runs the app's own callbacks (Race, Explore, the Lab's check; no browser, no server) alternately with a
stopwatch around `goose.generate` on the same prompt, budget and length, on the embedded model, and prints the
medians and their ratios:

    python scripts/check_clocks.py                     # Repetitive list, 64 new tokens (the Race's default), 5 rounds
    python scripts/check_clocks.py --example "Code completion" --tokens 128 --rounds 7

Done when every method's app/library ratio is at least 0.9 and goose's speed-up in the Race is within 10% of the
library's. The last lines time the run's text work (decoding the output as it grows, stop strings) per token, at
128 tokens and at the whole run's length, by feeding a run's own steps to the decoder the loop uses.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

import goose  # noqa: E402
from app import callbacks, lab  # noqa: E402
from app.models import ModelRegistry  # noqa: E402
from app.race_trace import race_from_dict  # noqa: E402
from app.ui import load_examples  # noqa: E402
from goose.text import OutputText  # noqa: E402
from goose.trace import read_text  # noqa: E402


def machine() -> str:
    """The CPU's model name (lscpu), its cores and its AVX/AMX flags."""
    try:
        lines = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout.splitlines()
        name = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("Model name")), "?")
    except (OSError, subprocess.CalledProcessError):
        name = platform.processor() or "?"
    flags = set()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    wide = sorted(flag for flag in flags if flag.startswith(("avx", "amx")) or flag == "fma")
    return f"{name}, {len(os.sched_getaffinity(0))} cores, flags: {' '.join(wide) or 'none'}"


def library(model: goose.GooseModel, prompt: str, method: str, tokens: int, budget: str) -> goose.RunRecord:
    """goose.generate with a stopwatch around the call; the stopwatch's tokens/s replaces the run's own."""
    start = time.perf_counter()
    run = goose.generate(model, prompt, method, tokens, budget)
    run.totals.tokens_per_s = run.totals.new_tokens / (time.perf_counter() - start)
    return run


def app_race(registry: ModelRegistry, prompt: str, tokens: int, budget: str) -> dict[str, goose.RunRecord]:
    """The Race tab's callback; its runs as its download holds them."""
    view = callbacks.race(registry, prompt, goose.DEFAULT_MODEL, [], budget, tokens)
    return race_from_dict(json.loads(read_text(view.download.value["path"])))


def app_explore(registry: ModelRegistry, prompt: str, tokens: int, budget: str) -> goose.RunRecord:
    """Explore's callback streamed to its end (every view it yields rendered), goose; the run it shows."""
    views = list(callbacks.explore(registry, prompt, goose.DEFAULT_MODEL, "goose", budget, tokens))
    return views[-1].run


def app_check(registry: ModelRegistry, run: goose.RunRecord) -> dict[str, float]:
    """The Lab's check of `run` at its own setting: the numbers its line shows."""
    checked = lab.check(registry, run, lab.open_run(run).curves, {}, lab.own_shape(run))
    found = dict(re.findall(r'class="lab-(real-tps|base-tps|real-speedup|est-speedup)">([0-9.]+)', checked.checks))
    return {name: float(value) for name, value in found.items()}


def text_work(run: goose.RunRecord, decode, upto: int, repeats: int = 5) -> float:
    """Seconds per token the loop's output text (incremental decode, stop strings) costs over the run's first `upto`
    tokens, fed as its steps committed them; the least of `repeats`."""
    chunks = [run.tokens[:1], *(step.committed for step in run.steps)]
    best = float("inf")
    for _ in range(repeats):
        text, fed = OutputText(decode, ("\n\n\n\n",)), 0
        start = time.perf_counter()
        for chunk in chunks:
            if fed >= upto:
                break
            text.extend(chunk[:upto - fed])
            fed += len(chunk[:upto - fed])
        best = min(best, time.perf_counter() - start)
    return best / fed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--example", default="Repetitive list", help="an app example's label (assets/examples.json)")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--budget", default="auto")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--long", type=int, default=1024, help="the long run of the text-work check (0: skip)")
    args = parser.parse_args()
    prompt = next(e["prompt"] for e in load_examples() if e["label"] == args.example)
    model = goose.load_model()
    registry = ModelRegistry(loader=lambda name: model)
    registry.get_warm(None)
    print(f"machine: {machine()}; torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"prompt: {args.example!r}, {args.tokens} new tokens, budget {args.budget}, {args.rounds} rounds, app and "
          "library alternated (the first of each round swaps)")
    methods = list(callbacks.RACE_METHODS)
    lib = {m: [] for m in methods}
    race = {m: [] for m in methods}
    explore, lib_explore, checks, speedups = [], [], [], []
    for r in range(args.rounds):
        def app_side() -> None:
            for method, run in app_race(registry, prompt, args.tokens, args.budget).items():
                race[method].append(run.totals.tokens_per_s)
            shown = app_explore(registry, prompt, args.tokens, args.budget)
            explore.append(shown.totals.tokens_per_s)
            checks.append(app_check(registry, shown))

        def library_side() -> None:
            runs = {method: library(model, prompt, method, args.tokens, args.budget) for method in methods}
            for method, run in runs.items():
                lib[method].append(run.totals.tokens_per_s)
            lib_explore.append(library(model, prompt, "goose", args.tokens, args.budget).totals.tokens_per_s)
            speedups.append(runs["goose"].totals.tokens_per_s / runs[goose.metrics.BASELINE].totals.tokens_per_s)

        for side in (app_side, library_side) if r % 2 == 0 else (library_side, app_side):
            side()
        print(f"round {r + 1}: race/library goose {race['goose'][-1]:.1f}/{lib['goose'][-1]:.1f} tok/s",
              file=sys.stderr, flush=True)
    med = statistics.median
    print(f"{'':28s}{'library tok/s':>14s}{'app tok/s':>11s}{'app/library':>13s}")
    for method in methods:
        print(f"{'race ' + method:28s}{med(lib[method]):14.1f}{med(race[method]):11.1f}"
              f"{med(race[method]) / med(lib[method]):13.2f}")
    print(f"{'explore goose':28s}{med(lib_explore):14.1f}{med(explore):11.1f}{med(explore) / med(lib_explore):13.2f}")
    lib_up = med(lib["goose"]) / med(lib[goose.metrics.BASELINE])
    race_up = med(race["goose"]) / med(race[goose.metrics.BASELINE])
    print(f"goose speed-up over autoregressive: library {lib_up:.2f}x (median of rounds {med(speedups):.2f}x), "
          f"race {race_up:.2f}x ({100 * (race_up / lib_up - 1):+.1f}%)")
    if all(checks):
        real = med(c["real-speedup"] for c in checks)
        print(f"lab check (explore's goose run, its own setting): measured speed-up {real:.2f}x "
              f"({100 * (real / lib_up - 1):+.1f}% from the library's), estimated "
              f"{med(c['est-speedup'] for c in checks):.2f}x; its run {med(c['real-tps'] for c in checks):.1f} "
              f"tok/s beside its own baseline {med(c['base-tps'] for c in checks):.1f} tok/s")
    ok = all(med(race[m]) >= 0.9 * med(lib[m]) for m in methods) and abs(race_up / lib_up - 1) <= 0.10
    print(f"race done-when (each >= 0.9x, speed-up within 10%): {'met' if ok else 'NOT met'}")
    if args.long:
        run = goose.generate(model, prompt, "goose", args.long, args.budget)
        decode = model.decode
        short, whole = text_work(run, decode, 128), text_work(run, decode, len(run.tokens))
        print(f"text work per token (a goose run of {len(run.tokens)} tokens, {len(run.steps)} steps): first 128 "
              f"tokens {1e6 * short:.1f} us, all {len(run.tokens)} {1e6 * whole:.1f} us "
              f"({whole / short:.2f}x); a full decode every step would cost "
              f"{1e6 * full_decode_work(run, decode):.1f} us per token over the whole run")


def full_decode_work(run: goose.RunRecord, decode) -> float:
    """Seconds per token of decoding the whole output at every step (what the loop did before OutputText)."""
    chunks = [run.tokens[:1], *(step.committed for step in run.steps)]
    tokens: list[int] = []
    start = time.perf_counter()
    for chunk in chunks:
        tokens.extend(chunk)
        decode(tokens)
    return (time.perf_counter() - start) / len(run.tokens)


if __name__ == "__main__":
    main()
