"""How far a bench run's speed-ups could go on this machine with its drafts kept: each method's passes re-priced at
the least a tree's rows can cost here (`python -m goose.bench.ceiling RUN_DIR [--bar 3.0]`).

Every row of a tree needs two products: the body's linears (float32, goose.packed) and the LM head's (the run's
head, goose.heads: its top-k for the adjacency table, the screen where it screens). Timed alone at each size of the
cost table, what they grow by from one row to n rows is the least n rows add to a pass with these kernels. So a
pass of n nodes costs at least

    floor(n) = autoregressive pass + products(n) - products(1)

and everything else a bigger tree adds (attention, norms, the screen's float32 candidates, the walk, the cache's
upkeep) is left out. Priced at the floor of its mean tree size, with its τ kept, a method's decoding reaches at most

    ceiling = τ x autoregressive pass / floor(mean nodes per pass)

against autoregressive decoding (the prefill and each run's first token, the same for every method, left out, and
drafting too; the floor bends upward with size, so its price at the mean is at most the mean of its prices). A
measured speed-up close to its ceiling says that cheaper passes cannot take the method much further on this machine
with these kernels: only more tokens per pass at the same tree size can. Beside it, the cost table's price
(goose.costs) of the same passes: the modelled clock, which the measured column checks. With `--bar X`: the τ each
method would need at its mean tree size to reach X at its ceiling.
"""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from goose.bench.methods import HF_GENERATE, HF_PLD
from goose.bench.pass_cost import linears_alone
from goose.bench.records import BenchRun, load_runs
from goose.bench.summary import summarize
from goose.budget import interpolate_cost
from goose.costs import (
    AUTOREGRESSIVE,
    autoregressive_cost,
    choose_head,
    cost_table,
    least_seconds,
    measure_costs,
    measurement_text,
    no_dearer_than_bigger,
)
from goose.heads.factory import head_for
from goose.model import GooseModel, load_model
from goose.packed import body_linears
from goose.verify import Verifier


@dataclass
class Decoding:
    """A method's decoding over a bench run's prompts, each run's prefill and first token left out."""

    tokens: int = 0  # new tokens after the first
    passes: int = 0  # verification passes after the prefill
    drafted: int = 0  # nodes verified beside the passes' roots

    @property
    def tau(self) -> float:
        return self.tokens / self.passes if self.passes else 0.0

    @property
    def nodes(self) -> float:
        """Mean nodes per pass, the root included."""
        return 1 + self.drafted / self.passes if self.passes else 1.0


def decoding_totals(runs: Sequence[BenchRun]) -> dict[str, Decoding]:
    """method -> its decoding pooled over the prompts, in the order the methods first appear (transformers' own
    generate and prompt lookup left out: their passes are not this loop's, whose costs the ceiling reads)."""
    totals: dict[str, Decoding] = {}
    for run in runs:
        if run.method in (HF_GENERATE, HF_PLD) or not run.totals.forward_passes:
            continue
        decoding = totals.setdefault(run.method, Decoding())
        decoding.tokens += run.totals.new_tokens - 1
        decoding.passes += run.totals.forward_passes - 1
        decoding.drafted += sum(run.totals.drafted.values())
    return totals


@torch.inference_mode()
def product_seconds(goose_model: GooseModel, head: str, sizes: Sequence[int], rounds: int = 5) -> dict[int, float]:
    """Seconds of the products every row needs, per tree size: every body linear once, alone, on random rows
    (goose.bench.pass_cost.linears_alone), and the head's top-k for the adjacency table (its screen, where the head
    screens) on a text's hidden states, whose candidates a screen pays for. The least over rounds that take every
    size in turn (goose.costs.least_seconds: other work only ever adds time)."""
    packed = body_linears(goose_model.model) == "packed"
    hidden = Verifier(goose_model.model).forward_chain(measurement_text(goose_model, max(sizes)))
    lm_head = head_for(goose_model, head)

    def products(linears: Callable[[], None], n: int) -> None:
        linears()
        lm_head.top(hidden[:n], 10)
    calls = {n: functools.partial(products, linears_alone(goose_model, n, packed), n) for n in sizes}
    return least_seconds(calls, rounds, goose_model.model.device)


def floor_costs(autoregressive_s: float, products: Mapping[int, float]) -> dict[int, float]:
    """Per size, the least a pass can cost: the autoregressive pass plus what the products grow by from one row
    (never less than that pass, nor more than a bigger size's floor: either is noise)."""
    one = min(products)
    return no_dearer_than_bigger({n: autoregressive_s + max(0.0, products[n] - products[one]) for n in products})


def ceilings(totals: Mapping[str, Decoding], measured: Mapping[str, float | None], costs: Mapping[int, float],
             table_autoregressive_s: float, floor: Mapping[int, float], autoregressive_s: float,
             bar: float | None = None) -> list[dict]:
    """Per method: its τ and mean tree size, the speed-up measured, the cost table's and the ceiling's (module notes:
    passes priced at their mean size), the measured speed-up as a share of the ceiling, and with a bar the τ it
    needs at its size for the bar."""
    table = []
    for method, decoding in totals.items():
        floor_s = interpolate_cost(floor, decoding.nodes)
        ceiling = decoding.tau * autoregressive_s / floor_s
        row = {"method": method, "tau": decoding.tau, "nodes": decoding.nodes, "measured": measured.get(method),
               "table": decoding.tau * table_autoregressive_s / interpolate_cost(costs, decoding.nodes),
               "ceiling": ceiling}
        row["of ceiling"] = row["measured"] / ceiling if row["measured"] is not None else None
        if bar is not None:
            row["tau needed"] = bar * floor_s / autoregressive_s
        table.append(row)
    return table


def markdown_table(table: Sequence[dict]) -> str:
    columns = list(table[0])
    speed_ups = ("measured", "table", "ceiling")

    def cell(column: str, value) -> str:
        if value is None:
            return "-"
        if column == "method":
            return value
        return f"{value:.1f}" if column == "nodes" else f"{value:.2f}" + ("x" if column in speed_ups else "")
    lines = ["| " + " | ".join(columns) + " |", "| --- |" + " --- |" * (len(columns) - 1)]
    lines += ["| " + " | ".join(cell(column, row[column]) for column in columns) + " |" for row in table]
    return "\n".join(lines)


def sizes_table(costs: Mapping[int, float], products: Mapping[int, float], floor: Mapping[int, float]) -> str:
    """Per tree size: the cost table's pass, its products, and the floor (milliseconds)."""
    sizes = sorted(floor)
    lines = ["| ms | " + " | ".join(f"{n} node{'s' if n > 1 else ''}" for n in sizes) + " |",
             "| --- |" + " --- |" * len(sizes)]
    for name, values in (("pass (cost table)", {n: interpolate_cost(costs, n) for n in sizes}),
                         ("products (linears, head)", products), ("floor", floor)):
        lines.append(f"| {name} | " + " | ".join(f"{1000 * values[n]:.1f}" for n in sizes) + " |")
    return "\n".join(lines)


def ceiling_report(goose_model: GooseModel, run_dir: str | Path, head: str = "auto", bar: float | None = None,
                   rounds: int = 9) -> str:
    """The ceilings of the bench run in `run_dir` on this machine, as markdown, after the costs they rest on."""
    runs = load_runs(Path(run_dir) / "runs.jsonl")
    head = choose_head(goose_model, head)
    costs = cost_table(goose_model, head=head)  # what the run's tuner read
    table_autoregressive_s = autoregressive_cost(goose_model, head=head) or costs[min(costs)]
    # the autoregressive pass timed now, beside the products: the kept table may be from another hour's machine
    autoregressive_s = measure_costs(goose_model, sizes=(1,), repeats=rounds, head=head)[AUTOREGRESSIVE]
    products = product_seconds(goose_model, head, sorted(costs), rounds)
    floor = floor_costs(autoregressive_s, products)
    measured = {s.method: s.speedup_pooled for s in summarize(runs)}
    table = ceilings(decoding_totals(runs), measured, costs, table_autoregressive_s, floor, autoregressive_s, bar)
    return "\n\n".join([f"head {head}, autoregressive pass {1000 * autoregressive_s:.1f} ms (the kept cost table's: "
                         f"{1000 * table_autoregressive_s:.1f} ms)",
                        sizes_table(costs, products, floor), markdown_table(table)])


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m goose.bench.ceiling", description=__doc__.split("\n")[0])
    parser.add_argument("run_dir", help="a bench run's folder (runs.jsonl, meta.json), made on this machine")
    parser.add_argument("--bar", type=float, default=None, help="a speed-up: the τ each method needs for it")
    parser.add_argument("--rounds", type=int, default=9, help="timing rounds over every size (the least kept)")
    args = parser.parse_args(argv)
    settings = json.loads((Path(args.run_dir) / "meta.json").read_text(encoding="utf-8"))["settings"]
    torch.set_num_threads(settings["threads"])
    goose_model = load_model(settings["model"])
    print(ceiling_report(goose_model, args.run_dir, settings["head"], args.bar, args.rounds))


if __name__ == "__main__":
    main()
