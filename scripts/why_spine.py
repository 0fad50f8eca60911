"""The numbers and the figure of docs/METHOD.md, "Why a spine", made by goose.optimal and goose.charts.

    python scripts/why_spine.py                          # the section's tables, as markdown
    python scripts/why_spine.py --html /tmp/why.html     # and the library's two charts, on one page

The example is a quality gap of 6x, the paper's median: the spine accepted at every depth with probability
0.72 given its parent was, failing it the table's top successor with 0.12, and each next rank, once the ones
before it failed, half as often as the one before (a spine node's children are exclusive outcomes: their
chances add up to 0.78). The page
needs no network (plotly's script is inlined). No PNG: plotly's image export needs kaleido, absent here.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from goose.charts import expected_length_chart  # noqa: E402
from goose.optimal import budget_curves, gap_curves, optimal_tree, rates_at_gap  # noqa: E402
from goose.tree import BRANCH, SPINE  # noqa: E402

SPINE_RATES = [0.72] * 64
BRANCH_RATES = [0.12 * 0.5**j for j in range(10)]
BUDGETS = [2, 4, 8, 16, 32, 64]
GAPS = [1.5, 2.0, 4.0, 6.0, 12.0, 18.0]
GAP_BUDGET = 32


def shape(budget: int, spine: list[float], branch: list[float]) -> str:
    """The optimal tree in a few words: its spine's depth, and where its branches hang."""
    tree = optimal_tree(budget, spine, branch)
    depths = tree.depths
    spine_depth = max((d for d, s in zip(depths, tree.sources) if s == SPINE), default=0)
    hung = [tree.sources[tree.parents[n]] for n in range(len(tree)) if tree.sources[n] == BRANCH]
    if not hung:
        return f"the spine alone, {spine_depth} deep"
    return (f"spine {spine_depth} deep; branches: {hung.count('root')} off the root, {hung.count(SPINE)} off the "
            f"spine, {hung.count(BRANCH)} deeper")


def tables() -> str:
    """Expected accepted tokens per step of the three trees against the budget, then against the gap."""
    rows = ["| budget | optimal | best balanced (k) | chain | the optimal tree |", "|---|---|---|---|---|"]
    for b in BUDGETS:
        tree = optimal_tree(b, SPINE_RATES, BRANCH_RATES)
        rows.append(f"| {b} | {tree.expected_accepted:.2f} | {tree.balanced.expected_accepted:.2f} "
                    f"({tree.balanced_k}) | {tree.chain.expected_accepted:.2f} | "
                    f"{shape(b, SPINE_RATES, BRANCH_RATES)} |")
    rows += ["", f"| quality gap (budget {GAP_BUDGET}) | optimal | best balanced | chain | the optimal tree |",
             "|---|---|---|---|---|"]
    curves = gap_curves(GAPS, GAP_BUDGET, SPINE_RATES, BRANCH_RATES)
    for gap, best, balanced, chain in zip(curves.x, curves.optimal, curves.balanced, curves.chain):
        rows.append(f"| {gap:g}x | {best:.2f} | {balanced:.2f} | {chain:.2f} | "
                    f"{shape(GAP_BUDGET, *rates_at_gap(gap, SPINE_RATES, BRANCH_RATES))} |")
    return "\n".join(rows)


def write_page(html: Path) -> None:
    """Both charts (goose.charts.expected_length_chart) on one self-contained page."""
    figures = [expected_length_chart(budget_curves(range(1, 65), SPINE_RATES, BRANCH_RATES),
                                     "Expected accepted tokens per step vs budget (6x gap)"),
               expected_length_chart(gap_curves([1.5 + 0.5 * i for i in range(34)], GAP_BUDGET, SPINE_RATES,
                                                BRANCH_RATES),
                                     f"Expected accepted tokens per step vs quality gap (budget {GAP_BUDGET})")]
    body = "".join(figure.to_html(full_html=False, include_plotlyjs="inline" if i == 0 else False)
                   for i, figure in enumerate(figures))
    html.write_text(f"<html><body>{body}</body></html>", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--html", type=Path, help="also write the two charts into this page (offline)")
    args = parser.parse_args()
    print(tables())
    if args.html:
        write_page(args.html)
        print(f"\nwrote {args.html}")


if __name__ == "__main__":
    main()
