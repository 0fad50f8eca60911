"""Where one verification pass spends its time, per tree size, and where a real step's time goes, per method:
`python -m goose.bench.pass_cost [--steps humaneval]`.

A pass is the body (the transformer without its LM head) over the tree's nodes, then the LM head's
argmax and top-k per node. The body itself splits into its linear layers (weights streamed from memory,
products) and everything else (norms, rotary, attention, the op dispatch of every layer). Each part is
timed alone, on the device and thread count a run uses, beside two yardsticks:

  weights   the body's linear weights streamed once at the machine's read bandwidth (a 1-row floor);
  linears   the body's linears on their own: what the pass could cost if nothing else did.

Trees are measured two ways: a chain of text (as the cost table is, goose.costs) and a spine tree built
from the same text (goose.costs.measurement_trees): its rejected branch rows are flatter, which the
screened heads pay for.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext

import torch

from goose.bench.machine import measure_memory_bandwidth
from goose.bench.suites import format_prompt, load_suite
from goose.costs import choose_head, measurement_text, measurement_trees, median_seconds
from goose.decode import Generation, generate, stream
from goose.heads.factory import head_for, heads_here
from goose.model import GooseModel, load_model
from goose.packed import packed_linears, plain_linears
from goose.verify import Verifier

SIZES = (1, 4, 8, 16, 32, 64)


def linears_alone(goose_model: GooseModel, rows: int, packed: bool) -> Callable[[], None]:
    """A call that runs every body linear once, in model order, on `rows` random rows (no other op)."""
    linears = plain_linears(goose_model.model.get_decoder())
    generator = torch.Generator().manual_seed(0)
    inputs = [torch.randn(rows, m.in_features, generator=generator) for m in linears]
    context = packed_linears if packed else nullcontext

    @torch.inference_mode()
    def run() -> None:
        with context():
            for linear, x in zip(linears, inputs):
                linear(x)
    return run


def time_linears(goose_model: GooseModel, rows: int, repeats: int, packed: bool) -> float:
    """Median seconds of every body linear once, in model order, on `rows` rows (no other op)."""
    run = linears_alone(goose_model, rows, packed)
    run()
    return median_seconds(run, repeats, torch.device("cpu"))


@torch.inference_mode()
def measure_parts(goose_model: GooseModel, sizes: Sequence[int] = SIZES, heads: Sequence[str] | None = None,
                  prefix: int = 256, repeats: int = 7) -> dict[str, dict[int, float]]:
    """Median seconds per part and tree size (see the module notes); one 'head …' entry per head."""
    verifier = Verifier(goose_model.model)
    device = goose_model.model.device
    heads = list(heads or heads_here(goose_model))
    chosen = choose_head(goose_model)  # what a run's head="auto" applies here: it may be a routed pair
    if chosen not in heads:
        heads.append(chosen)
    text = measurement_text(goose_model, prefix + max(sizes))
    trees = measurement_trees(goose_model, verifier, text, prefix, sizes, chosen)  # leaves the prefix cached
    linears = plain_linears(goose_model.model.get_decoder())
    weight_bytes = sum(m.weight.numel() * m.weight.element_size() for m in linears)
    read_gbs = measure_memory_bandwidth()["read"]
    parts: dict[str, dict[int, float]] = {"weights floor": {}, "linears": {}, "linears (stock)": {},
                                          "body": {}, "body (tree)": {}}
    for n in sizes:
        parts["weights floor"][n] = weight_bytes / (read_gbs * 1e9)
        if device.type == "cpu":
            parts["linears"][n] = time_linears(goose_model, n, repeats, packed=verifier.packed)
            parts["linears (stock)"][n] = time_linears(goose_model, n, repeats, packed=False)
        chain = text[prefix:prefix + n]
        tree = trees[n]
        hidden = {}
        for name, forward in (("body", lambda: verifier.forward_chain(chain)),  # noqa: B023
                              ("body (tree)", lambda: verifier.forward_tree(tree))):  # noqa: B023
            forward()
            verifier.truncate(prefix)
            parts[name][n] = median_seconds(forward, repeats, device, after=lambda: verifier.truncate(prefix))
            hidden[name] = forward()
            verifier.truncate(prefix)
        for kind in heads:
            head = head_for(goose_model, kind)
            for name, rows in ((f"head {kind}", hidden["body"]), (f"head {kind} (tree)", hidden["body (tree)"])):
                head.greedy(rows, 10)
                parts.setdefault(name, {})[n] = median_seconds(lambda: head.greedy(rows, 10),  # noqa: B023
                                                               repeats, device)
    return parts


def markdown_table(parts: dict[str, dict[int, float]]) -> str:
    """One row per part, one column per tree size, in milliseconds; the pass totals per head appended."""
    sizes = sorted(next(iter(parts.values())))
    rows = dict(parts)
    for name in [name for name in parts if name.startswith("head ")]:
        tree = name.endswith("(tree)")
        body = parts["body (tree)" if tree else "body"]
        kind = name.removeprefix("head ").removesuffix(" (tree)")
        rows[f"pass, {kind} head{' (tree)' if tree else ''}"] = {n: body[n] + parts[name][n] for n in sizes}
    lines = ["| part | " + " | ".join(f"{n} node{'s' if n > 1 else ''}" for n in sizes) + " | 16 / 1 |",
             "| --- |" + " --- |" * (len(sizes) + 1)]
    for name, row in rows.items():
        if not row:
            continue
        ratio = f"{row[16] / row[1]:.2f}x" if 16 in row and 1 in row else ""
        lines.append(f"| {name} | " + " | ".join(f"{1000 * row[n]:.1f}" for n in sizes) + f" | {ratio} |")
    return "\n".join(lines)


class StepClock:
    """Seconds spent in each part of a generation's steps, by wrapping its model target's verifier and walker."""

    PARTS = {"forward": ("verifier", "forward_tree"), "head and walk": ("walker", "walk"),
             "commit": ("verifier", "commit")}

    def __init__(self, generation: Generation) -> None:
        self.seconds: dict[str, list[float]] = {part: [] for part in self.PARTS}
        for part, (owner, name) in self.PARTS.items():
            target = getattr(generation.target, owner)
            setattr(target, name, self._timed(part, getattr(target, name)))

    def _timed(self, part: str, call: Callable) -> Callable:
        def timed(*args, **kwargs):
            start = time.perf_counter()
            result = call(*args, **kwargs)
            self.seconds[part].append(time.perf_counter() - start)
            return result
        return timed


def step_profile(goose_model: GooseModel, prompts: Sequence[str], methods: Sequence[str],
                 max_new_tokens: int = 128) -> dict[str, dict[str, float]]:
    """Per method, over `prompts` (methods interleaved per prompt): the prefill per prompt and the median
    milliseconds of each part of a step (draft, forward, head and walk, commit, observe, the rest of the loop),
    with the mean tree size, τ and tokens/s."""
    stats: dict[str, dict[str, list]] = {method: {} for method in methods}
    for method in methods:  # warm-up: the heads, the tuners and the cost table are built before any timing
        generate(goose_model, prompts[0], method, 8)
    for prompt in prompts:
        for method in methods:
            generation = stream(goose_model, prompt, method, max_new_tokens)
            clock = StepClock(generation)
            for _ in generation:
                pass
            run, kept = generation.run, stats[method]
            for part, seconds in clock.seconds.items():
                kept.setdefault(part, []).extend(seconds)
            kept.setdefault("draft", []).extend(step.draft_s for step in run.steps)
            kept.setdefault("commit tokens and observe", []).extend(step.observe_s for step in run.steps)
            kept.setdefault("nodes", []).extend(len(step.nodes) for step in run.steps)
            kept.setdefault("runs", []).append(run.totals)
    table = {}
    for method, kept in stats.items():
        runs = kept.pop("runs")
        wall = sum(t.wall_s for t in runs)
        steps_s = wall - sum(t.prefill_s + t.setup_s for t in runs)
        row = {part: 1000 * statistics.median(values) for part, values in kept.items() if part != "nodes"}
        row["rest of the loop"] = 1000 * steps_s / len(kept["nodes"]) - sum(
            1000 * statistics.mean(values) for part, values in kept.items() if part != "nodes")
        row["prefill per prompt"] = 1000 * statistics.mean(t.prefill_s for t in runs)
        row["nodes"] = statistics.mean(kept["nodes"])
        row["tau"] = sum(t.new_tokens for t in runs) / sum(t.forward_passes for t in runs)
        row["tokens/s"] = sum(t.new_tokens for t in runs) / wall
        table[method] = row
    return table


def profile_table(table: dict[str, dict[str, float]]) -> str:
    parts = list(next(iter(table.values())))
    lines = ["| method | " + " | ".join(parts) + " |", "| --- |" + " --- |" * len(parts)]
    for method, row in table.items():
        lines.append(f"| {method} | " + " | ".join(f"{row[part]:.1f}" if part != "tau" else f"{row[part]:.2f}"
                                                 for part in parts) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m goose.bench.pass_cost", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None, help="HF model id or local folder (default: embedded Gemma 3 270M)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--steps", default=None, metavar="SUITE",
                        help="also profile real steps of every method on this suite's prompts (bench suites)")
    parser.add_argument("--limit", type=int, default=5, help="prompts of --steps' suite")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    goose_model = load_model(args.model)
    if args.steps:
        prompts = [format_prompt(goose_model.tokenizer, p) for p in load_suite(args.steps, args.limit)]
        methods = ("autoregressive", "pld", "balanced", "goose")
        print(profile_table(step_profile(goose_model, prompts, methods)), end="\n\n")
    print(f"auto head here: {choose_head(goose_model)}")
    print(markdown_table(measure_parts(goose_model, repeats=args.repeats)))


if __name__ == "__main__":
    main()
