"""Where one verification pass spends its time, per tree size: `python -m goose.bench.pass_cost`.

A pass is the body (the transformer without its LM head) over the tree's nodes, then the LM head's
argmax and top-k per node. The body itself splits into its linear layers (weights streamed from memory,
products) and everything else (norms, rotary, attention, the op dispatch of every layer). Each part is
timed alone, on the device and thread count a run uses, beside two yardsticks:

  weights   the body's linear weights streamed once at the machine's read bandwidth (a 1-row floor);
  linears   the body's linears on their own: what the pass could cost if nothing else did.

Trees are measured two ways: a chain of text (as the cost table is, goose.costs) and a spine tree built
from the same text (goose.costs.measurement_tree): its rejected branch rows are flatter, which the
screened heads pay for.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from contextlib import nullcontext

import torch

from goose.bench.machine import measure_memory_bandwidth
from goose.costs import choose_head, measurement_text, measurement_tree, median_seconds
from goose.head import head_for, heads_here
from goose.model import GooseModel, load_model
from goose.packed import packed_linears
from goose.verify import Verifier

SIZES = (1, 4, 8, 16, 32, 64)
PARTS = ("weights floor", "linears", "body", "body (tree)", "head", "head (tree)", "pass", "pass (tree)")


def body_linears_of(goose_model: GooseModel) -> list[torch.nn.Linear]:
    return [m for m in goose_model.model.get_decoder().modules() if type(m) is torch.nn.Linear]


@torch.inference_mode()
def time_linears(goose_model: GooseModel, rows: int, repeats: int, packed: bool) -> float:
    """Median seconds of every body linear once, in model order, on `rows` rows (no other op)."""
    linears = body_linears_of(goose_model)
    generator = torch.Generator().manual_seed(0)
    inputs = [torch.randn(rows, m.in_features, generator=generator) for m in linears]
    context = packed_linears if packed else nullcontext

    def run() -> None:
        with context():
            for linear, x in zip(linears, inputs):
                linear(x)
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
    verifier.forward_chain(text[:prefix])
    verifier.truncate(prefix)
    weight_bytes = sum(m.weight.numel() * m.weight.element_size() for m in body_linears_of(goose_model))
    read_gbs = measure_memory_bandwidth()["read"]
    parts: dict[str, dict[int, float]] = {"weights floor": {}, "linears": {}, "linears (stock)": {},
                                          "body": {}, "body (tree)": {}}
    for n in sizes:
        parts["weights floor"][n] = weight_bytes / (read_gbs * 1e9)
        if device.type == "cpu":
            parts["linears"][n] = time_linears(goose_model, n, repeats, packed=verifier.packed)
            parts["linears (stock)"][n] = time_linears(goose_model, n, repeats, packed=False)
        chain = text[prefix:prefix + n]
        tree = measurement_tree(goose_model, verifier, text, prefix, n, chosen)
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


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m goose.bench.pass_cost", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None, help="HF model id or local folder (default: embedded Gemma 3 270M)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    goose_model = load_model(args.model)
    print(f"auto head here: {choose_head(goose_model)}")
    print(markdown_table(measure_parts(goose_model, repeats=args.repeats)))


if __name__ == "__main__":
    main()
