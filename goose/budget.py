"""Hardware-aware tree budgets (issue: speed). DESIGN.md §4: the budget that wins is measured, not assumed.

Two measurements decide the budget:
  cost(n)      seconds of one verification pass of n tree nodes on this device
               (measured once per model, device and thread count; cached on disk);
  accepted(n)  draft tokens a tree of n nodes gets accepted, learnt while decoding.

The second needs no exploration. Greedy acceptance depends only on the target's
greedy continuation g: a tree accepts the longest prefix of g that is one of
its paths. Each verified step reveals g up to its bonus token, so the trees
every candidate budget *would* have built from the same state can be scored
against it (exactly, or as a lower bound when a tree holds all of the known g).
The next step then uses the budget with the most expected tokens per second:
(1 + accepted(n)) / cost(n).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence

import torch

from goose.tree import DraftTree

BUDGET_GRID = (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
COST_FORMAT = 1


def accepted_length(tree: DraftTree, greedy: Sequence[int]) -> int:
    """Draft tokens the greedy walk accepts when the target's continuation starts with `greedy`."""
    node, length = 0, 0
    for token in greedy:
        child = tree.children[node].get(token)
        if child is None:
            break
        node, length = child, length + 1
    return length


def _cost_key(goose_model, threads: int, head: str) -> str:
    weight = goose_model.model.get_input_embeddings().weight
    return f"v{COST_FORMAT}|{goose_model.name}|{weight.device}|{weight.dtype}|threads={threads}|head={head}"


@torch.inference_mode()
def measure_costs(goose_model, sizes: Sequence[int] = BUDGET_GRID, prefix: int = 256, repeats: int = 3,
                  head: str = "screened") -> dict[int, float]:
    """Median seconds of one tree verification (body + the run's LM head + top-k) per node count."""
    from goose.head import head_for
    from goose.verify import Verifier

    verifier = Verifier(goose_model.model)
    lm_head = head_for(goose_model, head)
    vocab = goose_model.vocab_size
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(vocab, (prefix,), generator=generator).tolist()
    verifier.forward_chain(tokens)
    verifier.truncate(prefix)
    costs = {}
    for n in [sizes[0], *sizes]:  # the first size twice: the first pass warms up
        chain = torch.randint(vocab, (n,), generator=generator).tolist()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            lm_head.greedy(verifier.forward_chain(chain), 10)
            if goose_model.model.device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
            verifier.truncate(prefix)  # the same prefix for every measurement
        costs[n] = sorted(times)[len(times) // 2]
    return costs


def cost_table(goose_model, cache_file: str | os.PathLike | None = None, head: str = "screened") -> dict[int, float]:
    """This device's verification cost per node count with the given LM head, measured on first use and cached."""
    from goose.model import cache_dir

    path = cache_file or cache_dir() / "verify-costs.json"
    key = _cost_key(goose_model, torch.get_num_threads(), head)
    try:
        table = json.loads(open(path).read())
    except (OSError, ValueError):
        table = {}
    if key not in table:
        table[key] = {str(n): c for n, c in measure_costs(goose_model, head=head).items()}
        os.makedirs(os.path.dirname(path), exist_ok=True)
        staging = f"{path}.{os.getpid()}.tmp"  # several processes may measure at once: replace atomically
        with open(staging, "w") as file:
            json.dump(table, file, indent=1)
        os.replace(staging, path)
    return {int(n): c for n, c in table[key].items()}


class BudgetTuner:
    """Picks each step's budget from measured costs and counterfactual acceptance."""

    def __init__(self, costs: dict[int, float], decay: float = 0.05) -> None:
        self.costs = dict(sorted(costs.items()))
        self.decay = decay
        # a weak prior (a few accepted tokens for big trees) until steps are seen
        self.accepted = {n: 0.4 * (n ** 0.5 - 1) for n in self.costs}
        self.steps = 0

    def best(self) -> int:
        return max(self.costs, key=lambda n: (1.0 + self.accepted[n]) / self.costs[n])

    def observe(self, trees: dict[int, DraftTree], greedy: Sequence[int]) -> None:
        """Score the tree each budget would have built against the continuation this step revealed."""
        self.steps += 1
        rate = max(self.decay, 1.0 / self.steps)  # a running mean at first, then an EMA
        for n, tree in trees.items():
            self.accepted[n] += rate * (accepted_length(tree, greedy) - self.accepted[n])


def tuner_for(goose_model, method: str, head: str = "screened") -> BudgetTuner:
    """One tuner per model, method and LM head (the head changes what a node costs), kept on the model so
    acceptance carries across runs."""
    tuners = goose_model.__dict__.setdefault("_budget_tuners", {})
    if (method, head) not in tuners:
        tuners[method, head] = BudgetTuner(cost_table(goose_model, head=head))
    return tuners[method, head]
